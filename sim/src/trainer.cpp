#include "halfway/sim/trainer.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "halfway/names.hpp"
#include "halfway/sim/accumulate.hpp"
#include "halfway/sim/fp8.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/sim/npz.hpp"

namespace halfway::sim {

namespace {

const NpyArray& need(const NpzFile& f, const char* key, const std::string& what) {
  auto it = f.find(key);
  if (it == f.end()) throw InputError(what + ": array '" + key + "' is missing");
  // After the arrays are read: float64 data must also fit fp32, which the model reads.
  check_finite_fp32(it->second.values, what + ": array '" + key + "'");
  return it->second;
}

void check_ids(const NpyArray& a, const char* key, int64_t limit, const std::string& what) {
  for (double v : a.values)
    if (v != std::floor(v) || v < 0 || v >= double(limit))
      throw InputError(what + ": array '" + key + "' must hold integers in [0, " +
                       std::to_string(limit) + ")");
}

Dataset load_data_unchecked(const TrainConfig& c, uint64_t npz_bytes);

/// `npz_bytes`: the most an .npz's values may take (read_npz's limit).
Dataset load_data(const TrainConfig& c, uint64_t npz_bytes) {
  Dataset d = load_data_unchecked(c, npz_bytes);
  if (c.data_npz.empty()) {
    check_finite_fp32(d.x, "synthetic data: 'x'");
    check_finite_fp32(d.y, "synthetic data: 'y' (data.noise or data.spread too large?)");
  }
  return d;
}

Dataset load_data_unchecked(const TrainConfig& c, uint64_t npz_bytes) {
  const bool mlp = c.model_kind == "mlp";
  const int fin = mlp ? c.mlp.layers.front() : 0, fout = mlp ? c.mlp.layers.back() : 0;
  if (!c.data_npz.empty()) {
    const NpzFile f = read_npz(c.data_npz, npz_bytes);
    const std::string what = "'" + c.data_npz + "'";
    const NpyArray& x = need(f, "x", what);
    const NpyArray& y = need(f, "y", what);
    Dataset d;
    if (x.shape.size() != 2 || x.shape[0] < 1)
      throw InputError(what + ": array 'x' has shape " + shape_str(x.shape) + ", expected 2-D");
    const int64_t N = x.shape[0];
    d.x_shape = x.shape;
    d.x = x.values;
    if (mlp) {
      if (x.shape[1] != fin)
        throw InputError(what + ": array 'x' has shape " + shape_str(x.shape) +
                         ", the model needs [N, " + std::to_string(fin) + "]");
      if (c.loss == "mse") {
        const bool ok = (y.shape.size() == 2 && y.shape[0] == N && y.shape[1] == fout) ||
                        (y.shape.size() == 1 && y.shape[0] == N && fout == 1);
        if (!ok)
          throw InputError(what + ": array 'y' has shape " + shape_str(y.shape) + ", expected [" +
                           std::to_string(N) + ", " + std::to_string(fout) + "]");
        d.y_shape = {N, fout};
      } else {
        if (y.shape != Shape{N})
          throw InputError(what + ": array 'y' has shape " + shape_str(y.shape) +
                           ", expected class labels [" + std::to_string(N) + "]");
        check_ids(y, "y", fout, what);
        d.y_shape = {N};
        d.y_labels = true;
      }
    } else {
      const auto& m = c.transformer;
      if (x.shape[1] > m.seq_len)
        throw InputError(what + ": array 'x' has sequences of length " +
                         std::to_string(x.shape[1]) + " > model.seq_len " +
                         std::to_string(m.seq_len));
      if (y.shape != x.shape)
        throw InputError(what + ": array 'y' has shape " + shape_str(y.shape) + ", expected " +
                         shape_str(x.shape));
      check_ids(x, "x", m.vocab, what);
      check_ids(y, "y", m.vocab, what);
      d.x_ids = d.y_labels = true;
      d.y_shape = y.shape;
    }
    d.y = y.values;
    return d;
  }
  if (mlp) {
    if (c.synthetic == "regression") {
      if (c.loss != "mse") throw InputError("synthetic regression data need loss.kind = \"mse\"");
      return synthetic_regression(c.data_n, fin, fout, c.noise, c.seed);
    }
    if (c.synthetic == "blobs") {
      if (c.loss != "cross_entropy")
        throw InputError("synthetic blobs need loss.kind = \"cross_entropy\"");
      if (fout < 2) throw InputError("synthetic blobs need at least 2 output classes");
      return synthetic_blobs(c.data_n, fin, fout, c.spread, c.seed);
    }
    throw InputError("synthetic '" + c.synthetic + "' data need model.kind = \"transformer\"");
  }
  if (c.synthetic == "copy" || c.synthetic == "reverse")
    return synthetic_sequence(c.data_n, c.transformer.seq_len, c.transformer.vocab,
                              c.synthetic == "reverse", c.seed);
  throw InputError("the transformer needs synthetic = \"copy\" or \"reverse\" or an .npz");
}

struct GradCounts {
  uint64_t values = 0, underflow = 0, overflow = 0;
};
GradCounts grad_counts(const StepTrace& st) {
  GradCounts g;
  for (const auto& r : st.records)
    if (r.is_grad() && r.dtype.is_low()) {
      g.values += r.events.total;
      g.underflow += r.events.underflow;
      g.overflow += r.events.overflow;
    }
  return g;
}

std::string k_str(int k) { return k == INT_MIN ? "" : std::to_string(k); }

}  // namespace

TrainSummary train(const TrainConfig& c, const TrainOptions& o, const StepCallback& cb) {
  // Before anything large is allocated. An .npz's arrays are bounded while they are read by
  // what the limit leaves them (they are held twice while copied into the dataset), and the
  // estimate is checked again with their real size.
  const uint64_t limit = o.max_memory ? o.max_memory : default_memory_limit();
  const MemoryEstimate before = estimate_memory(c);
  check_memory(before, limit);
  const uint64_t npz_bytes =
      uint64_t(std::max(1.0, (double(limit) - (before.total() - before.data)) / 2));
  Rng rng(c.seed);
  std::unique_ptr<Model> model =
      c.model_kind == "mlp" ? make_mlp(c.mlp, rng) : make_transformer(c.transformer, rng);
  if (!c.init_npz.empty()) model->load(read_npz(c.init_npz, npz_bytes), "'" + c.init_npz + "'");
  if (c.policy.param_dtype != DType::f32()) model->set_param_dtype(c.policy.param_dtype);
  const Dataset data = load_data(c, npz_bytes);
  if (!c.data_npz.empty()) check_memory(estimate_memory(c, &data), limit);
  Loader loader(data, c.batch_size, c.shuffle, c.seed);
  std::vector<Param>& params = model->params();
  Optimizer opt(c.optimizer, params);
  GradScaler scaler(c.scaler);
  Tracer tracer(c.tracer);
  Fp8State fp8(c.policy.fp8_config);
  Runtime rt;
  rt.tracer = c.trace ? &tracer : nullptr;
  rt.rounding.rounding = c.rounding;
  rt.rounding.seed = c.seed;
  rt.rounding.random_bits = c.sr_random_bits;
  rt.accumulator = &accumulator_by_name(c.policy.accumulation);
  rt.fp8 = c.policy.fp8 ? &fp8 : nullptr;
  rt.threads = o.threads;
  rt.on_round = o.on_round;

  TrainSummary sum;
  bool first_window = true;
  for (int64_t step = 0; step < c.steps; ++step) {
    // A stop request (SIGINT, SIGTERM) ends the run here, between two steps.
    if (const int sig = stop_signal()) {
      sum.stop_signal = sig;
      break;
    }
    rt.sr_step = uint64_t(step);
    rt.sr_tensor = 0;
    const bool traced = c.trace && step % c.trace_every == 0;
    const float scale_used = scaler.scale();
    if (traced) tracer.begin_step(int(step), scale_used);
    for (Param& p : params) p.t.impl()->grad.clear();
    Batch b = loader.next();
    Tensor loss;
    {
      ContextGuard g(&c.policy, &rt);
      if (b.x && b.x.dtype() != c.policy.input_dtype) {
        Scope s("");
        b.x = cast(b.x, c.policy.input_dtype, "input");
      }
      Tensor out = model->forward(b);
      Scope s("loss");
      if (c.loss == "mse") {
        Tensor y = b.y;
        if (y.dtype() != c.policy.input_dtype) y = cast(y, c.policy.input_dtype, scoped("target"));
        if (out.shape() != y.shape()) y = reshape(y, out.shape());
        loss = mse(out, y);
      } else {
        loss = cross_entropy(out, b.labels);
      }
    }
    const double loss_value = loss.item();
    if (step == 0) sum.memory = account_memory(loss, params, c.policy, opt.state_per_element());
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
    std::vector<std::vector<float>> grads(params.size());
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
    if (!row.skipped) opt.step(grads, rt);
    if (!c.scaler.mistake) scaler.update(row.found_inf);
    row.growth_tracker = scaler.growth_tracker();
    row.next_scale = scaler.scale();
    sum.found_inf += row.found_inf;
    sum.skipped += row.skipped;
    sum.final_loss = loss_value;
    const StepTrace* stp = traced ? &tracer.end_step() : nullptr;
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
  sum.final_scale = scaler.scale();
  sum.final_params = params;
  return sum;
}

namespace {

TrainSummary write_run_into(const TrainConfig& c, const std::string& out_dir,
                            const TrainOptions& o) {
  const std::string d = out_dir + "/";
  AtomicFile steps(d + "steps.csv"), trace(d + "trace.csv"), window(d + "scale_window.csv");
  steps.out() << "step,loss,loss_scale,found_inf,skipped,growth_tracker,next_scale,grad_values,"
                 "grad_underflow,grad_overflow,k_low,k_high\n";
  trace.out() << "step,name,op,kind,dtype,total,zeros,underflow,subnormal,overflow,nan,inexact,"
                 "nonfinite_in,vanished,small_update,min_exp,max_exp,max_abs,hist\n";
  window.out() << "step,loss_scale,k,values,underflow,underflow_fraction,overflow,safe\n";
  // Each step's gradients go to disk as the run goes (grads.npz is built from them at the end).
  std::unique_ptr<NpzWriter> grads_out;
  if (c.save_grads) grads_out = std::make_unique<NpzWriter>(d + "grads.npz");
  // Rows are assembled with std::to_chars (locale-free, shortest round-trip text) and written
  // with one call per step and file.
  std::string line;
  auto num = [&line](auto v) {
    char b[64];
    line.append(b, std::to_chars(b, b + sizeof b, v).ptr);
  };
  auto sep = [&line]() { line += ','; };
  auto on_step = [&](const StepRow& r, const StepTrace* st, const std::vector<Param>& params,
                     const std::vector<std::vector<float>>& grads) {
    line.clear();
    num(r.step), sep(), num(float(r.loss)), sep(), num(r.loss_scale), sep(), num(int(r.found_inf));
    sep(), num(int(r.skipped)), sep(), num(r.growth_tracker), sep(), num(r.next_scale), sep();
    if (st) {
      const GradCounts g = grad_counts(*st);
      num(g.values), sep(), num(g.underflow), sep(), num(g.overflow), sep();
      line += k_str(st->k_low) + ',' + k_str(st->k_high);
    } else {
      line += ",,,,";
    }
    line += '\n';
    steps.out() << line;
    if (st) {
      line.clear();
      for (const TraceRecord& t : st->records) {
        const EventCounts& e = t.events;
        num(st->step), sep();
        line += t.name + ',' + t.op + ',' + kind_name(t.kind) + ',' + t.dtype.name() + ',';
        for (uint64_t v : {e.total, e.zero, e.underflow, e.subnormal, e.overflow, e.nan, e.inexact,
                           t.nonfinite_in, t.vanished, t.small_update})
          num(v), sep();
        line += k_str(t.min_exp()) + ',' + k_str(t.max_exp()) + ',';
        num(float(t.max_abs)), sep();
        bool first = true;
        for (int i = 0; i < TraceRecord::kBins; ++i)
          if (t.hist[size_t(i)]) {
            if (!first) line += ';';
            first = false;
            num(i + TraceRecord::kMinExp), line += ':', num(t.hist[size_t(i)]);
          }
        line += '\n';
      }
      trace.out() << line;
      // Scales are predicted from low-precision gradient roundings; with none there is nothing
      // to predict (fp32) and no rows are written.
      line.clear();
      for (const WindowRow& w : st->window) {
        if (w.values == 0) continue;
        const bool safe = !w.overflow && w.fraction() <= c.tracer.underflow_tolerance;
        num(st->step), sep(), num(float(st->loss_scale)), sep(), num(w.k), sep(), num(w.values);
        sep(), num(w.underflow), sep(), num(w.fraction()), sep(), num(int(w.overflow)), sep();
        num(int(safe)), line += '\n';
      }
      window.out() << line;
    }
    if (grads_out)
      for (size_t i = 0; i < params.size(); ++i)
        grads_out->add_f4("step" + std::to_string(r.step) + "." + params[i].name,
                          params[i].t.shape(), grads[i].data(), grads[i].size());
  };
  TrainSummary sum = train(c, o, on_step);

  {
    AtomicFile mem(d + "memory.csv");
    mem.out() << "category,dtype,elements,bytes\n";
    for (const MemoryRow& m : sum.memory)
      mem.out() << m.category << ',' << m.dtype << ',' << m.elements << ',' << m.bytes << '\n';
    mem.commit();
  }
  steps.commit();
  trace.commit();
  window.commit();
  std::vector<std::string> outputs{"steps.csv", "trace.csv", "scale_window.csv", "memory.csv"};
  if (c.save_weights) {
    std::vector<std::pair<std::string, NpyArray>> arrays;
    for (const Param& p : sum.final_params) {
      NpyArray a;
      a.dtype = "f4";
      a.shape = p.t.shape();
      a.values = p.t.data();
      arrays.emplace_back(p.name, a);
    }
    write_npz(d + "weights.npz", arrays);
    outputs.push_back("weights.npz");
  }
  if (c.save_grads) {
    grads_out->commit();
    outputs.push_back("grads.npz");
  }

  using nlohmann::json;
  json m;
  m["halfway_version"] = sim_version();
  m["git_revision"] = git_revision();
  m["seed"] = c.seed;
  m["config_file"] = c.source_name;
  // A run stopped by SIGINT/SIGTERM holds the files of its finished steps only.
  m["complete"] = sum.complete();
  m["steps_done"] = sum.steps_done;
  try {
    m["config"] = json::parse(c.config_json);
  } catch (const json::exception&) {
    m["config"] = c.config_json;  // TOML values JSON cannot hold (inf, nan): keep the text
  }
  json pol;
  pol["name"] = c.policy.name;
  pol["low"] = c.policy.low.name();
  pol["params"] = c.policy.param_dtype.name();
  pol["inputs"] = c.policy.input_dtype.name();
  pol["master_weights"] = c.policy.master_weights();
  pol["accumulation"] = c.policy.accumulation;
  pol["rounding"] = rounding_name(c.rounding);
  if (c.rounding == Rounding::stochastic) pol["sr_random_bits"] = c.sr_random_bits;
  if (c.policy.fp8) {
    pol["fp8_forward"] = format_name(c.policy.fp8_config.fwd);
    pol["fp8_backward"] = format_name(c.policy.fp8_config.bwd);
    pol["scaling"] = scaling_name(c.policy.fp8_config.scaling);
    if (c.policy.fp8_config.scaling == Fp8Scaling::delayed) {
      pol["amax_history_len"] = c.policy.fp8_config.amax_history_len;
      pol["amax_compute_algo"] = amax_algo_name(c.policy.fp8_config.amax_compute_algo);
    }
    pol["margin"] = c.policy.fp8_config.margin;
  }
  json rules = json::object();
  for (int i = 0; i < kOpCount; ++i)
    rules[op_name(OpKind(i))] = rule_name(c.policy.rule(OpKind(i)));
  pol["rules"] = rules;
  m["policy"] = pol;
  m["outputs"] = outputs;
  json s;
  s["steps"] = c.steps;
  s["final_loss"] = sum.final_loss;
  s["final_scale"] = sum.final_scale;
  s["found_inf_steps"] = sum.found_inf;
  s["skipped_steps"] = sum.skipped;
  s["memory_bytes"] = total_bytes(sum.memory);
  if (sum.window_known && sum.k_low != INT_MIN)
    s["safe_window"] = {{"k_low", sum.k_low}, {"k_high", sum.k_high}};
  else
    s["safe_window"] = nullptr;
  m["summary"] = s;
  write_file_atomic(d + "manifest.json", m.dump(2) + "\n");
  return sum;
}

}  // namespace

TrainSummary write_run(const TrainConfig& c, const std::string& out_dir, const TrainOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool existed = fs::exists(out_dir, ec);
  fs::create_directories(out_dir, ec);
  if (ec) throw InputError("cannot create output directory '" + out_dir + "': " + ec.message());
  // What a killed run (SIGKILL) left behind.
  remove_stale_tmp_files(out_dir, {"steps.csv", "trace.csv", "scale_window.csv", "memory.csv",
                                   "manifest.json", "weights.npz", "grads.npz", "config.toml"});
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
