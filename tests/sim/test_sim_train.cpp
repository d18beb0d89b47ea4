// The trainer end to end: config errors, data errors, determinism (seed, thread count), the
// atomic outputs, mistake mode, pure low precision, fp8 and the transformer.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <fstream>
#include <sstream>

#include "halfway/halfway.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/sim/npz.hpp"
#include "halfway/sim/context.hpp"
#include "halfway/sim/trainer.hpp"
#include "configs.hpp"
#include "scratch.hpp"

using namespace halfway;
using namespace halfway::sim;
namespace fs = std::filesystem;

namespace {

const std::string kMlp = halfway_test::config(
    "mlp", {{"model.activation", "\"relu\""}, {"data.n", std::nullopt}, {"run.steps", "4"}});

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const auto p = s.find(from);
  REQUIRE(p != std::string::npos);
  return s.replace(p, from.size(), to);
}

fs::path scratch(const std::string& name) { return halfway_test::scratch_dir("sim", name); }

using halfway_test::slurp;

std::vector<StepRow> rows_of(const TrainConfig& c, std::vector<StepTrace>* traces = nullptr,
                             std::vector<Param>* final_params = nullptr) {
  std::vector<StepRow> rows;
  auto s = train(c, {}, [&](const StepRow& r, const StepTrace* st, const std::vector<Param>&,
                            const std::vector<std::vector<float>>&) {
    rows.push_back(r);
    if (traces && st) traces->push_back(*st);
  });
  if (final_params) *final_params = s.final_params;
  return rows;
}

void expect_error(const std::string& toml, const std::string& fragment) {
  INFO("expecting an error mentioning: " << fragment);
  try {
    parse_config(toml, ".");
    FAIL("no error");
  } catch (const InputError& e) {
    const std::string msg = e.what();
    CHECK(msg.find(fragment) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
}

}  // namespace

TEST_CASE("config errors are one-line input errors", "[sim][train]") {
  CHECK_NOTHROW(parse_config(kMlp, "."));
  expect_error(replace(kMlp, "torch-cuda-fp16", "torch-tpu-fp16"), "unknown policy 'torch-tpu-fp16'");
  expect_error(replace(kMlp, "policy = \"torch-cuda-fp16\"",
                       "policy = \"torch-cuda-fp16\"\n[precision.ops]\nconv9d = \"lower\""),
               "unknown op 'conv9d'");
  expect_error(replace(kMlp, "policy = \"torch-cuda-fp16\"",
                       "policy = \"torch-cuda-fp16\"\n[precision.ops]\nmatmul = \"lowest\""),
               "unknown cast rule 'lowest'");
  expect_error(replace(kMlp, "lr = 0.01", "lr = 0.01\nmomentun = 0.9"), "unknown option 'optimizer.momentun'");
  expect_error(replace(kMlp, "[run]", "[runn]"), "unknown option 'runn'");
  // The count of values flushed to zero was called underflow; the old key says its new name.
  expect_error(kMlp + "\n[trace]\nunderflow_tolerance = 0.01\n",
               "'trace.underflow_tolerance' is now 'trace.flush_tolerance'");
  expect_error(replace(kMlp, "lr = 0.01", ""), "missing field 'optimizer.lr'");
  expect_error(replace(kMlp, "batch_size = 64", ""), "missing field 'data.batch_size'");
  expect_error(replace(kMlp, "steps = 4", ""), "missing field 'run.steps'");
  expect_error(replace(kMlp, "kind = \"dynamic\"", "kind = \"static\""), "missing field 'scaler.scale'");
  for (const char* bad : {"0.0", "-8.0", "inf", "nan", "-inf"})
    expect_error(replace(kMlp, "kind = \"dynamic\"", std::string("kind = \"static\"\nscale = ") + bad),
                 "scaler.scale");
  expect_error(replace(kMlp, "kind = \"dynamic\"", "kind = \"dynamic\"\ngrowth_factor = 1.0"),
               "growth_factor");
  expect_error(replace(kMlp, "kind = \"dynamic\"", "kind = \"dynamic\"\nbackoff_factor = 1.0"),
               "backoff_factor");
  expect_error(replace(kMlp, "kind = \"dynamic\"", "kind = \"dynamic\"\nbackoff_factor = 2"),
               "backoff_factor");
  expect_error(replace(kMlp, "\"relu\"", "\"swish\""), "unknown activation");
  expect_error(replace(kMlp, "steps = 4", "steps = \"4\""), "'run.steps' must be an integer");
  expect_error(replace(kMlp, "[model]", "[model"), "config:");
}

TEST_CASE("the config's accumulation is resolved once, at parse time", "[sim][train]") {
  CHECK(parse_config(kMlp, ".").precision.accumulation == &accumulator_by_name("fp32"));
  const std::string cpu =
      replace(kMlp, "policy = \"torch-cuda-fp16\"", "policy = \"torch-cpu-bf16\"");
  CHECK(parse_config(cpu, ".").precision.accumulation == &accumulator_by_name("torch-cpu"));
  const std::string a100 = replace(cpu, "policy = \"torch-cpu-bf16\"",
                                   "policy = \"torch-cpu-bf16\"\naccumulation = \"a100\"");
  CHECK(parse_config(a100, ".").precision.accumulation == &accumulator_by_name("a100"));
  CHECK_THROWS_WITH(parse_config(replace(a100, "\"a100\"", "\"a200\""), "."),
                    Catch::StartsWith("unknown accumulation 'a200' ("));
}

TEST_CASE("data and initial-weight errors", "[sim][train]") {
  const fs::path dir = scratch("data");
  auto arr = [](Shape s, double fill) {
    NpyArray a;
    a.dtype = "f4";
    a.shape = s;
    a.values.assign(size_t(numel(s)), fill);
    return a;
  };
  const std::string cfg = replace(kMlp, "synthetic = \"regression\"", "npz = \"data.npz\"");
  auto run_with = [&](std::vector<std::pair<std::string, NpyArray>> arrays) {
    write_npz((dir / "data.npz").string(), arrays);
    TrainConfig c = parse_config(cfg, dir.string());
    c.steps = 1;
    rows_of(c);
  };
  auto expect = [&](std::vector<std::pair<std::string, NpyArray>> arrays, const std::string& frag) {
    INFO(frag);
    try {
      run_with(arrays);
      FAIL("no error");
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).find(frag) != std::string::npos);
    }
  };
  CHECK_NOTHROW(run_with({{"x", arr({8, 10}, 0.5)}, {"y", arr({8, 1}, 1.0)}}));
  CHECK_NOTHROW(run_with({{"x", arr({8, 10}, 0.5)}, {"y", arr({8}, 1.0)}}));
  expect({{"x", arr({8, 10}, 0.5)}}, "array 'y' is missing");
  expect({{"x", arr({8, 9}, 0.5)}, {"y", arr({8, 1}, 1.0)}}, "array 'x' has shape [8, 9]");
  expect({{"x", arr({8, 10}, 0.5)}, {"y", arr({7, 1}, 1.0)}}, "array 'y' has shape [7, 1]");
  expect({{"x", arr({8, 10}, std::nan(""))}, {"y", arr({8, 1}, 1.0)}}, "NaN or inf");
  expect({{"x", arr({8, 10}, 0.5)}, {"y", arr({8, 1}, INFINITY)}}, "NaN or inf");
  // initial weights with PyTorch state_dict names
  write_npz((dir / "data.npz").string(), {{"x", arr({8, 10}, 0.5)}, {"y", arr({8, 1}, 1.0)}});
  const std::string icfg = replace(cfg, "activation = \"relu\"", "activation = \"relu\"\ninit = \"init.npz\"");
  auto init_with = [&](std::vector<std::pair<std::string, NpyArray>> arrays) {
    write_npz((dir / "init.npz").string(), arrays);
    TrainConfig c = parse_config(icfg, dir.string());
    c.steps = 1;
    std::vector<Param> fp;
    rows_of(c, nullptr, &fp);
    return fp;
  };
  std::vector<std::pair<std::string, NpyArray>> good{{"0.weight", arr({32, 10}, 0.01)},
                                                     {"0.bias", arr({32}, 0.0)},
                                                     {"2.weight", arr({1, 32}, 0.02)},
                                                     {"2.bias", arr({1}, 0.0)}};
  CHECK_NOTHROW(init_with(good));
  auto bad = good;
  bad[2].second = arr({32, 1}, 0.02);
  CHECK_THROWS_WITH(init_with(bad), Catch::Contains("'2.weight' has shape [32, 1]"));
  bad = good;
  bad.pop_back();
  CHECK_THROWS_WITH(init_with(bad), Catch::Contains("'2.bias' is missing"));
  fs::remove_all(dir);
}

TEST_CASE("outputs are byte-identical for the same seed, whatever the thread count", "[sim][train]") {
  // Big enough that the matrix products really split across threads.
  std::string cfg = replace(kMlp, "layers = [10, 32, 1]", "layers = [64, 128, 128, 8]");
  cfg = replace(cfg, "batch_size = 64", "batch_size = 256");
  cfg = replace(cfg, "steps = 4", "steps = 2");
  const TrainConfig c = parse_config(cfg, ".");
  const fs::path a = scratch("t1"), b = scratch("t3");
  TrainOptions one, three;
  three.threads = 3;
  write_run(c, a.string(), one);
  write_run(c, b.string(), three);
  for (const char* f : {"steps.csv", "trace.csv", "scale_window.csv", "memory.csv", "manifest.json"}) {
    INFO(f);
    const std::string x = slurp(a / f);
    CHECK(!x.empty());
    CHECK(x == slurp(b / f));
  }
  // Nothing temporary is left behind.
  for (const auto& e : fs::directory_iterator(a))
    CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
  fs::remove_all(a);
  fs::remove_all(b);
}

namespace {

/// A wider MLP for 2 steps under torch-cuda-fp16 with stochastic rounding of 8 random bits.
std::string stochastic_mlp() {
  std::string cfg = replace(kMlp, "layers = [10, 32, 1]", "layers = [64, 128, 128, 8]");
  cfg = replace(cfg, "batch_size = 64", "batch_size = 256");
  cfg = replace(cfg, "steps = 4", "steps = 2");
  return replace(cfg, "policy = \"torch-cuda-fp16\"",
                 "policy = \"torch-cuda-fp16\"\nrounding = \"stochastic\"\nsr_random_bits = 8");
}

}  // namespace

TEST_CASE("stochastic rounding: byte-identical at any thread count, streams per step and tensor",
          "[sim][train][stochastic]") {
  const std::string cfg = stochastic_mlp();
  const TrainConfig c = parse_config(cfg, ".");
  REQUIRE(c.precision.rounding == Rounding::stochastic);
  REQUIRE(c.precision.sr_random_bits == 8);
  for (const char* bad : {"sr_random_bits = 0", "sr_random_bits = 33"})
    CHECK_THROWS_WITH(parse_config(replace(cfg, "sr_random_bits = 8", bad), "."),
                      Catch::Contains("'precision.sr_random_bits' must be in 1..32"));
  const fs::path a = scratch("sr1"), b = scratch("sr3");
  TrainOptions one, three;
  three.threads = 3;
  write_run(c, a.string(), one);
  write_run(c, b.string(), three);
  for (const char* f : {"steps.csv", "trace.csv", "manifest.json"}) {
    INFO(f);
    CHECK(slurp(a / f) == slurp(b / f));
  }
  CHECK(slurp(a / "manifest.json").find("\"sr_random_bits\": 8") != std::string::npos);
  fs::remove_all(a);
  fs::remove_all(b);
  // The stream of a rounding call: (seed, step·2^32 + tensor), offset 0, tensor counting the
  // step's rounding calls; compared with quantize_f32 given that stream directly.
  Runtime rt;
  rt.rounding.rounding = Rounding::stochastic;
  rt.rounding.seed = 77;
  rt.rounding.random_bits = 8;
  rt.sr_step = 5;
  std::vector<double> v0(100), v1(100);
  for (size_t i = 0; i < v0.size(); ++i) v0[i] = v1[i] = 1.0 + 0.37e-3 * double(i);
  std::vector<float> in(v0.begin(), v0.end()), want(100);
  round_into(rt, DType::f32(), v0, nullptr);  // tensor 0 (fp32: native, no draws)
  round_into(rt, DType::low(formats::fp16), v1, nullptr);  // tensor 1
  BulkOptions o = rt.rounding;
  o.subsequence = (uint64_t(5) << 32) | 1;
  quantize_f32(formats::fp16, in.data(), want.data(), in.size(), o);
  for (size_t i = 0; i < v1.size(); ++i) CHECK(v1[i] == double(want[i]));
  CHECK(rt.sr_tensor == 2);
}

TEST_CASE("precision.sr_pack_random_bits: packed draws in a run, at any thread count",
          "[sim][train][stochastic]") {
  const std::string cfg = stochastic_mlp();
  const TrainConfig unpacked = parse_config(cfg, ".");
  const TrainConfig packed = parse_config(
      replace(cfg, "sr_random_bits = 8", "sr_random_bits = 8\nsr_pack_random_bits = true"), ".");
  REQUIRE(!unpacked.precision.sr_pack_random_bits);
  REQUIRE(packed.precision.sr_pack_random_bits);
  CHECK_THROWS_WITH(
      parse_config(replace(cfg, "sr_random_bits = 8", "sr_pack_random_bits = 1"), "."),
      Catch::Contains("sr_pack_random_bits"));
  const fs::path a = scratch("pk1"), b = scratch("pk3"), u = scratch("pku");
  TrainOptions one, three;
  three.threads = 3;
  write_run(packed, a.string(), one);
  write_run(packed, b.string(), three);
  write_run(unpacked, u.string(), one);
  for (const char* f : {"steps.csv", "trace.csv", "manifest.json"}) {
    INFO(f);
    CHECK(slurp(a / f) == slurp(b / f));
  }
  // Other draws per element than unpacked: the run's roundings, and so its trace, differ.
  CHECK(slurp(a / "trace.csv") != slurp(u / "trace.csv"));
  CHECK(slurp(a / "manifest.json").find("\"sr_pack_random_bits\": true") != std::string::npos);
  CHECK(slurp(u / "manifest.json").find("sr_pack_random_bits") == std::string::npos);
  // The rounding of a call: quantize_f32 with the call's stream and packed draws.
  Runtime rt;
  apply_precision(rt, packed.precision, 77);
  rt.sr_step = 5;
  std::vector<double> v(100);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1.0 + 0.37e-3 * double(i);
  std::vector<float> in(v.begin(), v.end()), want(v.size());
  round_into(rt, DType::low(formats::fp16), v, nullptr);  // tensor 0
  BulkOptions o;
  o.rounding = Rounding::stochastic;
  o.seed = 77;
  o.random_bits = 8;
  o.pack_random_bits = true;
  o.subsequence = uint64_t(5) << 32;
  quantize_f32(formats::fp16, in.data(), want.data(), in.size(), o);
  bool same = true;
  for (size_t i = 0; i < v.size(); ++i) same &= v[i] == double(want[i]);
  CHECK(same);
  fs::remove_all(a);
  fs::remove_all(b);
  fs::remove_all(u);
}

TEST_CASE("a different seed gives different data and weights", "[sim][train]") {
  const auto r0 = rows_of(parse_config(kMlp, "."));
  const auto r1 = rows_of(parse_config(replace(kMlp, "seed = 0", "seed = 1"), "."));
  CHECK(r0[0].loss != r1[0].loss);
  const auto r0b = rows_of(parse_config(kMlp, "."));
  for (size_t i = 0; i < r0.size(); ++i) CHECK(r0[i].loss == r0b[i].loss);
}

TEST_CASE("mistake mode: the optimizer sees scaled gradients", "[sim][train]") {
  // SGD from the same start: with the bug the first update is scale times larger.
  std::string cfg = replace(kMlp, "kind = \"adam\"", "kind = \"sgd\"");
  cfg = replace(cfg, "kind = \"dynamic\"", "kind = \"static\"\nscale = 1024.0");
  cfg = replace(cfg, "steps = 4", "steps = 1");
  std::vector<Param> ok, bug, start;
  TrainConfig c0 = parse_config(cfg, ".");
  c0.optimizer.lr = 0;
  rows_of(c0, nullptr, &start);
  rows_of(parse_config(cfg, "."), nullptr, &ok);
  rows_of(parse_config(replace(cfg, "scale = 1024.0", "scale = 1024.0\nmistake = true"), "."), nullptr,
          &bug);
  double ratio_min = 1e9, ratio_max = 0;
  for (size_t i = 0; i < ok.size(); ++i)
    for (size_t j = 0; j < ok[i].t.data().size(); ++j) {
      const double d_ok = ok[i].t.data()[j] - start[i].t.data()[j];
      const double d_bug = bug[i].t.data()[j] - start[i].t.data()[j];
      if (std::fabs(d_ok) < 1e-6) continue;
      ratio_min = std::min(ratio_min, d_bug / d_ok);
      ratio_max = std::max(ratio_max, d_bug / d_ok);
    }
  CHECK(ratio_min > 1000);
  CHECK(ratio_max < 1050);
}

TEST_CASE("dynamic scaling recovers from overflow; skipped steps keep the weights", "[sim][train]") {
  // pure-fp16 with the default 2^16 scale: the very first gradient (the scaled loss's seed,
  // 65536, rounded into the fp16 loss) overflows, so the first step is skipped and backs off.
  std::string cfg = replace(kMlp, "torch-cuda-fp16", "pure-fp16");
  cfg = replace(cfg, "batch_size = 64", "batch_size = 1024");  // one batch: same data each step
  cfg = replace(cfg, "kind = \"dynamic\"", "kind = \"dynamic\"\ngrowth_interval = 2");
  cfg = replace(cfg, "steps = 4", "steps = 6");
  const auto rows = rows_of(parse_config(cfg, "."));
  CHECK(rows[0].found_inf);
  CHECK(rows[0].skipped);
  CHECK(rows[0].next_scale == 32768.0f);
  CHECK(rows[1].loss == rows[0].loss);  // the skipped step did not move the weights
  CHECK(!rows[1].found_inf);
  CHECK(rows[2].loss < rows[1].loss);
  CHECK(rows[2].next_scale == 65536.0f);  // grew back after growth_interval clean steps
}

TEST_CASE("pure-fp16 SGD with a tiny learning rate: updates vanish", "[sim][train]") {
  std::string cfg = replace(kMlp, "torch-cuda-fp16", "pure-fp16");
  cfg = replace(cfg, "kind = \"adam\"\nlr = 0.01", "kind = \"sgd\"\nlr = 1e-5");
  cfg = replace(cfg, "kind = \"dynamic\"", "kind = \"none\"");
  cfg = replace(cfg, "steps = 4", "steps = 1");
  std::vector<StepTrace> tr;
  rows_of(parse_config(cfg, "."), &tr);
  REQUIRE(tr.size() == 1);
  uint64_t vanished = 0, updates = 0;
  for (const TraceRecord& r : tr[0].records)
    if (r.kind == TraceKind::update) {
      vanished += r.vanished;
      updates += r.events.total;
    }
  CHECK(updates == 385);
  CHECK(vanished > 300);
}

TEST_CASE("memory: mixed precision halves activations, pure halves everything", "[sim][train]") {
  std::string cfg = replace(kMlp, "layers = [10, 32, 1]", "layers = [64, 256, 256, 1]");
  cfg = replace(cfg, "steps = 4", "steps = 1");
  auto mem = [&](const char* policy) {
    TrainConfig c = parse_config(replace(cfg, "torch-cuda-fp16", policy), ".");
    return train(c, {}, nullptr).memory;
  };
  auto bytes = [](const std::vector<MemoryRow>& rows, const std::string& cat) {
    uint64_t b = 0;
    for (const auto& r : rows)
      if (r.category == cat) b += r.bytes;
    return b;
  };
  const auto f32 = mem("fp32"), amp = mem("torch-cuda-fp16"), pure = mem("pure-fp16");
  CHECK(bytes(amp, "activations") * 10 < bytes(f32, "activations") * 6);
  CHECK(bytes(amp, "master_weights") == bytes(f32, "weights"));
  CHECK(bytes(pure, "weights") * 2 == bytes(f32, "weights"));
  CHECK(bytes(pure, "gradients") * 2 == bytes(f32, "gradients"));
  CHECK(total_bytes(pure) < total_bytes(f32));
}

TEST_CASE("fp8-hybrid and the transformer train", "[sim][train]") {
  {
    TrainConfig c = parse_config(replace(replace(kMlp, "torch-cuda-fp16", "fp8-hybrid"),
                                         "steps = 4", "steps = 30"), ".");
    std::vector<StepTrace> tr;
    const auto rows = rows_of(c, &tr);
    CHECK(rows.back().loss < 0.5 * rows.front().loss);
    bool e4m3 = false, e5m2 = false;
    for (const auto& r : tr[1].records) {
      e4m3 = e4m3 || (r.name == "0.input" && r.dtype.fmt.exp_bits == 4);
      e5m2 = e5m2 || (r.name == "2.grad_output" && r.dtype.fmt.exp_bits == 5);
    }
    CHECK(e4m3);
    CHECK(e5m2);
  }
  const std::string tf = halfway_test::config(
      "transformer", {{"model.vocab", "8"}, {"model.seq_len", "6"}, {"model.d_model", "16"},
                      {"data.n", "64"}, {"optimizer.kind", "\"adamw\""}, {"[scaler]", std::nullopt},
                      {"run.steps", "25"}, {"run.seed", "1"}});
  std::vector<StepTrace> tr;
  const auto rows = rows_of(parse_config(tf, "."), &tr);
  CHECK(rows.back().loss < 0.7 * rows.front().loss);
  bool has_attn = false;
  for (const auto& r : tr[0].records) has_attn = has_attn || r.name == "blocks.0.attn.scores.output";
  CHECK(has_attn);
}

// The tiny transformer of the fp8 report: vocab 16, seq_len 8, d_model 32, 2 heads, 1 block,
// copy task, Adam 3e-3.
std::string tiny_transformer(const std::string& precision, int seed, int steps) {
  return R"(
[model]
kind = "transformer"
vocab = 16
seq_len = 8
d_model = 32
heads = 2
blocks = 1
[data]
synthetic = "copy"
batch_size = 32
n = 512
[loss]
kind = "cross_entropy"
[optimizer]
kind = "adam"
lr = 0.003
[precision]
)" + precision + R"(
[trace]
enabled = false
[run]
steps = )" + std::to_string(steps) + "\nseed = " + std::to_string(seed) + "\n";
}

TEST_CASE("fp8-hybrid trains the tiny transformer like fp32 (TE's recipe, nothing more)",
          "[sim][train][fp8]") {
  // Before fp8-hybrid was confined to the linear layers' GEMM operands, attention's matmuls
  // and the linear layers' input gradients were rounded into unscaled e4m3: q, k and v got
  // zero gradient for ~150 steps and the final loss was 25x fp32's.
  const int steps = 200;
  for (int seed : {0, 1, 2}) {
    std::vector<double> ref, fp8;
    std::map<std::string, double> nonzero;  // fraction of non-zero step-0 weight gradients
    train(parse_config(tiny_transformer("policy = \"fp32\"", seed, steps), "."), {},
          [&](const StepRow& r, const StepTrace*, const std::vector<Param>&,
              const std::vector<std::vector<float>>&) { ref.push_back(r.loss); });
    train(parse_config(tiny_transformer("policy = \"fp8-hybrid\"", seed, steps), "."), {},
          [&](const StepRow& r, const StepTrace*, const std::vector<Param>& ps,
              const std::vector<std::vector<float>>& grads) {
            fp8.push_back(r.loss);
            if (r.step != 0) return;
            for (size_t i = 0; i < ps.size(); ++i) {
              size_t nz = 0;
              for (float g : grads[i]) nz += g != 0.0f;
              nonzero[ps[i].name] = double(nz) / double(grads[i].size());
            }
          });
    INFO("seed " << seed << ": fp32 " << ref.front() << " -> " << ref.back() << ", fp8-hybrid "
                 << fp8.front() << " -> " << fp8.back());
    for (const char* w : {"blocks.0.attn.q.weight", "blocks.0.attn.k.weight",
                          "blocks.0.attn.v.weight"}) {
      INFO(w << ": " << nonzero[w] << " of its step-0 gradient is non-zero");
      CHECK(nonzero[w] > 0.5);
    }
    // The curve never stalls: at every 25th step fp8 is within 10% of fp32 (or below it).
    for (int t = 25; t < steps; t += 25) {
      INFO("step " << t << ": fp32 " << ref[size_t(t)] << ", fp8-hybrid " << fp8[size_t(t)]);
      CHECK(fp8[size_t(t)] <= 1.10 * ref[size_t(t)]);
    }
    CHECK(fp8.back() < 0.05 * fp8.front());
  }
}

TEST_CASE("fp8-hybrid's current scaling and most_recent amax also follow fp32",
          "[sim][train][fp8]") {
  const int steps = 150;
  std::vector<double> ref;
  train(parse_config(tiny_transformer("policy = \"fp32\"", 0, steps), "."), {},
        [&](const StepRow& r, const StepTrace*, const std::vector<Param>&,
            const std::vector<std::vector<float>>&) { ref.push_back(r.loss); });
  for (const char* opts : {"scaling = \"current\"", "amax_compute_algo = \"most_recent\"",
                           "amax_history_len = 16\nmargin = 1"}) {
    std::vector<double> l;
    train(parse_config(tiny_transformer(std::string("policy = \"fp8-hybrid\"\n") + opts, 0, steps),
                       "."),
          {}, [&](const StepRow& r, const StepTrace*, const std::vector<Param>&,
                  const std::vector<std::vector<float>>&) { l.push_back(r.loss); });
    INFO(opts << ": fp32 " << ref.back() << ", fp8-hybrid " << l.back());
    CHECK(l.back() <= 1.10 * ref.back());
  }
}

TEST_CASE("on_round sees every traced rounding with its values, and fp32 ones", "[sim][train]") {
  // The low-precision roundings the observer sees are exactly the tracer's records, in order,
  // with their sizes; its values are representable in their dtype; the fp32 roundings (mse in
  // fp32, the scaler's product, the casts' backward into the fp32 parameters) come too; and an
  // observed run is the same run.
  const TrainConfig c = parse_config(kMlp, ".");
  struct Seen {
    std::string name;
    DType dt;
    std::vector<double> v;
  };
  std::vector<std::vector<Seen>> steps(1);
  std::vector<StepTrace> traces;
  std::vector<StepRow> rows;
  TrainOptions o;
  o.on_round = [&](const TraceTag& t, const DType& dt, const double* v, size_t n) {
    steps.back().push_back({t.name, dt, std::vector<double>(v, v + n)});
  };
  train(c, o, [&](const StepRow& r, const StepTrace* st, const std::vector<Param>&,
                  const std::vector<std::vector<float>>&) {
    rows.push_back(r);
    traces.push_back(*st);
    steps.emplace_back();
  });
  steps.pop_back();
  REQUIRE(steps.size() == 4);
  const std::vector<StepRow> plain = rows_of(c);
  for (size_t s = 0; s < steps.size(); ++s) {
    CHECK(rows[s].loss == plain[s].loss);
    std::vector<const Seen*> low;
    std::set<std::string> f32;
    size_t not_representable = 0;
    for (const Seen& x : steps[s]) {
      if (x.dt.is_low()) low.push_back(&x);
      else f32.insert(x.name);
      for (double v : x.v) {
        Env env;
        const double back = x.dt.is_low() ? to_f64(x.dt.fmt, from_f32(x.dt.fmt, float(v), env), env)
                                          : double(float(v));
        if (back != v && !std::isnan(v)) ++not_representable;
      }
    }
    CHECK(not_representable == 0);
    REQUIRE(low.size() == traces[s].records.size());
    for (size_t i = 0; i < low.size(); ++i) {
      CHECK(low[i]->name == traces[s].records[i].name);
      CHECK(low[i]->v.size() == traces[s].records[i].events.total);
    }
    for (const char* n : {"loss.input", "loss.output", "loss.grad_input", "scaler.output",
                          "scaler.grad_input", "0.weight.grad.cast", "2.bias.grad.cast"})
      CHECK(f32.count(n));
  }
}

// ---- Limits (issue 16): sizes, memory, values that cannot train, files, stopping -------------

TEST_CASE("sizes are checked in 64 bits against stated limits", "[sim][train][limits]") {
  const std::string tr = halfway_test::config(
      "transformer", {{"model.d_model", "4"}, {"model.blocks", std::nullopt},
                      {"model.mlp_ratio", "4"}, {"data.n", std::nullopt}, {"data.batch_size", "4"},
                      {"precision.policy", "\"fp32\""}, {"[scaler]", std::nullopt},
                      {"run.steps", "1"}});
  CHECK_NOTHROW(parse_config(tr, "."));
  // 4 * 2^30 wrapped an int in the model and crashed.
  expect_error(replace(tr, "mlp_ratio = 4", "mlp_ratio = 1073741824"),
               "'model.mlp_ratio' must be in");
  expect_error(replace(replace(tr, "d_model = 4", "d_model = 65536"), "mlp_ratio = 4",
                       "mlp_ratio = 512"),
               "(the MLP width) must be at most 16777216");
  expect_error(replace(tr, "vocab = 16", "vocab = 1099511627776"), "'model.vocab' must be in");
  expect_error(replace(tr, "heads = 2", "heads = 8"), "'model.heads' must be in 1..4");
  expect_error(replace(tr, "heads = 2", "heads = 3"), "multiple of 'model.heads'");
  expect_error(replace(tr, "mlp_ratio = 4", "blocks = 1073741824"), "'model.blocks' must be in");
  expect_error(replace(tr, "seq_len = 8", "seq_len = 65537"), "'model.seq_len' must be in");
  expect_error(replace(kMlp, "[10, 32, 1]", "[10, 9223372036854775807, 1]"),
               "'model.layers' widths must be in 1..16777216");
  expect_error(replace(kMlp, "batch_size = 64", "batch_size = 16777217"), "'data.batch_size'");
  expect_error(replace(kMlp, "batch_size = 64", "batch_size = 64\nn = 67108865"), "'data.n'");
  expect_error(replace(kMlp, "steps = 4", "steps = 2147483648"), "'run.steps' must be in");
  // The models check the same limits when built directly (no config in between).
  Rng rng(0);
  TransformerConfig t;
  t.d_model = 4;
  t.mlp_ratio = 1 << 30;
  CHECK_THROWS_AS(make_transformer(t, rng), InputError);
  MlpConfig m;
  m.layers = {10, int(kMaxWidth) + 1, 1};
  CHECK_THROWS_AS(make_mlp(m, rng), InputError);
}

TEST_CASE("the memory estimate refuses what does not fit, before allocating",
          "[sim][train][limits]") {
  TrainConfig c = parse_config(kMlp, ".");
  const MemoryEstimate e = estimate_memory(c);
  CHECK(e.params > 0);
  CHECK(e.activations > 0);
  CHECK(e.data >= 1024.0 * 11 * 8);  // n = 1024 rows of 10 + 1 doubles
  CHECK(e.total() < 64.0 * 1024 * 1024);
  CHECK_NOTHROW(check_memory(e, uint64_t(1) << 30));
  CHECK_THROWS_AS(check_memory(e, 1024), InputError);
  try {
    check_memory(e, 1024);
  } catch (const InputError& err) {
    const std::string msg = err.what();
    CHECK(msg.find("estimated") != std::string::npos);
    CHECK(msg.find("memory limit of 1.00 KiB") != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
  // Refused by train() itself, whatever called it.
  TrainOptions o;
  o.max_memory = 1024;
  CHECK_THROWS_AS(train(c, o, {}), InputError);
  // Sizes no config accepts (built directly): a huge, finite estimate, never a wrapped one.
  c.model_kind = "transformer";
  c.transformer.blocks = 1 << 30;
  c.transformer.d_model = 1 << 16;
  c.transformer.mlp_ratio = 1 << 30;
  c.transformer.vocab = 1 << 30;
  c.batch_size = c.data_n = int64_t(1) << 40;
  const double huge = estimate_memory(c).total();
  CHECK(huge > 1e30);
  CHECK_THROWS_AS(check_memory(estimate_memory(c), 0), InputError);
  // More of anything costs more.
  TrainConfig a = parse_config(kMlp, "."), b = a;
  b.data_n *= 4;
  CHECK(estimate_memory(b).data > estimate_memory(a).data);
  b = a;
  b.batch_size *= 4;
  CHECK(estimate_memory(b).activations > estimate_memory(a).activations);
  b = a;
  b.mlp.layers = {10, 320, 1};
  CHECK(estimate_memory(b).params > estimate_memory(a).params);
}

TEST_CASE("memory sizes parse with binary suffixes", "[sim][limits]") {
  CHECK(parse_memory_size("100000") == 100000u);
  CHECK(parse_memory_size("2K") == 2048u);
  CHECK(parse_memory_size("512M") == 512u << 20);
  CHECK(parse_memory_size("2G") == uint64_t(2) << 30);
  CHECK(parse_memory_size("1.5GiB") == uint64_t(3) << 29);
  CHECK(parse_memory_size("1t") == uint64_t(1) << 40);
  CHECK(parse_memory_size("64MB") == uint64_t(64) << 20);
  for (const char* bad : {"", "0", "-1", "G", "2X", "1.2.3", "2 G", "2GB!", "1e3", "0.5",
                          "99999999999T", ".", "inf", "nan"})
    CHECK_THROWS_AS(parse_memory_size(bad), InputError);
  CHECK(default_memory_limit() > 0);
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(17) == "17 bytes");
}

TEST_CASE("values that cannot train are refused", "[sim][train][limits]") {
  expect_error(replace(kMlp, "kind = \"dynamic\"", "kind = \"dynamic\"\ninit_scale = 1e-50"),
               "below the smallest positive fp32");
  expect_error(replace(kMlp, "kind = \"dynamic\"", "kind = \"static\"\nscale = 1e-40"),
               "its fp32 inverse overflows");
  CHECK_NOTHROW(
      parse_config(replace(kMlp, "kind = \"dynamic\"", "kind = \"static\"\nscale = 3e-39"), "."));
  expect_error(replace(kMlp, "lr = 0.01", "lr = 1e308"), "makes the first update overflow fp32");
  // Adam's first step is lr / (1 - beta1): 10 lr by default.
  expect_error(replace(kMlp, "lr = 0.01", "lr = 1e38"), "at most 3.40282347e+37");
  CHECK_NOTHROW(parse_config(replace(kMlp, "lr = 0.01", "lr = 1e37"), "."));
  expect_error(replace(kMlp, "lr = 0.01", "lr = 0.01\neps = inf"), "optimizer.eps");
  std::vector<double> v{1.0, 3.4028235e38};  // above FLT_MAX, but rounds to it: finite
  CHECK_NOTHROW(check_finite_fp32(v, "x"));
  v.push_back(3.5e38);
  CHECK_THROWS_WITH(check_finite_fp32(v, "x"),
                    Catch::Contains("x has values beyond the fp32 range"));
  v.back() = NAN;
  CHECK_THROWS_WITH(check_finite_fp32(v, "x"), Catch::Contains("x has NaN or inf"));
}

TEST_CASE("configs are read from regular files of at most 1 MiB", "[sim][limits]") {
  const fs::path dir = scratch("text_file");
  CHECK_THROWS_WITH(read_text_file("/dev/zero"), Catch::Contains("a character device"));
  CHECK_THROWS_WITH(parse_config_file("/dev/zero"), Catch::Contains("not a regular file"));
  CHECK_THROWS_WITH(read_text_file(dir.string()), Catch::Contains("a directory"));
  const std::string fifo = (dir / "fifo.toml").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(read_text_file(fifo), Catch::Contains("a FIFO"));  // and no hang
  std::ofstream((dir / "big.toml").string()) << std::string(kMaxTextFileBytes + 1, '#');
  CHECK_THROWS_WITH(read_text_file((dir / "big.toml").string()), Catch::Contains("larger than"));
  std::ofstream((dir / "ok.toml").string()) << kMlp;
  CHECK(read_text_file((dir / "ok.toml").string()) == kMlp);
  CHECK_THROWS_WITH(parse_config(std::string(kMaxTextFileBytes + 1, '#'), "."),
                    Catch::Contains("at most 1048576 bytes"));
  fs::remove_all(dir);
}

TEST_CASE("a config file's precision table: parsed as parse_config parses it", "[sim][train]") {
  const fs::path dir = scratch("precision_file");
  const std::string table =
      "[precision]\npolicy = \"pure-bf16\"\nrounding = \"sr\"\nsr_random_bits = 4\n";
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream((dir / name).string()) << text;
    return (dir / name).string();
  };
  const Precision p = parse_precision_file(write("only.toml", table));
  CHECK(p.policy.name == "pure-bf16");
  CHECK(p.rounding == Rounding::stochastic);
  CHECK(p.sr_random_bits == 4);
  // the same table inside a whole config gives the same precision
  const Precision q =
      parse_precision_file(write("whole.toml", replace(kMlp, "torch-cuda-fp16", "pure-bf16")));
  CHECK(q.policy.name == "pure-bf16");
  CHECK(q.sr_random_bits == 32);
  CHECK_THROWS_WITH(parse_precision_file(write("none.toml", "[run]\nsteps = 1\n")),
                    Catch::Contains("precision"));
  CHECK_THROWS_WITH(parse_precision_file(write("key.toml", table + "bogus = 1\n")),
                    Catch::Contains("precision.bogus"));
  CHECK_THROWS_WITH(parse_precision_file(write("table.toml", table + "[bogus]\n")),
                    Catch::Contains("bogus"));
  CHECK_THROWS_WITH(parse_precision_file(write("bad.toml", "[precision\n")),
                    Catch::Contains("bad.toml:1"));
  CHECK_THROWS_WITH(parse_precision_file("/dev/zero"), Catch::Contains("not a regular file"));
  fs::remove_all(dir);
}

TEST_CASE("a stop request ends the run at a step boundary, marked incomplete",
          "[sim][train][limits]") {
  const fs::path dir = scratch("stop");
  TrainConfig c = parse_config(replace(kMlp, "steps = 4", "steps = 50"), ".");
  TrainOptions o;
  int calls = 0;
  o.on_progress = [&](int64_t done, int64_t total) {
    ++calls;
    CHECK(total == 50);
    if (done == 7) request_stop(SIGTERM);
  };
  const TrainSummary s = write_run(c, dir.string(), o);
  clear_stop();
  CHECK(calls == 7);
  CHECK(s.steps_done == 7);
  CHECK(s.stop_signal == SIGTERM);
  CHECK_FALSE(s.complete());
  const std::string manifest = slurp(dir / "manifest.json");
  CHECK(manifest.find("\"complete\": false") != std::string::npos);
  CHECK(manifest.find("\"steps_done\": 7") != std::string::npos);
  CHECK_FALSE(run_complete(dir.string()));
  std::istringstream steps(slurp(dir / "steps.csv"));
  std::string line;
  int rows = -1;
  while (std::getline(steps, line)) ++rows;
  CHECK(rows == 7);
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
  // A complete run in the same folder, which also removes a dead process's temporary file.
  std::ofstream((dir / "trace.csv.tmp.999999999").string()) << "partial";
  c.steps = 2;
  CHECK(write_run(c, dir.string(), {}).complete());
  CHECK(run_complete(dir.string()));
  CHECK_FALSE(fs::exists(dir / "trace.csv.tmp.999999999"));
  fs::remove_all(dir);
}

TEST_CASE("temporary names carry the PID and the host; others' and foreign names are not ours",
          "[sim][io]") {
  const std::string& suffix = tmp_suffix();
  REQUIRE(suffix.rfind(".tmp." + std::to_string(::getpid()) + "@", 0) == 0);
  const std::string host = suffix.substr(suffix.find('@') + 1);
  CHECK(host.find_first_of("./@") == std::string::npos);
  std::string name, h;
  long pid = 0;
  struct Case {
    const char *file, *name;
    long pid;
    const char* host;
  };
  // A name may itself hold ".tmp." (notes.tmp.csv); a spool or libzip suffix follows the host.
  for (const Case& k : {Case{"steps.csv.tmp.12@node-1", "steps.csv", 12, "node-1"},
                        Case{"grads.npz.tmp.7@n_a_b.data", "grads.npz", 7, "n_a_b"},
                        Case{"grads.npz.tmp.7@n.Ab12Cd", "grads.npz", 7, "n"},
                        Case{"trace.csv.tmp.99", "trace.csv", 99, ""},
                        Case{"grads.npz.tmp.99.data", "grads.npz", 99, ""},
                        Case{"notes.tmp.csv.tmp.5@h", "notes.tmp.csv", 5, "h"}}) {
    INFO(k.file);
    REQUIRE(parse_tmp_name(k.file, name, pid, h));
    CHECK(name == k.name);
    CHECK(pid == k.pid);
    CHECK(h == k.host);
  }
  for (const char* f : {"steps.csv", "steps.csv.tmp.", "steps.csv.tmp.x1", "steps.csv.tmp.12@",
                        "steps.csv.tmp.12x", "steps.csv.tmp.1234567890", ".tmp.12"}) {
    INFO(f);
    CHECK_FALSE(parse_tmp_name(f, name, pid, h));
  }
  // Only this host's files of dead processes are removed.
  const fs::path dir = fs::temp_directory_path() / ("halfway_tmpnames_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string dead = "999999999";
  for (const std::string& f : {"steps.csv.tmp." + dead + "@" + host, "steps.csv.tmp." + dead,
                               "steps.csv.tmp." + dead + "@x" + host,
                               "steps.csv.tmp." + std::to_string(::getpid()) + "@" + host})
    std::ofstream((dir / f).string()) << "partial";
  remove_stale_tmp_files(dir.string(), {"steps.csv"});
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"steps.csv.tmp." + std::to_string(::getpid()) + "@" + host,
                                         "steps.csv.tmp." + dead + "@x" + host});
  fs::remove_all(dir);
}
