/// \file accumulate.hpp
/// Accumulation models for matmul and linear. A model turns C = A·B (+ bias) over the inputs'
/// exact values into the values the op then rounds into its output dtype. More models (tensor
/// core block FMAs) plug in by deriving from `Accumulator`.
///
///     const Accumulator& acc = accumulator_by_name("in-format");   // fp16 HFMA chain
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "halfway/bulk.hpp"
#include "halfway/sim/dtype.hpp"

namespace halfway::sim {

/// Memory layout of the operands as a framework sees them: C = A·B ("nn"), A·Bᵀ with B a
/// transposed view ("nt": a linear layer's forward), Aᵀ·B ("tn": a weight gradient). The
/// results of most models do not depend on it; PyTorch's CPU kernels do.
enum class Layout : uint8_t { nn, nt, tn };

class Accumulator {
 public:
  virtual ~Accumulator() = default;
  virtual std::string name() const = 0;
  /// C[m×n] = A[m×k]·B[k×n] (+ bias[n] when not null), all row-major binary32 values. Each
  /// output element is accumulated in order kk = 0..k-1, so results never depend on `threads`.
  /// `out` is the dtype the op rounds C into afterwards.
  virtual void gemm(int64_t m, int64_t n, int64_t k, const float* A, const float* B,
                    const float* bias, float* C, const DType& out, const BulkOptions& o,
                    int threads, Layout layout) const = 0;
};

/// acc ← fl32(acc + a·b) with one rounding (fused multiply-add), then fl32(acc + bias): what
/// cuBLAS/oneDNN do with an fp32 compute type, in a defined (sequential) order.
const Accumulator& fp32_sequential();
/// The vector path fp32_sequential() runs on this CPU: "avx512", "avx2" (with FMA) or
/// "scalar" (a register-blocked micro-kernel on the first two; all give the same bits).
const char* fp32_gemm_path();
/// acc ← fl_F(acc + a·b) with one rounding in the output format F (inputs converted to F),
/// then fl_F(acc + bias): fp16 accumulation as with CUBLAS_COMPUTE_16F / HFMA chains.
const Accumulator& in_format();
/// acc ← fl_F(acc + fl_F(a·b)): every product and every sum rounded in the output format F,
/// as arithmetic written with c10::BFloat16 / __half scalars does.
const Accumulator& in_format_unfused();
/// PyTorch 1.13's CPU matmul for bf16/fp16 on a machine with oneDNN bf16 support (AVX-512):
/// products with m·n·k > 4096 go to oneDNN (fp32 accumulation, one rounding); smaller ones to
/// ATen's own gemm, which accumulates in the low format with rounded products, except when
/// the second operand is a transposed view (a linear layer's forward), where it accumulates
/// in fp32. Measured against torch 1.13.1 on this project's machines.
const Accumulator& torch_cpu();
/// "fp32" (also "fp32-sequential"), "in-format", "in-format-unfused" or "torch-cpu"; throws
/// InputError otherwise.
const Accumulator& accumulator_by_name(std::string_view name);

/// binary64 reference: sequential fused multiply-adds in double (used for fp64 tensors).
void gemm_f64(int64_t m, int64_t n, int64_t k, const double* A, const double* B,
              const double* bias, double* C);

/// Run f(i0, i1) over [0, m) split into contiguous row blocks on up to `threads` threads
/// (only when `work` is large enough to pay for them).
void parallel_rows(int64_t m, int threads, int64_t work, void (*f)(int64_t, int64_t, void*),
                   void* arg);

}  // namespace halfway::sim
