// The element loop of Adam and AdamW (optim.cpp), scalar and AVX-512, internal to sim/.
#pragma once

#include <cstddef>
#include <cstdint>

namespace halfway::sim::detail {

/// One step's fp32 scalars, as ATen's single-tensor float kernels receive them.
struct AdamScalars {
  float decay;          ///< AdamW: param.mul_(1 − lr·wd)
  float wd;             ///< Adam: grad.add(param, alpha = wd) where non-zero
  float b1, c1;         ///< β1, 1 − β1
  float b2, c2;         ///< β2, 1 − β2
  float bc2_sqrt, eps;  ///< √(1 − β2^t), ε
  float step_size_neg;  ///< −lr / (1 − β1^t)
  bool adamw, kahan, decays;
};

/// The arrays of one parameter (n elements): p is updated in place from old (its values
/// before the step), m and v are the moments, du (kahan only, else null) receives the fp32
/// increment, nonzero[i] whether the update is non-zero in exact arithmetic.
struct AdamArrays {
  size_t n;
  const float *g, *old;
  float *p, *m, *v, *du;
  uint8_t* nonzero;
};

/// Every element, in ATen's order of fp32 operations, in parts on up to `threads` threads.
/// With AVX-512, sixteen at a time with the same correctly rounded operations; a vector that
/// meets a NaN is redone by the scalar loop, so NaN payloads are the scalar code's too. Same
/// bits either way, and at any thread count (each element is computed on its own).
void adam_rows(const AdamScalars& s, const AdamArrays& a, int threads = 1);
/// The scalar loop alone (the tests' reference).
void adam_rows_scalar(const AdamScalars& s, const AdamArrays& a, size_t lo, size_t hi);

}  // namespace halfway::sim::detail
