// The oracle of `halfway verify` (see verify_oracle.hpp for the method). This file is compiled
// with -frounding-math -ffp-contract=off: the host rounding mode is part of the computation, so
// the compiler must neither fold nor move floating-point operations across fesetround, nor fuse
// a multiply and an add on its own.
#include "verify_oracle.hpp"

#include <algorithm>
#include <bit>
#include <cfenv>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace halfway::verify {

namespace {

constexpr uint8_t kInexact = flag::inexact, kUnderflow = flag::underflow,
                  kOverflow = flag::overflow, kInfinite = flag::infinite, kInvalid = flag::invalid;

/// 2^k as a double, for -1022 <= k <= 1023 (built from its bits: exact, no libm).
inline double pow2(int k) { return std::bit_cast<double>(uint64_t(k + 1023) << 52); }

/// Unbiased exponent of a positive normal double.
inline int exponent_of(double a) { return int((std::bit_cast<uint64_t>(a) >> 52) & 0x7FF) - 1023; }

/// The host rounding mode that computes the binary64 intermediate for direction r. Round to
/// nearest-away and round to odd are computed toward zero; the residual supplies the sticky bit.
int host_mode(Rounding r) {
  switch (r) {
    case Rounding::near_even: return FE_TONEAREST;
    case Rounding::min: return FE_DOWNWARD;
    case Rounding::max: return FE_UPWARD;
    default: return FE_TOWARDZERO;
  }
}

/// Sets the host rounding mode for the lifetime of the object (the mode is per thread).
class HostRounding {
 public:
  explicit HostRounding(Rounding r) : saved_(std::fegetround()) {
    if (std::fesetround(host_mode(r)) != 0) throw std::runtime_error("fesetround failed");
  }
  ~HostRounding() { std::fesetround(saved_); }
  HostRounding(const HostRounding&) = delete;
  HostRounding& operator=(const HostRounding&) = delete;

 private:
  int saved_;
};

/// Sign of the exact value's offset from a binary64 approximation: +1 above, -1 below, 0 exact.
inline int sign_of(double r) { return (r > 0) - (r < 0); }

/// Per-element facts the event counts are defined from: the result class (FormatInfo::kNan,
/// kZero, kSubnormal) and whether the exact result was a non-zero finite number.
constexpr uint8_t kExactNonzero = 8;

/// Event counts by their definitions in bulk.hpp: inexact (NaN results excluded), zero results,
/// flushed (a non-zero finite exact value gave zero), subnormal results, overflow (the overflow
/// flag), NaN results, and the OR of the flags.
void tally(const uint8_t* fl, const uint8_t* meta, size_t n, EventCounts* c) {
  static_assert(kInexact == 1 && FormatInfo::kNan == 1 && FormatInfo::kZero == 2 &&
                FormatInfo::kSubnormal == 4 && kOverflow == 4 && kExactNonzero == 8);
  if (!c) return;
  // Bit arithmetic on bytes with 32-bit partial sums, so that the compiler vectorises it.
  uint64_t inexact = 0, zero = 0, flushed = 0, subnormal = 0, overflow = 0, nan = 0;
  uint32_t flags = 0;
  for (size_t start = 0; start < n; start += 4096) {
    const size_t end = std::min(n, start + 4096);
    uint32_t in = 0, ze = 0, un = 0, su = 0, ov = 0, na = 0, fo = 0;
    for (size_t i = start; i < end; ++i) {
      const uint32_t f = fl[i], m = meta[i];
      in += f & ~m & 1;  // inexact, result not NaN
      ze += (m >> 1) & 1;
      un += (m >> 1) & (m >> 3) & 1;  // zero result from a non-zero exact value
      su += (m >> 2) & 1;
      ov += (f >> 2) & 1;
      na += m & 1;
      fo |= f;
    }
    inexact += in;
    zero += ze;
    flushed += un;
    subnormal += su;
    overflow += ov;
    nan += na;
    flags |= fo;
  }
  c->total += n;
  c->inexact += inexact;
  c->zero += zero;
  c->flushed += flushed;
  c->subnormal += subnormal;
  c->overflow += overflow;
  c->nan += nan;
  c->flags |= uint8_t(flags);
}

/// Scratch for the per-element facts (one buffer per thread).
uint8_t* meta_buffer(size_t n) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Formats by definition

FormatInfo::FormatInfo(const Format& fmt) : f(fmt) {
  m = f.frac_bits;
  p = m + 1;
  nbits = (f.is_signed ? 1 : 0) + f.exp_bits + m;
  sign_bit = f.is_signed ? uint32_t(1) << (f.exp_bits + m) : 0;
  mag_mask = (uint32_t(1) << (f.exp_bits + m)) - 1;
  field_max = (uint32_t(1) << f.exp_bits) - 1;
  // A format with zero has subnormals in field 0, so its first normal binade is field 1; a
  // format without zero (e8m0) uses field 0 as its smallest normal binade.
  emin = f.has_zero ? 1 - f.bias : -f.bias;
  // The largest finite encoding: IEEE reserves the all-ones exponent; "fn" reserves only the
  // all-ones pattern (its NaN); fnuz and formats without specials use every magnitude.
  switch (f.specials) {
    case Specials::ieee: max_mag = (field_max << m) - 1; break;
    case Specials::fn: max_mag = mag_mask - 1; break;
    default: max_mag = mag_mask; break;
  }
  max_value = value(max_mag);
  min_normal = pow2(emin);
  if (nbits <= 16) {
    classes.resize(size_t(1) << nbits);
    for (uint32_t e = 0; e < classes.size(); ++e) classes[e] = result_class(e);
  }
}

uint8_t FormatInfo::result_class(uint32_t enc) const {
  const Kind k = kind(enc);
  const bool nan = k == Kind::qnan || k == Kind::snan;
  // Classify the result as stored (daz is about inputs: a subnormal result is subnormal).
  const bool zero = f.has_zero && !nan && (enc & mag_mask) == 0;
  return uint8_t((nan ? kNan : 0) | (zero ? kZero : 0) | (is_subnormal(enc) ? kSubnormal : 0));
}

Kind FormatInfo::kind(uint32_t enc) const {
  const uint32_t mag = enc & mag_mask;
  const uint32_t field = mag >> m, frac = mag & ((uint32_t(1) << m) - 1);
  switch (f.specials) {
    case Specials::ieee:
      if (field == field_max) {
        if (frac == 0) return Kind::inf;
        return (frac >> (m - 1)) & 1 ? Kind::qnan : Kind::snan;
      }
      break;
    case Specials::fn:
      if (mag == mag_mask) return Kind::qnan;
      break;
    case Specials::fnuz:
      if (enc == sign_bit) return Kind::qnan;  // the only NaN is "negative zero"
      break;
    default: break;
  }
  if (f.has_zero && field == 0 && (frac == 0 || f.daz)) return Kind::zero;
  return Kind::finite;
}

bool FormatInfo::is_subnormal(uint32_t enc) const {
  const uint32_t mag = enc & mag_mask;
  return f.has_zero && (mag >> m) == 0 && mag != 0 && kind(enc) != Kind::qnan;
}

double FormatInfo::value(uint32_t enc) const {
  const bool neg = (enc & sign_bit) != 0;
  const uint32_t mag = enc & mag_mask;
  const uint32_t field = mag >> m, frac = mag & ((uint32_t(1) << m) - 1);
  double v;
  if (f.specials == Specials::ieee && field == field_max) {
    v = INFINITY;
  } else if (f.has_zero && field == 0) {
    // Subnormal: 0.frac · 2^emin (zero under daz).
    v = f.daz ? 0.0 : double(frac) * pow2(emin - m);
  } else {
    // Normal: 1.frac · 2^(field − bias).
    v = double((uint32_t(1) << m) | frac) * pow2(int(field) - f.bias - m);
  }
  return neg ? -v : v;
}

// ---------------------------------------------------------------------------------------------
// Rounding a binary64 value into the target

namespace {

struct Rounder {
  const FormatInfo& F;
  Rounding r;
  bool tiny_after;
  // Binades [fast_lo, fast_hi] hold only normal target numbers: results there take the short
  // path (short_round below) unless they overflow.
  int fast_lo = F.emin;
  int fast_hi = F.f.is_signed && F.f.has_zero ? exponent_of(F.max_value) : F.emin - 1;
  // A normal binary64 value r of the target's normal range has the target encoding
  // ((bits(r) >> (52 − m)) − bias_shift) for its magnitude (exponent field and top m fraction
  // bits, rebiased from 1023 to the format's bias) and its sign at bit nbits − 1.
  int frac_shift = 52 - F.m;
  uint64_t bias_shift = uint64_t(1023 - F.f.bias) << F.m;
  int sign_shift = F.nbits - 1;
  // The short path covers signed formats with zero (below the normal range: without flushing).
  bool short_ok = F.f.is_signed && F.f.has_zero;
  double sub_scale = pow2(F.m - F.emin);
  double two_p = pow2(F.p);
  // Overflow results [to infinity?][negative?] and their classes, for the short path.
  uint32_t overflow_enc[2][2] = {{with_sign(false, F.max_mag), with_sign(true, F.max_mag)},
                                 {overflow_value(false), overflow_value(true)}};
  uint8_t overflow_meta[2][2] = {{F.class_of(overflow_enc[0][0]), F.class_of(overflow_enc[0][1])},
                                 {F.class_of(overflow_enc[1][0]), F.class_of(overflow_enc[1][1])}};

  uint32_t with_sign(bool neg, uint32_t mag) const { return neg ? (mag | F.sign_bit) : mag; }

  /// The encoding of ±0; formats without −0 give +0. Formats without zero (e8m0) clamp to their
  /// smallest value, which is inexact and an underflow.
  Answer zero(bool neg) const {
    if (!F.f.has_zero) return {0, uint8_t(kUnderflow | kInexact)};
    if (F.f.specials == Specials::fnuz) return {0, 0};
    return {with_sign(neg, 0), 0};
  }

  /// The NaN an invalid operation produces: x86's "real indefinite" (sign set, quiet bit set,
  /// zero payload) for IEEE formats, the format's only NaN otherwise (positive), +max without NaN.
  Answer default_nan() const {
    switch (F.f.specials) {
      case Specials::ieee:
        return {F.sign_bit | (F.field_max << F.m) | (uint32_t(1) << (F.m - 1)), kInvalid};
      case Specials::fn: return {F.mag_mask, kInvalid};
      case Specials::fnuz: return {uint32_t(1) << (F.nbits - 1), kInvalid};
      default: return {F.max_mag, kInvalid};
    }
  }

  /// A NaN operand or input: quieted, keeping its sign and the top bits of its payload
  /// (`payload` top-aligned, quiet bit at bit 63). Signalling NaNs raise invalid.
  Answer nan(bool neg, uint64_t payload, bool signalling) const {
    const uint8_t fl = signalling ? kInvalid : 0;
    switch (F.f.specials) {
      case Specials::ieee: {
        const uint32_t frac = uint32_t(payload >> (64 - F.m)) | (uint32_t(1) << (F.m - 1));
        return {with_sign(neg, (F.field_max << F.m) | frac), fl};
      }
      case Specials::fn: return {with_sign(neg, F.mag_mask), fl};
      case Specials::fnuz: return {uint32_t(1) << (F.nbits - 1), fl};
      default: return {F.max_mag, kInvalid};  // no NaN to hold it: invalid, +max
    }
  }

  /// An infinite operand or input.
  Answer inf(bool neg) const {
    if (neg && !F.f.is_signed) return default_nan();
    if (F.f.specials == Specials::ieee && F.f.overflow != Overflow::saturate)
      return {with_sign(neg, F.field_max << F.m), 0};
    // Saturating formats never deliver infinity (__NV_SATFINITE sends ±inf to ±max).
    // No infinity: not representable, so invalid; ±max when saturating (or without NaN).
    if (F.f.overflow == Overflow::saturate || F.f.specials == Specials::none)
      return {with_sign(neg, F.max_mag), kInvalid};
    if (F.f.specials == Specials::fnuz) return {uint32_t(1) << (F.nbits - 1), kInvalid};
    return {with_sign(neg, F.mag_mask), kInvalid};
  }

  /// What "rounds to infinity" becomes in this format.
  uint32_t overflow_value(bool neg) const {
    switch (F.f.overflow) {
      case Overflow::infinity: return with_sign(neg, F.field_max << F.m);
      case Overflow::nan:
        if (F.f.specials == Specials::fnuz) return uint32_t(1) << (F.nbits - 1);
        return with_sign(neg, F.mag_mask);  // the all-ones pattern is a NaN
      default: return with_sign(neg, F.max_mag);
    }
  }

  /// Round v (a double holding an integer-scaled value, |v| < 2^52) to an integer in direction
  /// r. `side` says where the exact value lies relative to v (+1 above, −1 below, 0 exactly v).
  double to_integer(double v, int side) const {
    switch (r) {
      case Rounding::near_maxMag: {
        // v was computed toward zero, so the exact value's fractional part is >= 1/2 exactly when
        // v's is (1/2 lies on v's binary64 grid). trunc(v) and v − trunc(v) are exact.
        const double t = trunc(v);
        return std::fabs(v - t) >= 0.5 ? t + std::copysign(1.0, v) : t;
      }
      case Rounding::odd: {
        const double t = trunc(v);
        if (t == v && side == 0) return t;
        const uint64_t k = uint64_t(std::fabs(t)) | 1;  // inexact: make the last bit odd
        return std::copysign(double(k), v);
      }
      default:
        // The host is in the same direction as r, and v is the binary64 rounding of the exact
        // value in that direction (or exact): rounding it again gives the right integer.
        return nearbyint(v);
    }
  }

  /// std::trunc for |v| < 2^63, without a library call: the conversion truncates.
  static double trunc(double v) { return double(int64_t(v)); }

  /// std::nearbyint (the host's current rounding direction) for |v| < 2^52, without a library
  /// call: adding ±2^52 leaves no fraction bits, so the addition rounds v to an integer in the
  /// current direction; the subtraction is exact. (-frounding-math keeps both operations.)
  static double nearbyint(double v) {
    const double c = std::copysign(4503599627370496.0, v);
    return (v + c) - c;
  }

  /// Round the exact value approximated by d (side: where the exact value lies) into the target.
  Answer round(double d, int side) const;

  /// Every case: zeros, unsigned formats, formats without zero, tiny results, overflow.
  Answer round_general(double d, int side) const {
    const bool neg = std::signbit(d);
    // Binary64 never rounds the non-zero results of these operations to zero: d == 0 is exact.
    if (d == 0) return zero(neg);
    if (neg && !F.f.is_signed) return default_nan();
    const double a = std::fabs(d);
    const bool mag_below = side != 0 && ((side < 0) != neg);  // |exact| < |d|
    if (!F.f.has_zero && (a < F.min_normal || (a == F.min_normal && mag_below)))
      return {0, uint8_t(kUnderflow | kInexact)};  // no zero, no subnormals: clamp to 2^emin
    const int e = exponent_of(a);

    // Onto the grid: the quantum is 2^(max(e, emin) − m); the scaled value is exact.
    int q = std::max(e, F.emin) - F.m;
    const double n = to_integer(d * pow2(-q), side);
    uint64_t N = uint64_t(std::fabs(n));
    if (F.m == 0 && e >= F.emin && (r == Rounding::near_even || r == Rounding::odd)) {
      // Precision 1 (e8m0): the candidates 2^e and 2^(e+1) are both "odd" significands, so
      // parity is that of the encoding (the exponent field), as ml_dtypes and halfway define
      // it (docs/semantics.md): a tie goes to the even field, round-to-odd to the odd one.
      const double t = a * pow2(-e);  // in [1, 2)
      const bool field_even = ((e + F.f.bias) & 1) == 0;
      if (r == Rounding::near_even && t == 1.5 && side == 0) N = field_even ? 1 : 2;
      if (r == Rounding::odd && (side != 0 || t != 1.0)) N = field_even ? 2 : 1;
    }
    const bool inexact = side != 0 || double(N) * pow2(q) != a;

    // Tininess: before rounding, |exact| < 2^emin; after rounding, the exact value rounded to p
    // bits with an unbounded exponent is below 2^emin (only the binade just below can reach it).
    bool tiny;
    if (!tiny_after) {
      tiny = e < F.emin || (a == F.min_normal && mag_below);
    } else if (e >= F.emin) {
      tiny = false;
    } else if (e < F.emin - 1) {
      tiny = true;
    } else {
      const double n2 = to_integer(d * pow2(-(e - F.m)), side);
      tiny = std::fabs(n2) < double(uint64_t(1) << F.p);
    }
    if (!F.f.has_zero) tiny = false;
    if (tiny && F.f.ftz) {
      Answer z = zero(neg);
      z.flags |= kUnderflow | kInexact;
      return z;
    }
    uint8_t fl = (inexact ? kInexact : 0) | (tiny && inexact ? kUnderflow : 0);

    if (N >> F.p) {  // rounded up to the next power of two
      N >>= 1;
      ++q;
    }
    if (N == 0) {
      Answer z = zero(neg);
      z.flags |= fl;
      return z;
    }
    if (double(N) * pow2(q) > F.max_value) {
      // Overflow. Rounding to nearest and the directed mode away from zero give "infinity";
      // toward zero, the other directed mode and round-to-odd give the largest finite value.
      const bool to_inf = r == Rounding::near_even || r == Rounding::near_maxMag ||
                          (r == Rounding::min && neg) || (r == Rounding::max && !neg);
      return {to_inf ? overflow_value(neg) : with_sign(neg, F.max_mag),
              uint8_t(kOverflow | kInexact)};
    }
    uint32_t mag;
    if (N < (uint64_t(1) << F.m)) {
      mag = uint32_t(N);  // subnormal: exponent field 0
    } else {
      const int field = q + F.m + F.f.bias;
      mag = (uint32_t(field) << F.m) | uint32_t(N - (uint64_t(1) << F.m));
    }
    return {with_sign(neg, mag), fl};
  }
};

Answer Rounder::round(double d, int side) const { return round_general(d, side); }

/// v rounded to an integer in direction R (see Rounder::to_integer), with the direction fixed at
/// compile time.
template <Rounding R>
__attribute__((always_inline)) inline double to_int(double v, int side) {
  if constexpr (R == Rounding::near_maxMag) {
    const double t = Rounder::trunc(v);
    return std::fabs(v - t) >= 0.5 ? t + std::copysign(1.0, v) : t;
  } else if constexpr (R == Rounding::odd) {
    const double t = Rounder::trunc(v);
    return t == v && side == 0 ? t : std::copysign(double(int64_t(std::fabs(t)) | 1), v);
  } else {
    return Rounder::nearbyint(v);  // the host rounds in direction R
  }
}

/// The short path of rounding a finite d in direction R, for the loops that run 2^32 times: the
/// normal range, overflow, and (without flushing) the range below 2^emin, with its fixed quantum
/// 2^(emin − m), for signed formats with zero. Returns false for infinities and NaNs and for
/// the formats it does not cover; the caller then takes the general path
/// (Rounder::round_general), which decides every case from the definitions. `meta` receives the
/// result class and whether the exact value was non-zero.
template <Rounding R>
__attribute__((always_inline)) inline bool short_round(const Rounder& Ro, double d, int side,
                                                       uint32_t& enc, uint8_t& fl,
                                                       uint8_t& meta) {
  const FormatInfo& F = Ro.F;
  const uint64_t bits = std::bit_cast<uint64_t>(d);
  const int e = int((bits >> 52) & 0x7FF) - 1023;  // −1023 for zero, 1024 for inf and NaN
  if (e == 1024 || !Ro.short_ok) return false;
  const bool neg = bits >> 63;
  const uint32_t sign = uint32_t(neg) << Ro.sign_shift;
  const auto overflow = [&] {
    // Rounding to nearest and the directed mode away from zero give "infinity" (what the format
    // makes of it); toward zero, the other directed mode and round-to-odd the largest finite.
    constexpr bool up = R == Rounding::near_even || R == Rounding::near_maxMag;
    const bool to_inf = up || (R == Rounding::min && neg) || (R == Rounding::max && !neg);
    enc = Ro.overflow_enc[to_inf][neg];
    fl = kOverflow | kInexact;
    meta = uint8_t(Ro.overflow_meta[to_inf][neg] | kExactNonzero);
    return true;
  };
  if (e > Ro.fast_hi) return overflow();  // |d| >= 2^(emax + 1) > max in every direction
  if (e >= Ro.fast_lo) {
    // Normal range: quantum 2^(e − m).
    const double v = d * pow2(F.m - e);  // exact: |v| in [2^m, 2^p)
    const double n = to_int<R>(v, side);
    const double r = n * pow2(e - F.m);  // the rounded value, exact
    if (std::fabs(r) > F.max_value) return overflow();
    const uint64_t rb = std::bit_cast<uint64_t>(r);
    enc = uint32_t(((rb & 0x7FFFFFFFFFFFFFFFull) >> Ro.frac_shift) - Ro.bias_shift) | sign;
    fl = n != v || side != 0 ? kInexact : 0;
    meta = kExactNonzero;
    return true;
  }
  if (F.f.ftz) return false;
  // Below 2^emin: the fixed quantum 2^(emin − m); the integer is the encoding's magnitude (2^m,
  // one past the subnormals, is the encoding of 2^emin).
  const double v = d * Ro.sub_scale;  // exact
  const double n = to_int<R>(v, side);
  const bool inexact = n != v || side != 0;
  bool tiny = true;  // the exact value is below 2^emin
  if (Ro.tiny_after && e == F.emin - 1) {
    // Tiny after rounding unless rounding to p bits with an unbounded exponent reaches 2^emin.
    tiny = std::fabs(to_int<R>(d * pow2(F.m - e), side)) < Ro.two_p;
  }
  const uint32_t N = uint32_t(std::fabs(n));
  enc = N == 0 && F.f.specials == Specials::fnuz ? 0 : (N | sign);  // fnuz has no −0
  fl = uint8_t((inexact ? kInexact : 0) | (tiny && inexact ? kUnderflow : 0));
  meta = uint8_t((N == 0 ? FormatInfo::kZero : N >> F.m ? 0 : FormatInfo::kSubnormal) |
                 (d != 0 || side != 0 ? kExactNonzero : 0));
  return true;
}

/// Call f.template operator()<R>() for the rounding direction r (a compile-time constant in f).
template <class F>
void with_direction(Rounding r, F&& f) {
  switch (r) {
    case Rounding::near_even: f.template operator()<Rounding::near_even>(); break;
    case Rounding::near_maxMag: f.template operator()<Rounding::near_maxMag>(); break;
    case Rounding::minMag: f.template operator()<Rounding::minMag>(); break;
    case Rounding::min: f.template operator()<Rounding::min>(); break;
    case Rounding::max: f.template operator()<Rounding::max>(); break;
    default: f.template operator()<Rounding::odd>(); break;
  }
}

/// NaN payload of an encoding, top-aligned (quiet bit at bit 63), and its sign.
void nan_payload(const FormatInfo& F, uint32_t enc, bool& neg, uint64_t& payload) {
  if (F.f.specials == Specials::ieee) {
    neg = (enc & F.sign_bit) != 0;
    payload = uint64_t(enc & ((uint32_t(1) << F.m) - 1)) << (64 - F.m);
  } else {
    neg = F.f.specials == Specials::fn && (enc & F.sign_bit) != 0;
    payload = uint64_t(1) << 63;
  }
}

/// Convert one value of `src` (a non-finite class or a finite double) through the rounder.
inline Answer convert_one(const Rounder& R, const FormatInfo& src, uint32_t enc, bool& nonzero) {
  const Kind k = src.kind(enc);
  nonzero = false;
  switch (k) {
    case Kind::zero: return R.zero((enc & src.sign_bit) != 0);
    case Kind::inf: return R.inf((enc & src.sign_bit) != 0);
    case Kind::qnan:
    case Kind::snan: {
      bool neg;
      uint64_t payload;
      nan_payload(src, enc, neg, payload);
      return R.nan(neg, payload, k == Kind::snan);
    }
    default: nonzero = true; return R.round(src.value(enc), 0);
  }
}

const FormatInfo& f32_info() {
  static const FormatInfo info(formats::fp32);
  return info;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Oracle

Oracle::Oracle(const Format& target, Rounding r, Tininess t, bool short_path)
    : info_(target), r_(r), t_(t), short_path_(short_path) {
  if (r == Rounding::stochastic)
    throw std::invalid_argument("the oracle covers the deterministic rounding directions");
  if (info_.nbits <= 16) {
    const uint32_t count = uint32_t(1) << info_.nbits;
    table_.resize(count);
    kinds_.resize(count);
    for (uint32_t e = 0; e < count; ++e) {
      kinds_[e] = uint8_t(info_.kind(e));
      // NaN encodings hold a NaN so that any operation on them leaves the short path.
      table_[e] = kinds_[e] == uint8_t(Kind::qnan) || kinds_[e] == uint8_t(Kind::snan)
                      ? std::numeric_limits<double>::quiet_NaN()
                      : info_.value(e);
    }
  }
}

void Oracle::from_f32(const uint32_t* in, size_t n, uint32_t* out, uint8_t* fl,
                      EventCounts* counts) const {
  const HostRounding host(r_);
  const Rounder R{info_, r_, t_ == Tininess::after_rounding};
  const FormatInfo& f32 = f32_info();
  uint8_t* meta = meta_buffer(n);
  const bool use_short = short_path_;
  with_direction(r_, [&]<Rounding D>() {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t b = in[i];
      // Finite f32 values widen exactly to double.
      if (use_short && (b & 0x7F800000) != 0x7F800000 &&
          short_round<D>(R, double(std::bit_cast<float>(b)), 0, out[i], fl[i], meta[i]))
        continue;
      Answer a;
      bool nonzero;
      if ((b & 0x7F800000) != 0x7F800000 && (b & 0x7FFFFFFF) != 0) {
        a = R.round_general(double(std::bit_cast<float>(b)), 0);
        nonzero = true;
      } else {
        a = convert_one(R, f32, b, nonzero);
      }
      out[i] = a.enc;
      fl[i] = a.flags;
      meta[i] = uint8_t(info_.class_of(a.enc) | (nonzero ? kExactNonzero : 0));
    }
  });
  tally(fl, meta, n, counts);
}

void Oracle::convert(const FormatInfo& src, const uint32_t* in, size_t n, uint32_t* out,
                     uint8_t* fl, EventCounts* counts) const {
  const HostRounding host(r_);
  const Rounder R{info_, r_, t_ == Tininess::after_rounding};
  uint8_t* meta = meta_buffer(n);
  for (size_t i = 0; i < n; ++i) {
    bool nonzero;
    const Answer a = convert_one(R, src, in[i], nonzero);
    out[i] = a.enc;
    fl[i] = a.flags;
    meta[i] = uint8_t(info_.class_of(a.enc) | (nonzero ? kExactNonzero : 0));
  }
  tally(fl, meta, n, counts);
}

namespace {

/// The binary operations on two decoded values, one of the cases where an operand is a NaN, an
/// infinity, or a division by zero. Returns false when the finite path applies.
bool special_binary(const Rounder& R, const FormatInfo& F, BinaryOp op, uint32_t a, Kind ka,
                    uint32_t b, Kind kb, Answer& out) {
  const bool an = ka == Kind::qnan || ka == Kind::snan, bn = kb == Kind::qnan || kb == Kind::snan;
  if (an || bn) {
    // x86 propagation: the first NaN operand, quieted; any signalling NaN raises invalid.
    bool neg;
    uint64_t payload;
    nan_payload(F, an ? a : b, neg, payload);
    out = R.nan(neg, payload, false);
    if (ka == Kind::snan || kb == Kind::snan) out.flags |= kInvalid;
    return true;
  }
  const bool sa = (a & F.sign_bit) != 0;
  bool sb = (b & F.sign_bit) != 0;
  const bool ia = ka == Kind::inf, ib = kb == Kind::inf;
  switch (op) {
    case BinaryOp::sub: sb = !sb; [[fallthrough]];
    case BinaryOp::add:
      if (!ia && !ib) return false;
      if (ia && ib && sa != sb) out = R.default_nan();  // inf − inf
      else out = R.inf(ia ? sa : sb);
      return true;
    case BinaryOp::mul:
      if (!ia && !ib) return false;
      if (ka == Kind::zero || kb == Kind::zero) out = R.default_nan();  // 0 · inf
      else out = R.inf(sa != sb);
      return true;
    default:  // div
      if (ia && ib) {
        out = R.default_nan();
      } else if (ia) {
        out = R.inf(sa != sb);
      } else if (ib) {
        out = R.zero(sa != sb);
      } else if (kb == Kind::zero) {
        if (ka == Kind::zero) {
          out = R.default_nan();  // 0 / 0
        } else {
          // Division by zero: an exact infinite result, flagged "infinite"; a format without
          // infinity gives what its overflow gives, and the operation is not invalid.
          out = {F.f.specials == Specials::ieee && F.f.overflow != Overflow::saturate
                     ? R.with_sign(sa != sb, F.field_max << F.m)
                     : R.overflow_value(sa != sb),
                 kInfinite};
        }
      } else {
        return false;
      }
      return true;
  }
}

/// The binary64 result of a finite operation, and the side of the exact value (+1 above, −1
/// below, 0 exact). `exact_sums`: every sum of two values of the format is a binary64 number
/// (fp16, fp8: their values span fewer than 53 bits), so the sum needs no residual.
template <BinaryOp op>
__attribute__((always_inline)) inline double compute(double x, double y, bool exact_sums,
                                                     int& side) {
  side = 0;
  if constexpr (op == BinaryOp::add || op == BinaryOp::sub) {
    if constexpr (op == BinaryOp::sub) y = -y;
    const double s = x + y;
    if (!exact_sums) {
      // With |big| >= |small|, s − big is exact (Sterbenz), so the exact sum lies above s
      // exactly when small > s − big. Exact for every rounding direction of s. (Selected
      // without a branch: the comparison is data dependent.)
      const uint64_t bx = std::bit_cast<uint64_t>(x), by = std::bit_cast<uint64_t>(y);
      const uint64_t x_big = uint64_t(0) - uint64_t(std::fabs(x) >= std::fabs(y));
      const double big = std::bit_cast<double>((bx & x_big) | (by & ~x_big));
      const double small = std::bit_cast<double>((by & x_big) | (bx & ~x_big));
      const double z = s - big;
      side = (small > z) - (small < z);
    }
    return s;
  } else if constexpr (op == BinaryOp::mul) {
    return x * y;  // significands of at most 16 bits: the product is exact
  } else {
    const double q = x / y;
    // The remainder x − q·y is exactly representable (q is a faithful quotient), so the fma
    // computes it exactly; the exact quotient is x/y = q + rem/y.
    const double rem = std::fma(-q, y, x);
    side = sign_of(rem);
    if (y < 0) side = -side;
    return q;
  }
}

/// a op b for every element. NaN and infinite operands make the binary64 result non-finite
/// (the table holds NaN and ±inf for them), and so does division by zero: all of those leave
/// the short path, and the general one sorts them out with special_binary.
template <BinaryOp op, Rounding D>
void binary_loop(const Rounder& R, bool use_short, const double* table, const uint8_t* kinds,
                 const uint32_t* a, uint32_t a_fixed, const uint32_t* b, size_t n, uint32_t* out,
                 uint8_t* fl, uint8_t* meta) {
  const FormatInfo& F = R.F;
  // Values are multiples of 2^(emin − m) below 2^(emax + 1): a sum needs at most
  // emax + 2 − (emin − m) bits.
  const bool exact_sums = exponent_of(F.max_value) + 2 - (F.emin - F.m) <= 53;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t ea = a ? a[i] : a_fixed, eb = b[i];
    int side;
    const double s = compute<op>(table[ea], table[eb], exact_sums, side);
    if (use_short && short_round<D>(R, s, side, out[i], fl[i], meta[i])) continue;
    const Kind ka = Kind(kinds[ea]), kb = Kind(kinds[eb]);
    Answer ans;
    bool nonzero = false;
    const bool finite = (ka == Kind::finite || ka == Kind::zero) &&
                        (kb == Kind::finite || (kb == Kind::zero && op != BinaryOp::div));
    if (finite || !special_binary(R, F, op, ea, ka, eb, kb, ans)) {
      ans = R.round_general(s, side);
      nonzero = s != 0 || side != 0;
    }
    out[i] = ans.enc;
    fl[i] = ans.flags;
    meta[i] = uint8_t(F.class_of(ans.enc) | (nonzero ? kExactNonzero : 0));
  }
}

}  // namespace

void Oracle::binary_row(BinaryOp op, uint32_t a, const uint32_t* b, size_t n, uint32_t* out,
                        uint8_t* fl, EventCounts* counts) const {
  binary_any(op, nullptr, a, b, n, out, fl, counts);
}

void Oracle::binary(BinaryOp op, const uint32_t* a, const uint32_t* b, size_t n, uint32_t* out,
                    uint8_t* fl, EventCounts* counts) const {
  binary_any(op, a, 0, b, n, out, fl, counts);
}

void Oracle::binary_any(BinaryOp op, const uint32_t* a, uint32_t a_fixed, const uint32_t* b,
                        size_t n, uint32_t* out, uint8_t* fl, EventCounts* counts) const {
  if (table_.empty()) throw std::invalid_argument("binary operations need a format of <= 16 bits");
  const HostRounding host(r_);
  const Rounder R{info_, r_, t_ == Tininess::after_rounding};
  const double* t = table_.data();
  const uint8_t* k = kinds_.data();
  uint8_t* meta = meta_buffer(n);
  const bool sp = short_path_;
  with_direction(r_, [&]<Rounding D>() {
    switch (op) {
      case BinaryOp::add: binary_loop<BinaryOp::add, D>(R, sp, t, k, a, a_fixed, b, n, out, fl, meta); break;
      case BinaryOp::sub: binary_loop<BinaryOp::sub, D>(R, sp, t, k, a, a_fixed, b, n, out, fl, meta); break;
      case BinaryOp::mul: binary_loop<BinaryOp::mul, D>(R, sp, t, k, a, a_fixed, b, n, out, fl, meta); break;
      default: binary_loop<BinaryOp::div, D>(R, sp, t, k, a, a_fixed, b, n, out, fl, meta); break;
    }
  });
  tally(fl, meta, n, counts);
}

void Oracle::sqrt(const uint32_t* in, size_t n, uint32_t* out, uint8_t* fl,
                  EventCounts* counts) const {
  const HostRounding host(r_);
  const Rounder R{info_, r_, t_ == Tininess::after_rounding};
  uint8_t* meta = meta_buffer(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t e = in[i];
    const Kind k = info_.kind(e);
    const bool neg = (e & info_.sign_bit) != 0;
    Answer ans;
    bool nonzero = false;
    if (k == Kind::qnan || k == Kind::snan) {
      bool nneg;
      uint64_t payload;
      nan_payload(info_, e, nneg, payload);
      ans = R.nan(nneg, payload, k == Kind::snan);
    } else if (k == Kind::zero) {
      ans = R.zero(neg);  // √±0 = ±0
    } else if (neg) {
      ans = R.default_nan();  // √ of a negative number (−inf included)
    } else if (k == Kind::inf) {
      ans = R.inf(false);
    } else {
      const double x = info_.value(e);
      const double s = std::sqrt(x);
      // x − s² is exactly representable for a faithful root, so the fma gives it exactly; the
      // exact root lies above s exactly when it is positive.
      const int side = sign_of(std::fma(-s, s, x));
      nonzero = true;
      ans = R.round(s, side);
    }
    out[i] = ans.enc;
    fl[i] = ans.flags;
    meta[i] = uint8_t(info_.class_of(ans.enc) | (nonzero ? kExactNonzero : 0));
  }
  tally(fl, meta, n, counts);
}

Answer to_f32(const FormatInfo& F, uint32_t enc) {
  const Kind k = F.kind(enc);
  if (k == Kind::qnan || k == Kind::snan) {
    bool neg;
    uint64_t payload;
    nan_payload(F, enc, neg, payload);
    const uint32_t frac = uint32_t(payload >> 41) | 0x00400000u;
    return {(neg ? 0x80000000u : 0u) | 0x7F800000u | frac, uint8_t(k == Kind::snan ? kInvalid : 0)};
  }
  // Every value of a supported format is a binary32 value: the narrowing is exact (signed
  // zeros and infinities included).
  return {std::bit_cast<uint32_t>(float(F.value(enc))), 0};
}

}  // namespace halfway::verify
