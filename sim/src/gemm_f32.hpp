// The fp32 sequential-FMA GEMM kernels (gemm_f32.cpp), internal to sim/.
#pragma once

#include <cstdint>

namespace halfway::sim::detail {

/// C[m×n] = A[m×k]·B[k×n] (+ bias[n]), row-major binary32.
struct GemmF32 {
  int64_t n, k;
  const float *A, *B, *bias;
  float* C;
};

enum class GemmF32Path : uint8_t { scalar, avx2, avx512 };
/// The fastest path this CPU runs (detected once, at run time).
GemmF32Path gemm_f32_best_path();
const char* gemm_f32_path_name(GemmF32Path p);
/// Rows [i0, i1) of C by `path`; every path gives the same bits.
void gemm_f32_rows(const GemmF32& g, int64_t i0, int64_t i1, GemmF32Path path);
/// dst (rows × cols, row-major) = the transpose of src (cols × rows): a GEMM operand stored
/// transposed, in the GEMM's layout (16 × 16 blocks in AVX-512 registers where the CPU has it,
/// in parts on up to `threads` threads).
void transpose_f32(const float* src, int64_t rows, int64_t cols, float* dst, int threads = 1);

}  // namespace halfway::sim::detail
