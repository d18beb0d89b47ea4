/// \file accumulate.hpp
/// How the simulator accumulates matmul and linear: one description, lib's
/// `AccumulationModel` (halfway/accumulate.hpp), for every GEMM. A run names an accumulation
/// (`[precision] accumulation`); for each GEMM the name resolves into the model that GEMM uses,
/// which may depend on the output dtype and, for `torch-cpu`, on the GEMM's size and layout.
///
///     const Accumulation& acc = accumulator_by_name("a100");    // tensor-core block FMA
///     AccumulationModel m = acc.resolve(DType::low(formats::fp16), m, n, k, Layout::nn, o);
///     gemm(m, formats::fp16, m, n, k, A, B, bias, C, o, threads);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "halfway/accumulate.hpp"
#include "halfway/bulk.hpp"
#include "halfway/sim/dtype.hpp"

namespace halfway::sim {

/// Memory layout of the operands as a framework sees them: C = A·B ("nn"), A·Bᵀ with B a
/// transposed view ("nt": a linear layer's forward), Aᵀ·B ("tn": a weight gradient). The
/// results of most accumulations do not depend on it; PyTorch's CPU kernels do.
enum class Layout : uint8_t { nn, nt, tn };

/// A named accumulation of a run.
///  - `fp32` (also `fp32-sequential`): sequential fused multiply-adds into an fp32
///    accumulator, then + bias in fp32 (cuBLAS/oneDNN with an fp32 compute type, in order).
///  - `in-format`: the same chain in the output format F (inputs are values of F), bias added
///    in F: CUBLAS_COMPUTE_16F / HFMA chains.
///  - `in-format-unfused`: every product and every sum rounded in F (c10::BFloat16 / __half
///    scalar arithmetic).
///  - `torch-cpu`: PyTorch 1.13's CPU matmul for bf16/fp16 with oneDNN bf16 support:
///    m·n·k > 4096 goes to oneDNN (fp32), smaller ones to ATen's gemm (in-format-unfused),
///    except a transposed second operand (a linear layer's forward: fp32). Measured against
///    torch 1.13.1. torch 2.x accumulates the small GEMMs in fp32 instead (docs/sim.md).
///  - the tensor-core block-FMA presets of lib/ (`v100`, `a100`, `h100` with an fp32
///    accumulator, `h100-fp16` with an fp16 one, `h100-fp8` for fp8 inputs): the low-precision
///    operands' exact products summed in blocks, aligned and truncated as the model says, and
///    the bias added in the accumulator format. GEMMs whose operands are fp32 run `fp32`.
///  - the x86 CPU presets: `amx-bf16` (Intel AMX `tdpbf16ps`, measured from recorded tiles: per
///    32 products two fma chains from +0, then + C) and `avx512-dpbf16` (`vdpbf16ps`: fmas in
///    pairs, odd element first), both with DAZ/FTZ; the bias is added as for the block presets.
/// The sequential models round with the run's rounding direction; every model keeps each
/// output element's order, so no result depends on the thread count.
struct Accumulation {
  enum class Kind : uint8_t { fp32, in_format, in_format_unfused, torch_cpu, block };
  std::string name;
  Kind kind = Kind::fp32;
  AccumulationModel block{};  ///< Kind::block: the preset

  /// The model one GEMM with output dtype `out` (not fp64) uses.
  AccumulationModel resolve(const DType& out, int64_t m, int64_t n, int64_t k, Layout layout,
                            const BulkOptions& o) const;
};

/// The three GEMMs of a linear layer, as Transformer Engine names them.
enum class Fp8Gemm : uint8_t { fprop, dgrad, wgrad };

/// The model one of Transformer Engine's per-tensor fp8 GEMMs (the fp8-hybrid and fp8-current
/// recipes) accumulates by under the run's accumulation `acc`. Under a Hopper name (`h100`,
/// `h100-fp16`, `h100-fp8`: the `h100-fp8` block model; `mmasim-hopper*`: `mmasim-hopper-fp8`)
/// fprop runs the fast fp8 accumulator (TE's _2X_ACC_FPROP = False: the whole K in the
/// tensor core's accumulator) and dgrad/wgrad the split accumulator (use_split_accumulator:
/// promotion into fp32 every 128 products, DeepGEMM's interval; cuBLAS's own is not
/// documented, so that interval is a hypothesis). Under every other name (no fp8 tensor-core
/// model: `fp32`, the CPU and the pre-Hopper names) exact fp32 sequential accumulation.
AccumulationModel fp8_gemm_model(const Accumulation& acc, Fp8Gemm gemm);
/// Products per promotion of the split accumulator (fp8_gemm_model).
inline constexpr int kFp8SplitPromotion = 128;
/// The element format an fp8 GEMM's operands are given in: `a` when both are the same format,
/// else the smallest IEEE-style format holding both exactly (e5m3 for e4m3 with e5m2). Under a
/// block model with MMA-Sim's alignment this aligns a subnormal e4m3 operand at its own
/// exponent rather than at e4m3's smallest one, a departure only in mixed-format GEMMs.
Format fp8_gemm_format(const Format& a, const Format& b);

/// The accumulation called `name` (see Accumulation); throws InputError listing the names.
const Accumulation& accumulator_by_name(std::string_view name);
/// `fp32`: what a run or a Runtime accumulates by unless told otherwise.
const Accumulation& default_accumulation();
/// Every accumulation name, in the order of the list above.
const std::vector<std::string>& accumulation_names();

/// C[m×n] = A[m×k]·B[k×n] (+ bias[n] when not null) accumulated by `model`, all row-major
/// binary32 values; A, B and the bias are values of `in` (exactly representable). C holds the
/// accumulator's values, not yet rounded into the op's dtype. `o` gives the stochastic-rounding
/// seed and stream offset: element (i, j) uses the stream from o.offset + (i·n + j)·(k + 1).
/// Rows are split over up to `threads` threads; each element's order never changes.
void gemm(const AccumulationModel& model, const Format& in, int64_t m, int64_t n, int64_t k,
          const float* A, const float* B, const float* bias, float* C, const BulkOptions& o,
          int threads);

/// The vector path the fp32 sequential model runs on this CPU: "avx512", "avx2" (with FMA) or
/// "scalar" (a register-blocked micro-kernel on the first two; all give the same bits).
const char* fp32_gemm_path();

/// The path gemm() takes for `model` with operands of `in` (not the fp32 model, which runs
/// fp32_gemm_path()): a vector path, "avx512", "avx2" or "generic" (its portable build), where
/// one is proven to give the scalar path's bits for this model, else "scalar" (lib's dot() per
/// element). See sim/src/gemm_model.cpp for which models have one.
const char* model_gemm_path(const AccumulationModel& model, const Format& in,
                            const BulkOptions& o);
/// Make the calling thread's gemm() calls of the non-fp32 models take the scalar path (or, with
/// false, the vector path again); returns the previous setting. For benchmarks and tests that
/// compare the two.
bool set_model_gemm_scalar(bool scalar);

/// binary64 reference: sequential fused multiply-adds in double (used for fp64 tensors).
void gemm_f64(int64_t m, int64_t n, int64_t k, const double* A, const double* B,
              const double* bias, double* C);

/// Run f(i0, i1) over [0, m) split into contiguous row blocks on up to `threads` threads
/// (only when `work` is large enough to pay for them).
void parallel_rows(int64_t m, int threads, int64_t work, void (*f)(int64_t, int64_t, void*),
                   void* arg);

}  // namespace halfway::sim
