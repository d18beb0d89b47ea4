/// \file accumulate.hpp
/// Models of how dot products and matrix-multiply units accumulate: plain sequential
/// accumulation in a chosen format, and the parametric block-FMA model of NVIDIA tensor cores
/// (Fasi, Higham, Mikaitis & Pranesh 2021; Khattak & Mikaitis 2025). A model is data, like a
/// format, so a simulator's matmul can take any of them.
///
///     using namespace halfway;
///     AccumulationModel m = accumulation::h100_fp32;  // 16 products per block, truncating
///     Env env;
///     uint32_t d = dot(m, formats::fp16, a, b, n, 0u, env);  // fp32 encoding of sum a_i*b_i
#pragma once

#include "halfway/config.hpp"
#include "halfway/env.hpp"
#include "halfway/format.hpp"
#include "halfway/softfloat.hpp"

namespace halfway {

struct AccumulationModel {
  enum class Kind : uint8_t {
    sequential_fma,  ///< c = fma(a_i, b_i, c) in `acc`, in order (one rounding per step)
    sequential,      ///< c = c + (a_i · b_i rounded to `acc`): two roundings per step
    block_fma,       ///< tensor-core block FMA: see below
  };
  Kind kind = Kind::sequential_fma;
  Format acc{8, 23, 127, Specials::ieee, Overflow::infinity};  ///< accumulator format
  Rounding rounding = Rounding::near_even;  ///< rounding of each step / of each block's sum
  /// block_fma: each block adds `block` exact products to the accumulator. All terms are aligned
  /// to the largest exponent among them, keeping `kept_bits` fraction bits below that exponent
  /// and truncating the rest toward zero (no sticky bit); the aligned terms are summed exactly
  /// and the sum is rounded once into `acc` with `rounding`.
  int block = 1;
  int kept_bits = 23;
  /// block_fma: truncate each aligned term toward −inf, as a two's-complement alignment shifter
  /// does, instead of toward zero (sign-magnitude alignment, the default). Hardware
  /// descriptions differ on this; the hardware validation searches both.
  bool floor_alignment = false;
};

namespace accumulation {
inline constexpr Format kF32{8, 23, 127, Specials::ieee, Overflow::infinity};
inline constexpr Format kF16{5, 10, 15, Specials::ieee, Overflow::infinity};
/// Sequential fma in fp32, round to nearest even (a CPU loop with fmaf).
inline constexpr AccumulationModel fp32_sequential{AccumulationModel::Kind::sequential_fma, kF32,
                                                   Rounding::near_even, 1, 23};
/// Published tensor-core parameters for fp16/bf16 inputs (numerics-reference.md §4): hypotheses
/// to test against hardware, not facts.
inline constexpr AccumulationModel v100_fp32{AccumulationModel::Kind::block_fma, kF32,
                                             Rounding::minMag, 4, 23};
inline constexpr AccumulationModel a100_fp32{AccumulationModel::Kind::block_fma, kF32,
                                             Rounding::minMag, 8, 24};
inline constexpr AccumulationModel h100_fp32{AccumulationModel::Kind::block_fma, kF32,
                                             Rounding::minMag, 16, 25};
inline constexpr AccumulationModel h100_fp16{AccumulationModel::Kind::block_fma, kF16,
                                             Rounding::near_even, 16, 25};
/// fp8 inputs on H100: 32 products per block, about 13 fraction bits kept after alignment.
inline constexpr AccumulationModel h100_fp8_fp32{AccumulationModel::Kind::block_fma, kF32,
                                                 Rounding::minMag, 32, 13};
}  // namespace accumulation

namespace detail {

/// One block FMA: acc + sum of n exact products, per the block model. Inputs in `in`.
HALFWAY_INLINE uint32_t block_fma_step(const AccumulationModel& m, const Format& in, const uint32_t* a,
                                  const uint32_t* b, int n, uint32_t c, Env& env) {
  // Terms: the accumulator and the exact products, unpacked.
  Unpacked t[65];
  int count = 0;
  // NaN operands propagate as a quiet NaN (invalid only for a signalling one); inf·0 and
  // inf − inf are invalid.
  bool any_nan = false, invalid = false, pos_inf = false, neg_inf = false;
  const Unpacked uc = unpack(m.acc, c);
  if (is_nan(uc.cls)) any_nan = true;
  if (uc.cls == Class::snan) invalid = true;
  if (uc.cls == Class::inf) (uc.sign ? neg_inf : pos_inf) = true;
  if (uc.cls == Class::finite) t[count++] = uc;
  bool zero_sign_all_neg = uc.cls == Class::zero ? uc.sign : false;
  bool all_zero = uc.cls == Class::zero;
  for (int i = 0; i < n; ++i) {
    const Unpacked x = unpack(in, a[i]), y = unpack(in, b[i]);
    const bool s = x.sign != y.sign;
    if (is_nan(x.cls) || is_nan(y.cls)) {
      any_nan = true;
      invalid = invalid || x.cls == Class::snan || y.cls == Class::snan;
      continue;
    }
    if (x.cls == Class::inf || y.cls == Class::inf) {
      if (x.cls == Class::zero || y.cls == Class::zero) invalid = true;
      else (s ? neg_inf : pos_inf) = true;
      continue;
    }
    if (x.cls == Class::zero || y.cls == Class::zero) {
      if (all_zero) zero_sign_all_neg = zero_sign_all_neg && s;
      continue;
    }
    all_zero = false;
    const uint64_t prod = (x.sig >> 32) * (y.sig >> 32);  // exact, <= 48 bits
    const int lz = clz64(prod);
    Unpacked p;
    p.cls = Class::finite;
    p.sign = s;
    p.exp = x.exp + y.exp + 1 - lz;
    p.sig = prod << lz;
    t[count++] = p;
  }
  if (invalid || (pos_inf && neg_inf && !any_nan)) return invalid_nan(m.acc, env);
  if (any_nan) return m.acc.default_nan();
  if (pos_inf || neg_inf) return pack_inf(m.acc, neg_inf, env);
  if (count == 0) return pack_zero(m.acc, all_zero && zero_sign_all_neg);
  int32_t emax = t[0].exp;
  for (int i = 1; i < count; ++i) emax = t[i].exp > emax ? t[i].exp : emax;
  // Fixed point with its last bit at 2^(emax - kept_bits): each term truncated toward zero.
  __int128 sum = 0;
  for (int i = 0; i < count; ++i) {
    const int shift = 63 - m.kept_bits + (emax - t[i].exp);  // right shift of sig
    const uint64_t mag = shift >= 64 ? 0 : (shift <= 0 ? t[i].sig : t[i].sig >> shift);
    const __int128 v = shift < 0 ? (__int128(t[i].sig) << -shift) : __int128(mag);
    // Bits shifted out of a negative term make its floor one unit below its truncation.
    const bool lost = shift > 0 && (shift >= 64 || (t[i].sig << (64 - shift)) != 0);
    sum += t[i].sign ? -v - __int128(m.floor_alignment && lost) : v;
  }
  if (sum == 0) return pack_zero(m.acc, m.rounding == Rounding::min);
  const bool sign = sum < 0;
  const unsigned __int128 mag = sign ? (unsigned __int128)(-sum) : (unsigned __int128)sum;
  const int lz = clz128(mag);
  const unsigned __int128 norm = mag << lz;
  const uint64_t hi = static_cast<uint64_t>(norm >> 64);
  const bool sticky = static_cast<uint64_t>(norm) != 0;
  Env e = env;
  e.rounding = m.rounding;
  // The leading bit of the sum sits at bit (127 - lz); bit 0 has weight 2^(emax - kept_bits).
  const uint32_t r = round_pack(m.acc, e, sign, emax - m.kept_bits + (127 - lz), hi | sticky);
  env.flags |= e.flags;
  env.sr_counter = e.sr_counter;
  return r;
}

}  // namespace detail

/// Dot product c + Σ a_i·b_i of `n` encodings in format `in`, accumulated by model `m`; `c` and
/// the result are encodings of `m.acc`. Sequential models convert each operand into `m.acc`
/// first (a rounding step, unless `in` is `m.acc`), then multiply-add in order.
HALFWAY_HD inline uint32_t dot(const AccumulationModel& m, const Format& in, const uint32_t* a,
                          const uint32_t* b, int n, uint32_t c, Env& env) {
  switch (m.kind) {
    case AccumulationModel::Kind::block_fma: {
      const int blk = m.block < 1 ? 1 : (m.block > 64 ? 64 : m.block);
      for (int i = 0; i < n; i += blk)
        c = detail::block_fma_step(m, in, a + i, b + i, (n - i < blk ? n - i : blk), c, env);
      return c;
    }
    default: {
      Env e = env;
      e.rounding = m.rounding;
      // Operands already in the accumulator's format are used as they are: no conversion, so
      // no rounding (and no stochastic-rounding draw) is spent on them.
      const bool same = in == m.acc;
      for (int i = 0; i < n; ++i) {
        const uint32_t ai = same ? a[i] : convert(in, a[i], m.acc, e);
        const uint32_t bi = same ? b[i] : convert(in, b[i], m.acc, e);
        c = m.kind == AccumulationModel::Kind::sequential_fma ? fma(m.acc, ai, bi, c, e)
                                                               : add(m.acc, mul(m.acc, ai, bi, e), c, e);
      }
      env.flags |= e.flags;
      env.sr_counter = e.sr_counter;
      return c;
    }
  }
}

}  // namespace halfway
