// A fast oracle for `halfway verify`, written independently of the library's `round_pack`.
//
// The library rounds with integer significands and a guard/sticky decision. The oracle instead
// lets the host's binary64 hardware do the work:
//   * decode an encoding from the format's definition into a double (exact for every format);
//   * compute the operation in binary64 with the host rounding mode (fesetround) of the same
//     direction: + − × are exact or, for a bf16 sum of far-apart operands, directed/nearest
//     rounded; ÷ and √ are rounded once in binary64 (53 >= 2p + 2, so a second rounding in the
//     same direction gives the correctly rounded result, Figueroa 1995). Whether the binary64
//     result is exact, and on which side the exact value lies, comes from an exact residual
//     (Sterbenz for sums, fma for quotients and roots);
//   * scale the double onto the target's grid by an exact power of two and round it to an
//     integer: nearbyint under the host mode for near_even/minMag/min/max (computed as
//     (v + 2^52) − 2^52, which rounds in the current mode), trunc plus the exact fractional part
//     for near_maxMag, trunc plus "set the last bit if inexact" for odd (those two compute the
//     binary64 operation toward zero and use the residual as sticky);
//   * build the encoding from the integer and the exponent, and decide overflow, tininess and
//     the flags from their IEEE definitions (inexact: result != exact value; underflow: tiny and
//     inexact, tininess after rounding by default; overflow: the result rounded with an unbounded
//     exponent exceeds the largest finite value).
// Special values (NaN, infinities, signed zeros, formats without them) follow the semantics the
// project fixed; they are written here from those rules, not from the library's code.
// The loops that run 2^32 times take a short path for results in and below the normal range
// (same method, fewer branches); `halfway verify` checks it against the general path.
#pragma once

#include <cstdint>
#include <vector>

#include "halfway/bulk.hpp"
#include "halfway/env.hpp"
#include "halfway/format.hpp"

namespace halfway::verify {

/// What an encoding is, by the format's definition.
enum class Kind : uint8_t { zero, finite, inf, qnan, snan };

/// The format's parameters, derived from its descriptor by the definitions of the encodings.
struct FormatInfo {
  Format f;
  int m = 0;              ///< stored fraction bits
  int p = 0;              ///< precision
  int nbits = 0;
  int emin = 0;           ///< exponent of the smallest normal (of 2^bias-scaled field 1, or 0)
  uint32_t sign_bit = 0;  ///< 0 for unsigned formats
  uint32_t mag_mask = 0;
  uint32_t field_max = 0;
  uint32_t max_mag = 0;   ///< encoding of the largest finite value
  double max_value = 0;   ///< the largest finite value
  double min_normal = 0;  ///< 2^emin

  explicit FormatInfo(const Format& fmt);
  Kind kind(uint32_t enc) const;
  /// Value of a zero, finite or infinite encoding (daz applies to subnormals).
  double value(uint32_t enc) const;
  bool is_nan(uint32_t enc) const { const Kind k = kind(enc); return k == Kind::qnan || k == Kind::snan; }
  /// Non-zero subnormal encoding (a format with zero, field 0, fraction non-zero).
  bool is_subnormal(uint32_t enc) const;

  /// Result classes of the bulk event counts.
  enum : uint8_t { kNan = 1, kZero = 2, kSubnormal = 4 };
  uint8_t result_class(uint32_t enc) const;
  uint8_t class_of(uint32_t enc) const {
    return classes.empty() ? result_class(enc) : classes[enc];
  }
  std::vector<uint8_t> classes;  ///< result_class of every encoding (formats of <= 16 bits)
};

/// One oracle answer: the encoding and the IEEE flags of the operation. `cls` caches the result
/// class for the event counts (FormatInfo::kNan | kZero | kSubnormal) when the producer knows it.
struct Answer {
  uint32_t enc;
  uint8_t flags;
  uint8_t cls = kUnclassified;
  static constexpr uint8_t kUnclassified = 0xFF;
};

/// The oracle for one target format, one rounding direction and one tininess mode.
class Oracle {
 public:
  /// `short_path`: take the quick route for results in the normal range (the default). Without
  /// it every element goes through the general rounding routine; the two must agree, which the
  /// quick run of `halfway verify` checks.
  Oracle(const Format& target, Rounding r, Tininess t = Tininess::after_rounding,
         bool short_path = true);
  const FormatInfo& target() const { return info_; }
  Rounding rounding() const { return r_; }

  // Every call writes the encodings to out[i] and the flags to fl[i]; when `counts` is not null
  // it also adds the event counts that a bulk call on the same inputs must report, from their
  // definitions in bulk.hpp.

  /// f32 bit patterns → target.
  void from_f32(const uint32_t* in, size_t n, uint32_t* out, uint8_t* fl,
                EventCounts* counts = nullptr) const;
  /// Encodings of `src` → target.
  void convert(const FormatInfo& src, const uint32_t* in, size_t n, uint32_t* out, uint8_t* fl,
               EventCounts* counts = nullptr) const;
  /// a[i] op b[i] in the target format (both operands are target encodings).
  void binary(BinaryOp op, const uint32_t* a, const uint32_t* b, size_t n, uint32_t* out,
              uint8_t* fl, EventCounts* counts = nullptr) const;
  /// One fixed `a` against b[0..n).
  void binary_row(BinaryOp op, uint32_t a, const uint32_t* b, size_t n, uint32_t* out,
                  uint8_t* fl, EventCounts* counts = nullptr) const;
  /// √a[i] in the target format.
  void sqrt(const uint32_t* a, size_t n, uint32_t* out, uint8_t* fl,
            EventCounts* counts = nullptr) const;

 private:
  void binary_any(BinaryOp op, const uint32_t* a, uint32_t a_fixed, const uint32_t* b, size_t n,
                  uint32_t* out, uint8_t* fl, EventCounts* counts) const;

  FormatInfo info_;
  Rounding r_;
  Tininess t_;
  bool short_path_;
  std::vector<double> table_;  ///< values of all encodings (formats of at most 16 bits)
  std::vector<uint8_t> kinds_;
};

/// Decode an encoding of `f` to the f32 bit pattern of its value (exact; NaNs quieted, keeping
/// sign and top payload bits; the NaN of fnuz formats is positive). Raises invalid on sNaN.
Answer to_f32(const FormatInfo& f, uint32_t enc);

}  // namespace halfway::verify
