/// \file optim.hpp
/// SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW with PyTorch's semantics
/// (torch.optim's single-tensor implementations: bias correction in binary64 Python scalars,
/// eps added to sqrt(v)/sqrt(bc2), `a + α·b` as a fused multiply-add as ATen's vectorised
/// add does), arithmetic in fp32. Low-precision parameters (pure policies) get the fp32 result
/// rounded into their dtype (plainly or Kahan-compensated), traced as "<param>.update".
/// Optimizer state is kept in fp32 or rounded into its own dtype after each step (pow2:<fp8>:
/// halfway's per-tensor power-of-two scale; dynamic8: 8-bit optimizers' blocks), traced as
/// "<param>.exp_avg" etc. Every step counts, per
/// parameter, the non-zero updates that left the stored weight unchanged.
///
///     Optimizer opt(cfg, model.params());
///     opt.step(grads_fp32, runtime);      // grads already unscaled
#pragma once

#include <array>
#include <string_view>

#include <string>
#include <vector>

#include "halfway/sim/context.hpp"
#include "halfway/sim/model.hpp"
#include "halfway/sim/policy.hpp"

namespace halfway::sim {

/// How an optimizer state is stored: in a dtype (fp32; bf16 or fp16 rounded; `pow2:e4m3` and
/// any 8-bit format: halfway's own per-tensor power-of-two scale, which an 8-bit dtype here
/// always means), or, `dynamic8`, as 8-bit optimizers
/// store it (Dettmers et al. 2021): blocks of `dynamic_block` values (2048, or `:block=N`),
/// each with its fp32 absmax, and each value the nearest entry of the dynamic 8-bit map
/// (docs/sim.md, "Updates").
struct StateFormat {
  StateFormat() = default;
  StateFormat(DType d) : dtype(d) {}  // NOLINT: a dtype is a state format
  DType dtype = DType::f32();
  int dynamic_block = 0;  ///< > 0: dynamic 8-bit in blocks of this many values
  bool dynamic() const { return dynamic_block > 0; }
  bool stored_as_computed() const { return !dynamic() && !dtype.is_low(); }
  int bits() const { return dynamic() ? 8 : dtype.bits(); }
  /// An 8-bit dtype: halfway's per-tensor power-of-two scaled state ("pow2:e4m3").
  bool pow2() const { return !dynamic() && dtype.is_low() && dtype.bits() == 8; }
  /// "fp32", "bf16", "fp16"; "pow2:e4m3", ...; "dynamic8" or "dynamic8:block=N".
  std::string name() const;
  bool operator==(const StateFormat& o) const {
    return dynamic_block == o.dynamic_block && dtype == o.dtype;
  }
};

/// A state format by name ("fp32", "bf16", "fp16", "pow2:" and an 8-bit format name,
/// "dynamic8", "dynamic8:block=N" with 1 <= N <= 2^24); InputError naming `key` for one that
/// cannot hold optimizer state, and for a bare 8-bit format name (renamed "pow2:<name>").
StateFormat parse_state_format(std::string_view name, const std::string& key);

/// The 256 values of the dynamic 8-bit map (bitsandbytes' create_dynamic_map: signed for
/// exp_avg and momentum_buffer, unsigned for exp_avg_sq), ascending, in [-1, 1] or [0, 1].
const std::array<float, 256>& dynamic_map(bool is_signed);

/// v (n values) stored as 8-bit optimizers store a state (Dettmers et al. 2021), in place: per
/// block of `block` values its fp32 absmax a, each value replaced by fp32(m · a), m the entry
/// of dynamic_map nearest to fp32(x / a) (ties to the lower entry, as bitsandbytes'
/// quantize_blockwise); an all-zero block, or one holding an infinity, is left as it is.
void store_dynamic8(float* v, size_t n, int block, bool is_signed);

struct OptimizerConfig {
  std::string kind = "adam";  ///< sgd | adam | adamw
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;  ///< adamw: decoupled (PyTorch's default 1e-2)
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  /// How each state is stored (torch.optim's names): fp32, bf16, fp16, pow2:<an 8-bit format>
  /// (halfway's per-tensor power-of-two scale) or dynamic8 (8-bit optimizers' blocks).
  StateFormat exp_avg_dtype{};
  StateFormat exp_avg_sq_dtype{};
  StateFormat momentum_buffer_dtype{};
};

/// InputError unless `d` may hold optimizer state (fp32, bf16, fp16, pow2:<an 8-bit format>,
/// dynamic8); `key` names the config option.
void check_state_dtype(const StateFormat& d, const std::string& key);

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
  /// The formats of the state kept per element, in order (exp_avg, exp_avg_sq; or
  /// momentum_buffer; none for plain SGD).
  std::vector<StateFormat> state_dtypes() const;
  /// Per parameter, the last step's counts (zeros before the first step).
  const std::vector<UpdateStats>& last_stats() const { return stats_; }

 private:
  struct State {
    std::vector<float> m, v;  ///< stored values (exactly representable in their dtypes)
    std::vector<float> comp;  ///< Kahan compensation
    double step = 0;
    bool has_buf = false;
  };
  void store_state(Runtime& rt, const StateFormat& dt, std::vector<float>& vals,
                   const std::string& name, bool is_signed = true) const;
  OptimizerConfig cfg_;
  WeightUpdate update_;
  std::vector<Param>& params_;
  std::vector<State> state_;
  std::vector<UpdateStats> stats_;
};

}  // namespace halfway::sim
