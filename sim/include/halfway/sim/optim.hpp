/// \file optim.hpp
/// SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW with PyTorch's semantics
/// (torch.optim's single-tensor implementations: bias correction in binary64 Python scalars,
/// eps added to sqrt(v)/sqrt(bc2), `a + α·b` as a fused multiply-add as ATen's vectorised
/// add does), arithmetic in fp32. Low-precision parameters (pure policies) get the fp32 result
/// rounded into their dtype (plainly or Kahan-compensated), traced as "<param>.update".
/// Optimizer state is kept in fp32 or rounded into its own dtype after each step (fp8 with a
/// per-tensor power-of-two scale), traced as "<param>.exp_avg" etc. Every step counts, per
/// parameter, the non-zero updates that left the stored weight unchanged.
///
///     Optimizer opt(cfg, model.params());
///     opt.step(grads_fp32, runtime);      // grads already unscaled
#pragma once

#include <string>
#include <vector>

#include "halfway/sim/context.hpp"
#include "halfway/sim/model.hpp"
#include "halfway/sim/policy.hpp"

namespace halfway::sim {

struct OptimizerConfig {
  std::string kind = "adam";  ///< sgd | adam | adamw
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;  ///< adamw: decoupled (PyTorch's default 1e-2)
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  /// Dtypes the state is stored in (torch.optim's names): fp32, bf16, fp16, or an 8-bit
  /// format, which gets a per-tensor power-of-two scale.
  DType exp_avg_dtype = DType::f32();
  DType exp_avg_sq_dtype = DType::f32();
  DType momentum_buffer_dtype = DType::f32();
};

/// InputError unless `d` may hold optimizer state (fp32, bf16, fp16, an 8-bit format);
/// `key` names the config option.
void check_state_dtype(const DType& d, const std::string& key);

/// One parameter's update in one step.
struct UpdateStats {
  uint64_t elements = 0;
  /// Elements whose update is non-zero in exact arithmetic: lr·d ≠ 0 (SGD), lr·m ≠ 0
  /// (Adam), or AdamW's decay of a non-zero weight.
  uint64_t nonzero = 0;
  /// Of those, the ones whose stored weight compares equal after the step (the update
  /// vanished, in the fp32 arithmetic or in the rounding into the weight's dtype).
  uint64_t vanished = 0;
};

class Optimizer {
 public:
  /// `update`: how low-precision weights are written (kahan needs every parameter in a
  /// low-precision dtype: InputError otherwise).
  Optimizer(OptimizerConfig cfg, std::vector<Param>& params, WeightUpdate update = {});
  /// One step with fp32 gradients (one vector per parameter, in order).
  void step(const std::vector<std::vector<float>>& grads, Runtime& rt);
  /// fp32 state values kept per parameter element (SGD: 0 or 1, Adam: 2).
  int state_per_element() const;
  const OptimizerConfig& config() const { return cfg_; }
  const WeightUpdate& weight_update() const { return update_; }
  /// The dtypes of the state kept per element, in order (exp_avg, exp_avg_sq; or
  /// momentum_buffer; none for plain SGD).
  std::vector<DType> state_dtypes() const;
  /// Per parameter, the last step's counts (zeros before the first step).
  const std::vector<UpdateStats>& last_stats() const { return stats_; }

 private:
  struct State {
    std::vector<float> m, v;  ///< stored values (exactly representable in their dtypes)
    std::vector<float> comp;  ///< Kahan compensation
    double step = 0;
    bool has_buf = false;
  };
  void store_state(Runtime& rt, const DType& dt, std::vector<float>& vals,
                   const std::string& name) const;
  OptimizerConfig cfg_;
  WeightUpdate update_;
  std::vector<Param>& params_;
  std::vector<State> state_;
  std::vector<UpdateStats> stats_;
};

}  // namespace halfway::sim
