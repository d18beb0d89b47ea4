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

}  // namespace detail

/// Operands of dot case number `index` of stream `seed`, elements in `f` (bf16 or fp16), the
/// accumulator fp32. The family is index % 8 (dot_family_name): uniform bit patterns; every
/// class of element and accumulator (zeros, subnormals, extremes, infinities, NaNs);
/// cancellation (c ≈ −(a0·b0 + a1·b1)); products and sums around fp32's smallest normal;
/// short significands against an accumulator one half-ulp away (ties); products and
/// accumulators near fp32's overflow threshold; one product zero; random normals.
HALFWAY_INLINE void dot_operands(const Format& f, uint64_t seed, uint64_t index, uint32_t& a,
                                 uint32_t& b, uint32_t& c) {
  using detail::class_value;
  using detail::normal_with_exp;
  using detail::pack2;
  const Format f32 = fmt_fp32();
  const uint64_t r = random64(seed, index), s = random64(seed ^ 0x9E3779B97F4A7C15ull, index);
  const uint64_t t = random64(seed ^ 0xD1B54A32D192ED03ull, index);
  const int fam = static_cast<int>(index % kDotFamilies);
  const int ebias = f.bias;  // element exponent range: [1 - bias, bias]
  auto rnd_elem = [&](uint64_t w, int lo, int hi, int top_bits) {
    const int e = lo + int((w >> 20) % uint64_t(hi - lo + 1));
    uint32_t frac = static_cast<uint32_t>(w >> 32) & f.frac_mask();
    if (top_bits < f.frac_bits) frac &= ~((uint32_t(1) << (f.frac_bits - top_bits)) - 1);
    return normal_with_exp(f, (w >> 7) & 1, e, frac);
  };
  switch (fam) {
    case 0:  // uniform bit patterns
      a = static_cast<uint32_t>(r);
      b = static_cast<uint32_t>(r >> 32);
      c = static_cast<uint32_t>(s);
      return;
    case 1:  // every class of element and accumulator
      a = pack2(class_value(f, r), class_value(f, s));
      b = pack2(class_value(f, t), class_value(f, random64(seed + 1, index)));
      {  // the accumulator's classes, in fp32
        const uint64_t w = random64(seed + 3, index);
        const uint32_t sg = (w >> 8) & 1 ? 0x80000000u : 0u;
        const uint32_t fr = static_cast<uint32_t>(w >> 32) & 0x7FFFFFu;
        switch (w % 10) {
          case 0: c = sg; break;
          case 1: c = sg | (fr ? fr : 1u); break;
          case 2: c = sg | 0x00800000u; break;
          case 3: c = sg | 0x7F7FFFFFu; break;
          case 4: c = sg | 0x7F800000u; break;
          case 5: c = sg | 0x7FC00000u | (fr & 0x3FFFFFu); break;
          case 6: c = sg | 0x7F800000u | ((fr & 0x3FFFFFu) ? (fr & 0x3FFFFFu) : 1u); break;
          case 7: c = sg | 0x3F800000u; break;
          default: c = normal_with_exp(f32, sg != 0, int((w >> 40) % 60) - 30, fr); break;
        }
      }
      return;
    case 2: {  // cancellation: c = −(a0·b0 + a1·b1) rounded, moved by a few ulps
      const int e0 = int(r % 40) - 20, e1 = e0 + int((r >> 8) % 9) - 4;
      const uint32_t a0 = rnd_elem(r, e0, e0, 16), b0 = rnd_elem(s, 0, 0, 16);
      const uint32_t a1 = rnd_elem(t, e1, e1, 16), b1 = rnd_elem(r ^ s, 0, 0, 16);
      a = pack2(a0, a1);
      b = pack2(b0, b1);
      const AccumulationModel plain{};  // fp32 fmas in index order: close enough to cancel
      const uint32_t sum = dot_lane(plain, f, a, b, 0);
      const int delta = int((s >> 60) & 7) - 3;
      uint32_t mag = (sum & 0x7FFFFFFFu);
      if (mag < 0x7F800000u) mag = static_cast<uint32_t>(int64_t(mag) + delta) & 0x7FFFFFFFu;
      if (mag >= 0x7F800000u) mag = sum & 0x7FFFFFFFu;
      c = ((sum & 0x80000000u) ^ 0x80000000u) | mag;
      return;
    }
    case 3: {  // products and sums around 2^-126: subnormal intermediates and results
      const int pe = -126 - int(r % 30) + 4;  // product exponent -152 .. -122
      const int ea = -int((r >> 8) % uint64_t(ebias - 1)) - 1;
      const uint32_t a0 = normal_with_exp(f, r >> 16 & 1, ea, static_cast<uint32_t>(s));
      const uint32_t b0 = normal_with_exp(f, r >> 17 & 1, pe - ea, static_cast<uint32_t>(s >> 16));
      const int eb = -int((r >> 24) % uint64_t(ebias - 1)) - 1;
      const int pe1 = -126 - int((r >> 32) % 30) + 4;
      const uint32_t a1 = normal_with_exp(f, r >> 18 & 1, eb, static_cast<uint32_t>(t));
      const uint32_t b1 = (r >> 40) % 4 == 0 ? 0u
                          : normal_with_exp(f, r >> 19 & 1, pe1 - eb, static_cast<uint32_t>(t >> 16));
      a = pack2(a0, a1);
      b = pack2(b0, b1);
      const uint32_t sg = (r >> 44) & 1 ? 0x80000000u : 0u;
      switch ((r >> 45) % 4) {
        case 0: c = sg; break;
        case 1: c = sg | (static_cast<uint32_t>(t >> 32) & 0x7FFFFFu); break;  // subnormal
        case 2: c = sg | (0x00800000u + static_cast<uint32_t>((t >> 32) % 4)); break;  // 2^-126 + k ulp
        default: c = sg | (0x00800000u * 2 + static_cast<uint32_t>((t >> 32) % 4)); break;
      }
      return;
    }
    case 4: {  // ties: short products half an ulp (or odd multiples) of c's ulp
      const int ec = int(r % 80) - 40;
      const uint32_t cf = static_cast<uint32_t>(s) & 0x7FFFFFu;
      c = normal_with_exp(f32, (r >> 8) & 1, ec, cf);
      const int pe = ec - 24 - int((r >> 12) % 3);  // at or just below the half-ulp
      const int ea = int((r >> 16) % 8) - 4;
      const uint32_t a0 = rnd_elem(s >> 8, ea, ea, 2);
      const uint32_t b0 = rnd_elem(t, pe - ea, pe - ea, 1);
      const uint32_t a1 = (r >> 24) & 1 ? 0u : rnd_elem(t >> 8, ea, ea, 1);
      const uint32_t b1 = rnd_elem(r >> 8, pe - ea - int((r >> 28) % 3), pe - ea, 1);
      a = pack2(a0, a1);
      b = pack2(b0, b1);
      return;
    }
    case 5: {  // near fp32 overflow
      const int ea = ebias - int(r % 8);
      a = pack2(rnd_elem(r, ea, ea, 16), rnd_elem(s, ea, ea, 16));
      const int eb = 127 - ea - int((r >> 8) % 3);
      b = pack2(rnd_elem(t, eb, eb, 16), rnd_elem(r ^ t, eb, eb, 16));
      c = normal_with_exp(f32, (s >> 8) & 1, 127 - int((s >> 16) % 3),
                          static_cast<uint32_t>(s >> 32));
      return;
    }
    case 6: {  // one product zero (either position), zero signs and a single rounding
      const uint32_t z = (r >> 8) & 1 ? f.sign_bit() : 0u;
      const uint32_t x = rnd_elem(r, -20, 20, 16), y = rnd_elem(s, -20, 20, 16);
      const uint32_t w = rnd_elem(t, -20, 20, 16);
      if ((r >> 9) & 1) {
        a = pack2(z, x);
        b = pack2(w, y);
      } else {
        a = pack2(x, w);
        b = pack2(y, z);
      }
      const uint32_t sg = (r >> 10) & 1 ? 0x80000000u : 0u;
      c = (r >> 11) % 4 == 0 ? sg
                             : normal_with_exp(f32, sg != 0, int((r >> 13) % 60) - 30,
                                               static_cast<uint32_t>(t >> 32));
      return;
    }
    default: {  // random normals within a few binades
      a = pack2(rnd_elem(r, -6, 6, 16), rnd_elem(s, -6, 6, 16));
      b = pack2(rnd_elem(t, -6, 6, 16), rnd_elem(r ^ s, -6, 6, 16));
      c = normal_with_exp(f32, (t >> 7) & 1, int((t >> 40) % 30) - 15,
                          static_cast<uint32_t>(r >> 40));
      return;
    }
  }
}

}  // namespace halfway::hw
