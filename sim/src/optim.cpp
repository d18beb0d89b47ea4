#include "halfway/sim/optim.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>

#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"
#include "halfway/thread_pool.hpp"
#include "halfway/sim/tracer.hpp"

#include "adam_rows.hpp"

namespace halfway::sim {

Optimizer::Optimizer(OptimizerConfig cfg, std::vector<Param>& params, WeightUpdate update)
    : cfg_(std::move(cfg)),
      update_(update),
      params_(params),
      state_(params.size()),
      stats_(params.size()) {
  check_state_dtype(cfg_.exp_avg_dtype, "optimizer.exp_avg_dtype");
  check_state_dtype(cfg_.exp_avg_sq_dtype, "optimizer.exp_avg_sq_dtype");
  check_state_dtype(cfg_.momentum_buffer_dtype, "optimizer.momentum_buffer_dtype");
  if (update_.method == UpdateMethod::kahan) {
    if (update_.compensation != DType::f32() && !update_.compensation.is_low())
      throw InputError("the Kahan compensation must be fp32 or a low-precision dtype");
    for (const Param& p : params_)
      if (!p.t.dtype().is_low())
        throw InputError("a Kahan-compensated update needs low-precision weights without an fp32 "
                         "master copy ('" + p.name + "' is " + p.t.dtype().name() + ")");
  }
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

int Optimizer::state_per_element() const { return int(state_dtypes().size()); }

std::vector<StateFormat> Optimizer::state_dtypes() const {
  if (cfg_.kind == "sgd")
    return cfg_.momentum != 0 ? std::vector<StateFormat>{cfg_.momentum_buffer_dtype}
                              : std::vector<StateFormat>{};
  return {cfg_.exp_avg_dtype, cfg_.exp_avg_sq_dtype};
}

/// The largest block a dynamic8 state may name.
constexpr long kMaxDynamicBlock = long(1) << 24;

std::string StateFormat::name() const {
  if (pow2()) return "pow2:" + dtype.name();
  if (!dynamic()) return dtype.name();
  return dynamic_block == 2048 ? "dynamic8" : "dynamic8:block=" + std::to_string(dynamic_block);
}

StateFormat parse_state_format(std::string_view name, const std::string& key) {
  if (name.substr(0, 8) == "dynamic8") {
    StateFormat f;
    f.dynamic_block = 2048;  // Dettmers et al. 2021's block size
    const std::string_view rest = name.substr(8);
    if (!rest.empty()) {
      long v = 0;
      const char* end = rest.data() + rest.size();
      const auto [p, ec] = std::from_chars(rest.data() + std::min<size_t>(7, rest.size()), end, v);
      if (rest.substr(0, 7) != ":block=" || rest.size() == 7 || ec != std::errc() || p != end ||
          v < 1 || v > kMaxDynamicBlock)
        throw InputError("'" + key + "': '" + std::string(name) + "' must be dynamic8 or "
                         "dynamic8:block=N with N in 1.." + std::to_string(kMaxDynamicBlock));
      f.dynamic_block = int(v);
    }
    return f;
  }
  StateFormat f;
  if (name.substr(0, 5) == "pow2:") {  // halfway's per-tensor power-of-two scaled 8-bit state
    f.dtype = parse_dtype(name.substr(5));
    check_value_dtype(f.dtype, key);
    if (!f.pow2())
      throw InputError("'" + key + "': '" + std::string(name) + "': pow2: takes an 8-bit "
                       "format (pow2:e4m3, pow2:e5m2, ...)");
    return f;
  }
  f.dtype = parse_dtype(name);
  check_value_dtype(f.dtype, key);
  // Renamed: a bare 8-bit format named halfway's own per-tensor scaling, which reads as if it
  // were 8-bit Adam's state (that is dynamic8).
  if (f.pow2())
    throw InputError("'" + key + "': '" + std::string(name) + "' as an optimizer state is "
                     "now written 'pow2:" + f.dtype.name() + "' (halfway's own per-tensor "
                     "power-of-two scaling; 8-bit optimizers' block-wise state is 'dynamic8')");
  check_state_dtype(f, key);
  return f;
}

void check_state_dtype(const StateFormat& f, const std::string& key) {
  if (f.dynamic()) return;
  const DType& d = f.dtype;
  check_value_dtype(d, key);
  if (d == DType::f32() || d == DType::low(formats::bf16) || d == DType::low(formats::fp16) ||
      f.pow2())
    return;
  throw InputError("'" + key + "' must be fp32, bf16, fp16, pow2:<an 8-bit format> (halfway's "
                   "per-tensor power-of-two scaling: pow2:e4m3, pow2:e5m2, ...) or dynamic8, "
                   "got '" + d.name() + "'");
}

const std::array<float, 256>& dynamic_map(bool is_signed) {
  // bitsandbytes' create_dynamic_map(signed, max_exponent_bits = 7, total_bits = 8) in
  // PyTorch's float32: for exponent i = 0..6, the midpoints of torch.linspace(0.1, 1, n)
  // (n = 2^i + 1 signed, 2^(i+1) + 1 unsigned) times fp32(10^(i-6)), and their negatives when
  // signed; then 0 and 1, sorted. torch.linspace as its scalar kernel (ATen's default
  // capability) computes it: step = (end − start) / (n − 1), value j start + step·j in the
  // first half and end − step·(n − 1 − j) in the second. (Its AVX2 and AVX-512 kernels add
  // step lane by lane to a vector's first value, which changes some last bits.)
  auto linspace = [](int n) {
    const float start = 0.1f, end = 1.0f, step = (end - start) / float(n - 1);
    std::vector<float> b(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j)
      b[size_t(j)] = j < n / 2 ? start + step * float(j) : end - step * float(n - 1 - j);
    return b;
  };
  auto build = [&](bool sgn) {
    std::vector<float> v;
    for (int i = 0; i < 7; ++i) {
      const int n = sgn ? (1 << i) + 1 : (1 << (i + 1)) + 1;
      const std::vector<float> b = linspace(n);
      const float scale = float(std::pow(10.0, double(i - 6)));
      for (int j = 0; j + 1 < n; ++j) {
        const float mean = (b[size_t(j)] + b[size_t(j + 1)]) / 2.0f;
        v.push_back(scale * mean);
        if (sgn) v.push_back(-(scale * mean));
      }
    }
    v.push_back(0.0f);
    v.push_back(1.0f);
    std::sort(v.begin(), v.end());
    std::array<float, 256> a{};
    std::copy(v.begin(), v.end(), a.begin());
    return a;
  };
  static const std::array<float, 256> s = build(true), u = build(false);
  return is_signed ? s : u;
}

namespace {

/// 2^e with e the largest integer such that amax·2^e <= fmax; 1 when amax is 0 or not finite.
double pow2_scale(float amax, float fmax) {
  if (!(amax > 0) || !std::isfinite(amax)) return 1.0;
  int e = std::ilogb(fmax) - std::ilogb(amax);
  if (std::ldexp(double(amax), e) > double(fmax)) --e;
  return std::ldexp(1.0, e);
}

}  // namespace

namespace {

/// The index of the map entry nearest to y (ties to the lower index), as bitsandbytes'
/// quantize_blockwise picks it: the binary search's left neighbour unless the right one is
/// strictly closer.
size_t nearest_entry(const std::array<float, 256>& map, float y) {
  size_t idx = size_t(std::upper_bound(map.begin(), map.end(), y) - map.begin());
  idx = idx == 0 ? 0 : idx - 1;
  if (idx < 255 && std::fabs(y - map[idx + 1]) < std::fabs(y - map[idx])) ++idx;
  return idx;
}

}  // namespace

void store_dynamic8(float* v, size_t n, int block, bool is_signed) {
  const std::array<float, 256>& map = dynamic_map(is_signed);
  for (size_t b0 = 0; b0 < n; b0 += size_t(block)) {
    const size_t b1 = std::min(n, b0 + size_t(block));
    float a = 0.0f;
    for (size_t i = b0; i < b1; ++i) a = std::fmax(a, std::fabs(v[i]));
    if (!(a > 0.0f) || !std::isfinite(a)) continue;  // all zero; an infinity: as computed
    for (size_t i = b0; i < b1; ++i) v[i] = map[nearest_entry(map, v[i] / a)] * a;
  }
}

namespace {

/// f(i) for every i < n, in parts on rt's threads (each element on its own).
template <class F>
void each(const Runtime& rt, size_t n, F f) {
  parallel_for(rt.threads, n, size_t(1) << 15, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) f(i);
  });
}

}  // namespace

void Optimizer::store_state(Runtime& rt, const StateFormat& f, std::vector<float>& vals,
                            const std::string& name, bool is_signed) const {
  if (f.dynamic()) return store_dynamic8(vals.data(), vals.size(), f.dynamic_block, is_signed);
  const DType& dt = f.dtype;
  if (!dt.is_low()) return;  // fp32: the values are stored as computed
  const TraceTag tag{name, "optimizer", TraceKind::optimizer_state};
  double scale = 1.0;
  if (f.pow2()) {
    // halfway's per-tensor scaling by a power of two: x·s and q/s are exact.
    float amax = 0.0f;
    for (float x : vals) amax = std::fmax(amax, std::fabs(x));
    Env env;
    scale = pow2_scale(amax, to_f32(dt.fmt, dt.fmt.max_mag(), env));
  }
  std::vector<double> q(vals.size());
  for (size_t i = 0; i < vals.size(); ++i) q[i] = double(vals[i]) * scale;
  round_into(rt, dt, q, &tag);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(q[i] / scale);
}

void Optimizer::step(const std::vector<std::vector<float>>& grads, Runtime& rt) {
  const bool adam = cfg_.kind != "sgd", adamw = cfg_.kind == "adamw";
  const bool kahan = update_.method == UpdateMethod::kahan;
  // Python scalars become fp32 scalars in ATen's float kernels.
  const float lr_neg = static_cast<float>(-cfg_.lr);
  const float wd = static_cast<float>(cfg_.weight_decay);
  const float mom = static_cast<float>(cfg_.momentum);
  const float damp1 = static_cast<float>(1.0 - cfg_.dampening);
  const float b1 = static_cast<float>(cfg_.beta1), b2 = static_cast<float>(cfg_.beta2);
  const float c1 = static_cast<float>(1.0 - cfg_.beta1), c2 = static_cast<float>(1.0 - cfg_.beta2);
  const float eps = static_cast<float>(cfg_.eps);
  const float decay = static_cast<float>(1.0 - cfg_.lr * cfg_.weight_decay);
  const bool decays = adamw && cfg_.lr * cfg_.weight_decay != 0;
  for (size_t pi = 0; pi < params_.size(); ++pi) {
    TensorImpl& P = *params_[pi].t.impl();
    const std::vector<float>& g = grads[pi];
    State& s = state_[pi];
    const size_t n = P.data.size();
    // The weights in fp32 (p, updated in place) and as they were (old); nonzero[i]: the update
    // is non-zero in exact arithmetic (every path below writes each element); du[i] (kahan):
    // the fp32 increment, added to the weight with the compensation. The element passes run
    // in parts on the pool, each element on its own.
    std::unique_ptr<float[]> p(new float[n]), old(new float[n]);
    std::unique_ptr<uint8_t[]> nonzero(new uint8_t[n]);
    std::as_const(P.data).visit([&](const auto* w) {
      each(rt, n, [&](size_t i) { old[i] = p[i] = static_cast<float>(w[i]); });
    });
    std::vector<float> du(kahan ? n : 0);
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
      detail::adam_rows({decay, wd, b1, c1, b2, c2, bc2_sqrt, eps, step_size_neg, adamw, kahan,
                         decays},
                        {n, g.data(), old.get(), p.get(), s.m.data(), s.v.data(),
                         kahan ? du.data() : nullptr, nonzero.get()},
                        rt.threads);
      store_state(rt, cfg_.exp_avg_dtype, s.m, P.name + ".exp_avg");
      store_state(rt, cfg_.exp_avg_sq_dtype, s.v, P.name + ".exp_avg_sq", false);
    } else {
      if (mom != 0 && s.m.empty()) s.m.assign(n, 0.0f);
      for (size_t i = 0; i < n; ++i) {
        float d = g[i];
        if (wd != 0) d = std::fmaf(p[i], wd, d);
        if (mom != 0) {
          s.m[i] = s.has_buf ? std::fmaf(d, damp1, s.m[i] * mom) : d;
          d = cfg_.nesterov ? std::fmaf(s.m[i], mom, d) : s.m[i];
        }
        if (kahan) du[i] = d * lr_neg;
        p[i] = std::fmaf(d, lr_neg, p[i]);
        nonzero[i] = lr_neg != 0 && d != 0;
      }
      if (mom != 0) {
        s.has_buf = true;
        store_state(rt, cfg_.momentum_buffer_dtype, s.m, P.name + ".momentum_buffer");
      }
    }
    if (kahan) {
      // y = Δ + c; the weight becomes round(w + y); c keeps what that rounding lost.
      if (s.comp.empty()) s.comp.assign(n, 0.0f);
      for (size_t i = 0; i < n; ++i) {
        du[i] = du[i] + s.comp[i];
        p[i] = old[i] + du[i];
      }
    }
    std::unique_ptr<double[]> nv(new double[n]);
    each(rt, n, [&](size_t i) { nv[i] = p[i]; });
    // The update's counts: non-zero, vanished (non-zero, yet the weight is unchanged), and,
    // for a low-precision weight, small (|old| >= 2^precision·|Δ| for the fp32 Δ). Integer
    // sums over the parts.
    const bool low = P.dtype.is_low();
    const TraceTag tag{P.name + ".update", "optimizer", TraceKind::update};
    if (low) round_into(rt, P.dtype, nv.get(), n, &tag);  // the fp32 result into the weight
    const double lim = std::ldexp(1.0, P.dtype.precision());
    const int np = even_parts(n, uint64_t(1) << 15, rt.threads);
    std::vector<std::array<uint64_t, 3>> counts(size_t(np), {0, 0, 0});
    parallel_slices(np, n, [&](int part, uint64_t lo, uint64_t hi) {
      auto& [nonzeros, vanished, small] = counts[size_t(part)];
      for (size_t i = lo; i < hi; ++i) {
        nonzeros += nonzero[i];
        vanished += nonzero[i] && nv[i] == double(old[i]);
        const float delta = p[i] - old[i];
        small += low && delta != 0.0f && std::fabs(double(old[i])) >= lim * std::fabs(double(delta));
      }
    });
    UpdateStats& st = stats_[pi];
    st = UpdateStats{};
    st.elements = n;
    uint64_t small = 0;
    for (const auto& c : counts) st.nonzero += c[0], st.vanished += c[1], small += c[2];
    if (low && rt.tracer) rt.tracer->add_update_counts(tag.name, st.vanished, small);
    if (kahan) {
      for (size_t i = 0; i < n; ++i)
        s.comp[i] = du[i] - (static_cast<float>(nv[i]) - old[i]);
      store_state(rt, StateFormat{update_.compensation}, s.comp, P.name + ".compensation");
    }
    Values stored = Values::uninitialized(n, P.dtype.is_f64());
    stored.visit([&](auto* w) {
      each(rt, n, [&](size_t i) { w[i] = static_cast<std::remove_pointer_t<decltype(w)>>(nv[i]); });
    });
    P.data = std::move(stored);
  }
}

}  // namespace halfway::sim
