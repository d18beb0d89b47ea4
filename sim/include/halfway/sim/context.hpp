/// \file context.hpp
/// The state an op consults: the precision policy (autocast), the runtime of the run (tracer,
/// rounding options, accumulation model, fp8 scaling state, threads) and the name scope that
/// gives traced tensors their stable names. Set with RAII guards, like `torch.autocast`:
///
///     Runtime rt;  rt.tracer = &tracer;
///     ContextGuard g(&policy, &rt);
///     { Scope s("0"); h = linear(x, w, b); }   // records "0.input", "0.weight", "0.output"
#pragma once

#include <functional>
#include <string>

#include "halfway/bulk.hpp"
#include "halfway/sim/accumulate.hpp"
#include "halfway/sim/dtype.hpp"
#include "halfway/sim/tensor.hpp"

namespace halfway::sim {

class Tracer;
struct Policy;
class Fp8State;

/// What a traced rounding is recorded under.
struct TraceTag {
  std::string name;
  const char* op = "";
  TraceKind kind = TraceKind::activation;
};

/// Called by `round_into` after every tagged rounding into binary32 or a low-precision dtype,
/// with the rounded values (exactly representable in `dt`). For tools that compare every
/// rounded tensor with another implementation (the GPU training-step replay).
using RoundObserver =
    std::function<void(const TraceTag& tag, const DType& dt, const double* values, size_t n)>;

/// Mutable state shared by the forward and backward passes of a run. Backward closures keep a
/// pointer to it, so it must outlive the graphs built under it.
struct Runtime {
  Tracer* tracer = nullptr;                  ///< null: nothing is recorded
  BulkOptions rounding;                      ///< direction, tininess, stochastic-rounding seed
  /// Stochastic-rounding streams (see `next_rounding`): the training step, and the ordinal of
  /// the next rounding call within it. The trainer sets both at the start of every step.
  uint64_t sr_step = 0;
  uint64_t sr_tensor = 0;
  const Accumulation* accumulator = &default_accumulation();  ///< never null
  Fp8State* fp8 = nullptr;                   ///< delayed-scaling state (fp8 policies)
  int threads = 1;
  /// Roundings into low-precision dtypes round into binary32 instead (the current role is
  /// promoted, Policy::promoted_roles); set by enter_role.
  bool promote_low = false;
  RoundObserver on_round;                    ///< empty: nothing is called (no cost)
};

/// The runtime used when no guard is active: no tracer, round-to-nearest-even.
Runtime& default_runtime();

struct Context {
  const Policy* policy = nullptr;  ///< null: no autocast, ops run in their inputs' dtype
  Runtime* rt = nullptr;
  std::string scope;               ///< current name scope ("" outside any)
};

/// The calling thread's current context.
Context& context();
inline Runtime& runtime() {
  Context& c = context();
  return c.rt ? *c.rt : default_runtime();
}

class ContextGuard {
 public:
  ContextGuard(const Policy* policy, Runtime* rt);
  ~ContextGuard();
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  Context saved_;
};

/// Sets the name scope (replacing, not nesting: scopes are full names such as "blocks.0.attn").
class Scope {
 public:
  explicit Scope(std::string name);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::string saved_;
};

/// `scope + "." + suffix`, or the suffix alone outside any scope.
std::string scoped(const std::string& suffix);

/// The options of the next rounding call (a tensor rounded by `round_into`, or a GEMM's
/// roundings): the runtime's, with the stochastic-rounding stream (seed, subsequence
/// step·2^32 + tensor, offset 0), where tensor counts the rounding calls of the step from 0.
/// Every call advances the count, whatever its dtype and rounding, so a tensor's stream does
/// not depend on which other roundings are stochastic.
BulkOptions next_rounding(Runtime& rt);

/// Round values (results computed in binary64 or exactly) into `dt`: binary32 by a native
/// conversion, low-precision formats by first rounding to binary32 (the op's "opmath" result,
/// as PyTorch computes half/bf16 ops in float) and then `quantize_f32`, whose event counts and
/// pre-rounding magnitudes go to the tracer under `tag`. No-op for fp64.
void round_into(Runtime& rt, const DType& dt, double* v, size_t n, const TraceTag* tag);
inline void round_into(Runtime& rt, const DType& dt, std::vector<double>& v, const TraceTag* tag) {
  round_into(rt, dt, v.data(), v.size(), tag);
}
/// The same rounding in place on binary32 values (`dt` not fp64).
void round_into(Runtime& rt, const DType& dt, float* v, size_t n, const TraceTag* tag);
/// The same rounding of n values into a tensor's storage for `dt` (binary64 only for fp64).
/// From binary32 values (a GEMM's fp32 results) the first rounding is exact.
Values rounded(Runtime& rt, const DType& dt, const double* v, size_t n, const TraceTag* tag);
Values rounded(Runtime& rt, const DType& dt, const float* v, size_t n, const TraceTag* tag);
inline Values rounded(Runtime& rt, const DType& dt, const std::vector<double>& v,
                      const TraceTag* tag) {
  return rounded(rt, dt, v.data(), v.size(), tag);
}
/// v rounded into `dt`, in place where its storage fits `dt`.
Values rounded(Runtime& rt, const DType& dt, Values&& v, const TraceTag* tag);
/// A tensor's values rounded again into `dt`, in place (their storage follows `dt`).
void round_into(Runtime& rt, const DType& dt, Values& v, const TraceTag* tag);

}  // namespace halfway::sim
