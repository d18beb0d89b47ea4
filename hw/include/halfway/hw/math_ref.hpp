/// \file math_ref.hpp
/// Correctly rounded references for the half-precision math functions (hsqrt, hrcp, hrsqrt,
/// hexp, ...) over all 65,536 inputs, and the ulp error of an approximate result. Host only.
///
/// The reference of f(x) for an fp16/bf16 input x: sqrt and rcp use the library's correctly
/// rounded √ and ÷. The others evaluate f in binary64 (error below 2 ulp of binary64, i.e.
/// relative 2^-51) and round that to the format once; the result is certain unless the binary64
/// value lies within relative 2^-44 of a rounding boundary (a midpoint between two format values,
/// or the overflow threshold), in which case the input is reported as unresolved instead of being
/// guessed. With 11 or 8 significant bits such near-midpoints do not occur for these functions
/// except at exact values (f(x) representable, e.g. exp(0) = 1), which are not boundaries.
///
///     MathRef r = math_reference(MathFn::exp, fmt_fp16(), 0x3C00);  // e -> 0x4170, certain
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "halfway/hw/diff.hpp"
#include "halfway/hw/hash.hpp"
#include "halfway/hw/ops.hpp"
#include "halfway/softfloat.hpp"

namespace halfway::hw {

enum class MathFn : uint8_t { sqrt, rcp, rsqrt, exp, exp2, exp10, log, log2, log10, sin, cos, tanh, count };
inline constexpr int kMathFnCount = static_cast<int>(MathFn::count);

inline const char* math_fn_name(MathFn f) {
  static const char* const names[] = {"sqrt", "rcp", "rsqrt", "exp", "exp2", "exp10",
                                      "log", "log2", "log10", "sin", "cos", "tanh"};
  return names[static_cast<int>(f)];
}

struct MathRef {
  uint32_t enc = 0;      ///< correctly rounded result (the library's NaN for NaN results)
  double exact = 0;      ///< f(x) in binary64 (NaN/inf as such)
  bool certain = true;   ///< false: too close to a rounding boundary to decide from binary64
};

namespace detail {
inline double eval_math(MathFn f, double x) {
  switch (f) {
    case MathFn::sqrt: return std::sqrt(x);
    case MathFn::rcp: return 1.0 / x;
    case MathFn::rsqrt: return 1.0 / std::sqrt(x);
    case MathFn::exp: return std::exp(x);
    case MathFn::exp2: return std::exp2(x);
    case MathFn::exp10: return std::pow(10.0, x);
    case MathFn::log: return std::log(x);
    case MathFn::log2: return std::log2(x);
    case MathFn::log10: return std::log10(x);
    case MathFn::sin: return std::sin(x);
    case MathFn::cos: return std::cos(x);
    default: return std::tanh(x);
  }
}
}  // namespace detail

/// Correctly rounded (nearest even) f(x) in format `fmt` for the encoding `x`.
inline MathRef math_reference(MathFn f, const Format& fmt, uint32_t x) {
  MathRef r;
  Env env;
  const double xv = to_f64(fmt, x, env);
  r.exact = detail::eval_math(f, xv);
  if (f == MathFn::sqrt) {
    Env e;
    r.enc = halfway::sqrt(fmt, x, e);
    return r;
  }
  if (f == MathFn::rcp) {
    Env e, e1;
    const uint32_t one = from_f64(fmt, 1.0, e1);
    r.enc = halfway::div(fmt, one, x, e);
    return r;
  }
  if (is_nan_enc(fmt, x)) {
    // NaN in, NaN out, propagated as the library propagates NaN operands.
    Env e;
    r.enc = halfway::add(fmt, x, x, e);
    return r;
  }
  Env e;
  r.enc = from_f64(fmt, r.exact, e);
  if (!std::isfinite(r.exact) || r.exact == 0.0) return r;
  // Distance to the nearest rounding boundary: the midpoints next to the rounded result.
  Env q;
  const double y = to_f64(fmt, r.enc, q);
  if (std::isinf(y)) {
    // Overflowed: certain unless the value is near the overflow threshold max + ulp/2.
    const double mx = to_f64(fmt, fmt.max_mag(), q);
    const double thr = mx + std::ldexp(1.0, fmt.emax() - fmt.frac_bits - 1);
    r.certain = std::fabs(std::fabs(r.exact) - thr) > std::ldexp(std::fabs(thr), -44);
    return r;
  }
  Env n1, n2;
  const double up = to_f64(fmt, next_up(fmt, r.enc, n1), n1);
  const double dn = to_f64(fmt, next_down(fmt, r.enc, n2), n2);
  const double m1 = std::isinf(up) ? INFINITY : 0.5 * (y + up);
  const double m2 = std::isinf(dn) ? -INFINITY : 0.5 * (y + dn);
  const double dist = std::fmin(std::fabs(r.exact - m1), std::fabs(r.exact - m2));
  r.certain = dist > std::ldexp(std::fabs(r.exact), -44);
  return r;
}

/// Error of `hw` in units of the format's spacing at the exact value (ulp(v) = 2^(e - frac_bits)
/// for 2^e <= |v| < 2^(e+1), and the subnormal spacing below the normal range). 0 when hw is
/// the exact value. Not defined (returns -1) when the exact value or hw is not finite.
inline double ulp_error(const Format& fmt, uint32_t hw, double exact) {
  Env env;
  if (is_nan_enc(fmt, hw) || is_inf_enc(fmt, hw) || !std::isfinite(exact)) return -1.0;
  const double h = to_f64(fmt, hw, env);
  const double a = std::fabs(exact);
  int e = fmt.emin();
  if (a >= std::ldexp(1.0, fmt.emin())) e = std::ilogb(a);
  const double ulp = std::ldexp(1.0, e - fmt.frac_bits);
  return std::fabs(h - exact) / ulp;
}

/// What a math function's 65,536 hardware results look like against correct rounding.
struct MathStats {
  static constexpr int kBuckets = 7;  ///< ulp distance 0, 1, 2, 3-4, 5-8, 9-16, >16
  uint64_t inputs = 0;
  uint64_t correctly_rounded = 0;  ///< equal to the reference (both NaN counts as equal)
  uint64_t unresolved = 0;         ///< reference not certain (see math_reference)
  uint64_t special_mismatch = 0;   ///< exactly one of hardware and reference is NaN
  uint64_t hist[kBuckets] = {};    ///< by distance in encodings, both not NaN
  double max_ulp = 0;              ///< largest ulp_error over finite results
  uint32_t max_ulp_input = 0;
  bool nan_uniform = true;         ///< every NaN the hardware returned has the same encoding
  uint32_t nan_encoding = 0;
  uint64_t hw_hash = 0;            ///< fingerprint of the 65,536 results (hash.hpp)
  /// Inputs where the hardware differs from the replay model (the reference, with NaN results
  /// replaced by `nan_encoding` when uniform): (input, hardware result).
  std::vector<std::pair<uint32_t, uint32_t>> exceptions;
};

inline int ulp_bucket(uint64_t d) {
  if (d <= 2) return static_cast<int>(d);
  if (d <= 4) return 3;
  if (d <= 8) return 4;
  if (d <= 16) return 5;
  return 6;
}

/// The replay model's result for input x: the reference, NaN results as the hardware encodes
/// them (when uniform).
inline uint32_t math_replay_model(const MathRef& r, const Format& fmt, bool nan_uniform,
                                  uint32_t nan_encoding) {
  return (nan_uniform && is_nan_enc(fmt, r.enc)) ? nan_encoding : r.enc;
}

/// Statistics of hardware results `hw` (indexed by input encoding, 2^nbits entries).
inline MathStats analyze_math(MathFn f, const Format& fmt, const uint32_t* hw) {
  MathStats s;
  const uint32_t n = uint32_t(1) << fmt.nbits();
  s.inputs = n;
  bool seen_nan = false;
  for (uint32_t x = 0; x < n; ++x) {
    if (!is_nan_enc(fmt, hw[x])) continue;
    if (!seen_nan) s.nan_encoding = hw[x];
    s.nan_uniform = s.nan_uniform && hw[x] == s.nan_encoding;
    seen_nan = true;
  }
  for (uint32_t x = 0; x < n; ++x) {
    const MathRef r = math_reference(f, fmt, x);
    const uint32_t h = hw[x];
    s.hw_hash += hash_term(x, h);
    if (!r.certain) s.unresolved++;
    const bool hn = is_nan_enc(fmt, h), rn = is_nan_enc(fmt, r.enc);
    if (h != math_replay_model(r, fmt, s.nan_uniform, s.nan_encoding)) s.exceptions.push_back({x, h});
    if (hn || rn) {
      if (hn && rn) s.correctly_rounded++;
      else s.special_mismatch++;
      continue;
    }
    const int64_t d = ordinal(fmt, h) - ordinal(fmt, r.enc);
    const uint64_t ad = static_cast<uint64_t>(d < 0 ? -d : d);
    s.hist[ulp_bucket(ad)]++;
    if (ad == 0) s.correctly_rounded++;
    const double e = ulp_error(fmt, h, r.exact);
    if (e > s.max_ulp) {
      s.max_ulp = e;
      s.max_ulp_input = x;
    }
  }
  return s;
}

}  // namespace halfway::hw
