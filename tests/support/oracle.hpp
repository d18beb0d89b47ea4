/// \file oracle.hpp
/// An independent exact reference for halfway's scalar arithmetic, used only by the tests.
///
/// It shares no code with `softfloat.hpp`. Every operand is turned into an exact value from the
/// format's definition (field by field), the operation is carried out exactly with
/// Boost.Multiprecision integers (a rational num/den·2^e, or the square root of one), and the
/// exact value is rounded into the destination format by a different method than `round_pack`:
///
///  - the binade k = floor(log2 |v|) is found by comparing |v| with powers of two;
///  - the grid spacing 2^q follows from the format's definition (q = max(k, emin) − m, or
///    k − m with an unbounded exponent range);
///  - M = floor(|v| / 2^q) is an exact integer division; the remainder is compared with one half
///    exactly (for a square root: by comparing squares, never a floating-point sqrt);
///  - the two candidates M·2^q and (M+1)·2^q are encoded from the definition and checked by
///    decoding them back; ties-to-even and round-to-odd pick by the parity of the encoding;
///  - flags come from their definitions: inexact = delivered ≠ exact; overflow = the result
///    rounded with an unbounded exponent range exceeds the largest finite value; underflow =
///    tiny and inexact (tiny before rounding: |v| < 2^emin; after rounding: the result rounded
///    with an unbounded exponent range is below 2^emin); invalid and infinite from the
///    operation's definition (IEEE 754-2019 §7).
///
/// Stochastic rounding follows the documented rule with the same 32 random bits: the first 32
/// bits of the fraction (distance to the lower neighbour / spacing), t = floor(frac·2^32), are
/// added to the random word and a carry out of 32 bits rounds up, i.e. up iff t + rnd >= 2^32
/// (probability t/2^32).
///
/// Shared conventions (documented in the library, not derivable from IEEE 754): the NaN payload
/// rule (quiet, keep sign and the top payload bits; the first NaN operand of a, b, c wins), the
/// default NaN of each specials style, the results of infinities and NaNs in formats without
/// them, e8m0's clamp below 2^-127, and flush-to-zero keeping the sign.
#pragma once

#include <boost/multiprecision/cpp_int.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "halfway/env.hpp"
#include "halfway/format.hpp"
#include "halfway/names.hpp"

namespace oracle {

using boost::multiprecision::cpp_int;
using halfway::Rounding;
using halfway::Tininess;

/// A binary format from its definition. Wider than halfway::Format so that binary64 fits.
struct Fmt {
  int exp_bits = 0, frac_bits = 0, bias = 0;
  halfway::Specials specials = halfway::Specials::ieee;
  halfway::Overflow overflow = halfway::Overflow::infinity;
  bool ftz = false, daz = false, is_signed = true, has_zero = true;
  uint64_t max_enc = 0;  ///< magnitude encoding of the largest finite value (found by decoding)

  explicit Fmt(const halfway::Format& f);
  /// An IEEE 754 interchange format (binary32: 8, 23; binary64: 11, 52).
  Fmt(int exp_bits, int frac_bits);

  int nbits() const { return int(is_signed) + exp_bits + frac_bits; }
  uint64_t mag_mask() const { return (uint64_t(1) << (exp_bits + frac_bits)) - 1; }
  uint64_t sign_bit() const { return is_signed ? uint64_t(1) << (exp_bits + frac_bits) : 0; }
  uint64_t enc_count() const { return uint64_t(1) << nbits(); }
  /// Exponent of the smallest normal binade: with a zero, field 1 is the first normal binade.
  int emin() const { return has_zero ? 1 - bias : -bias; }

 private:
  void find_max();
};

enum class Kind : uint8_t { zero, finite, inf, nan };

/// An encoding taken apart by the format's definition. Finite: (−1)^neg · sig · 2^exp.
struct Decoded {
  Kind kind = Kind::zero;
  bool neg = false;
  uint64_t sig = 0;
  int exp = 0;
  bool signaling = false;  ///< NaN only
  uint64_t payload = 0;    ///< NaN only: the fraction bits below the quiet bit, top-aligned at bit 63
};
Decoded decode(const Fmt& f, uint64_t enc);

/// The exact result of an operation (or an input, for conversions).
struct Exact {
  Kind kind = Kind::zero;
  bool neg = false;
  /// Exact zero from adding opposite-signed values: −0 under `min`, +0 otherwise (IEEE §6.3).
  bool zero_sign_by_rounding = false;
  bool default_nan = false;           ///< NaN from an invalid operation (not propagated)
  bool from_division_by_zero = false; ///< infinity produced from finite operands
  uint64_t payload = 0;               ///< propagated NaN payload (as in Decoded)
  uint8_t flags = 0;                  ///< invalid / infinite raised by the operation itself
  /// Finite: |value| = num / den · 2^e, or the square root of that when `is_sqrt`.
  cpp_int num, den;
  int e = 0;
  bool is_sqrt = false;
};

Exact value_of(const Decoded& a);  ///< the input itself (conversions); invalid on a sNaN
Exact add(const Decoded& a, const Decoded& b);
Exact sub(const Decoded& a, const Decoded& b);
Exact mul(const Decoded& a, const Decoded& b);
Exact div(const Decoded& a, const Decoded& b);
Exact fma(const Decoded& a, const Decoded& b, const Decoded& c);
Exact sqrt(const Decoded& a);

struct Result {
  uint64_t enc = 0;
  uint8_t flags = 0;
};

/// floor(|v|·2^s) and how the dropped part compares with one half.
struct Scaled {
  uint64_t m = 0;     ///< the floor
  int half = -1;      ///< sign of (fraction − 1/2); −1 when exact
  bool exact = true;  ///< fraction == 0
  uint32_t t = 0;     ///< floor(fraction · 2^32)
};

/// Rounds one exact value into one format. The expensive, rounding-independent part (binade,
/// floors, remainders) is done once in the constructor; `round` is cheap for each direction.
/// Keeps references: `f` and `x` must outlive the Rounder.
class Rounder {
 public:
  Rounder(const Fmt& f, const Exact& x);
  Result round(Rounding r, Tininess t, uint32_t rnd) const;

 private:
  const Fmt& f_;
  const Exact& x_;
  int k_ = 0;              ///< binade of |v|
  bool clamp_ = false;     ///< below 2^emin in a format without zero
  bool tiny_before_ = false;
  Scaled b_;               ///< on the format's grid
  int qb_ = 0;
  int64_t lo_enc_ = 0;     ///< encoding (possibly beyond max) of the lower candidate
  Scaled u_;               ///< on the grid with an unbounded exponent range (k < emin only)
  bool lo_u_odd_ = false;
};

/// Convenience: round `x` into `f` once.
Result deliver(const Fmt& f, const Exact& x, Rounding r, Tininess t, uint32_t rnd);

/// roundToIntegral in the same format, direction `r`; `exact` raises inexact when the value
/// changes. Rounds to an integer on the grid of spacing 1 (round-to-odd picks the odd integer),
/// then delivers that integer into the format (overflow per the format when it does not fit).
Result round_to_int(const Fmt& f, uint64_t enc, Rounding r, bool exact, uint32_t rnd);

/// Comparisons with IEEE 754-2019 §5.11 semantics (±0 equal; daz inputs compare as zero).
struct Compare {
  bool unordered = false;
  int order = 0;  ///< −1, 0, +1 when ordered
  bool any_snan = false;
};
Compare compare(const Fmt& f, uint64_t a, uint64_t b);

/// Whether `got` (with flags `got_flags`) is a correct IEEE 754-2019 minimum/maximum
/// (number = minimumNumber/maximumNumber) of a and b. With equal values of the same sign,
/// either operand is accepted; −0 < +0.
bool minmax_ok(const Fmt& f, uint64_t a, uint64_t b, bool want_max, bool number, uint64_t got,
               uint8_t got_flags, std::string* why);

/// Fields of an encoding separated by spaces ("0 01111 0000000000"), for failure messages.
std::string show(const Fmt& f, uint64_t enc);
/// The exact value of a finite encoding as a double (every supported format fits exactly).
double to_double(const Fmt& f, uint64_t enc);
/// The encoding of (−1)^neg·sig·2^exp, which must be exactly representable in f (throws).
uint64_t encode_exact(const Fmt& f, bool neg, uint64_t sig, int exp);
/// The encoding of 2^k when it is representable; false otherwise.
bool power_of_two(const Fmt& f, int k, uint64_t* enc);

// -------------------------------------------------------------------------------------------
// Test inputs computed from the format's definition

/// Boundary encodings, both signs: ±0, the smallest subnormals, the largest subnormal, the
/// smallest normal and neighbours, 1 and neighbours, every power of two, the largest finite
/// value and its neighbours, and every encoding above it (infinities, quiet/signalling NaNs).
std::vector<uint64_t> boundary_encodings(const Fmt& f);

/// Real numbers (as binary64) around the format's boundaries: every boundary value, the
/// midpoints (ties) between consecutive values, the overflow midpoint max + ulp/2, half the
/// smallest subnormal, each with its binary64 neighbours (nextafter), both signs, plus ±0,
/// ±inf, NaN and binary64 extremes. For formats of at most 8 bits: every value and every tie.
std::vector<double> boundary_values(const Fmt& f);

// -------------------------------------------------------------------------------------------
// Checking the library against the oracle

/// Counts of one kind of check and the first few mismatches (operands shown field by field).
struct Tally {
  std::string what;
  uint64_t checks = 0, mismatches = 0;
  std::vector<std::string> first;
  std::map<std::string, uint64_t> by_subject;  ///< mismatches per first word (the format)
  explicit Tally(std::string w) : what(std::move(w)) {}
  void fail(std::string msg) {
    ++mismatches;
    ++by_subject[msg.substr(0, msg.find(' '))];
    if (first.size() < 8) first.push_back(std::move(msg));
  }
  std::string breakdown() const {
    std::string s;
    for (const auto& [k, n] : by_subject) s += " " + k + ":" + std::to_string(n);
    return s;
  }
};

inline std::string describe_result(const Fmt& f, uint64_t enc, uint8_t flags) {
  return show(f, enc) + " [" + halfway::flags_name(flags) + "]";
}

/// Check one library operation, whose exact result is `x`, under all 7 rounding directions and
/// both tininess modes. `lib(env)` runs the library with `env`; stochastic rounding uses the
/// 32 random bits halfway::sr_bits(seed, 0, counter) on both sides. `what()` describes the
/// operands for a failure message.
template <class Lib, class What>
void check_rounded(Tally& tally, const Fmt& out, const Exact& x, uint64_t seed, uint64_t counter,
                   Lib&& lib, What&& what) {
  const Rounder rounder(out, x);
  for (int r = 0; r < halfway::kRoundingCount; ++r) {
    for (int t = 0; t < 2; ++t) {
      halfway::Env env{Rounding(r), seed};
      env.tininess = Tininess(t);
      env.sr_counter = counter;
      const uint64_t got = lib(env);
      const Result want = rounder.round(Rounding(r), Tininess(t), halfway::sr_bits(seed, 0, counter));
      ++tally.checks;
      if (got != want.enc || env.flags != want.flags)
        tally.fail(what() + " " + halfway::rounding_name(Rounding(r)) +
                   (t ? " tininess-before" : " tininess-after") + ": got " +
                   describe_result(out, got, env.flags) + " want " +
                   describe_result(out, want.enc, want.flags));
    }
  }
}

}  // namespace oracle
