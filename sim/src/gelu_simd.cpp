// The exact-erf GELU on fp32 inputs without calling erf for almost every element, and with
// the same bits. The forward is y = fl32(fl64(0.5·x) · fl64(1 + E)), E = glibc's erf(x/√2);
// the gradient is fl32(g · D), D = glibc's binary64 Φ(x) + x·φ(x) (gelu_erf_derivative).
//
// For |x| < 8, piecewise degree-12 polynomials (gelu_erf_table.hpp) give e ≈ E and d ≈ D.
// The tests measure |e − E| and |d − D| on every fp32 input below 8 in magnitude, against
// glibc's own values on the machine: at most 2^-50 (test_sim_vector). Both chains above are
// monotone in E and in D (each step rounds a monotone function), so the kernel evaluates them
// at e ± 2^-46 and d ± 2^-46: where the two ends round to the same fp32 value, that is the
// value glibc's E or D gives, whatever its last bits. Elsewhere (|x| ≥ 8, NaN, and the rare
// value whose result lies within the margin of a rounding boundary) the element calls the
// scalar function. The margin is 16 times the tested bound, so the other libm variant
// glibc may pick on another CPU (an FMA or a non-FMA exp, each within an ulp) lies inside it.
#include "gelu_simd.hpp"

#include "gelu_erf_table.hpp"
#include "halfway/cpu.hpp"

#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's headers initialise their "undefined" vectors from themselves (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define HALFWAY_X86_KERNELS 1
#endif

namespace halfway::sim::detail {

namespace {
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
}  // namespace

double gelu_erf(double v) { return 0.5 * v * (1.0 + std::erf(v / kSqrt2)); }

double gelu_erf_derivative(double v) {
  return 0.5 * (1.0 + std::erf(v / kSqrt2)) + v * kInvSqrt2Pi * std::exp(-0.5 * v * v);
}

namespace {

constexpr int64_t kIntervalMask = 15;  // 16 intervals: lanes past the tables stay in range

size_t rows_scalar(const float* x, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(gelu_erf(double(x[i])));
  return n;
}
size_t grad_rows_scalar(const float* g, const float* x, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<float>(double(g[i]) * gelu_erf_derivative(double(x[i])));
  return n;
}

#ifdef HALFWAY_X86_KERNELS
#define HALFWAY_GELU_TARGET __attribute__((target("avx512f,avx512dq,avx512vl")))

/// Coefficient j of both tables for all 16 intervals, two registers each.
struct Coefficients {
  __m512d e[kGeluTableDegree + 1][2], d[kGeluTableDegree + 1][2];
};

HALFWAY_GELU_TARGET Coefficients load_coefficients() {
  Coefficients c;
  for (int j = 0; j <= kGeluTableDegree; ++j)
    for (int h = 0; h < 2; ++h) {
      c.e[j][h] = _mm512_loadu_pd(&kGeluErfTable[j][8 * h]);
      c.d[j][h] = _mm512_loadu_pd(&kGeluDerivativeTable[j][8 * h]);
    }
  return c;
}

/// Horner's rule on interval idx's polynomial at t; each lane picks its interval's coefficient
/// from the two registers holding it.
HALFWAY_GELU_TARGET inline __m512d horner(const __m512d (&c)[kGeluTableDegree + 1][2],
                                          __m512i idx, __m512d t) {
  __m512d p = _mm512_permutex2var_pd(c[kGeluTableDegree][0], idx, c[kGeluTableDegree][1]);
  for (int j = kGeluTableDegree - 1; j >= 0; --j)
    p = _mm512_fmadd_pd(p, t, _mm512_permutex2var_pd(c[j][0], idx, c[j][1]));
  return p;
}

/// Eight inputs' table lanes: which of them the tables cover (|x| < 8), their interval, and t.
struct Lanes {
  __mmask8 covered;
  __m512i idx;
  __m512d t;
};

HALFWAY_GELU_TARGET inline Lanes lanes(__m512d v) {
  const __m512d a = _mm512_abs_pd(v);
  const __mmask8 covered = _mm512_cmp_pd_mask(a, _mm512_set1_pd(8.0), _CMP_LT_OQ);
  const __m512d u = _mm512_mul_pd(a, _mm512_set1_pd(2.0));
  const __m512d fl = _mm512_roundscale_pd(u, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512i idx =
      _mm512_and_si512(_mm512_cvttpd_epi64(fl), _mm512_set1_epi64(kIntervalMask));
  const __m512d frac = _mm512_sub_pd(u, fl);
  const __m512d t = _mm512_sub_pd(_mm512_add_pd(frac, frac), _mm512_set1_pd(1.0));
  return {covered, idx, t};
}

/// e ≈ erf(x/√2): odd.
HALFWAY_GELU_TARGET inline __m512d erf_value(const Coefficients& c, __m512d v, const Lanes& l) {
  const __m512d p = horner(c.e, l.idx, l.t);
  const __m512d sign = _mm512_and_pd(v, _mm512_set1_pd(-0.0));
  return _mm512_or_pd(p, sign);
}

/// d ≈ Φ(x) + x·φ(x): D(−x) = 1 − D(x).
HALFWAY_GELU_TARGET inline __m512d derivative_value(const Coefficients& c, __m512d v,
                                                    const Lanes& l) {
  const __m512d p = horner(c.d, l.idx, l.t);
  const __mmask8 negative = _mm512_cmp_pd_mask(v, _mm512_setzero_pd(), _CMP_LT_OQ);
  return _mm512_mask_sub_pd(p, negative, _mm512_set1_pd(1.0), p);
}

/// The lanes where both ends of the margin round to the same fp32 value.
HALFWAY_GELU_TARGET inline __mmask8 same(__m256 lo, __m256 hi) {
  return _mm256_cmpeq_epi32_mask(_mm256_castps_si256(lo), _mm256_castps_si256(hi));
}

HALFWAY_GELU_TARGET size_t rows_avx512(const float* x, size_t n, float* out) {
  const Coefficients c = load_coefficients();
  const __m512d margin = _mm512_set1_pd(kGeluTableMargin), one = _mm512_set1_pd(1.0),
                half = _mm512_set1_pd(0.5);
  size_t i = 0, called = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    const Lanes l = lanes(v);
    const __m512d e = erf_value(c, v, l), h = _mm512_mul_pd(half, v);
    const __m256 lo = _mm512_cvtpd_ps(
        _mm512_mul_pd(h, _mm512_add_pd(one, _mm512_sub_pd(e, margin))));
    const __m256 hi = _mm512_cvtpd_ps(
        _mm512_mul_pd(h, _mm512_add_pd(one, _mm512_add_pd(e, margin))));
    const __mmask8 ok = l.covered & same(lo, hi);
    _mm256_storeu_ps(out + i, lo);
    called += size_t(__builtin_popcount(~unsigned(ok) & 0xffu));
    for (unsigned rest = ~unsigned(ok) & 0xffu; rest; rest &= rest - 1) {
      const size_t k = i + size_t(__builtin_ctz(rest));
      out[k] = static_cast<float>(gelu_erf(double(x[k])));
    }
  }
  return called + rows_scalar(x + i, n - i, out + i);
}

HALFWAY_GELU_TARGET size_t grad_rows_avx512(const float* g, const float* x, size_t n, float* out) {
  const Coefficients c = load_coefficients();
  const __m512d margin = _mm512_set1_pd(kGeluTableMargin);
  size_t i = 0, called = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    const __m512d gd = _mm512_cvtps_pd(_mm256_loadu_ps(g + i));
    const Lanes l = lanes(v);
    const __m512d d = derivative_value(c, v, l);
    const __m256 lo = _mm512_cvtpd_ps(_mm512_mul_pd(gd, _mm512_sub_pd(d, margin)));
    const __m256 hi = _mm512_cvtpd_ps(_mm512_mul_pd(gd, _mm512_add_pd(d, margin)));
    const __mmask8 ok = l.covered & same(lo, hi);
    _mm256_storeu_ps(out + i, lo);
    called += size_t(__builtin_popcount(~unsigned(ok) & 0xffu));
    for (unsigned rest = ~unsigned(ok) & 0xffu; rest; rest &= rest - 1) {
      const size_t k = i + size_t(__builtin_ctz(rest));
      out[k] = static_cast<float>(double(g[k]) * gelu_erf_derivative(double(x[k])));
    }
  }
  return called + grad_rows_scalar(g + i, x + i, n - i, out + i);
}

HALFWAY_GELU_TARGET void table_values_avx512(const float* x, size_t n, double* e, double* d) {
  const Coefficients c = load_coefficients();
  const __m512d nan = _mm512_set1_pd(std::numeric_limits<double>::quiet_NaN());
  float in[8];
  for (size_t i = 0; i < n; i += 8) {
    const size_t m = n - i < 8 ? n - i : 8;
    for (size_t k = 0; k < 8; ++k) in[k] = k < m ? x[i + k] : 0.0f;
    const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(in));
    const Lanes l = lanes(v);
    double ev[8], dv[8];
    _mm512_storeu_pd(ev, _mm512_mask_blend_pd(l.covered, nan, erf_value(c, v, l)));
    _mm512_storeu_pd(dv, _mm512_mask_blend_pd(l.covered, nan, derivative_value(c, v, l)));
    for (size_t k = 0; k < m; ++k) e[i + k] = ev[k], d[i + k] = dv[k];
  }
}

bool has_avx512() { return cpu::target() == cpu::Target::avx512; }
#endif  // HALFWAY_X86_KERNELS

}  // namespace

size_t gelu_erf_rows(const float* x, size_t n, float* out) {
#ifdef HALFWAY_X86_KERNELS
  if (has_avx512()) return rows_avx512(x, n, out);
#endif
  return rows_scalar(x, n, out);
}

size_t gelu_erf_grad_rows(const float* g, const float* x, size_t n, float* out) {
#ifdef HALFWAY_X86_KERNELS
  if (has_avx512()) return grad_rows_avx512(g, x, n, out);
#endif
  return grad_rows_scalar(g, x, n, out);
}

bool gelu_erf_table_values(const float* x, size_t n, double* e, double* d) {
#ifdef HALFWAY_X86_KERNELS
  if (has_avx512()) {
    table_values_avx512(x, n, e, d);
    return true;
  }
#endif
  (void)x, (void)n, (void)e, (void)d;
  return false;
}

}  // namespace halfway::sim::detail
