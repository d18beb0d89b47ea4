#include "halfway/sim/optim.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "halfway/names.hpp"
#include "halfway/sim/tracer.hpp"

namespace halfway::sim {

Optimizer::Optimizer(OptimizerConfig cfg, std::vector<Param>& params)
    : cfg_(std::move(cfg)), params_(params), state_(params.size()) {
  if (cfg_.kind != "sgd" && cfg_.kind != "adam" && cfg_.kind != "adamw")
    throw InputError("unknown optimizer '" + cfg_.kind + "' (sgd adam adamw)");
  if (!(std::isfinite(cfg_.lr) && cfg_.lr >= 0)) throw InputError("optimizer.lr must be >= 0");
  if (!(cfg_.momentum >= 0) || !(cfg_.weight_decay >= 0) || !(cfg_.eps >= 0) ||
      !(cfg_.beta1 >= 0 && cfg_.beta1 < 1) || !(cfg_.beta2 >= 0 && cfg_.beta2 < 1))
    throw InputError("optimizer: momentum, weight_decay, eps must be >= 0 and betas in [0, 1)");
  if (cfg_.nesterov && (cfg_.momentum <= 0 || cfg_.dampening != 0))
    throw InputError("optimizer: nesterov needs momentum > 0 and dampening 0");
  // The step computes in fp32: every hyperparameter must be a finite fp32 value, and the
  // largest update of a unit gradient, lr times the bound below, must not overflow fp32 (an lr
  // of 1e308 makes the first update inf, and every later loss NaN). SGD's update is lr·g;
  // Adam's step size is lr/(1-beta1^t), largest at t = 1, and its update is at most
  // lr·max(1, (1-beta1)/sqrt(1-beta2)) (Kingma & Ba, section 2.1); AdamW also computes
  // 1 - lr·weight_decay.
  const double fmax = std::numeric_limits<float>::max();
  for (const auto& [name, v] : {std::pair<const char*, double>{"momentum", cfg_.momentum},
                                {"dampening", cfg_.dampening},
                                {"weight_decay", cfg_.weight_decay}, {"eps", cfg_.eps}})
    if (!(std::fabs(v) <= fmax))
      throw InputError(std::string("optimizer.") + name + " must be a finite fp32 value");
  double bound = 1;
  if (cfg_.kind != "sgd")
    bound = std::max(1.0 / (1.0 - cfg_.beta1),
                     std::max(1.0, (1.0 - cfg_.beta1) / std::sqrt(1.0 - cfg_.beta2)));
  if (!(cfg_.lr * bound <= fmax) || !(cfg_.lr * cfg_.weight_decay <= fmax)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "optimizer.lr = %.9g makes the first update overflow fp32 "
                  "(lr must be at most %.9g here)", cfg_.lr,
                  fmax / std::max(bound, cfg_.weight_decay));
    throw InputError(buf);
  }
}

int Optimizer::state_per_element() const {
  if (cfg_.kind == "sgd") return cfg_.momentum != 0 ? 1 : 0;
  return 2;
}

void Optimizer::step(const std::vector<std::vector<float>>& grads, Runtime& rt) {
  const bool adam = cfg_.kind != "sgd", adamw = cfg_.kind == "adamw";
  // Python scalars become fp32 scalars in ATen's float kernels.
  const float lr_neg = static_cast<float>(-cfg_.lr);
  const float wd = static_cast<float>(cfg_.weight_decay);
  const float mom = static_cast<float>(cfg_.momentum);
  const float damp1 = static_cast<float>(1.0 - cfg_.dampening);
  const float b1 = static_cast<float>(cfg_.beta1), b2 = static_cast<float>(cfg_.beta2);
  const float c1 = static_cast<float>(1.0 - cfg_.beta1), c2 = static_cast<float>(1.0 - cfg_.beta2);
  const float eps = static_cast<float>(cfg_.eps);
  const float decay = static_cast<float>(1.0 - cfg_.lr * cfg_.weight_decay);
  for (size_t pi = 0; pi < params_.size(); ++pi) {
    TensorImpl& P = *params_[pi].t.impl();
    const std::vector<float>& g = grads[pi];
    State& s = state_[pi];
    const size_t n = P.data.size();
    std::vector<float> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(P.data[i]);
    const std::vector<float> old = p;
    if (adam) {
      if (s.m.empty()) {
        s.m.assign(n, 0.0f);
        s.v.assign(n, 0.0f);
      }
      s.step += 1;
      const double bc1 = 1.0 - std::pow(cfg_.beta1, s.step);
      const double bc2 = 1.0 - std::pow(cfg_.beta2, s.step);
      const float step_size_neg = static_cast<float>(-(cfg_.lr / bc1));
      const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
      for (size_t i = 0; i < n; ++i) {
        if (adamw) p[i] = p[i] * decay;                  // param.mul_(1 - lr·wd)
        float gi = g[i];
        if (!adamw && wd != 0) gi = std::fmaf(p[i], wd, gi);  // grad.add(param, alpha=wd)
        s.m[i] = std::fmaf(gi, c1, s.m[i] * b1);         // mul_(β1).add_(g, alpha=1-β1)
        s.v[i] = s.v[i] * b2 + (c2 * gi) * gi;            // mul_(β2).addcmul_(g, g, 1-β2)
        const float denom = std::sqrt(s.v[i]) / bc2_sqrt + eps;
        p[i] = p[i] + (step_size_neg * s.m[i]) / denom;  // addcdiv_(m, denom, -step_size)
      }
    } else {
      if (mom != 0 && s.m.empty()) s.m.assign(n, 0.0f);
      for (size_t i = 0; i < n; ++i) {
        float d = g[i];
        if (wd != 0) d = std::fmaf(p[i], wd, d);
        if (mom != 0) {
          s.m[i] = s.has_buf ? std::fmaf(d, damp1, s.m[i] * mom) : d;
          d = cfg_.nesterov ? std::fmaf(s.m[i], mom, d) : s.m[i];
        }
        p[i] = std::fmaf(d, lr_neg, p[i]);
      }
      if (mom != 0) s.has_buf = true;
    }
    std::vector<double> nv(p.begin(), p.end());
    if (P.dtype.is_low()) {
      // The fp32 result rounded into the low-precision weight: count the updates that vanish.
      const TraceTag tag{P.name + ".update", "optimizer", TraceKind::update};
      round_into(rt, P.dtype, nv, &tag);
      uint64_t vanished = 0, small = 0;
      const double lim = std::ldexp(1.0, P.dtype.precision());
      for (size_t i = 0; i < n; ++i) {
        const float delta = p[i] - old[i];
        if (delta == 0.0f) continue;
        if (nv[i] == double(old[i])) ++vanished;
        if (std::fabs(double(old[i])) >= lim * std::fabs(double(delta))) ++small;
      }
      if (rt.tracer) rt.tracer->add_update_counts(tag.name, vanished, small);
    }
    P.data = std::move(nv);
  }
}

}  // namespace halfway::sim
