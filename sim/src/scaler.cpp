#include "halfway/sim/scaler.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "halfway/names.hpp"

namespace halfway::sim {

const char* scaler_kind_name(ScalerConfig::Kind k) {
  switch (k) {
    case ScalerConfig::Kind::none: return "none";
    case ScalerConfig::Kind::static_scale: return "static";
    default: return "dynamic";
  }
}

namespace {

/// A scale is an fp32 value whose fp32 reciprocal (GradScaler's inv_scale) unscales the
/// gradients: below the smallest positive fp32 it is 0, and at 2^-128 (about 2.94e-39) or below
/// inv_scale is inf and every unscaled gradient inf or NaN, a run that cannot train.
void check_scale_range(double s, const char* key) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", s);
  const float f = static_cast<float>(s);
  if (s < double(std::numeric_limits<float>::denorm_min()) || f == 0.0f)
    throw InputError(std::string(key) + " = " + buf + " is below the smallest positive fp32 "
                     "(1.4e-45): the scale would be 0");
  if (!std::isfinite(static_cast<float>(1.0 / double(f))))
    throw InputError(std::string(key) + " = " + buf + " is too small: its fp32 inverse "
                     "overflows (a scale must be above 2^-128, about 2.94e-39)");
}

}  // namespace

void validate(const ScalerConfig& c) {
  using K = ScalerConfig::Kind;
  if (c.kind == K::static_scale && !(std::isfinite(c.scale) && c.scale > 0))
    throw InputError("scaler.scale must be positive and finite, got " + std::to_string(c.scale));
  if (c.kind == K::static_scale && !std::isfinite(float(c.scale)))
    throw InputError("scaler.scale overflows fp32");
  if (c.kind == K::static_scale) check_scale_range(c.scale, "scaler.scale");
  if (c.kind == K::dynamic) {
    if (!(std::isfinite(c.init_scale) && c.init_scale > 0) || !std::isfinite(float(c.init_scale)))
      throw InputError("scaler.init_scale must be positive and finite in fp32");
    check_scale_range(c.init_scale, "scaler.init_scale");
    if (!(std::isfinite(c.growth_factor) && c.growth_factor > 1))
      throw InputError("scaler.growth_factor must be > 1, got " + std::to_string(c.growth_factor));
    if (!(c.backoff_factor > 0 && c.backoff_factor < 1))
      throw InputError("scaler.backoff_factor must be in (0, 1), got " +
                       std::to_string(c.backoff_factor));
    if (c.growth_interval < 1)
      throw InputError("scaler.growth_interval must be >= 1, got " +
                       std::to_string(c.growth_interval));
  }
}

GradScaler::GradScaler(const ScalerConfig& c) : cfg_(c) {
  validate(c);
  switch (c.kind) {
    case ScalerConfig::Kind::none: scale_ = 1.0f; break;
    case ScalerConfig::Kind::static_scale: scale_ = static_cast<float>(c.scale); break;
    default: scale_ = static_cast<float>(c.init_scale); break;
  }
}

float GradScaler::inv_scale() const {
  // GradScaler.unscale_: self._scale.double().reciprocal().float()
  return static_cast<float>(1.0 / static_cast<double>(scale_));
}

bool GradScaler::any_nonfinite(const std::vector<std::vector<float>>& grads) {
  for (const auto& g : grads)
    for (float v : g)
      if (!std::isfinite(v)) return true;
  return false;
}

bool GradScaler::unscale(std::vector<std::vector<float>>& grads) const {
  const bool found = any_nonfinite(grads);
  const float inv = inv_scale();
  // _amp_foreach_non_finite_check_and_unscale_: val * inv_scale in fp32, skipped when 1.
  if (inv != 1.0f)
    for (auto& g : grads)
      for (float& v : g) v = v * inv;
  return found;
}

void GradScaler::update(bool found_inf) {
  if (cfg_.kind != ScalerConfig::Kind::dynamic) return;
  // _amp_update_scale_: float scale times a double factor, computed in double and stored
  // back as float.
  if (found_inf) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * cfg_.backoff_factor);
    tracker_ = 0;
  } else {
    const int64_t successful = tracker_ + 1;
    if (successful == cfg_.growth_interval) {
      const float grown = static_cast<float>(static_cast<double>(scale_) * cfg_.growth_factor);
      if (std::isfinite(grown)) scale_ = grown;
      tracker_ = 0;
    } else {
      tracker_ = successful;
    }
  }
}

}  // namespace halfway::sim
