/// \file optim.hpp
/// SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW with PyTorch's semantics
/// (torch.optim's single-tensor implementations: bias correction in binary64 Python scalars,
/// eps added to sqrt(v)/sqrt(bc2), `a + α·b` as a fused multiply-add as ATen's vectorised
/// add does), state and arithmetic in fp32. Low-precision parameters (pure policies) get the
/// fp32 result rounded into their dtype, traced as "<param>.update" with the updates that
/// vanished.
///
///     Optimizer opt(cfg, model.params());
///     opt.step(grads_fp32, runtime);      // grads already unscaled
#pragma once

#include <string>
#include <vector>

#include "halfway/sim/context.hpp"
#include "halfway/sim/model.hpp"

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
};

class Optimizer {
 public:
  Optimizer(OptimizerConfig cfg, std::vector<Param>& params);
  /// One step with fp32 gradients (one vector per parameter, in order).
  void step(const std::vector<std::vector<float>>& grads, Runtime& rt);
  /// fp32 state values kept per parameter element (SGD: 0 or 1, Adam: 2).
  int state_per_element() const;
  const OptimizerConfig& config() const { return cfg_; }

 private:
  struct State {
    std::vector<float> m, v;
    double step = 0;
    bool has_buf = false;
  };
  OptimizerConfig cfg_;
  std::vector<Param>& params_;
  std::vector<State> state_;
};

}  // namespace halfway::sim
