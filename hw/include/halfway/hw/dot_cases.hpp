/// \file dot_cases.hpp
/// Operands for checking a CPU dot-product instruction lane by lane (x86 `vdpbf16ps`, AMX
/// `tdpbf16ps` / `tdpfp16ps`): one lane computes c + a0·b0 + a1·b1 from two 16-bit elements of
/// each source (element 0 in the low 16 bits of `a` and `b`) and an fp32 accumulator `c`.
/// The reference is the library's dot() under an AccumulationModel. Host and device code.
///
///     uint32_t a, b, c;
///     dot_operands(formats::bf16, kDotSeed, index, a, b, c);
///     uint32_t ref = dot_lane(accumulation::avx512_dpbf16, formats::bf16, a, b, c);
#pragma once

#include "halfway/accumulate.hpp"
#include "halfway/hw/hash.hpp"
#include "halfway/hw/ops.hpp"

namespace halfway::hw {

/// Stream of the dot-product cases of hw-report ("dotprod!").
inline constexpr uint64_t kDotSeed = 0x646F7470726F6421ull;

/// The lane result c + a0·b0 + a1·b1 under model `m` (elements in format `in`).
HALFWAY_INLINE uint32_t dot_lane(const AccumulationModel& m, const Format& in, uint32_t a,
                                 uint32_t b, uint32_t c) {
  const uint32_t av[2] = {a & 0xFFFFu, a >> 16}, bv[2] = {b & 0xFFFFu, b >> 16};
  Env env;
  return dot(m, in, av, bv, 2, c, env);
}

/// Number of dot-product case families (dot_operands).
inline constexpr int kDotFamilies = 8;
inline const char* dot_family_name(int f) {
  static const char* const names[kDotFamilies] = {
      "uniform_bits", "special_classes", "cancellation", "tiny_results",
      "ties",         "overflow",        "one_product",  "random_normal"};
  return names[f & 7];
}

namespace detail {

/// A value of every class of a 16-bit IEEE format `f`, picked by `w`: ±0, ±subnormal,
/// ±smallest normal, ±largest finite, ±inf, quiet and signalling NaNs with payloads, ±1 and a
/// random normal.
HALFWAY_INLINE uint32_t class_value(const Format& f, uint64_t w) {
  const uint32_t s = (w >> 8) & 1 ? f.sign_bit() : 0u;
  const uint32_t frac = static_cast<uint32_t>(w >> 16) & f.frac_mask();
  const uint32_t quiet = uint32_t(1) << (f.frac_bits - 1);
  switch (w % 10) {
    case 0: return s;
    case 1: return s | (frac ? frac : 1u);                          // subnormal
    case 2: return s | (uint32_t(1) << f.frac_bits);                // smallest normal
    case 3: return s | f.max_mag();
    case 4: return s | f.inf_mag();
    case 5: return s | f.inf_mag() | quiet | (frac & (quiet - 1));  // quiet NaN
    case 6: return s | f.inf_mag() | ((frac & (quiet - 1)) ? (frac & (quiet - 1)) : 1u);  // sNaN
    case 7: return s | (uint32_t(f.bias) << f.frac_bits);           // ±1
    default: {
      const uint32_t e = 1 + static_cast<uint32_t>((w >> 32) % (f.exp_field_max() - 1));
      return compose(f, s != 0, e, frac);
    }
  }
}

/// A normal of `f` with unbiased exponent e (clamped to the normal range) and fraction bits.
HALFWAY_INLINE uint32_t normal_with_exp(const Format& f, bool neg, int e, uint32_t frac) {
  int field = e + f.bias;
  if (field < 1) field = 1;
  if (field > int(f.exp_field_max()) - 1) field = int(f.exp_field_max()) - 1;
  return compose(f, neg, static_cast<uint32_t>(field), frac);
}

HALFWAY_INLINE uint32_t pack2(uint32_t lo, uint32_t hi) { return (lo & 0xFFFFu) | (hi << 16); }

/// A normal of `f` from the draw `w`: exponent in [lo, hi], the fraction's top `top_bits` bits
/// random (the rest zero), sign random.
HALFWAY_INLINE uint32_t rnd_elem(const Format& f, uint64_t w, int lo, int hi, int top_bits) {
  const int e = lo + int((w >> 20) % uint64_t(hi - lo + 1));
  uint32_t frac = static_cast<uint32_t>(w >> 32) & f.frac_mask();
  if (top_bits < f.frac_bits) frac &= ~((uint32_t(1) << (f.frac_bits - top_bits)) - 1);
  return normal_with_exp(f, (w >> 7) & 1, e, frac);
}

/// The draws of one case: three independent random words, and the stream and index they come
/// from (the special classes draw two more).
struct DotDraws {
  uint64_t seed, index;
  uint64_t r, s, t;
};

/// One lane's operands: two packed elements each in `a` and `b`, the fp32 accumulator `c`.
struct DotOperands {
  uint32_t& a;
  uint32_t& b;
  uint32_t& c;
};

/// Family 0: uniform bit patterns.
HALFWAY_INLINE void uniform_bits(const DotDraws& d, DotOperands o) {
  o.a = static_cast<uint32_t>(d.r);
  o.b = static_cast<uint32_t>(d.r >> 32);
  o.c = static_cast<uint32_t>(d.s);
}

/// An fp32 accumulator of every class, picked by `w`: ±0, ±subnormal, ±smallest normal,
/// ±largest finite, ±inf, quiet and signalling NaNs with payloads, ±1 and a random normal.
HALFWAY_INLINE uint32_t class_acc(uint64_t w) {
  const Format f32 = fmt_fp32();
  const uint32_t sg = (w >> 8) & 1 ? 0x80000000u : 0u;
  const uint32_t fr = static_cast<uint32_t>(w >> 32) & 0x7FFFFFu;
  switch (w % 10) {
    case 0: return sg;
    case 1: return sg | (fr ? fr : 1u);
    case 2: return sg | 0x00800000u;
    case 3: return sg | 0x7F7FFFFFu;
    case 4: return sg | 0x7F800000u;
    case 5: return sg | 0x7FC00000u | (fr & 0x3FFFFFu);
    case 6: return sg | 0x7F800000u | ((fr & 0x3FFFFFu) ? (fr & 0x3FFFFFu) : 1u);
    case 7: return sg | 0x3F800000u;
    default: return normal_with_exp(f32, sg != 0, int((w >> 40) % 60) - 30, fr);
  }
}

/// Family 1: every class of element and accumulator.
HALFWAY_INLINE void special_classes(const Format& f, const DotDraws& d, DotOperands o) {
  o.a = pack2(class_value(f, d.r), class_value(f, d.s));
  o.b = pack2(class_value(f, d.t), class_value(f, random64(d.seed + 1, d.index)));
  o.c = class_acc(random64(d.seed + 3, d.index));
}

/// Family 2: cancellation: c = −(a0·b0 + a1·b1) rounded, moved by a few ulps.
HALFWAY_INLINE void cancellation(const Format& f, const DotDraws& d, DotOperands o) {
  const uint64_t r = d.r, s = d.s, t = d.t;
  const int e0 = int(r % 40) - 20, e1 = e0 + int((r >> 8) % 9) - 4;
  const uint32_t a0 = rnd_elem(f, r, e0, e0, 16), b0 = rnd_elem(f, s, 0, 0, 16);
  const uint32_t a1 = rnd_elem(f, t, e1, e1, 16), b1 = rnd_elem(f, r ^ s, 0, 0, 16);
  o.a = pack2(a0, a1);
  o.b = pack2(b0, b1);
  const AccumulationModel plain{};  // fp32 fmas in index order: close enough to cancel
  const uint32_t sum = dot_lane(plain, f, o.a, o.b, 0);
  const int delta = int((s >> 60) & 7) - 3;
  uint32_t mag = (sum & 0x7FFFFFFFu);
  if (mag < 0x7F800000u) mag = static_cast<uint32_t>(int64_t(mag) + delta) & 0x7FFFFFFFu;
  if (mag >= 0x7F800000u) mag = sum & 0x7FFFFFFFu;
  o.c = ((sum & 0x80000000u) ^ 0x80000000u) | mag;
}

/// Family 3: products and sums around 2^-126: subnormal intermediates and results.
HALFWAY_INLINE void tiny_results(const Format& f, const DotDraws& d, DotOperands o) {
  const uint64_t r = d.r, s = d.s, t = d.t;
  const int ebias = f.bias;
  const int pe = -126 - int(r % 30) + 4;  // product exponent -152 .. -122
  const int ea = -int((r >> 8) % uint64_t(ebias - 1)) - 1;
  const uint32_t a0 = normal_with_exp(f, r >> 16 & 1, ea, static_cast<uint32_t>(s));
  const uint32_t b0 = normal_with_exp(f, r >> 17 & 1, pe - ea, static_cast<uint32_t>(s >> 16));
  const int eb = -int((r >> 24) % uint64_t(ebias - 1)) - 1;
  const int pe1 = -126 - int((r >> 32) % 30) + 4;
  const uint32_t a1 = normal_with_exp(f, r >> 18 & 1, eb, static_cast<uint32_t>(t));
  const uint32_t b1 = (r >> 40) % 4 == 0 ? 0u
                      : normal_with_exp(f, r >> 19 & 1, pe1 - eb, static_cast<uint32_t>(t >> 16));
  o.a = pack2(a0, a1);
  o.b = pack2(b0, b1);
  const uint32_t sg = (r >> 44) & 1 ? 0x80000000u : 0u;
  switch ((r >> 45) % 4) {
    case 0: o.c = sg; break;
    case 1: o.c = sg | (static_cast<uint32_t>(t >> 32) & 0x7FFFFFu); break;  // subnormal
    case 2: o.c = sg | (0x00800000u + static_cast<uint32_t>((t >> 32) % 4)); break;  // 2^-126 + k ulp
    default: o.c = sg | (0x00800000u * 2 + static_cast<uint32_t>((t >> 32) % 4)); break;
  }
}

/// Family 4: ties: short products half an ulp (or odd multiples) of c's ulp.
HALFWAY_INLINE void ties(const Format& f, const DotDraws& d, DotOperands o) {
  const uint64_t r = d.r, s = d.s, t = d.t;
  const Format f32 = fmt_fp32();
  const int ec = int(r % 80) - 40;
  const uint32_t cf = static_cast<uint32_t>(s) & 0x7FFFFFu;
  o.c = normal_with_exp(f32, (r >> 8) & 1, ec, cf);
  const int pe = ec - 24 - int((r >> 12) % 3);  // at or just below the half-ulp
  const int ea = int((r >> 16) % 8) - 4;
  const uint32_t a0 = rnd_elem(f, s >> 8, ea, ea, 2);
  const uint32_t b0 = rnd_elem(f, t, pe - ea, pe - ea, 1);
  const uint32_t a1 = (r >> 24) & 1 ? 0u : rnd_elem(f, t >> 8, ea, ea, 1);
  const uint32_t b1 = rnd_elem(f, r >> 8, pe - ea - int((r >> 28) % 3), pe - ea, 1);
  o.a = pack2(a0, a1);
  o.b = pack2(b0, b1);
}

/// Family 5: near fp32 overflow.
HALFWAY_INLINE void near_overflow(const Format& f, const DotDraws& d, DotOperands o) {
  const uint64_t r = d.r, s = d.s, t = d.t;
  const Format f32 = fmt_fp32();
  const int ebias = f.bias;
  const int ea = ebias - int(r % 8);
  o.a = pack2(rnd_elem(f, r, ea, ea, 16), rnd_elem(f, s, ea, ea, 16));
  const int eb = 127 - ea - int((r >> 8) % 3);
  o.b = pack2(rnd_elem(f, t, eb, eb, 16), rnd_elem(f, r ^ t, eb, eb, 16));
  o.c = normal_with_exp(f32, (s >> 8) & 1, 127 - int((s >> 16) % 3),
                        static_cast<uint32_t>(s >> 32));
}

/// Family 6: one product zero (either position), zero signs and a single rounding.
HALFWAY_INLINE void one_product(const Format& f, const DotDraws& d, DotOperands o) {
  const uint64_t r = d.r, s = d.s, t = d.t;
  const Format f32 = fmt_fp32();
  const uint32_t z = (r >> 8) & 1 ? f.sign_bit() : 0u;
  const uint32_t x = rnd_elem(f, r, -20, 20, 16), y = rnd_elem(f, s, -20, 20, 16);
  const uint32_t w = rnd_elem(f, t, -20, 20, 16);
  if ((r >> 9) & 1) {
    o.a = pack2(z, x);
    o.b = pack2(w, y);
  } else {
    o.a = pack2(x, w);
    o.b = pack2(y, z);
  }
  const uint32_t sg = (r >> 10) & 1 ? 0x80000000u : 0u;
  o.c = (r >> 11) % 4 == 0 ? sg
                           : normal_with_exp(f32, sg != 0, int((r >> 13) % 60) - 30,
                                             static_cast<uint32_t>(t >> 32));
}

/// Family 7: random normals within a few binades.
HALFWAY_INLINE void random_normals(const Format& f, const DotDraws& d, DotOperands o) {
  const uint64_t r = d.r, s = d.s, t = d.t;
  const Format f32 = fmt_fp32();
  o.a = pack2(rnd_elem(f, r, -6, 6, 16), rnd_elem(f, s, -6, 6, 16));
  o.b = pack2(rnd_elem(f, t, -6, 6, 16), rnd_elem(f, r ^ s, -6, 6, 16));
  o.c = normal_with_exp(f32, (t >> 7) & 1, int((t >> 40) % 30) - 15,
                        static_cast<uint32_t>(r >> 40));
}

}  // namespace detail

/// Operands of dot case number `index` of stream `seed`, elements in `f` (bf16 or fp16), the
/// accumulator fp32. The family is index % 8 (dot_family_name): uniform bit patterns; every
/// class of element and accumulator (zeros, subnormals, extremes, infinities, NaNs);
/// cancellation (c ≈ −(a0·b0 + a1·b1)); products and sums around fp32's smallest normal;
/// short significands against an accumulator one half-ulp away (ties); products and
/// accumulators near fp32's overflow threshold; one product zero; random normals.
HALFWAY_INLINE void dot_operands(const Format& f, uint64_t seed, uint64_t index, uint32_t& a,
                                 uint32_t& b, uint32_t& c) {
  const detail::DotDraws d{seed, index, random64(seed, index),
                           random64(seed ^ 0x9E3779B97F4A7C15ull, index),
                           random64(seed ^ 0xD1B54A32D192ED03ull, index)};
  const detail::DotOperands o{a, b, c};
  switch (static_cast<int>(index % kDotFamilies)) {
    case 0: return detail::uniform_bits(d, o);
    case 1: return detail::special_classes(f, d, o);
    case 2: return detail::cancellation(f, d, o);
    case 3: return detail::tiny_results(f, d, o);
    case 4: return detail::ties(f, d, o);
    case 5: return detail::near_overflow(f, d, o);
    case 6: return detail::one_product(f, d, o);
    default: return detail::random_normals(f, d, o);
  }
}

}  // namespace halfway::hw
