// GEMMs under an AccumulationModel other than plain fp32 (gemm_model.cpp), internal to sim/.
#pragma once

#include <cstdint>

#include "halfway/accumulate.hpp"
#include "halfway/bulk.hpp"

namespace halfway::sim::detail {

/// C[m×n] = A·B (+ bias) under model `m`, operands prepared by the caller: encodings of `in`
/// (A row-major m×k, Bᵀ row-major n×k) and their decoded binary32 values (A m×k, B k×n), the
/// bias as encodings of `m.acc` (or null). C receives the accumulator's values as binary32.
struct GemmModel {
  AccumulationModel m;
  Format in;
  int64_t n, k;
  const uint32_t *eA, *eBt, *ebias;
  const float *A, *B;
  float* C;
  BulkOptions o;
};

/// `scalar`: lib's dot() per element (the definition). The vector paths run many output
/// elements side by side, each lane its own chain in the model's order, and give the same bits;
/// `generic` is their portable build, `avx2`/`avx512` the same code built for those CPUs.
enum class GemmModelPath : uint8_t { scalar, generic, avx2, avx512 };

/// Whether a vector path is proven identical to the scalar one for this model and input format
/// (see gemm_model.cpp for the conditions); where not, only `scalar` may be used.
bool gemm_model_vectorizable(const AccumulationModel& m, const Format& in, const BulkOptions& o);
/// The fastest vector path this CPU runs (detected once, at run time).
GemmModelPath gemm_model_best_vector_path();
const char* gemm_model_path_name(GemmModelPath p);
/// Rows [i0, i1) of C by `path` (a vector path only where gemm_model_vectorizable holds).
void gemm_model_rows(const GemmModel& g, int64_t i0, int64_t i1, GemmModelPath path);

}  // namespace halfway::sim::detail
