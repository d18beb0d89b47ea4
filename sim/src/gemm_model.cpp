// GEMMs under the in-format and block-FMA accumulation models. The scalar path is the
// definition: lib's dot() per output element from +0, then the bias added in the accumulator
// format. The vector paths keep every element's order and run a tile of up to 1024 output
// elements (up to 8 rows of up to 512 columns) side by side, each lane its own chain, with
// exact binary32/binary64 arithmetic and lib's bulk rounding kernel (quantize_f32), so they
// give the same bits.
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
// most 65 integers of at most kept_bits + 1 bits sum exactly in 64-bit integers, and with
// kept_bits ≤ 44 the sum (under 2^53) converts exactly back to binary64. The sum times
// 2^(emax − kept_bits) is the exact block result; it is rounded into an fp32
// accumulator by integer arithmetic on its binary64 bits, or rounded to odd at 24 bits and
// then into another accumulator format by quantize_f32. The zero signs follow lib's rule.
//
// A lane leaves the vector path for the scalar one (lib's dot() over the rest of its chain,
// from the same accumulator) at the step or block where its inputs or its accumulator are not
// finite (an accumulator that overflowed to ±inf is handed over as ±inf; a NaN from overflow,
// in formats whose overflow is NaN, at the step that made it), where a product is not exact in
// binary32 (in-format), where a block result lies outside binary32's normal range (block FMA),
// and in the zero-sum case above. NaN, infinity and those rare ranges therefore cost a scalar
// chain, per element.
#include "gemm_model.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "halfway/cpu.hpp"
#include "halfway/softfloat.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define HALFWAY_X86_KERNELS 1
#endif

namespace halfway::sim::detail {

namespace {

using Kind = AccumulationModel::Kind;
constexpr int64_t kStrip = 512, kLanes = 1024;

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

/// Per-thread state of a tile of output elements: `rows` rows × `w` columns, lane r·w + j.
struct Strip {
  std::vector<float> c, cn, t;
  std::vector<uint32_t> bad, done, negz;
  std::vector<uint64_t> ef;
  std::vector<int64_t> sum;
  explicit Strip(int64_t lanes)
      : c(size_t(lanes)), cn(size_t(lanes)), t(size_t(lanes)), bad(size_t(lanes)),
        done(size_t(lanes)), negz(size_t(lanes)), ef(size_t(lanes)), sum(size_t(lanes)) {}
};

/// The tile [i, i + rows) × [j0, j0 + w) of C.
struct Lanes {
  const GemmModel& g;
  int64_t i, rows, j0, w;
  Strip& s;

  int64_t count() const { return rows * w; }
  float& out(int64_t l) const { return g.C[(i + l / w) * g.n + j0 + l % w]; }

  /// Lanes flagged in s.bad (and not done) continue on the scalar path from step kk.
  void hand_over(int64_t kk) {
    for (int64_t l = 0; l < count(); ++l)
      if (s.bad[size_t(l)] && !s.done[size_t(l)]) {
        Env e;
        const uint32_t c = from_f32(g.m.acc, s.c[size_t(l)], e);  // finite or ±inf: exact
        out(l) = element(g, i + l / w, j0 + l % w, kk, c);
        s.done[size_t(l)] = 1;
      }
  }

  /// s.cn → s.c, after handing over (from step kk) the lanes whose new value is not finite.
  /// An accumulator format whose overflow is ±inf or saturation needs no scan: an infinite
  /// accumulator is the lane's exact state, which the next step hands over (or store() keeps).
  void commit(int64_t kk) {
    const Format& f = g.m.acc;
    const bool exact_overflow = f.overflow == Overflow::saturate ||
                                (f.overflow == Overflow::infinity && f.specials == Specials::ieee);
    if (exact_overflow) return std::swap(s.c, s.cn);
    uint32_t any = 0;
    for (int64_t l = 0; l < count(); ++l) {
      s.bad[size_t(l)] = (finite(s.cn[size_t(l)]) ^ 1u) & (s.done[size_t(l)] ^ 1u);
      any |= s.bad[size_t(l)];
    }
    if (any) hand_over(kk);
    std::swap(s.c, s.cn);
  }

  /// Hand over the lanes the last lane loop flagged (`any`: whether it flagged one) from kk.
  void check(uint32_t any, int64_t kk) {
    if (any) hand_over(kk);
  }

  void quantize(const Format& f, const float* in, float* o) const {
    BulkOptions opt;
    opt.rounding = g.m.rounding;
    quantize_f32(f, in, o, size_t(count()), opt);
  }

  /// The accumulators of the lanes still on the vector path, epilogue included.
  void store() {
    for (int64_t l = 0; l < count(); ++l) {
      if (s.done[size_t(l)]) continue;
      if (!g.ebias) {
        out(l) = s.c[size_t(l)];
        continue;
      }
      const int64_t i_l = i + l / w, j = j0 + l % w;
      Env env = element_env(g.o, uint64_t(i_l * g.n + j) * uint64_t(g.k + 1));
      Env e;
      out(l) = finish(g, j, from_f32(g.m.acc, s.c[size_t(l)], e), env);
    }
  }
};

// ---- in-format ---------------------------------------------------------------------------

/// One step kk of every lane: c = F(a·b + c) (fused) or F(F(a·b) + c).
template <bool fused>
HALFWAY_INLINE void in_format_step(Lanes& L, int64_t kk) {
  Strip& s = L.s;
  const GemmModel& g = L.g;
  const int64_t w = L.w;
  const float* b = g.B + kk * g.n + L.j0;
  const uint32_t nonzero_sum_needed = g.m.rounding != Rounding::near_even;
  uint32_t any = 0;
  for (int64_t r = 0; r < L.rows; ++r) {
    const float a = g.A[(L.i + r) * g.k + kk];
    const uint32_t a_ok = finite(a);
    float *c = s.c.data() + r * w, *t = s.t.data() + r * w;
    uint32_t *bad = s.bad.data() + r * w, *done = s.done.data() + r * w;
    for (int64_t j = 0; j < w; ++j) {
      const float x = a * b[j];
      uint32_t ok = a_ok & finite(b[j]) & finite(c[j]) & product_exact(a, b[j], x);
      if constexpr (fused) {
        float sum;
        t[j] = sum_to_odd(x, c[j], sum);
        ok &= finite(sum) & ~(nonzero_sum_needed & is_zero(sum));
      } else {
        t[j] = x;
        ok &= finite(x);
      }
      bad[j] = (ok ^ 1u) & (done[j] ^ 1u);
      any |= bad[j];
    }
  }
  if constexpr (!fused) {
    L.quantize(g.m.acc, s.t.data(), s.t.data());  // the products rounded into F
    float *c = s.c.data(), *t = s.t.data();
    uint32_t *bad = s.bad.data(), *done = s.done.data();
    for (int64_t l = 0; l < L.count(); ++l) {
      const float p = t[l];
      float sum;
      t[l] = sum_to_odd(p, c[l], sum);
      const uint32_t ok = finite(p) & finite(sum) & ~(nonzero_sum_needed & is_zero(sum));
      bad[l] |= (ok ^ 1u) & (done[l] ^ 1u);
      any |= bad[l];
    }
  }
  L.check(any, kk);
  L.quantize(g.m.acc, s.t.data(), s.cn.data());
  L.commit(kk);
}

// ---- block FMA ---------------------------------------------------------------------------

/// Binary64 exponent field of a nonzero finite term (0 for a zero; never subnormal here).
HALFWAY_INLINE uint64_t exp_field(double x) { return (bits(x) >> 52) & 0x7FF; }
/// The exponent field of a lane's largest term; an all-zero lane gets 2^0 (its sum is zero).
HALFWAY_INLINE int64_t field_or_one(uint64_t ef) { return ef == 0 ? 1023 : int64_t(ef); }
HALFWAY_INLINE double pow2(int64_t biased) { return std::bit_cast<double>(uint64_t(biased) << 52); }

/// The block's largest exponent per lane, whether every term is −0, and which lanes have a
/// term that is not finite (s.bad; returns whether any has).
HALFWAY_INLINE uint32_t block_scan(Lanes& L, int64_t k0, int64_t nb) {
  const GemmModel& g = L.g;
  Strip& s = L.s;
  const int64_t w = L.w;
  uint32_t any = 0;
  for (int64_t l = 0; l < L.count(); ++l) {
    const double cd = s.c[size_t(l)];
    s.ef[size_t(l)] = exp_field(cd);
    s.negz[size_t(l)] = bits(cd) == 0x8000000000000000u;
    s.bad[size_t(l)] = finite(s.c[size_t(l)]) ^ 1u;
  }
  for (int64_t kk = k0; kk < k0 + nb; ++kk) {
    const float* b = g.B + kk * g.n + L.j0;
    for (int64_t r = 0; r < L.rows; ++r) {
      const float a = g.A[(L.i + r) * g.k + kk];
      const double ad = a;
      const uint32_t a_bad = finite(a) ^ 1u;
      uint64_t* ef = s.ef.data() + r * w;
      uint32_t *negz = s.negz.data() + r * w, *bad = s.bad.data() + r * w;
      for (int64_t j = 0; j < w; ++j) {
        const double t = ad * double(b[j]);
        ef[j] = std::max(ef[j], exp_field(t));
        negz[j] &= bits(t) == 0x8000000000000000u;
        bad[j] |= a_bad | (finite(b[j]) ^ 1u);
      }
    }
  }
  for (int64_t l = 0; l < L.count(); ++l) any |= s.bad[size_t(l)] & (s.done[size_t(l)] ^ 1u);
  return any;
}

/// v truncated toward zero (Floor: toward −inf) to an integer. Lanes on the vector path have
/// |v| < 2^46; others (handed over, their values unused) get 0, so no conversion overflows.
template <bool Floor>
HALFWAY_INLINE int64_t to_integer(double v) {
  v = std::fabs(v) < 0x1p62 ? v : 0.0;
  const int64_t q = int64_t(v);
  return Floor ? q - int64_t(v < double(q)) : q;
}

/// Every term on the grid 2^(emax − kept_bits), truncated (floored), summed exactly.
template <bool Floor>
HALFWAY_INLINE void block_sum(Lanes& L, int64_t k0, int64_t nb) {
  const GemmModel& g = L.g;
  Strip& s = L.s;
  const int64_t w = L.w, kept = g.m.kept_bits;
  for (int64_t l = 0; l < L.count(); ++l) {
    const double v = double(s.c[size_t(l)]) * pow2(kept + 2046 - field_or_one(s.ef[size_t(l)]));
    s.sum[size_t(l)] = to_integer<Floor>(v);
  }
  for (int64_t kk = k0; kk < k0 + nb; ++kk) {
    const float* b = g.B + kk * g.n + L.j0;
    for (int64_t r = 0; r < L.rows; ++r) {
      const double ad = g.A[(L.i + r) * g.k + kk];
      const uint64_t* ef = s.ef.data() + r * w;
      int64_t* sum = s.sum.data() + r * w;
      for (int64_t j = 0; j < w; ++j) {
        const double v = ad * double(b[j]) * pow2(kept + 2046 - field_or_one(ef[j]));
        sum[j] += to_integer<Floor>(v);
      }
    }
  }
}

/// The exact block results rounded into the accumulator (an fp32 one: into s.cn; another:
/// rounded to odd at 24 bits into s.t); flags the lanes outside binary32's normal range.
HALFWAY_INLINE uint32_t block_round(Lanes& L) {
  const GemmModel& g = L.g;
  Strip& s = L.s;
  const int64_t kept = g.m.kept_bits;
  const Rounding r = g.m.rounding;
  const bool f32 = g.m.acc == accumulation::kF32;
  const uint64_t rne = r == Rounding::near_even, up = r == Rounding::max,
                 down = r == Rounding::min, jam = !f32;
  const uint32_t zero_sign = down ? 0x80000000u : 0u;
  float* out = f32 ? s.cn.data() : s.t.data();
  uint32_t any = 0;
  for (int64_t l = 0; l < L.count(); ++l) {
    const uint64_t ef = s.ef[size_t(l)];
    const double d = double(s.sum[size_t(l)]) * pow2(field_or_one(ef) - kept);
    const uint64_t db = bits(d), sign = db >> 63;
    const int64_t e = int64_t((db >> 52) & 0x7FF) - 1023;
    const uint64_t mant = (db & ((uint64_t(1) << 52) - 1)) | (uint64_t(1) << 52);
    const uint64_t q = mant >> 29, rem = mant & ((uint64_t(1) << 29) - 1);
    const uint64_t half = uint64_t(1) << 28, inexact = rem != 0;
    // To 24 bits per the rounding (fp32), or truncated with a sticky bit (round to odd).
    const uint64_t inc = (1 - jam) * ((rne & ((rem > half) | ((rem == half) & q))) |
                                      (up & (sign ^ 1) & inexact) | (down & sign & inexact));
    uint32_t rb = uint32_t(sign << 31) |
                  (uint32_t(((e + 127) << 23) + int64_t(q - (uint64_t(1) << 23)) + int64_t(inc)) |
                   uint32_t(jam & inexact));
    const uint32_t zero = s.sum[size_t(l)] == 0;
    rb = ef == 0 ? (s.negz[size_t(l)] ? 0x80000000u : 0u) : (zero ? zero_sign : rb);
    s.bad[size_t(l)] = (zero ^ 1u) & ((e < -126) | (e > 127)) & (s.done[size_t(l)] ^ 1u);
    any |= s.bad[size_t(l)];
    out[l] = std::bit_cast<float>(rb);
  }
  return any;
}

/// One block [k0, k0 + nb) of every lane.
template <bool Floor>
HALFWAY_INLINE void block_step(Lanes& L, int64_t k0, int64_t nb) {
  L.check(block_scan(L, k0, nb), k0);
  block_sum<Floor>(L, k0, nb);
  L.check(block_round(L), k0);
  if (!(L.g.m.acc == accumulation::kF32)) L.quantize(L.g.m.acc, L.s.t.data(), L.s.cn.data());
  L.commit(k0);
}

// ---- tiles and paths ---------------------------------------------------------------------

HALFWAY_INLINE void rows_vector_body(const GemmModel& g, int64_t i0, int64_t i1) {
  // Tiles of up to kLanes elements: whole rows of up to kStrip columns, as many rows as fit.
  const int64_t width = std::min<int64_t>(g.n, kStrip);
  const int64_t rows = std::clamp<int64_t>(kLanes / std::max<int64_t>(width, 1), 1, 8);
  Strip s(rows * width);
  const bool block = g.m.kind == Kind::block_fma;
  const int64_t blk = block ? std::clamp(g.m.block, 1, 64) : 1;
  for (int64_t i = i0; i < i1; i += rows)
    for (int64_t j0 = 0; j0 < g.n; j0 += width) {
      Lanes L{g, i, std::min(rows, i1 - i), j0, std::min(width, g.n - j0), s};
      std::fill(s.c.begin(), s.c.end(), 0.0f);
      std::fill(s.done.begin(), s.done.end(), 0u);
      if (!block) {
        if (g.m.kind == Kind::sequential_fma)
          for (int64_t kk = 0; kk < g.k; ++kk) in_format_step<true>(L, kk);
        else
          for (int64_t kk = 0; kk < g.k; ++kk) in_format_step<false>(L, kk);
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
  if (m.kind == Kind::split_fma) return false;
  // MMA-Sim's alignment, a narrower block output, promotion and a canonical NaN: lib's dot only.
  if (m.unnormalized_alignment || m.step_frac_bits || m.promote > 0 || m.nan_result) return false;
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
  switch (cpu::target()) {
    case cpu::Target::avx512: return GemmModelPath::avx512;
    case cpu::Target::avx2: return GemmModelPath::avx2;
    default: return GemmModelPath::generic;
  }
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
