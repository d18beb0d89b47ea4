/// \file softfloat.hpp
/// Correctly rounded scalar arithmetic in any `Format`: conversions, + − × ÷ fma √,
/// roundToInt, comparisons, min/max. Every result passes through one routine, `round_pack`,
/// which applies the rounding direction, subnormal/flush modes, overflow mode and raises the
/// IEEE flags. All routines are `__host__ __device__`.
///
///     using namespace halfway;
///     Env env;                                        // near_even, tininess after rounding
///     uint32_t a = from_f32(formats::fp16, 0.1f, env);  // 0x2E66, flags = inexact
///     uint32_t s = add(formats::fp16, a, a, env);       // 0x3266
///     float back = to_f32(formats::fp16, s, env);       // 0.199951171875
#pragma once

#include "halfway/config.hpp"
#include "halfway/env.hpp"
#include "halfway/format.hpp"

namespace halfway {

/// Class of an unpacked value.
enum class Class : uint8_t { zero, finite, inf, qnan, snan };

/// An unpacked value. Finite non-zero values are (-1)^sign · sig · 2^(exp − 63) with bit 63
/// of `sig` set, so `exp` is the unbiased exponent of the leading bit. NaNs keep their payload
/// top-aligned in `sig` (quiet bit at bit 63), as SoftFloat's "common NaN" does.
struct Unpacked {
  Class cls = Class::zero;
  bool sign = false;
  int32_t exp = 0;
  uint64_t sig = 0;
};

namespace detail {

HALFWAY_INLINE bool is_nan(Class c) { return c == Class::qnan || c == Class::snan; }

/// `mag` with the sign bit set when `sign` (never in an unsigned format, whose sign_bit() is 0).
/// No branch: the sign is data.
HALFWAY_INLINE uint32_t with_sign(const Format& f, bool sign, uint32_t mag) {
  return mag | (f.sign_bit() & (0u - uint32_t(sign)));
}

/// The largest finite value with the given sign.
HALFWAY_INLINE uint32_t pack_max(const Format& f, bool sign) { return with_sign(f, sign, f.max_mag()); }

/// Signed zero; fnuz formats have no −0, e8m0 has no zero at all (clamps to its minimum).
HALFWAY_INLINE uint32_t pack_zero(const Format& f, bool sign) {
  if (!f.has_zero) return 0;
  return f.has_neg_zero() ? with_sign(f, sign, 0) : 0;
}

/// An exact zero result (x − x, a·b − c cancelling, roundToInt(0.3)). A format without zero
/// (e8m0) delivers its smallest value instead, which is inexact and tiny, as pack() does for a
/// zero input.
HALFWAY_INLINE uint32_t pack_exact_zero(const Format& f, bool sign, Env& env) {
  if (!f.has_zero) env.flags |= flag::underflow | flag::inexact;
  return pack_zero(f, sign);
}

/// Quiet NaN carrying `payload` (top-aligned) where the format has room for a payload.
HALFWAY_INLINE uint32_t pack_nan(const Format& f, bool sign, uint64_t payload, Env& env) {
  switch (f.specials) {
    case Specials::ieee: {
      const uint32_t quiet = uint32_t(1) << (f.frac_bits - 1);
      const uint32_t frac = static_cast<uint32_t>(payload >> (64 - f.frac_bits));
      return with_sign(f, sign, f.inf_mag() | quiet | frac);
    }
    case Specials::fn: return with_sign(f, sign, f.mag_mask());
    case Specials::fnuz: return f.default_nan();
    default:
      // The format cannot hold a NaN: the operation is invalid and the result is +max.
      env.flags |= flag::invalid;
      return f.default_nan();
  }
}

/// The default NaN of an invalid operation.
HALFWAY_INLINE uint32_t invalid_nan(const Format& f, Env& env) {
  env.flags |= flag::invalid;
  return f.default_nan();
}

/// ±infinity, or what a format without infinities makes of an infinite operand: ±max when it
/// saturates, otherwise NaN. Either way the value was not representable, so invalid is raised.
/// A saturating format never delivers infinity, even when it has the encoding (e5m2:sat is
/// NVIDIA's __NV_SATFINITE, which sends ±inf to ±max).
HALFWAY_INLINE uint32_t pack_inf(const Format& f, bool sign, Env& env) {
  if (sign && !f.is_signed) return invalid_nan(f, env);  // −inf in an unsigned format (0 − inf)
  if (f.has_inf() && f.overflow != Overflow::saturate) return with_sign(f, sign, f.inf_mag());
  env.flags |= flag::invalid;
  if (f.overflow == Overflow::saturate || !f.has_nan()) return pack_max(f, sign);
  return f.specials == Specials::fnuz ? f.default_nan() : with_sign(f, sign, f.mag_mask());
}

/// Result of an overflow that rounding sends to infinity (as opposed to max finite).
HALFWAY_INLINE uint32_t pack_overflow_inf(const Format& f, bool sign) {
  switch (f.overflow) {
    case Overflow::infinity:
      if (f.has_inf()) return with_sign(f, sign, f.inf_mag());
      [[fallthrough]];
    case Overflow::nan:
      if (f.specials == Specials::fnuz) return f.default_nan();
      if (f.has_nan()) return with_sign(f, sign, f.mag_mask());
      [[fallthrough]];
    default: return pack_max(f, sign);
  }
}

/// Decide whether to increment the truncated magnitude `kept` given the dropped bits `rem`
/// (top-aligned: bit 63 is the half-ulp bit) under rounding direction `r`. Written with bitwise
/// operations rather than && and ||: the dropped bits are data, and a branch on them is
/// mispredicted about half the time.
HALFWAY_INLINE bool round_up(Rounding r, bool sign, uint64_t kept, uint64_t rem, uint32_t rnd) {
  constexpr uint64_t half = uint64_t(1) << 63;
  switch (r) {
    case Rounding::near_even: {
      // rem > half, or a tie with kept odd: exactly when rem + half − 1 + (kept & 1) carries.
      const uint64_t sum = rem + ((half - 1) + (kept & 1));
      return sum < rem;
    }
    case Rounding::near_maxMag: return rem >= half;
    case Rounding::min: return sign & (rem != 0);
    case Rounding::max: return !sign & (rem != 0);
    case Rounding::stochastic:
      // Up when the top 32 remainder bits plus the random bits carry out: with r random bits
      // (the low 32 − r bits of rnd clear, sr_mask) the probability is ⌊f·2^r⌋/2^r for the
      // exact distance f to the lower neighbour over the spacing.
      return ((rem >> 32) + rnd) >> 32;
    default: return false;  // minMag; odd jams instead of incrementing
  }
}

/// The increment of rounding plus round-to-odd's jamming: the packed magnitude `kept`, rounded.
HALFWAY_INLINE uint64_t round_kept(Rounding r, bool sign, uint64_t kept, uint64_t rem,
                                   uint32_t rnd) {
  // The default direction first, ahead of the switch's chain of comparisons.
  if (r == Rounding::near_even) return kept + round_up(Rounding::near_even, sign, kept, rem, rnd);
  kept += round_up(r, sign, kept, rem, rnd);
  if (r == Rounding::odd) kept |= uint64_t(rem != 0);
  return kept;
}

/// A rounded magnitude beyond the largest finite value: raise overflow|inexact and deliver what
/// direction `r` makes of it. Round-to-nearest and the directed mode pointing away from zero
/// overflow to "infinity"; toward zero, the other directed mode and round-to-odd give the
/// largest finite value.
HALFWAY_NOINLINE uint32_t round_overflow(const Format& f, Env& env, bool sign, Rounding r) {
  env.flags |= flag::overflow | flag::inexact;
  const bool to_inf = r == Rounding::near_even || r == Rounding::near_maxMag ||
                      r == Rounding::stochastic || (r == Rounding::min && sign) ||
                      (r == Rounding::max && !sign);
  return to_inf ? pack_overflow_inf(f, sign) : pack_max(f, sign);
}

/// round_pack for exp >= emin, the common case: the result is normal (or overflows), so there
/// is no tininess to decide. Straight-line code apart from the checks of the rare outcomes.
HALFWAY_INLINE uint32_t round_pack_normal(const Format& f, Env& env, bool sign, int32_t exp,
                                          uint64_t sig, uint32_t rnd) {
  const int m = f.frac_bits;
  const Rounding r = env.rounding;
  // exp + bias is the exponent field, to which the hidden bit of `kept` adds 1 (e8m0, without
  // zero, has 2^−bias in field 0).
  const uint64_t base = uint64_t(exp + f.bias - 1) << m;
  const uint64_t rem = sig << (m + 1);
  const uint64_t packed = round_kept(r, sign, base + (sig >> (63 - m)), rem, rnd);
  if (packed > f.max_mag()) return round_overflow(f, env, sign, r);
  // Written only when it changes: a store on every call would chain each call to the last
  // through memory. The flag is tested first: that branch is taken until the first inexact
  // result, while one on rem would follow the data.
  if (!(env.flags & flag::inexact) && rem != 0) env.flags |= flag::inexact;
  // packed is 0 only for 2^emin in a format without zero (e8m0), and those are unsigned.
  return with_sign(f, sign, static_cast<uint32_t>(packed));
}

/// round_pack for exp < emin: a subnormal, flushed or zero result (or the smallest normal,
/// rounded up to), with tininess and underflow decided here.
HALFWAY_INLINE uint32_t round_pack_tiny(const Format& f, Env& env, bool sign, int32_t exp,
                                        uint64_t sig, uint32_t rnd) {
  const int p = f.frac_bits + 1;
  const int emin = f.emin();
  const Rounding r = env.rounding;
  if (!f.has_zero) {
    // e8m0 has neither zero nor subnormals: anything below 2^emin clamps to 2^emin.
    env.flags |= flag::underflow | flag::inexact;
    return 0;
  }
  const int shift = 64 - p + (emin - exp);
  uint64_t kept, rem;
  if (shift < 64) {
    kept = sig >> shift;
    rem = sig << (64 - shift);
  } else {
    kept = 0;
    rem = shift >= 128 ? uint64_t(sig != 0) : shr_jam64(sig, shift - 64);
  }
  const bool inexact = rem != 0;
  const uint64_t packed = round_kept(r, sign, kept, rem, rnd);
  // Tininess. Before rounding: the exact value is below 2^emin. After rounding: the value
  // rounded to p bits with an unbounded exponent range is below 2^emin; only a value in the
  // binade just below 2^emin can round up to it.
  bool tiny = true;
  if (env.tininess == Tininess::after_rounding && exp == emin - 1) {
    const uint64_t ku = sig >> (64 - p);
    const uint64_t ru = sig << p;
    const bool upu = round_up(r, sign, ku, ru, rnd);
    tiny = !(upu && ku == (uint64_t(1) << p) - 1);
  }
  if (tiny) {
    if (f.ftz) {
      env.flags |= flag::underflow | flag::inexact;
      return pack_zero(f, sign);
    }
    if (inexact) env.flags |= flag::underflow;
  }
  if (packed > f.max_mag()) return round_overflow(f, env, sign, r);  // e2m1 and the like
  if (inexact) env.flags |= flag::inexact;
  if (packed == 0) return pack_zero(f, sign);
  return with_sign(f, sign, static_cast<uint32_t>(packed));
}

/// round_pack in full: unsigned formats, stochastic rounding, tiny results.
HALFWAY_NOINLINE uint32_t round_pack_general(const Format& f, Env& env, bool sign, int32_t exp,
                                             uint64_t sig) {
  if (sign && !f.is_signed) return invalid_nan(f, env);  // unsigned formats: no negatives
  const uint32_t rnd = env.rounding == Rounding::stochastic ? env.next_random() : 0;
  if (exp >= f.emin()) return round_pack_normal(f, env, sign, exp, sig, rnd);
  return round_pack_tiny(f, env, sign, exp, sig, rnd);
}
}  // namespace detail

/// Round the exact value (-1)^sign · sig · 2^(exp − 63) into `f` (bit 63 of `sig` set; any
/// inexactness below the kept bits must be "jammed" into bit 0). The one place where rounding,
/// subnormals, flushing, overflow and the exception flags are decided. The common case (a
/// normal result, a signed format with zero, a direction other than stochastic) is inlined.
HALFWAY_INLINE uint32_t round_pack(const Format& f, Env& env, bool sign, int32_t exp,
                                   uint64_t sig) {
  // One branch for the four conditions (exp >= emin is exp + bias > 0 with zero in the format).
  if (f.is_signed & f.has_zero & (exp + f.bias > 0) & (env.rounding != Rounding::stochastic))
    return detail::round_pack_normal(f, env, sign, exp, sig, 0);
  return detail::round_pack_general(f, env, sign, exp, sig);
}

namespace detail {
/// Whether the magnitude bits `mag` of an encoding of `f` hold a normal number (neither zero,
/// subnormal, infinity nor NaN; e8m0's field 0 is normal). One unsigned comparison: below the
/// smallest normal, mag − lo wraps around to a large number.
HALFWAY_INLINE bool is_normal_mag(const Format& f, uint32_t mag) {
  const uint32_t lo = uint32_t(f.has_zero) << f.frac_bits;
  return mag - lo <= f.max_mag() - lo;
}

/// The unpacked value of a normal number's magnitude bits `mag` (is_normal_mag).
HALFWAY_INLINE Unpacked unpack_normal(const Format& f, bool sign, uint32_t mag) {
  const int m = f.frac_bits;
  const uint64_t sig = (mag & f.frac_mask()) | (uint32_t(1) << m);
  return {Class::finite, sign, int32_t(mag >> m) - f.bias, sig << (63 - m)};
}

/// unpack for the encodings that are not normal numbers: zeros, subnormals, infinities, NaNs.
HALFWAY_NOINLINE Unpacked unpack_special(const Format& f, uint32_t enc) {
  Unpacked u;
  enc &= f.enc_mask();
  const uint32_t mag = enc & f.mag_mask();
  u.sign = (enc & f.sign_bit()) != 0;
  const int m = f.frac_bits;
  const uint32_t field = mag >> m;
  const uint32_t frac = mag & f.frac_mask();
  switch (f.specials) {
    case Specials::ieee:
      if (field == f.exp_field_max()) {
        if (frac == 0) {
          u.cls = Class::inf;
        } else {
          u.cls = (frac >> (m - 1)) & 1 ? Class::qnan : Class::snan;
          u.sig = uint64_t(frac) << (64 - m);
        }
        return u;
      }
      break;
    case Specials::fn:
      if (mag == f.mag_mask()) {
        u.cls = Class::qnan;
        u.sig = uint64_t(1) << 63;
        return u;
      }
      break;
    case Specials::fnuz:
      if (enc == f.sign_bit()) {
        u.cls = Class::qnan;
        u.sign = false;
        u.sig = uint64_t(1) << 63;
        return u;
      }
      break;
    default: break;
  }
  if (f.has_zero && field == 0) {
    if (frac == 0 || f.daz) {
      u.cls = Class::zero;
      return u;
    }
    const int lz = detail::clz64(frac);
    u.cls = Class::finite;
    u.sig = uint64_t(frac) << lz;
    u.exp = f.emin() - m + (63 - lz);
    return u;
  }
  return unpack_normal(f, u.sign, mag);
}

}  // namespace detail

/// Unpack an encoding of `f` (only the low `f.nbits()` bits are read).
HALFWAY_INLINE Unpacked unpack(const Format& f, uint32_t enc) {
  const uint32_t mag = enc & f.mag_mask();
  if (detail::is_normal_mag(f, mag))
    return detail::unpack_normal(f, (enc & f.sign_bit()) != 0, mag);
  return detail::unpack_special(f, enc);
}

/// Unpack IEEE binary32 / binary64 bit patterns (native float and double, no DAZ).
HALFWAY_HD inline Unpacked unpack_f32_bits(uint32_t b) {
  constexpr Format f32{8, 23, 127, Specials::ieee, Overflow::infinity};  // usable on the device
  return unpack(f32, b);
}

HALFWAY_HD inline Unpacked unpack_f64_bits(uint64_t b) {
  Unpacked u;
  u.sign = b >> 63;
  const uint32_t field = (b >> 52) & 0x7FF;
  const uint64_t frac = b & ((uint64_t(1) << 52) - 1);
  if (field == 0x7FF) {
    if (frac == 0) {
      u.cls = Class::inf;
    } else {
      u.cls = (frac >> 51) & 1 ? Class::qnan : Class::snan;
      u.sig = frac << 12;
    }
  } else if (field == 0) {
    if (frac == 0) return u;
    const int lz = detail::clz64(frac);
    u.cls = Class::finite;
    u.sig = frac << lz;
    u.exp = -1022 - 52 + (63 - lz);
  } else {
    u.cls = Class::finite;
    u.sig = ((uint64_t(1) << 52) | frac) << 11;
    u.exp = int32_t(field) - 1023;
  }
  return u;
}

namespace detail {
/// pack for zeros, infinities and NaNs.
HALFWAY_NOINLINE uint32_t pack_special(const Format& f, const Unpacked& u, Env& env) {
  switch (u.cls) {
    case Class::zero:
      if (!f.has_zero) {
        env.flags |= flag::underflow | flag::inexact;
        return 0;
      }
      if (u.sign && !f.is_signed) return pack_zero(f, false);
      return pack_zero(f, u.sign);
    case Class::inf:
      if (u.sign && !f.is_signed) return invalid_nan(f, env);
      return pack_inf(f, u.sign, env);
    case Class::snan:
      env.flags |= flag::invalid;
      [[fallthrough]];
    default: return pack_nan(f, u.sign, u.sig, env);
  }
}
}  // namespace detail

/// Pack an unpacked value into `f`: NaNs are quieted (invalid raised for a signalling NaN) and
/// keep sign and top payload bits, like SoftFloat and x86; finite values are rounded.
HALFWAY_INLINE uint32_t pack(const Format& f, const Unpacked& u, Env& env) {
  if (u.cls == Class::finite) return round_pack(f, env, u.sign, u.exp, u.sig);
  return detail::pack_special(f, u, env);
}

// ---------------------------------------------------------------------------------------------
// Conversions

HALFWAY_HD inline uint32_t f32_bits(float x) {
  uint32_t b;
  __builtin_memcpy(&b, &x, 4);
  return b;
}
HALFWAY_HD inline float bits_f32(uint32_t b) {
  float x;
  __builtin_memcpy(&x, &b, 4);
  return x;
}
HALFWAY_HD inline uint64_t f64_bits(double x) {
  uint64_t b;
  __builtin_memcpy(&b, &x, 8);
  return b;
}
HALFWAY_HD inline double bits_f64(uint64_t b) {
  double x;
  __builtin_memcpy(&x, &b, 8);
  return x;
}

namespace detail {
/// from_f32_bits for zeros, subnormals, infinities and NaNs.
HALFWAY_NOINLINE uint32_t from_f32_special(const Format& f, uint32_t b, Env& env) {
  return pack(f, unpack_f32_bits(b), env);
}
}  // namespace detail

/// f32 → f, correctly rounded under `env.rounding`.
HALFWAY_HD inline uint32_t from_f32_bits(const Format& f, uint32_t b, Env& env) {
  // A normal binary32 (the common case) goes straight to rounding: the shift leaves the
  // significand, hidden bit included, at bit 63 and pushes the exponent field out.
  const uint32_t field = (b >> 23) & 0xFF;
  if (field - 1 < 254)
    return round_pack(f, env, b >> 31, int32_t(field) - 127, uint64_t(b | 0x800000) << 40);
  return detail::from_f32_special(f, b, env);
}
HALFWAY_HD inline uint32_t from_f32(const Format& f, float x, Env& env) {
  return from_f32_bits(f, f32_bits(x), env);
}
/// f64 → f, correctly rounded in one step (no double rounding through f32).
HALFWAY_HD inline uint32_t from_f64(const Format& f, double x, Env& env) {
  return pack(f, unpack_f64_bits(f64_bits(x)), env);
}
/// Format → format.
HALFWAY_HD inline uint32_t convert(const Format& from, uint32_t a, const Format& to, Env& env) {
  return pack(to, unpack(from, a), env);
}

/// f → binary64 bits. Exact: every format value fits (signalling NaNs are quieted, raising
/// invalid).
HALFWAY_HD inline uint64_t to_f64_bits(const Format& f, uint32_t a, Env& env) {
  const Unpacked u = unpack(f, a);
  const uint64_t s = uint64_t(u.sign) << 63;
  switch (u.cls) {
    case Class::zero: return s;
    case Class::inf: return s | 0x7FF0000000000000ull;
    case Class::snan: env.flags |= flag::invalid; [[fallthrough]];
    case Class::qnan: return s | 0x7FF8000000000000ull | (u.sig >> 12);
    default: break;
  }
  // Values of every supported format are normal in binary64.
  return s | (uint64_t(u.exp + 1023) << 52) | ((u.sig << 1) >> 12);
}
HALFWAY_HD inline double to_f64(const Format& f, uint32_t a, Env& env) {
  return bits_f64(to_f64_bits(f, a, env));
}
/// f → binary32 bits: exact for every supported format (they all fit in binary32).
HALFWAY_HD inline uint32_t to_f32_bits(const Format& f, uint32_t a, Env& env) {
  constexpr Format f32{8, 23, 127, Specials::ieee, Overflow::infinity};
  return pack(f32, unpack(f, a), env);
}
HALFWAY_HD inline float to_f32(const Format& f, uint32_t a, Env& env) {
  return bits_f32(to_f32_bits(f, a, env));
}

// ---------------------------------------------------------------------------------------------
// Arithmetic

namespace detail {

/// NaN propagation as on x86 SSE (and SoftFloat's 8086-SSE specialisation): a signalling NaN
/// operand raises invalid; the result is the first NaN operand, quieted.
HALFWAY_INLINE uint32_t propagate_nan(const Format& f, const Unpacked& a, const Unpacked& b, Env& env) {
  if (a.cls == Class::snan || b.cls == Class::snan) env.flags |= flag::invalid;
  const Unpacked& n = is_nan(a.cls) ? a : b;
  Env quiet;  // the flags of packing the NaN itself are already accounted for above
  const uint32_t r = pack_nan(f, n.sign, n.sig, quiet);
  env.flags |= quiet.flags;
  return r;
}

/// The exact sum (or difference when `subtract`) of two significands with their leading bits
/// at bit 61 (room for a carry), |x| >= |y|, y still to be shifted right by `d`; `exp` is x's
/// exponent. Rounded into f. No branch on the signs: they are data.
HALFWAY_INLINE uint32_t add_aligned(const Format& f, Env& env, bool sign, int32_t exp, uint64_t x,
                                    uint64_t y, int d, bool subtract) {
  const uint64_t neg = 0 - uint64_t(subtract);
  const uint64_t s = x + ((shr_jam64(y, d) ^ neg) - neg);
  if (s == 0) return pack_exact_zero(f, env.rounding == Rounding::min, env);
  const int lz = clz64(s);
  return round_pack(f, env, sign, exp + 2 - lz, s << lz);
}

/// Exact sum of two finite non-zero values, rounded into f.
HALFWAY_INLINE uint32_t add_finite(const Format& f, Unpacked a, Unpacked b, Env& env) {
  if (a.exp < b.exp || (a.exp == b.exp && a.sig < b.sig)) {
    const Unpacked t = a;
    a = b;
    b = t;
  }
  return add_aligned(f, env, a.sign, a.exp, a.sig >> 2, b.sig >> 2, a.exp - b.exp,
                     a.sign != b.sign);
}

HALFWAY_INLINE uint32_t add_zero_cases(const Format& f, const Unpacked& a, const Unpacked& b, Env& env) {
  // At least one operand is zero.
  if (a.cls == Class::zero && b.cls == Class::zero) {
    const bool sign = a.sign == b.sign ? a.sign : env.rounding == Rounding::min;
    return pack_zero(f, sign);
  }
  const Unpacked& x = a.cls == Class::zero ? b : a;
  return round_pack(f, env, x.sign, x.exp, x.sig);
}

}  // namespace detail

namespace detail {
/// a + b for operands that are not NaNs (sub has flipped b's sign).
HALFWAY_INLINE uint32_t add_not_nan(const Format& f, const Unpacked& a, const Unpacked& b,
                                    Env& env) {
  if (a.cls == Class::inf || b.cls == Class::inf) {
    if (a.cls == Class::inf && b.cls == Class::inf && a.sign != b.sign) return invalid_nan(f, env);
    return pack_inf(f, a.cls == Class::inf ? a.sign : b.sign, env);
  }
  if (a.cls == Class::zero || b.cls == Class::zero) return add_zero_cases(f, a, b, env);
  return add_finite(f, a, b, env);
}

/// a + b, or a − b when `negate_b`, for operands of every class.
HALFWAY_NOINLINE uint32_t add_general(const Format& f, uint32_t a_enc, uint32_t b_enc,
                                      bool negate_b, Env& env) {
  const Unpacked a = unpack(f, a_enc);
  Unpacked b = unpack(f, b_enc);
  if (is_nan(a.cls) || is_nan(b.cls)) return propagate_nan(f, a, b, env);  // b's own sign
  b.sign = b.sign != negate_b;
  return add_not_nan(f, a, b, env);
}

/// Whether both encodings are normal numbers of a signed format with zero: the case that add,
/// sub and mul inline, working on the encodings' fields.
HALFWAY_INLINE bool normal_pair(const Format& f, uint32_t a_enc, uint32_t b_enc) {
  return f.is_signed & f.has_zero & is_normal_mag(f, a_enc & f.mag_mask()) &
         is_normal_mag(f, b_enc & f.mag_mask());
}

/// The significand of a normal magnitude, hidden bit included, as an integer.
HALFWAY_INLINE uint64_t normal_sig(const Format& f, uint32_t mag) {
  return (mag & f.frac_mask()) | (uint32_t(1) << f.frac_bits);
}

/// a + b, or a − b when `negate_b`, for two normal operands (normal_pair).
HALFWAY_INLINE uint32_t add_normal(const Format& f, uint32_t a_enc, uint32_t b_enc, bool negate_b,
                                   Env& env) {
  const int m = f.frac_bits;
  const uint32_t ma = a_enc & f.mag_mask(), mb = b_enc & f.mag_mask();
  const bool sa = (a_enc & f.sign_bit()) != 0, sb = ((b_enc & f.sign_bit()) != 0) != negate_b;
  // The encodings of normal numbers order as their magnitudes: x is the larger operand, y the
  // other, and the sum has x's sign (selects and bit operations, not a branch on the data).
  const bool swap = ma < mb;
  const uint32_t x = swap ? mb : ma, y = swap ? ma : mb;
  const bool sign = sa ^ (swap & (sa ^ sb));
  const int32_t ex = int32_t(x >> m), ey = int32_t(y >> m);
  return add_aligned(f, env, sign, ex - f.bias, normal_sig(f, x) << (61 - m),
                     normal_sig(f, y) << (61 - m), ex - ey, sa != sb);
}

/// The exact product `prod` (non-zero) of two significands, its value prod · 2^(exp − 63),
/// normalised and rounded into f.
HALFWAY_INLINE uint32_t round_product(const Format& f, Env& env, bool sign, int32_t exp,
                                      uint64_t prod) {
  const int lz = clz64(prod);
  return round_pack(f, env, sign, exp - lz, prod << lz);
}

/// Exact product of two finite non-zero values, rounded into f.
HALFWAY_INLINE uint32_t mul_finite(const Format& f, const Unpacked& a, const Unpacked& b,
                                   Env& env) {
  // Significands have at most 24 bits: the 64-bit product is exact.
  return round_product(f, env, a.sign != b.sign, a.exp + b.exp + 1, (a.sig >> 32) * (b.sig >> 32));
}

/// a · b for two normal operands (normal_pair): integer significands of m + 1 bits, so the
/// product's value is sa·sb · 2^(ea + eb − 2m).
HALFWAY_INLINE uint32_t mul_normal(const Format& f, uint32_t a_enc, uint32_t b_enc, Env& env) {
  const int m = f.frac_bits;
  const uint32_t ma = a_enc & f.mag_mask(), mb = b_enc & f.mag_mask();
  const int32_t exp = int32_t(ma >> m) + int32_t(mb >> m) - 2 * f.bias - 2 * m + 63;
  return round_product(f, env, ((a_enc ^ b_enc) & f.sign_bit()) != 0, exp,
                       normal_sig(f, ma) * normal_sig(f, mb));
}

/// a · b for operands of every class.
HALFWAY_NOINLINE uint32_t mul_general(const Format& f, uint32_t a_enc, uint32_t b_enc, Env& env) {
  const Unpacked a = unpack(f, a_enc), b = unpack(f, b_enc);
  if (is_nan(a.cls) || is_nan(b.cls)) return propagate_nan(f, a, b, env);
  const bool sign = a.sign != b.sign;
  if (a.cls == Class::inf || b.cls == Class::inf) {
    if (a.cls == Class::zero || b.cls == Class::zero) return invalid_nan(f, env);
    return pack_inf(f, sign, env);
  }
  if (a.cls == Class::zero || b.cls == Class::zero) return pack_zero(f, sign);
  return mul_finite(f, a, b, env);
}
}  // namespace detail

HALFWAY_HD inline uint32_t add(const Format& f, uint32_t a_enc, uint32_t b_enc, Env& env) {
  if (detail::normal_pair(f, a_enc, b_enc)) return detail::add_normal(f, a_enc, b_enc, false, env);
  return detail::add_general(f, a_enc, b_enc, false, env);
}

HALFWAY_HD inline uint32_t sub(const Format& f, uint32_t a_enc, uint32_t b_enc, Env& env) {
  if (detail::normal_pair(f, a_enc, b_enc)) return detail::add_normal(f, a_enc, b_enc, true, env);
  return detail::add_general(f, a_enc, b_enc, true, env);
}

HALFWAY_HD inline uint32_t mul(const Format& f, uint32_t a_enc, uint32_t b_enc, Env& env) {
  if (detail::normal_pair(f, a_enc, b_enc)) return detail::mul_normal(f, a_enc, b_enc, env);
  return detail::mul_general(f, a_enc, b_enc, env);
}

HALFWAY_HD inline uint32_t div(const Format& f, uint32_t a_enc, uint32_t b_enc, Env& env) {
  using namespace detail;
  const Unpacked a = unpack(f, a_enc), b = unpack(f, b_enc);
  if (is_nan(a.cls) || is_nan(b.cls)) return propagate_nan(f, a, b, env);
  const bool sign = a.sign != b.sign;
  if (a.cls == Class::inf) {
    if (b.cls == Class::inf) return invalid_nan(f, env);
    return pack_inf(f, sign, env);
  }
  if (b.cls == Class::inf) return pack_zero(f, sign);
  if (b.cls == Class::zero) {
    if (a.cls == Class::zero) return invalid_nan(f, env);
    env.flags |= flag::infinite;
    if (!f.has_inf() || f.overflow == Overflow::saturate) {
      // No infinity to return: the format's overflow value, without the invalid flag.
      return pack_overflow_inf(f, sign);
    }
    return with_sign(f, sign, f.inf_mag());
  }
  if (a.cls == Class::zero) return pack_zero(f, sign);
  // Dividend with its leading bit at 103, divisor as a <= 24-bit integer: the quotient has at
  // least 80 bits, so the first 64 are exact (p + 32 are needed: stochastic rounding reads 32
  // fraction bits), and the remainder supplies the sticky bit.
  using u128 = unsigned __int128;
  const u128 n = u128(a.sig) << 40;
  const uint64_t d = b.sig >> 40;
  const u128 q = n / d;
  const bool sticky = (n % d) != 0;
  const int lz = clz128(q);
  const u128 qn = q << lz;
  const uint64_t hi = static_cast<uint64_t>(qn >> 64) | (static_cast<uint64_t>(qn) != 0) | sticky;
  return round_pack(f, env, sign, a.exp - b.exp + 47 - lz, hi);
}

HALFWAY_HD inline uint32_t sqrt(const Format& f, uint32_t a_enc, Env& env) {
  using namespace detail;
  const Unpacked a = unpack(f, a_enc);
  if (is_nan(a.cls)) return propagate_nan(f, a, a, env);
  if (a.cls == Class::zero) return pack_zero(f, a.sign);
  if (a.sign) return invalid_nan(f, env);
  if (a.cls == Class::inf) return pack_inf(f, false, env);
  // value = s · 2^k with s < 2^25 and k even; n = s · 2^92 < 2^117; sqrt(n) has >= 58 bits,
  // p + 32 of them exact (stochastic rounding reads 32 fraction bits), the rest is sticky.
  using u128 = unsigned __int128;
  uint64_t s = a.sig >> 40;
  int32_t k = a.exp - 23;
  if (k & 1) {
    s <<= 1;
    k -= 1;
  }
  const u128 n = u128(s) << 92;
  const double nd = static_cast<double>(static_cast<uint64_t>(n >> 64)) * 18446744073709551616.0;
#if defined(__CUDA_ARCH__)
  uint64_t r = static_cast<uint64_t>(::sqrt(nd));
#else
  uint64_t r = static_cast<uint64_t>(__builtin_sqrt(nd));
#endif
  r = (r + static_cast<uint64_t>(n / r)) >> 1;  // one Newton step: error of a few units at most
  while (u128(r) * r > n) --r;
  while (u128(r + 1) * (r + 1) <= n) ++r;
  const bool sticky = u128(r) * r != n;
  const int lz = clz64(r);
  return round_pack(f, env, false, (k - 92) / 2 + 63 - lz, (r << lz) | sticky);
}

/// Fused multiply-add a·b + c with a single rounding.
HALFWAY_HD inline uint32_t fma(const Format& f, uint32_t a_enc, uint32_t b_enc, uint32_t c_enc,
                          Env& env) {
  using namespace detail;
  using u128 = unsigned __int128;
  const Unpacked a = unpack(f, a_enc), b = unpack(f, b_enc), c = unpack(f, c_enc);
  const bool psign = a.sign != b.sign;
  // NaN and infinity rules follow SoftFloat's mulAdd (x86 flavour).
  if (is_nan(a.cls) || is_nan(b.cls)) {
    const uint32_t n = propagate_nan(f, a, b, env);
    if (c.cls == Class::snan) env.flags |= flag::invalid;
    return n;
  }
  if (a.cls == Class::inf || b.cls == Class::inf) {
    if (a.cls == Class::zero || b.cls == Class::zero) {
      if (c.cls == Class::snan) env.flags |= flag::invalid;
      return invalid_nan(f, env);
    }
    if (is_nan(c.cls)) return propagate_nan(f, c, c, env);
    if (c.cls == Class::inf && c.sign != psign) return invalid_nan(f, env);
    return pack_inf(f, psign, env);
  }
  if (is_nan(c.cls)) return propagate_nan(f, c, c, env);
  if (c.cls == Class::inf) return pack_inf(f, c.sign, env);
  if (a.cls == Class::zero || b.cls == Class::zero) {
    if (c.cls == Class::zero) {
      const bool sign = psign == c.sign ? psign : env.rounding == Rounding::min;
      return pack_zero(f, sign);
    }
    return round_pack(f, env, c.sign, c.exp, c.sig);
  }
  // Exact product (<= 48 bits) normalised to bit 63.
  const uint64_t prod = (a.sig >> 32) * (b.sig >> 32);
  const int plz = clz64(prod);
  const int32_t pexp = a.exp + b.exp + 1 - plz;
  const uint64_t psig = prod << plz;
  if (c.cls == Class::zero) return round_pack(f, env, psign, pexp, psig);
  // Exact sum in 128 bits: leading bits at bit 125, the smaller operand aligned with jamming.
  // Both significands have <= 48 significant bits, so shifts up to 77 lose nothing.
  bool sx = psign, sy = c.sign;
  int32_t ex = pexp, ey = c.exp;
  u128 x = u128(psig) << 62, y = u128(c.sig) << 62;
  if (ex < ey || (ex == ey && x < y)) {
    const u128 t = x;
    x = y;
    y = t;
    const int32_t te = ex;
    ex = ey;
    ey = te;
    const bool ts = sx;
    sx = sy;
    sy = ts;
  }
  y = shr_jam128(y, ex - ey);
  u128 s;
  if (sx == sy) {
    s = x + y;
  } else {
    s = x - y;
    if (s == 0) return pack_exact_zero(f, env.rounding == Rounding::min, env);
  }
  const int lz = clz128(s);
  s <<= lz;
  const uint64_t hi = static_cast<uint64_t>(s >> 64);
  const bool sticky = static_cast<uint64_t>(s) != 0;
  return round_pack(f, env, sx, ex + (127 - lz) - 125, hi | sticky);
}

/// Round to an integral value in the same format. `exact` raises inexact when the value
/// changes (IEEE roundToIntegralExact); round-to-odd jams the last integer bit, as SoftFloat.
HALFWAY_HD inline uint32_t round_to_int(const Format& f, uint32_t a_enc, Rounding r, bool exact,
                                   Env& env) {
  using namespace detail;
  const Unpacked a = unpack(f, a_enc);
  if (is_nan(a.cls)) return propagate_nan(f, a, a, env);
  if (a.cls == Class::inf) return pack_inf(f, a.sign, env);
  if (a.cls == Class::zero) return pack_zero(f, a.sign);
  if (a.exp >= f.frac_bits) return a_enc & f.enc_mask();  // already integral
  uint64_t kept, rem;
  if (a.exp >= 0) {
    kept = a.sig >> (63 - a.exp);
    rem = a.sig << (a.exp + 1);
  } else {
    kept = 0;
    rem = shr_jam64(a.sig, -1 - a.exp);
  }
  const uint32_t rnd = r == Rounding::stochastic ? env.next_random() : 0;
  kept += round_up(r, a.sign, kept, rem, rnd);
  if (r == Rounding::odd && rem != 0) kept |= 1;
  if (exact && rem != 0) env.flags |= flag::inexact;
  if (kept == 0) return pack_exact_zero(f, a.sign, env);
  const int lz = clz64(kept);
  // An integer of at most p bits fits the precision, but not always the range: e2m3 rounds 7.5
  // to 8 > max. That overflows like any result, under direction r (e2m3 saturates to 7.5, fnuz
  // gives NaN), raising overflow|inexact whether or not `exact` was asked for.
  Env sub{r};
  const uint32_t out = round_pack(f, sub, a.sign, 63 - lz, kept << lz);
  env.flags |= sub.flags;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Comparisons and min/max

namespace detail {
/// Total order key of a non-NaN value: compare as signed integers (−0 and +0 are equal).
HALFWAY_INLINE int64_t order_key(const Unpacked& u) {
  if (u.cls == Class::zero) return 0;
  int64_t k;
  if (u.cls == Class::inf) {
    k = INT64_MAX;
  } else {
    // exp in [-200, 200], sig top 24 bits: (exp + 512) << 40 | sig >> 24 is monotone.
    k = (int64_t(u.exp + 512) << 40) | int64_t(u.sig >> 24);
  }
  return u.sign ? -k : k;
}
}  // namespace detail

/// Quiet equality (invalid only on a signalling NaN).
HALFWAY_HD inline bool eq(const Format& f, uint32_t a_enc, uint32_t b_enc, Env& env) {
  const Unpacked a = unpack(f, a_enc), b = unpack(f, b_enc);
  if (detail::is_nan(a.cls) || detail::is_nan(b.cls)) {
    if (a.cls == Class::snan || b.cls == Class::snan) env.flags |= flag::invalid;
    return false;
  }
  return detail::order_key(a) == detail::order_key(b);
}
/// Signalling equality (invalid on any NaN).
HALFWAY_HD inline bool eq_signaling(const Format& f, uint32_t a_enc, uint32_t b_enc, Env& env) {
  const Unpacked a = unpack(f, a_enc), b = unpack(f, b_enc);
  if (detail::is_nan(a.cls) || detail::is_nan(b.cls)) {
    env.flags |= flag::invalid;
    return false;
  }
  return detail::order_key(a) == detail::order_key(b);
}
/// a <= b; `signaling` (the IEEE default for <=) raises invalid on any NaN, quiet only on sNaN.
HALFWAY_HD inline bool le(const Format& f, uint32_t a_enc, uint32_t b_enc, Env& env,
                     bool signaling = true) {
  const Unpacked a = unpack(f, a_enc), b = unpack(f, b_enc);
  if (detail::is_nan(a.cls) || detail::is_nan(b.cls)) {
    if (signaling || a.cls == Class::snan || b.cls == Class::snan) env.flags |= flag::invalid;
    return false;
  }
  return detail::order_key(a) <= detail::order_key(b);
}
HALFWAY_HD inline bool lt(const Format& f, uint32_t a_enc, uint32_t b_enc, Env& env,
                     bool signaling = true) {
  const Unpacked a = unpack(f, a_enc), b = unpack(f, b_enc);
  if (detail::is_nan(a.cls) || detail::is_nan(b.cls)) {
    if (signaling || a.cls == Class::snan || b.cls == Class::snan) env.flags |= flag::invalid;
    return false;
  }
  return detail::order_key(a) < detail::order_key(b);
}

namespace detail {
HALFWAY_INLINE uint32_t minmax(const Format& f, uint32_t a_enc, uint32_t b_enc, Env& env, bool want_max,
                          bool number) {
  const Unpacked a = unpack(f, a_enc), b = unpack(f, b_enc);
  const bool an = is_nan(a.cls), bn = is_nan(b.cls);
  if (an || bn) {
    if (number && !(an && bn)) {
      // IEEE 754-2019 minimumNumber/maximumNumber: a NaN operand is ignored.
      if (a.cls == Class::snan || b.cls == Class::snan) env.flags |= flag::invalid;
      return (an ? b_enc : a_enc) & f.enc_mask();
    }
    return propagate_nan(f, a, b, env);
  }
  int64_t ka = order_key(a), kb = order_key(b);
  if (ka == kb) {  // ±0: −0 < +0 for minimum/maximum
    ka = a.sign ? -1 : 0;
    kb = b.sign ? -1 : 0;
  }
  const bool pick_a = want_max ? ka >= kb : ka <= kb;
  return (pick_a ? a_enc : b_enc) & f.enc_mask();
}
}  // namespace detail

/// IEEE 754-2019 minimum/maximum: NaN-propagating, −0 < +0.
HALFWAY_HD inline uint32_t minimum(const Format& f, uint32_t a, uint32_t b, Env& env) {
  return detail::minmax(f, a, b, env, false, false);
}
HALFWAY_HD inline uint32_t maximum(const Format& f, uint32_t a, uint32_t b, Env& env) {
  return detail::minmax(f, a, b, env, true, false);
}
/// IEEE 754-2019 minimumNumber/maximumNumber (2008's minNum/maxNum for quiet NaNs).
HALFWAY_HD inline uint32_t minimum_number(const Format& f, uint32_t a, uint32_t b, Env& env) {
  return detail::minmax(f, a, b, env, false, true);
}
HALFWAY_HD inline uint32_t maximum_number(const Format& f, uint32_t a, uint32_t b, Env& env) {
  return detail::minmax(f, a, b, env, true, true);
}

// ---------------------------------------------------------------------------------------------
// Neighbours

/// IEEE nextUp: the least encoding that compares greater than `a` (±0 → the smallest positive
/// value; the largest finite → +inf, or itself in formats without infinity; NaN → quieted NaN).
HALFWAY_HD inline uint32_t next_up(const Format& f, uint32_t a_enc, Env& env) {
  const Unpacked a = unpack(f, a_enc);
  a_enc &= f.enc_mask();
  if (detail::is_nan(a.cls)) return detail::propagate_nan(f, a, a, env);
  const uint32_t mag = a_enc & f.mag_mask();
  if (a.cls == Class::inf) return a.sign ? detail::with_sign(f, true, f.max_mag()) : a_enc;
  if (a.cls == Class::zero && mag == 0) return f.has_zero ? 1 : a_enc;
  if (a.cls == Class::zero) return 1;  // a daz subnormal compares as zero
  if (!a.sign) {
    if (mag == f.max_mag()) return f.has_inf() ? f.inf_mag() : a_enc;
    return a_enc + 1;
  }
  if (mag == 1 && f.has_zero) return detail::pack_zero(f, true);
  return detail::with_sign(f, true, mag - 1);
}

/// IEEE nextDown(a) = −nextUp(−a).
HALFWAY_HD inline uint32_t next_down(const Format& f, uint32_t a_enc, Env& env) {
  const Unpacked a = unpack(f, a_enc);
  a_enc &= f.enc_mask();
  if (detail::is_nan(a.cls)) return detail::propagate_nan(f, a, a, env);
  const uint32_t mag = a_enc & f.mag_mask();
  if (!f.is_signed) {
    if (a.cls == Class::inf) return f.max_mag();
    return mag == 0 ? a_enc : a_enc - 1;
  }
  if (a.cls == Class::inf) return a.sign ? a_enc : f.max_mag();
  if (a.cls == Class::zero) return detail::with_sign(f, true, 1);
  if (a.sign) {
    if (mag == f.max_mag()) return f.has_inf() ? (f.sign_bit() | f.inf_mag()) : a_enc;
    return a_enc + 1;
  }
  if (mag == 1 && f.has_zero) return 0;
  return mag - 1;
}

}  // namespace halfway
