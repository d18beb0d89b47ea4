/// \file scaler.hpp
/// Loss scaling: none, static, or dynamic with exactly PyTorch's GradScaler semantics
/// (`torch/amp/grad_scaler.py`, kernels `_amp_foreach_non_finite_check_and_unscale_` and
/// `_amp_update_scale_`):
///   - the scale is an fp32 value; `scale(loss)` multiplies by it in fp32;
///   - unscale checks the *scaled* gradients for inf/NaN, then multiplies every gradient by
///     inv_scale = float(1/double(scale)) in fp32 (also on a step that will be skipped);
///   - a step with inf/NaN is skipped; `update()` then multiplies the scale by backoff_factor
///     and resets the growth tracker; otherwise the tracker increments and, on reaching
///     growth_interval, the scale grows by growth_factor only if the product is finite, and
///     the tracker resets. There is no lower clamp.
///
///     GradScaler s(cfg);  loss_scaled = loss·s.scale();  bool inf = s.unscale(grads);
///     if (!inf) opt.step(grads);  s.update(inf);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace halfway::sim {

struct ScalerConfig {
  enum class Kind : uint8_t { none, static_scale, dynamic };
  Kind kind = Kind::none;
  double scale = 1.0;  ///< static
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  /// The common AMP bug: the optimizer runs on the still-scaled gradients (no unscale, no
  /// skipping, the scale never updates), as `optimizer.step()` instead of `scaler.step()`.
  bool mistake = false;
};
const char* scaler_kind_name(ScalerConfig::Kind k);
/// Throws InputError for a non-positive or non-finite scale, growth_factor <= 1,
/// backoff_factor outside (0, 1), growth_interval < 1.
void validate(const ScalerConfig& c);

class GradScaler {
 public:
  explicit GradScaler(const ScalerConfig& c);
  /// The current scale (1 when kind is none).
  float scale() const { return scale_; }
  int64_t growth_tracker() const { return tracker_; }
  bool enabled() const { return cfg_.kind != ScalerConfig::Kind::none; }
  /// float(1.0 / double(scale)).
  float inv_scale() const;
  /// True when any value is inf or NaN.
  static bool any_nonfinite(const std::vector<std::vector<float>>& grads);
  /// Check the scaled gradients, then unscale them in place. Returns found_inf.
  bool unscale(std::vector<std::vector<float>>& grads) const;
  /// Scale update after a step (dynamic only; static and none keep the scale).
  void update(bool found_inf);
  const ScalerConfig& config() const { return cfg_; }

 private:
  ScalerConfig cfg_;
  float scale_;
  int64_t tracker_ = 0;
};

}  // namespace halfway::sim
