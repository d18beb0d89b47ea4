// The exact-erf GELU on fp32 inputs, eight at a time (gelu_simd.cpp), internal to sim/.
#pragma once

#include <cstddef>

namespace halfway::sim::detail {

/// The forward, x·Φ(x) as ops.cpp computes it in binary64 with glibc's erf, rounded to fp32.
double gelu_erf(double x);
/// Its derivative, Φ(x) + x·φ(x), as ops.cpp computes it in binary64 with glibc's erf and exp.
double gelu_erf_derivative(double x);

/// out[i] = fl32(gelu_erf(x[i])) for i < n, bit for bit. With AVX-512 each value comes from
/// the table polynomials wherever they decide the rounding (almost everywhere); the rest call
/// gelu_erf. Without AVX-512, all of them do. Returns how many called gelu_erf.
size_t gelu_erf_rows(const float* x, size_t n, float* out);
/// out[i] = fl32(g[i]·gelu_erf_derivative(x[i])) for i < n, bit for bit, the same way.
size_t gelu_erf_grad_rows(const float* g, const float* x, size_t n, float* out);

/// For the tests: the values the vector kernels take from the tables at x[i] (NaN where
/// |x[i]| ≥ 8 or x[i] is NaN): e[i] approximates erf(x[i]/√2) and d[i]
/// gelu_erf_derivative(x[i]). False, and nothing written, without AVX-512.
bool gelu_erf_table_values(const float* x, size_t n, double* e, double* d);
/// The margin: the kernels take a value from the table only where every E within this of
/// e[i] (and D within this of d[i]) rounds the same way.
inline constexpr double kGeluTableMargin = 0x1p-46;

}  // namespace halfway::sim::detail
