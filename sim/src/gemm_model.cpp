// GEMMs under the in-format and block-FMA accumulation models. The scalar path is the
// definition: lib's dot() per output element from +0, then the bias added in the accumulator
// format. The vector paths keep every element's order and run a strip of up to kStrip output
// columns of one row side by side, each lane its own chain, with exact binary32/binary64
// arithmetic and lib's bulk rounding kernel (quantize_f32), so they give the same bits.
//
// In-format (sequential_fma: c = F(a·b + c); sequential: c = F(F(a·b) + c)), F of at most 11
// fraction bits whose values are binary32 values. a·b of two such values has at most 24
// significant bits, so it is exact in binary32 unless it leaves binary32's normal range (then
// the lane is handed to the scalar path). p + c is formed exactly as s + err (TwoSum, no
// overflow), and s, err give the exact sum rounded to odd at 24 bits; rounding that into F
// (at most 12 bits, per the step's direction) equals rounding the exact sum directly, because
// round-to-odd with at least two extra bits is innocuous for every rounding direction (Boldo &
// Melquiond 2008). An exact zero sum gets IEEE's sign from binary32's round-to-nearest-even
// addition, which is the right sign only under near_even: in other directions such lanes go to
// the scalar path.
//
// Block FMA: every term of a block (the accumulator and the exact products, exact in binary64)
// is scaled by 2^(kept_bits − emax) and truncated (or floored) to an integer, exactly; the at
// most 65 integers of at most kept_bits + 1 bits sum exactly in binary64 (kept_bits ≤ 44). The
// sum times 2^(emax − kept_bits) is the exact block result; it is rounded into an fp32
// accumulator by integer arithmetic on its binary64 bits, or rounded to odd at 24 bits and
// then into another accumulator format by quantize_f32. The zero signs follow lib's rule.
//
// A lane leaves the vector path for the scalar one (lib's dot() over the rest of its chain,
// from the same accumulator) at the step or block where its inputs or its accumulator are not
// finite, where a product is not exact in binary32 (in-format), where a result would not be
// finite or lies outside binary32's normal range (block FMA to fp32), and in the zero-sum case
// above. NaN, infinity and those rare ranges therefore cost a scalar chain, per element.
#include "gemm_model.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "halfway/softfloat.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define HALFWAY_X86_KERNELS 1
#endif

namespace halfway::sim::detail {

namespace {

using Kind = AccumulationModel::Kind;
constexpr int64_t kStrip = 512;

// ---- the definition ----------------------------------------------------------------------

/// The epilogue: + bias in the accumulator format (round to nearest even after a block model),
/// then the accumulator's value as binary32.
float finish(const GemmModel& g, int64_t j, uint32_t acc, Env& env) {
  if (g.ebias) {
    env.rounding = g.m.kind == Kind::block_fma ? Rounding::near_even : g.m.rounding;
    acc = halfway::add(g.m.acc, acc, g.ebias[j], env);
  }
  Env d;
  return to_f32(g.m.acc, acc, d);
}

/// Element (i, j) by lib's dot over steps [k0, k) from the accumulator encoding `c`, then the
/// epilogue. Stochastic rounding: one stream index per rounding, fixed by (i, j, kk).
float element(const GemmModel& g, int64_t i, int64_t j, int64_t k0, uint32_t c) {
  Env env = element_env(g.o, uint64_t(i * g.n + j) * uint64_t(g.k + 1));
  c = dot(g.m, g.in, g.eA + i * g.k + k0, g.eBt + j * g.k + k0, int(g.k - k0), c, env);
  return finish(g, j, c, env);
}

void rows_scalar(const GemmModel& g, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = 0; j < g.n; ++j) g.C[i * g.n + j] = element(g, i, j, 0, 0);
}

// ---- lane arithmetic ---------------------------------------------------------------------

HALFWAY_INLINE uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }
HALFWAY_INLINE uint64_t bits(double x) { return std::bit_cast<uint64_t>(x); }
HALFWAY_INLINE uint32_t finite(float x) { return (bits(x) & 0x7F800000u) != 0x7F800000u; }
HALFWAY_INLINE uint32_t is_zero(float x) { return (bits(x) & 0x7FFFFFFFu) == 0; }

/// p + c exactly (TwoSum; s = p + c rounded to nearest even), rounded to odd at 24 bits.
HALFWAY_INLINE float sum_to_odd(float p, float c, float& s) {
  s = p + c;
  const float bb = s - p, err = (p - (s - bb)) + (c - bb);
  const uint32_t sb = bits(s), inexact = err != 0.0f;
  // |exact| < |s| when err and s differ in sign: s one unit toward zero, then the odd bit.
  const uint32_t toward_zero = inexact & ((sb ^ bits(err)) >> 31);
  return std::bit_cast<float>((sb - toward_zero) | inexact);
}

/// A product of two values of 12 significant bits or less is exact in binary32 when it is a
/// normal number or an operand is zero (every step checks that it is finite).
HALFWAY_INLINE uint32_t product_exact(float a, float b, float x) {
  return is_zero(a) | is_zero(b) | ((bits(x) & 0x7FFFFFFFu) >= 0x00800000u);
}

/// Per-thread state of one strip of output columns.
struct Strip {
  std::vector<float> c, cn, t;
  std::vector<uint32_t> bad, done, negz;
  std::vector<uint64_t> ef;
  std::vector<double> sum;
  explicit Strip(int64_t w)
      : c(size_t(w)), cn(size_t(w)), t(size_t(w)), bad(size_t(w)), done(size_t(w)),
        negz(size_t(w)), ef(size_t(w)), sum(size_t(w)) {}
};

struct Lanes {
  const GemmModel& g;
  int64_t i, j0, w;
  Strip& s;

  /// Lanes flagged in s.bad and not yet done continue on the scalar path from step kk.
  void hand_over(int64_t kk) {
    for (int64_t j = 0; j < w; ++j)
      if (s.bad[size_t(j)] && !s.done[size_t(j)]) {
        Env e;
        const uint32_t c = from_f32(g.m.acc, s.c[size_t(j)], e);  // finite: exact
        g.C[i * g.n + j0 + j] = element(g, i, j0 + j, kk, c);
        s.done[size_t(j)] = 1;
      }
  }

  /// s.cn → s.c, after handing over (from step kk) the lanes whose new value is not finite.
  void commit(int64_t kk) {
    uint32_t any = 0;
    for (int64_t j = 0; j < w; ++j) {
      s.bad[size_t(j)] = !finite(s.cn[size_t(j)]) & !s.done[size_t(j)];
      any |= s.bad[size_t(j)];
    }
    if (any) hand_over(kk);
    std::swap(s.c, s.cn);
  }

  /// Flags from the last lane loop: hand over the flagged lanes from step kk.
  void check(int64_t kk) {
    uint32_t any = 0;
    for (int64_t j = 0; j < w; ++j) any |= s.bad[size_t(j)] & !s.done[size_t(j)];
    if (any) hand_over(kk);
  }

  void quantize(const Format& f, const float* in, float* out) const {
    BulkOptions o;
    o.rounding = g.m.rounding;
    quantize_f32(f, in, out, size_t(w), o);
  }

  /// The accumulators of the lanes still on the vector path, epilogue included.
  void store() {
    for (int64_t j = 0; j < w; ++j) {
      if (s.done[size_t(j)]) continue;
      float& out = g.C[i * g.n + j0 + j];
      if (!g.ebias) {
        out = s.c[size_t(j)];
        continue;
      }
      Env env = element_env(g.o, uint64_t(i * g.n + j0 + j) * uint64_t(g.k + 1));
      Env e;
      out = finish(g, j0 + j, from_f32(g.m.acc, s.c[size_t(j)], e), env);
    }
  }
};

// ---- in-format ---------------------------------------------------------------------------

/// One step kk of every lane: c = F(a·b + c) (fused) or F(F(a·b) + c).
HALFWAY_INLINE void in_format_step(Lanes& L, int64_t kk, bool fused) {
  Strip& s = L.s;
  const int64_t w = L.w;
  const float a = L.g.A[L.i * L.g.k + kk];
  const float* b = L.g.B + kk * L.g.n + L.j0;
  const uint32_t a_ok = finite(a), nonzero_sum_needed = L.g.m.rounding != Rounding::near_even;
  float* c = s.c.data();
  float* t = s.t.data();
  uint32_t* bad = s.bad.data();
  if (fused) {
    for (int64_t j = 0; j < w; ++j) {
      const float x = a * b[j];
      float sum;
      t[j] = sum_to_odd(x, c[j], sum);
      const uint32_t ok = a_ok & finite(b[j]) & finite(c[j]) & finite(sum) &
                          product_exact(a, b[j], x) & ~(nonzero_sum_needed & is_zero(sum));
      bad[j] = ok ^ 1u;
    }
  } else {
    for (int64_t j = 0; j < w; ++j) {
      const float x = a * b[j];
      t[j] = x;
      bad[j] = (a_ok & finite(b[j]) & finite(c[j]) & finite(x) & product_exact(a, b[j], x)) ^ 1u;
    }
    L.quantize(L.g.m.acc, t, t);  // the product rounded into F
    for (int64_t j = 0; j < w; ++j) {
      const float p = t[j];
      float sum;
      t[j] = sum_to_odd(p, c[j], sum);
      const uint32_t ok = finite(p) & finite(sum) & ~(nonzero_sum_needed & is_zero(sum));
      bad[j] |= ok ^ 1u;
    }
  }
  L.check(kk);
  L.quantize(L.g.m.acc, t, s.cn.data());
  L.commit(kk);
}

// ---- block FMA ---------------------------------------------------------------------------

/// Binary64 exponent field of a nonzero finite term (0 for a zero; never subnormal here).
HALFWAY_INLINE uint64_t exp_field(double x) { return (bits(x) >> 52) & 0x7FF; }
/// The exponent field of a lane's largest term; an all-zero lane gets 2^0 (its sum is zero).
HALFWAY_INLINE int64_t field_or_one(uint64_t ef) { return ef == 0 ? 1023 : int64_t(ef); }
HALFWAY_INLINE double pow2(int64_t biased) { return std::bit_cast<double>(uint64_t(biased) << 52); }

/// One block [k0, k0 + nb) of every lane.
template <bool Floor>
HALFWAY_INLINE void block_step(Lanes& L, int64_t k0, int64_t nb) {
  const GemmModel& g = L.g;
  Strip& s = L.s;
  const int64_t w = L.w, kept = g.m.kept_bits;
  float* c = s.c.data();
  uint32_t *bad = s.bad.data(), *negz = s.negz.data();
  uint64_t* ef = s.ef.data();
  double* sum = s.sum.data();
  // The largest exponent among the terms, whether every term is −0, and finiteness.
  for (int64_t j = 0; j < w; ++j) {
    const double cd = c[j];
    ef[j] = exp_field(cd);
    negz[j] = bits(cd) == 0x8000000000000000u;
    bad[j] = finite(c[j]) ^ 1u;
  }
  for (int64_t kk = k0; kk < k0 + nb; ++kk) {
    const float a = g.A[L.i * g.k + kk];
    const float* b = g.B + kk * g.n + L.j0;
    const double ad = a;
    const uint32_t a_bad = finite(a) ^ 1u;
    for (int64_t j = 0; j < w; ++j) {
      const double t = ad * double(b[j]);
      ef[j] = std::max(ef[j], exp_field(t));
      negz[j] &= bits(t) == 0x8000000000000000u;
      bad[j] |= a_bad | (finite(b[j]) ^ 1u);
    }
  }
  L.check(k0);
  // Every term on the grid 2^(emax − kept_bits), truncated (floored), summed exactly.
  for (int64_t j = 0; j < w; ++j) {
    const double scale = pow2(kept + 2046 - field_or_one(ef[j]));
    const double v = double(c[j]) * scale;
    sum[j] = 0.0 + (Floor ? std::floor(v) : std::trunc(v));
  }
  for (int64_t kk = k0; kk < k0 + nb; ++kk) {
    const double ad = g.A[L.i * g.k + kk];
    const float* b = g.B + kk * g.n + L.j0;
    for (int64_t j = 0; j < w; ++j) {
      const double scale = pow2(kept + 2046 - field_or_one(ef[j]));
      const double v = ad * double(b[j]) * scale;
      sum[j] += Floor ? std::floor(v) : std::trunc(v);
    }
  }
  // The exact block result, rounded into the accumulator.
  const Rounding r = g.m.rounding;
  const bool f32 = g.m.acc == accumulation::kF32;
  const uint64_t rne = r == Rounding::near_even, up = r == Rounding::max, down = r == Rounding::min;
  const uint32_t zero_sign = down ? 0x80000000u : 0u;
  float* out = f32 ? s.cn.data() : s.t.data();
  for (int64_t j = 0; j < w; ++j) {
    const double d = sum[j] * pow2(field_or_one(ef[j]) - kept);
    const uint64_t db = bits(d), sign = db >> 63;
    const int64_t e = int64_t((db >> 52) & 0x7FF) - 1023;
    const uint64_t mant = (db & ((uint64_t(1) << 52) - 1)) | (uint64_t(1) << 52);
    const uint64_t q = mant >> 29, rem = mant & ((uint64_t(1) << 29) - 1);
    const uint64_t half = uint64_t(1) << 28;
    uint64_t inc = 0;
    if (f32)
      inc = (rne & ((rem > half) | ((rem == half) & q))) | (up & (sign ^ 1) & (rem != 0)) |
            (down & sign & (rem != 0));
    else
      inc = 0;
    // Truncated (f32: rounded) to 24 bits; otherwise the sticky bit makes it round-to-odd.
    uint32_t rb = uint32_t(sign << 31) |
                  (uint32_t(((e + 127) << 23) + int64_t(q - (uint64_t(1) << 23)) + int64_t(inc)) |
                   uint32_t(!f32 & (rem != 0)));
    const uint32_t zero = sum[j] == 0.0;
    const uint32_t all_zero = ef[j] == 0;
    rb = all_zero ? (negz[j] ? 0x80000000u : 0u) : (zero ? zero_sign : rb);
    bad[j] = (zero ^ 1u) & ((e < -126) | (e > 127));
    out[j] = std::bit_cast<float>(rb);
  }
  L.check(k0);
  if (!f32) L.quantize(g.m.acc, s.t.data(), s.cn.data());
  L.commit(k0);
}

// ---- strips and paths --------------------------------------------------------------------

HALFWAY_INLINE void rows_vector_body(const GemmModel& g, int64_t i0, int64_t i1) {
  const int64_t width = std::min<int64_t>(g.n, kStrip);
  Strip s(width);
  const bool block = g.m.kind == Kind::block_fma;
  const int64_t blk = block ? std::clamp(g.m.block, 1, 64) : 1;
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j0 = 0; j0 < g.n; j0 += width) {
      Lanes L{g, i, j0, std::min(width, g.n - j0), s};
      std::fill(s.c.begin(), s.c.end(), 0.0f);
      std::fill(s.done.begin(), s.done.end(), 0u);
      if (!block) {
        const bool fused = g.m.kind == Kind::sequential_fma;
        for (int64_t kk = 0; kk < g.k; ++kk) in_format_step(L, kk, fused);
      } else {
        for (int64_t k0 = 0; k0 < g.k; k0 += blk) {
          const int64_t nb = std::min(blk, g.k - k0);
          if (g.m.floor_alignment) block_step<true>(L, k0, nb);
          else block_step<false>(L, k0, nb);
        }
      }
      L.store();
    }
}

void rows_generic(const GemmModel& g, int64_t i0, int64_t i1) { rows_vector_body(g, i0, i1); }

#ifdef HALFWAY_X86_KERNELS
__attribute__((target("avx2,fma"))) void rows_avx2(const GemmModel& g, int64_t i0, int64_t i1) {
  rows_vector_body(g, i0, i1);
}
__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw"))) void rows_avx512(
    const GemmModel& g, int64_t i0, int64_t i1) {
  rows_vector_body(g, i0, i1);
}
#endif

/// Every value of `f` is a binary32 value, −0 included, and f has a zero.
bool binary32_values(const Format& f) {
  const int emax = int(f.exp_field_max()) - f.bias - (f.specials == Specials::ieee ? 1 : 0);
  return f.is_signed && f.has_zero && f.specials != Specials::fnuz && !f.daz && !f.ftz &&
         f.frac_bits <= 23 && f.emin() - f.frac_bits >= -149 && emax <= 127;
}

}  // namespace

bool gemm_model_vectorizable(const AccumulationModel& m, const Format& in, const BulkOptions& o) {
  (void)o;
  if (m.period > 1 || m.daz || m.ftz || m.rounding == Rounding::stochastic) return false;
  if (!binary32_values(in) || !binary32_values(m.acc)) return false;
  if (m.kind == Kind::block_fma) {
    if (m.block < 1 || m.block > 64 || m.kept_bits < 0 || m.kept_bits > 44) return false;
    if (m.acc == accumulation::kF32)
      return m.rounding == Rounding::near_even || m.rounding == Rounding::minMag ||
             m.rounding == Rounding::min || m.rounding == Rounding::max;
    return m.acc.frac_bits <= 21;
  }
  return in == m.acc && m.acc.frac_bits <= 11 && !m.nan_accumulator_first;
}

GemmModelPath gemm_model_best_vector_path() {
#ifdef HALFWAY_X86_KERNELS
  static const GemmModelPath best =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw")
          ? GemmModelPath::avx512
          : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                 ? GemmModelPath::avx2
                 : GemmModelPath::generic);
  return best;
#else
  return GemmModelPath::generic;
#endif
}

const char* gemm_model_path_name(GemmModelPath p) {
  switch (p) {
    case GemmModelPath::avx512: return "avx512";
    case GemmModelPath::avx2: return "avx2";
    case GemmModelPath::generic: return "generic";
    default: return "scalar";
  }
}

void gemm_model_rows(const GemmModel& g, int64_t i0, int64_t i1, GemmModelPath path) {
  if (path == GemmModelPath::scalar || !gemm_model_vectorizable(g.m, g.in, g.o))
    return rows_scalar(g, i0, i1);
#ifdef HALFWAY_X86_KERNELS
  if (path == GemmModelPath::avx512) return rows_avx512(g, i0, i1);
  if (path == GemmModelPath::avx2) return rows_avx2(g, i0, i1);
#endif
  rows_generic(g, i0, i1);
}

}  // namespace halfway::sim::detail
