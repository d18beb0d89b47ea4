#include "halfway/sim/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "halfway/names.hpp"
#include "halfway/sim/fp8.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/sim/npz.hpp"
#include "halfway/sim/precision.hpp"
#include "manifest.hpp"
#include "run_data.hpp"
#include "run_files.hpp"

namespace halfway::sim {

namespace {

/// The mean cross-entropy over the validation windows, in batches of data.batch_size, under the
/// run's policy. It runs on copies of the runtime's fp8 scaling state and stochastic-rounding
/// stream, untraced and unobserved: validating changes nothing that training sees.
double validation_loss(Model& model, const Dataset& val, const TrainConfig& c,
                       const Runtime& rt) {
  Runtime vr = rt;
  vr.tracer = nullptr;
  vr.on_round = nullptr;
  enter_role(vr, c.precision, Role::forward);
  std::optional<Fp8State> fp8;
  if (rt.fp8) vr.fp8 = &fp8.emplace(*rt.fp8);
  Loader ld(val, c.batch_size, false, 0);
  double sum = 0;
  for (int64_t done = 0; done < val.n();) {
    const Batch b = ld.next();
    ContextGuard g(&c.precision.policy, &vr);
    const Tensor out = model.forward(b);
    Scope s("loss");
    sum += cross_entropy(out, b.labels).item() * double(b.size);
    done += b.size;
  }
  return sum / double(val.n());
}

/// The model with its initial weights (from the seed, or the config's .npz) in the policy's
/// parameter dtype.
std::unique_ptr<Model> make_model(const TrainConfig& c, uint64_t npz_bytes) {
  Rng rng(c.seed);
  std::unique_ptr<Model> model =
      c.model_kind == "mlp" ? make_mlp(c.mlp, rng) : make_transformer(c.transformer, rng);
  if (!c.init_npz.empty()) model->load(read_npz(c.init_npz, npz_bytes), "'" + c.init_npz + "'");
  const DType params = c.precision.policy.param_dtype;
  if (params != DType::f32()) model->set_param_dtype(params);
  return model;
}

}  // namespace

TrainConfig reference_config(const TrainConfig& c) {
  TrainConfig r = c;
  r.precision = preset_precision("fp32");
  r.optimizer.exp_avg_dtype = r.optimizer.exp_avg_sq_dtype = r.optimizer.momentum_buffer_dtype =
      StateFormat{};
  r.scaler = ScalerConfig{};
  r.scaler.kind = ScalerConfig::Kind::none;
  r.trace = false;
  r.reference.clear();
  return r;
}

namespace {

/// One run's state: model, data loader, optimizer, scaler, tracer and runtime.
struct Trainee {
  Trainee(const TrainConfig& cfg, std::unique_ptr<Model> m, const Dataset& data,
          const TrainOptions& o)
      : c(cfg),
        model(std::move(m)),
        loader(data, c.batch_size, c.shuffle, c.seed),
        opt(c.optimizer, model->params(), c.precision.policy.update),
        scaler(c.scaler),
        tracer(c.tracer),
        fp8(c.precision.policy.fp8_config) {
    rt.tracer = c.trace ? &tracer : nullptr;
    apply_precision(rt, c.precision, c.seed);
    rt.fp8 = c.precision.policy.fp8 ? &fp8 : nullptr;
    rt.threads = o.threads;
    rt.on_round = o.on_round;
  }
  Trainee(const Trainee&) = delete;
  Trainee& operator=(const Trainee&) = delete;

  /// One step: forward, scaled backward, unscale/check/skip, optimizer, scale update. Fills
  /// `grads` with the fp32 gradients the optimizer saw; `memory` (when not null) with the
  /// graph's memory rows.
  StepRow step(int64_t step, bool traced, std::vector<std::vector<float>>& grads,
               std::vector<MemoryRow>* memory);

  const TrainConfig& c;
  std::unique_ptr<Model> model;
  Loader loader;
  Optimizer opt;
  GradScaler scaler;
  Tracer tracer;
  Fp8State fp8;
  Runtime rt;
};

StepRow Trainee::step(int64_t step, bool traced, std::vector<std::vector<float>>& grads,
                      std::vector<MemoryRow>* memory) {
  std::vector<Param>& params = model->params();
  const float scale_used = scaler.scale();
  if (traced) tracer.begin_step(int(step), scale_used);
  for (Param& p : params) p.t.impl()->grad.clear();
  Batch b = loader.next();
  Tensor loss;
  enter_role(rt, c.precision, Role::forward);
  const DType in = c.precision.policy.input_dtype;
  {
    ContextGuard g(&c.precision.policy, &rt);
    if (b.x && b.x.dtype() != in) {
      Scope s("");
      b.x = cast(b.x, in, "input");
    }
    Tensor out = model->forward(b);
    Scope s("loss");
    if (c.loss == "mse") {
      Tensor y = b.y;
      if (y.dtype() != in) y = cast(y, in, scoped("target"));
      if (out.shape() != y.shape()) y = reshape(y, out.shape());
      loss = mse(out, y);
    } else {
      loss = cross_entropy(out, b.labels);
    }
  }
  const double loss_value = loss.item();
  if (memory) *memory = account_memory(loss, params, c.precision.policy, opt.state_dtypes());
  enter_role(rt, c.precision, Role::backward);
  {
    // scaler.scale(loss).backward() runs outside autocast: plain type promotion.
    ContextGuard g(nullptr, &rt);
    Tensor scaled = loss;
    if (scaler.enabled()) {
      Scope s("scaler");
      scaled = mul(loss, Tensor::scalar(scale_used, DType::f32()));
    }
    scaled.backward();
  }
  loss = Tensor();
  grads.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& g = params[i].t.grad();
    grads[i].assign(size_t(params[i].t.numel()), 0.0f);
    for (size_t j = 0; j < g.size(); ++j) grads[i][j] = static_cast<float>(g[j]);
  }
  StepRow row;
  row.step = step;
  row.loss = loss_value;
  row.loss_scale = scale_used;
  if (!scaler.enabled() || c.scaler.mistake) {
    // No unscale (none: nothing to undo; mistake: the bug) and no skipping.
    row.found_inf = GradScaler::any_nonfinite(grads);
    row.skipped = false;
  } else {
    row.found_inf = scaler.unscale(grads);
    row.skipped = row.found_inf;
  }
  enter_role(rt, c.precision, Role::update);
  if (!row.skipped) opt.step(grads, rt);
  if (!c.scaler.mistake) scaler.update(row.found_inf);
  row.growth_tracker = scaler.growth_tracker();
  row.next_scale = scaler.scale();
  for (size_t i = 0; i < params.size(); ++i) {
    UpdateRow u;
    u.name = params[i].name;
    u.dtype = params[i].t.dtype().name();
    u.elements = uint64_t(params[i].t.numel());
    if (!row.skipped) {
      u.nonzero = opt.last_stats()[i].nonzero;
      u.vanished = opt.last_stats()[i].vanished;
    }
    row.updates.push_back(std::move(u));
  }
  return row;
}

/// ‖w − w_ref‖₂ / ‖w_ref‖₂ in binary64, summed in element order (NaN when w_ref is all zero).
double relative_drift(const Values& w, const Values& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    d += (w[i] - ref[i]) * (w[i] - ref[i]);
    r += ref[i] * ref[i];
  }
  return std::sqrt(d) / std::sqrt(r);
}

}  // namespace

TrainSummary train(const TrainConfig& c, const TrainOptions& o, const StepCallback& cb) {
  // Before anything large is allocated. An .npz's arrays are bounded while they are read by
  // what the limit leaves them (they are held twice while copied into the dataset), and the
  // estimate is checked again with their real size.
  const uint64_t limit = o.max_memory ? o.max_memory : default_memory_limit();
  const MemoryEstimate before = estimate_memory(c);
  check_memory(before, limit);
  reuse_freed_memory();
  const uint64_t npz_bytes =
      uint64_t(std::max(1.0, (double(limit) - (before.total() - before.data)) / 2));
  std::unique_ptr<Model> model = make_model(c, npz_bytes);
  const detail::RunData run_data = detail::load_run_data(c, npz_bytes);
  const Dataset& data = run_data.train;
  if (!c.data_npz.empty() || !c.text_files.empty()) {
    MemoryEstimate e = estimate_memory(c, &data);
    e.data += double(run_data.val.x.size() + run_data.val.y.size()) * 16;
    check_memory(e, limit);
  }
  Trainee run(c, std::move(model), data, o);
  std::vector<Param>& params = run.model->params();
  std::unique_ptr<TrainConfig> ref_cfg;
  std::unique_ptr<Trainee> ref;
  if (!c.reference.empty()) {
    ref_cfg = std::make_unique<TrainConfig>(reference_config(c));
    TrainOptions ro;
    ro.threads = o.threads;
    ref = std::make_unique<Trainee>(*ref_cfg, make_model(*ref_cfg, npz_bytes), data, ro);
  }

  TrainSummary sum;
  bool first_window = true;
  std::vector<std::vector<float>> grads, ref_grads;
  for (int64_t step = 0; step < c.steps; ++step) {
    // A stop request (SIGINT, SIGTERM) ends the run here, between two steps.
    if (const int sig = stop_signal()) {
      sum.stop_signal = sig;
      break;
    }
    double val_loss = std::numeric_limits<double>::quiet_NaN();
    if (run_data.val.n() > 0 && c.val_every > 0 &&
        (step % c.val_every == 0 || step + 1 == c.steps))
      val_loss = validation_loss(*run.model, run_data.val, c, run.rt);
    run.rt.sr_step = uint64_t(step);
    run.rt.sr_tensor = 0;
    const bool traced = c.trace && step % c.trace_every == 0;
    StepRow row = run.step(step, traced, grads, step == 0 ? &sum.memory : nullptr);
    row.val_loss = val_loss;
    if (ref) {
      ref->step(step, false, ref_grads, nullptr);
      const std::vector<Param>& rp = ref->model->params();
      for (size_t i = 0; i < params.size(); ++i)
        row.updates[i].drift = relative_drift(params[i].t.data(), rp[i].t.data());
    }
    sum.found_inf += row.found_inf;
    sum.skipped += row.skipped;
    sum.final_loss = row.loss;
    const StepTrace* stp = traced ? &run.tracer.end_step() : nullptr;
    if (traced) {
      const StepTrace& st = *stp;
      if (first_window) {
        sum.k_low = st.k_low;
        sum.k_high = st.k_high;
        sum.window_known = true;
        first_window = false;
      } else if (sum.k_low != INT_MIN) {
        if (st.k_low == INT_MIN) {
          sum.k_low = sum.k_high = INT_MIN;
        } else {
          sum.k_low = std::max(sum.k_low, st.k_low);
          sum.k_high = std::min(sum.k_high, st.k_high);
          if (sum.k_low > sum.k_high) sum.k_low = sum.k_high = INT_MIN;
        }
      }
    }
    if (cb) cb(row, stp, params, grads);
    sum.steps_done = step + 1;
    if (o.on_progress) o.on_progress(step + 1, c.steps);
  }
  sum.final_scale = run.scaler.scale();
  sum.final_params = params;
  return sum;
}

namespace {

TrainSummary write_run_into(const TrainConfig& c, const std::string& out_dir,
                            const TrainOptions& o) {
  const std::string d = out_dir + "/";
  detail::RunFiles files(c, d);
  TrainSummary sum = train(c, o, [&](const StepRow& r, const StepTrace* st,
                                     const std::vector<Param>& params,
                                     const std::vector<std::vector<float>>& grads) {
    files.add_step(r, st, params, grads);
  });
  files.finish(sum);
  // Until here the folder is as it was; from here it is the old run, or no run (no
  // manifest), or the new run.
  files.publish(detail::run_manifest(c, sum, files));
  return sum;
}

}  // namespace

TrainSummary write_run(const TrainConfig& c, const std::string& out_dir, const TrainOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  check_disk(estimate_disk(c), o.max_disk, out_dir);
  const bool existed = fs::exists(out_dir, ec);
  fs::create_directories(out_dir, ec);
  if (ec) throw InputError("cannot create output directory '" + out_dir + "': " + ec.message());
  // What a killed run (SIGKILL) left behind.
  remove_stale_tmp_files(out_dir, {"steps.csv", "trace.csv", "scale_window.csv", "memory.csv",
                                   "manifest.json", "weights.npz", "grads.npz", "config.toml",
                                   "updates.csv", "blocks.csv"});
  try {
    return write_run_into(c, out_dir, o);
  } catch (...) {
    // The temporary files are gone already; do not leave an empty directory behind either.
    if (!existed) fs::remove(out_dir, ec);  // only removes it when empty
    throw;
  }
}

bool run_complete(const std::string& dir) {
  std::error_code ec;
  const std::string path = dir + "/manifest.json";
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  try {
    const nlohmann::json m = nlohmann::json::parse(read_file(path));
    return m.value("complete", true);
  } catch (const std::exception&) {
    return false;  // unreadable: not a finished run
  }
}

}  // namespace halfway::sim
