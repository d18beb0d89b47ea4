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
    split_fma,       ///< interleaved fma chains per block, then summed: see `chains`
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
  /// Operand order. period = 0 or 1: the products are taken in index order. Otherwise the
  /// operands are visited in groups of `period` consecutive indices, and step j of a group uses
  /// index `order[j]` within it (a permutation of 0..period-1); a last, incomplete group is taken
  /// in index order. block_fma forms its blocks from the visited sequence, so a permutation of
  /// k expresses interleaved k-blocks (period a multiple of `block`, or `block` of `period`).
  uint8_t period = 0;
  uint8_t order[64] = {};
  /// Denormals are zero: subnormal inputs (both operands and the accumulator, including each
  /// step's accumulator) are read as zero of the same sign.
  bool daz = false;
  /// Flush to zero: a tiny result of any step (an intermediate or the final one) becomes zero of
  /// the same sign. Tininess is detected per `tininess` (x86's FTZ: after rounding).
  bool ftz = false;
  Tininess tininess = Tininess::after_rounding;
  /// sequential_fma: a NaN accumulator is the result even when the product is invalid (inf·0),
  /// as x86 FMA hardware does; otherwise such a step gives the default NaN (SoftFloat's rule,
  /// the library's fma()).
  bool nan_accumulator_first = false;
  /// split_fma: the operands are taken in blocks of `block` products (one instruction's K).
  /// Within a block, product j goes to accumulator j mod `chains`; each accumulator starts at
  /// +0 and adds its exact products one at a time, as fused multiply-adds in `acc` (one
  /// rounding each, the NaN rules of `nan_accumulator_first`); then the accumulators are added
  /// in order (accumulator 0 first) and that sum S is added to the block's input c as c + S
  /// (a NaN c wins over a NaN S), each addition rounded. A last, partial block has fewer
  /// products. Intel AMX `tdpbf16ps` is this with 2 chains of 16 (`accumulation::amx_bf16`).
  uint8_t chains = 1;
  /// block_fma: align to the largest *unnormalised* term exponent, as MMA-Sim (Xie et al. 2025,
  /// arXiv 2511.10909) models NVIDIA's tensor cores: a product's exponent is the sum of its
  /// operands' exponents, each read as a significand in [1, 2) or, for a subnormal, as its
  /// format's smallest exponent with a significand below 1 (so a product in [2, 4) keeps one
  /// more bit); the accumulator's likewise (fp32's smallest exponent for a subnormal). false:
  /// align to the largest normalised exponent (Fasi et al. 2021).
  bool unnormalized_alignment = false;
  /// block_fma: each block's result is truncated or rounded (with `rounding`) to this many
  /// fraction bits, in `acc`'s exponent range, before it becomes the next block's accumulator:
  /// 13 is Hopper's fp8 "FP22" (an e8m13 output held in fp32). 0: `acc`'s own precision.
  uint8_t step_frac_bits = 0;
  /// block_fma: promotion interval. Every `promote` products (a whole number of blocks) the
  /// partial sum, accumulated from +0 by the block model, is added to an fp32 accumulator that
  /// starts at c, rounded to nearest even: CUTLASS's 2xAcc, DeepGEMM's 128-element promotion,
  /// Transformer Engine's split accumulator. 0: no promotion (c is the first block's input).
  int promote = 0;
  /// Non-zero: every NaN result is this encoding (NVIDIA's canonical NaN 0x7FFFFFFF in fp32,
  /// 0x7FFF in fp16), whatever NaN or invalid operation produced it.
  uint32_t nan_result = 0;
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
/// x86 AVX512-BF16 `vdpbf16ps` (Intel's pseudo-code, measured on AMD Zen 4 by `halfway
/// hw-report --backend avx512bf16-dot`): per fp32 lane, two sequential fused multiply-adds,
/// the odd (high) element first, each rounded to nearest even; subnormal inputs and
/// accumulators read as zero, tiny results (after rounding) flushed; a NaN accumulator wins
/// over an invalid inf·0 product; MXCSR neither read nor written.
inline constexpr AccumulationModel avx512_dpbf16{AccumulationModel::Kind::sequential_fma,
                                                 kF32,
                                                 Rounding::near_even,
                                                 1,
                                                 23,
                                                 false,
                                                 2,
                                                 {1, 0},
                                                 true,
                                                 true,
                                                 Tininess::after_rounding,
                                                 true};
/// x86 AMX-BF16 `tdpbf16ps` (one instruction: K = 32, 16 element pairs), found from 512,000
/// outputs of 2,000 full tiles recorded on an Intel Xeon with AMX-BF16 (tests/data/amx/) and
/// reproducing every one of them bit for bit, NaNs included: inputs and C read with DAZ; two
/// fp32 accumulators from +0, E taking the even elements (2k) and O the odd ones (2k+1), each
/// a chain of exact products added with one round-to-nearest-even rounding per step and FTZ;
/// then round(E + O), then round(C + that). NaN rules (x86's): a NaN operand's payload,
/// quieted (A's before B's), replaces the chain's value; a NaN accumulator survives a later
/// inf·0 or inf − inf, which otherwise give the default NaN 0xFFC00000; E's NaN wins over O's,
/// and C's over the sum's. Intel's pseudo-code (one chain of fmas, even element first) differs
/// on about 37% of those outputs.
inline constexpr AccumulationModel amx_bf16{AccumulationModel::Kind::split_fma,
                                            kF32,
                                            Rounding::near_even,
                                            32,
                                            23,
                                            false,
                                            0,
                                            {},
                                            true,
                                            true,
                                            Tininess::after_rounding,
                                            true,
                                            2};
/// MMA-Sim's published NVIDIA tensor-core models (Xie, Wang, Yang & Yang 2025, arXiv
/// 2511.10909), implemented from their documented rules: per instruction of K products, C and
/// the exact products aligned to the largest unnormalised exponent, each truncated toward zero
/// `kept` bits below it, summed exactly, then truncated into fp32 (RZ; e8m13 for Hopper fp8) or
/// rounded to nearest even into fp16; any NaN or invalid operation gives the canonical NaN.
/// Longer K chains instructions: D = mma(A_block, B_block, D).
constexpr AccumulationModel mmasim(int k, int kept, const Format& acc, Rounding r,
                                   uint8_t step_frac_bits = 0) {
  AccumulationModel m{AccumulationModel::Kind::block_fma, acc, r, k, kept};
  m.unnormalized_alignment = true;
  m.step_frac_bits = step_frac_bits;
  m.nan_result = acc.nbits() == 16 ? 0x7FFFu : 0x7FFFFFFFu;
  return m;
}
/// Volta `mma.sync` m8n8k4 (fp16 inputs, fp32 accumulator): K = 4, 23 bits kept.
inline constexpr AccumulationModel mmasim_volta = mmasim(4, 23, kF32, Rounding::minMag);
/// Ampere `mma.sync` m16n8k16 (fp16/bf16, fp32): two K = 8 halves, 24 bits kept.
inline constexpr AccumulationModel mmasim_ampere = mmasim(8, 24, kF32, Rounding::minMag);
/// Hopper `wgmma` k16 (fp16/bf16, fp32): K = 16, 25 bits kept.
inline constexpr AccumulationModel mmasim_hopper = mmasim(16, 25, kF32, Rounding::minMag);
/// Hopper `wgmma` k16 with an fp16 accumulator: 25 bits kept, rounded to nearest even into fp16.
inline constexpr AccumulationModel mmasim_hopper_fp16 = mmasim(16, 25, kF16, Rounding::near_even);
/// Hopper `wgmma` k8 tf32 (fp32 accumulator): K = 8, 25 bits kept.
inline constexpr AccumulationModel mmasim_hopper_tf32 = mmasim(8, 25, kF32, Rounding::minMag);
/// Hopper `wgmma` k32 e4m3/e5m2 (fp32 accumulator): K = 32, 13 bits kept, and every
/// instruction's output truncated to 13 fraction bits (e8m13, the "FP22" accumulator).
inline constexpr AccumulationModel mmasim_hopper_fp8 = mmasim(32, 13, kF32, Rounding::minMag, 13);
}  // namespace accumulation

namespace detail {

/// One block FMA: acc + sum of n exact products, per the block model. Inputs in `in`.
HALFWAY_INLINE uint32_t block_fma_step(const AccumulationModel& m, const Format& in,
                                       const Format& acc, const uint32_t* a, const uint32_t* b,
                                       int n, uint32_t c, Env& env) {
  // Terms: the accumulator and the exact products, unpacked.
  Unpacked t[65];
  int32_t align[65];  // each term's alignment exponent
  int count = 0;
  const int32_t in_emin = in.emin(), acc_emin = acc.emin();
  // NaN operands propagate as a quiet NaN (invalid only for a signalling one); inf·0 and
  // inf − inf are invalid.
  bool any_nan = false, invalid = false, pos_inf = false, neg_inf = false;
  const Unpacked uc = unpack(acc, c);
  if (is_nan(uc.cls)) any_nan = true;
  if (uc.cls == Class::snan) invalid = true;
  if (uc.cls == Class::inf) (uc.sign ? neg_inf : pos_inf) = true;
  if (uc.cls == Class::finite) {
    align[count] = m.unnormalized_alignment && uc.exp < acc_emin ? acc_emin : uc.exp;
    t[count++] = uc;
  }
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
    align[count] = m.unnormalized_alignment
                       ? (x.exp < in_emin ? in_emin : x.exp) + (y.exp < in_emin ? in_emin : y.exp)
                       : p.exp;
    t[count++] = p;
  }
  if (invalid || (pos_inf && neg_inf && !any_nan)) {
    const uint32_t r = invalid_nan(acc, env);
    return m.nan_result ? m.nan_result : r;
  }
  if (any_nan) return m.nan_result ? m.nan_result : acc.default_nan();
  if (pos_inf || neg_inf) return pack_inf(acc, neg_inf, env);
  if (count == 0) return pack_zero(acc, all_zero && zero_sign_all_neg);
  int32_t emax = align[0];
  for (int i = 1; i < count; ++i) emax = align[i] > emax ? align[i] : emax;
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
  if (sum == 0) return pack_zero(acc, m.rounding == Rounding::min);
  const bool sign = sum < 0;
  const unsigned __int128 mag = sign ? (unsigned __int128)(-sum) : (unsigned __int128)sum;
  const int lz = clz128(mag);
  const unsigned __int128 norm = mag << lz;
  const uint64_t hi = static_cast<uint64_t>(norm >> 64);
  const bool sticky = static_cast<uint64_t>(norm) != 0;
  Env e = env;
  e.rounding = m.rounding;
  if (m.ftz) e.tininess = m.tininess;
  // The leading bit of the sum sits at bit (127 - lz); bit 0 has weight 2^(emax - kept_bits).
  const int32_t lead = emax - m.kept_bits + (127 - lz);
  uint32_t r;
  if (m.step_frac_bits > 0 && m.step_frac_bits < acc.frac_bits) {
    // Rounded into the narrower output (same exponent range), which acc holds exactly.
    Format step = acc;
    step.frac_bits = m.step_frac_bits;
    Env x;
    r = convert(step, round_pack(step, e, sign, lead, hi | sticky), acc, x);
  } else {
    r = round_pack(acc, e, sign, lead, hi | sticky);
  }
  env.flags |= e.flags;
  env.sr_counter = e.sr_counter;
  return r;
}

}  // namespace detail

namespace detail {

/// One step of a sequential_fma model: fma(a, b, c), except that with
/// `m.nan_accumulator_first` a NaN c wins over an invalid product.
HALFWAY_INLINE uint32_t fma_step(const AccumulationModel& m, const Format& acc, uint32_t a,
                                 uint32_t b, uint32_t c, Env& env) {
  if (m.nan_accumulator_first) {
    const Unpacked ua = unpack(acc, a), ub = unpack(acc, b), uc = unpack(acc, c);
    if (is_nan(uc.cls) && !is_nan(ua.cls) && !is_nan(ub.cls)) {
      const bool inf_times_zero = (ua.cls == Class::inf && ub.cls == Class::zero) ||
                                  (ua.cls == Class::zero && ub.cls == Class::inf);
      if (inf_times_zero) env.flags |= flag::invalid;
      return propagate_nan(acc, uc, uc, env);
    }
  }
  return fma(acc, a, b, c, env);
}

/// One block of a split_fma model: c + the sum of `m.chains` fma chains over n products.
HALFWAY_INLINE uint32_t split_fma_step(const AccumulationModel& m, const Format& in,
                                       const Format& acc, bool same, const uint32_t* a,
                                       const uint32_t* b, int n, uint32_t c, Env& env) {
  const int chains = m.chains < 1 ? 1 : (m.chains > 8 ? 8 : m.chains);
  uint32_t part[8] = {};  // +0 in every IEEE-style format
  for (int i = 0; i < n; ++i) {
    const uint32_t ai = same ? a[i] : convert(in, a[i], acc, env);
    const uint32_t bi = same ? b[i] : convert(in, b[i], acc, env);
    part[i % chains] = fma_step(m, acc, ai, bi, part[i % chains], env);
  }
  uint32_t s = part[0];
  for (int j = 1; j < chains; ++j) s = add(acc, s, part[j], env);
  return add(acc, c, s, env);
}

/// dot() on operands already in visiting order; `in` and `acc` carry the model's DAZ/FTZ;
/// `same`: the caller's input format is the model's accumulator format (no conversion).
HALFWAY_INLINE uint32_t dot_in_order(const AccumulationModel& m, const Format& in,
                                     const Format& acc, bool same, const uint32_t* a,
                                     const uint32_t* b, int n, uint32_t c, Env& env) {
  if (m.kind == AccumulationModel::Kind::block_fma) {
    const int blk = m.block < 1 ? 1 : (m.block > 64 ? 64 : m.block);
    if (m.promote <= 0) {
      for (int i = 0; i < n; i += blk)
        c = block_fma_step(m, in, acc, a + i, b + i, (n - i < blk ? n - i : blk), c, env);
      return c;
    }
    // Promotion: each interval of whole blocks from +0, then added to the fp32 accumulator.
    const int interval = m.promote < blk ? blk : m.promote - m.promote % blk;
    Env rne = env;
    rne.rounding = Rounding::near_even;
    const Format f32{8, 23, 127, Specials::ieee, Overflow::infinity};
    uint32_t total = convert(acc, c, f32, rne);
    for (int i = 0; i < n; i += interval) {
      uint32_t part = 0;  // +0
      const int end = n - i < interval ? n : i + interval;
      for (int j = i; j < end; j += blk)
        part = block_fma_step(m, in, acc, a + j, b + j, (end - j < blk ? end - j : blk), part, env);
      total = add(f32, total, convert(acc, part, f32, rne), rne);
    }
    env.flags |= rne.flags;
    return convert(f32, total, acc, rne);
  }
  Env e = env;
  e.rounding = m.rounding;
  if (m.ftz) e.tininess = m.tininess;
  if (m.kind == AccumulationModel::Kind::split_fma) {
    const int blk = m.block < 1 ? 1 : m.block;
    for (int i = 0; i < n; i += blk)
      c = split_fma_step(m, in, acc, same, a + i, b + i, (n - i < blk ? n - i : blk), c, e);
    env.flags |= e.flags;
    env.sr_counter = e.sr_counter;
    return c;
  }
  // Operands already in the accumulator's format are used as they are: no conversion, so
  // no rounding (and no stochastic-rounding draw) is spent on them.
  for (int i = 0; i < n; ++i) {
    const uint32_t ai = same ? a[i] : convert(in, a[i], acc, e);
    const uint32_t bi = same ? b[i] : convert(in, b[i], acc, e);
    c = m.kind == AccumulationModel::Kind::sequential_fma ? fma_step(m, acc, ai, bi, c, e)
                                                         : add(acc, mul(acc, ai, bi, e), c, e);
  }
  env.flags |= e.flags;
  env.sr_counter = e.sr_counter;
  return c;
}

}  // namespace detail

/// Dot product c + Σ a_i·b_i of `n` encodings in format `in`, accumulated by model `m`; `c` and
/// the result are encodings of `m.acc`. Sequential models convert each operand into `m.acc`
/// first (a rounding step, unless `in` is `m.acc`), then multiply-add in the model's order.
HALFWAY_HD inline uint32_t dot(const AccumulationModel& m, const Format& in, const uint32_t* a,
                          const uint32_t* b, int n, uint32_t c, Env& env) {
  const bool same = in == m.acc;
  Format fin = in, facc = m.acc;
  fin.daz = fin.daz || m.daz;
  facc.daz = facc.daz || m.daz;
  facc.ftz = facc.ftz || m.ftz;
  if (m.period <= 1) return detail::dot_in_order(m, fin, facc, same, a, b, n, c, env);
  // Visit the operands group by group in the permuted order; a chunk holds whole groups and
  // whole blocks, so block boundaries fall where they would in the permuted sequence.
  const int period = m.period > 64 ? 64 : m.period;
  const int blk = m.kind == AccumulationModel::Kind::block_fma ? (m.block < 1 ? 1 : m.block) : 1;
  const int chunk = (blk > period && blk % period == 0 && blk <= 64) ? blk : period;
  uint32_t pa[64], pb[64];
  int i = 0;
  for (; i + chunk <= n; i += chunk) {
    for (int g = 0; g < chunk; g += period)
      for (int j = 0; j < period; ++j) {
        const int src = i + g + (m.order[j] < period ? m.order[j] : j);
        pa[g + j] = a[src];
        pb[g + j] = b[src];
      }
    c = detail::dot_in_order(m, fin, facc, same, pa, pb, chunk, c, env);
  }
  if (i < n) c = detail::dot_in_order(m, fin, facc, same, a + i, b + i, n - i, c, env);
  return c;
}

}  // namespace halfway
