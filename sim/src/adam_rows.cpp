// Adam's element loop. The scalar loop is the definition (torch.optim.Adam's single-tensor
// path in fp32); the AVX-512 loop issues the same IEEE operations (fused where the scalar
// code calls fmaf, separate elsewhere: this file is built with -ffp-contract=off) in the same
// order, so every finite result is the same. NaN payloads could differ where the scalar
// code's commutative operands are swapped, so a vector with a NaN in any result is recomputed
// by the scalar loop.
#include "adam_rows.hpp"

#include "halfway/cpu.hpp"
#include "halfway/thread_pool.hpp"

#include <cmath>

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's headers initialise their "undefined" vectors from themselves (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define HALFWAY_X86_KERNELS 1
#endif

namespace halfway::sim::detail {

void adam_rows_scalar(const AdamScalars& s, const AdamArrays& a, size_t lo, size_t hi) {
  const bool grad_decay = !s.adamw && s.wd != 0;
  for (size_t i = lo; i < hi; ++i) {
    if (s.adamw) a.p[i] = a.p[i] * s.decay;                    // param.mul_(1 - lr·wd)
    float gi = a.g[i];
    if (grad_decay) gi = std::fmaf(a.p[i], s.wd, gi);          // grad.add(param, alpha=wd)
    a.m[i] = std::fmaf(gi, s.c1, a.m[i] * s.b1);               // mul_(β1).add_(g, alpha=1-β1)
    a.v[i] = a.v[i] * s.b2 + (s.c2 * gi) * gi;                 // mul_(β2).addcmul_(g, g, 1-β2)
    const float denom = std::sqrt(a.v[i]) / s.bc2_sqrt + s.eps;
    const float term = (s.step_size_neg * a.m[i]) / denom;
    if (s.kahan) a.du[i] = s.adamw ? (a.p[i] - a.old[i]) + term : term;
    a.p[i] = a.p[i] + term;                                    // addcdiv_(m, denom, -step_size)
    a.nonzero[i] = (s.step_size_neg != 0 && a.m[i] != 0) || (s.decays && a.old[i] != 0);
  }
}

namespace {

#ifdef HALFWAY_X86_KERNELS
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void adam_avx512(
    const AdamScalars& s, const AdamArrays& a, size_t lo, size_t hi) {
  const bool grad_decay = !s.adamw && s.wd != 0;
  const __m512 decay = _mm512_set1_ps(s.decay), wd = _mm512_set1_ps(s.wd),
               b1 = _mm512_set1_ps(s.b1), c1 = _mm512_set1_ps(s.c1), b2 = _mm512_set1_ps(s.b2),
               c2 = _mm512_set1_ps(s.c2), bc2 = _mm512_set1_ps(s.bc2_sqrt),
               eps = _mm512_set1_ps(s.eps), step = _mm512_set1_ps(s.step_size_neg),
               zero = _mm512_setzero_ps();
  const __mmask16 step_nonzero = s.step_size_neg != 0 ? 0xffff : 0;
  size_t i = lo;
  for (; i + 16 <= hi; i += 16) {
    __m512 p = _mm512_loadu_ps(a.p + i), g = _mm512_loadu_ps(a.g + i);
    const __m512 old = _mm512_loadu_ps(a.old + i);
    if (s.adamw) p = _mm512_mul_ps(p, decay);
    if (grad_decay) g = _mm512_fmadd_ps(p, wd, g);
    const __m512 m = _mm512_fmadd_ps(g, c1, _mm512_mul_ps(_mm512_loadu_ps(a.m + i), b1));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(a.v + i), b2),
                                   _mm512_mul_ps(_mm512_mul_ps(c2, g), g));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bc2), eps);
    const __m512 term = _mm512_div_ps(_mm512_mul_ps(step, m), denom);
    const __m512 du = s.adamw ? _mm512_add_ps(_mm512_sub_ps(p, old), term) : term;
    const __m512 np = _mm512_add_ps(p, term);
    // Any NaN among the results: the scalar loop does these sixteen.
    const __mmask16 nan = _mm512_cmp_ps_mask(m, v, _CMP_UNORD_Q) |
                          _mm512_cmp_ps_mask(np, du, _CMP_UNORD_Q);
    if (nan) {
      adam_rows_scalar(s, a, i, i + 16);
      continue;
    }
    _mm512_storeu_ps(a.m + i, m);
    _mm512_storeu_ps(a.v + i, v);
    _mm512_storeu_ps(a.p + i, np);
    if (s.kahan) _mm512_storeu_ps(a.du + i, du);
    __mmask16 nz = step_nonzero & _mm512_cmp_ps_mask(m, zero, _CMP_NEQ_UQ);
    if (s.decays) nz |= _mm512_cmp_ps_mask(old, zero, _CMP_NEQ_UQ);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a.nonzero + i),
                     _mm_maskz_set1_epi8(nz, 1));
  }
  adam_rows_scalar(s, a, i, hi);
}
#endif

}  // namespace

void adam_rows(const AdamScalars& s, const AdamArrays& a, int threads) {
#ifdef HALFWAY_X86_KERNELS
  const bool avx512 = cpu::target() == cpu::Target::avx512;
#endif
  parallel_for(threads, a.n, size_t(1) << 14, [&](size_t lo, size_t hi) {
#ifdef HALFWAY_X86_KERNELS
    if (avx512) return adam_avx512(s, a, lo, hi);
#endif
    adam_rows_scalar(s, a, lo, hi);
  });
}

}  // namespace halfway::sim::detail
