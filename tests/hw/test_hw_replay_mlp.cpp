// The training-step replay (hw/cuda/replay_mlp.cuh, run on the GPU by halfway_gpu_replay)
// against `halfway train`, every rounded tensor of every step, bit for bit:
//
//  - the committed input file (hw/replay/default_mlp.bin: initial weights, batches, Adam's
//    scalars, the cases) is what the simulator generates for the default MLP, so it cannot
//    drift from the simulator;
//  - the replay's step code, compiled here with the host implementations of NVIDIA's
//    intrinsics (cuda_fp16.h, cuda_bf16.h), reproduces the simulator: every tensor the
//    simulator rounds (seen through Runtime::on_round, under its trace names), the fp32
//    gradients the optimizer sees, the updated fp32 master weights, the scale, found_inf and
//    skipped, for fp16 without and with dynamic loss scaling, for bf16, and for fp16 with a
//    scale that overflows at first (inf/NaN gradients, skipped steps, back-off);
//  - the report writer and the comparator agree, and a tampered hash is caught.
//
//   test_hw_replay_mlp --input FILE [Catch2 options]   the tests above
//   test_hw_replay_mlp --input FILE --report REPORT    compares the GPU's report (the "replay"
//                        part of results/gpu/report.json) with the simulator; exit 77 and
//                        "skipped: no GPU replay report committed" when there is none
//   test_hw_replay_mlp --write-input FILE              regenerates the input file
//   test_hw_replay_mlp --input FILE --host-report OUT  writes the device program's report part
//                        from the host replay (a dry run of the campaign tools, no GPU)
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <bit>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "halfway/halfway.hpp"
#include "halfway/sim/trainer.hpp"
#include "replay_mlp.cuh"
#include "configs.hpp"

namespace {

using namespace halfway;
using replay::ReplayCase;
using replay::ReplayInput;
using replay::StepRecord;
using replay::TensorRecord;

std::string g_input_path = HALFWAY_REPLAY_INPUT_DEFAULT;  // --input overrides
constexpr int kSteps = 20;

struct CaseDef {
  const char* name;
  const char* policy;
  const char* scaler;
  const char* init_scale = nullptr;  ///< dynamic scaler: init_scale (default PyTorch's 2^16)
};
// The demo's low-precision cases (experiments/demo/sweep.toml), and the dynamic scaler started
// at 2^24, where the fp16 gradients overflow: inf and NaN flow through the backward, found_inf,
// skipped steps and back-off until the scale fits (six skipped steps, then 2^18).
constexpr CaseDef kCases[] = {{"fp16-noscale", "torch-cuda-fp16", "none"},
                              {"fp16-dynamic", "torch-cuda-fp16", "dynamic"},
                              {"bf16", "torch-cuda-bf16", "none"},
                              {"fp16-overflow", "torch-cuda-fp16", "dynamic", "16777216.0"}};

/// The demo's base configuration (experiments/demo/sweep.toml) with one case's policy and scaler.
sim::TrainConfig case_config(const std::string& policy, const std::string& scaler, int steps,
                             const char* init_scale = nullptr) {
  std::vector<halfway_test::Key> keys = {
      {"model.layers", "[16, 64, 64, 1]"}, {"model.activation", "\"gelu\""}, {"data.noise", "0.001"},
      {"data.n", "1024"}, {"optimizer.lr", "0.003"}, {"precision.policy", "\"" + policy + "\""},
      {"scaler.kind", "\"" + scaler + "\""}, {"run.steps", std::to_string(steps)}};
  if (init_scale) keys.push_back({"scaler.init_scale", init_scale});
  const std::string toml = halfway_test::config("mlp", keys);
  return sim::parse_config(toml, ".", "replay");
}

/// What the replay needs, from the simulator's own generators (trainer.cpp: the model from
/// Rng(seed); run_data.cpp: the synthetic data; the loader) and Adam's scalars as optim.cpp
/// computes them.
ReplayInput make_input(int steps) {
  const sim::TrainConfig c = case_config("torch-cuda-fp16", "dynamic", steps);
  ReplayInput in;
  for (int w : c.mlp.layers) in.layers.push_back(uint32_t(w));
  in.activation = c.mlp.activation == "gelu" ? 1 : 0;
  in.bias = c.mlp.bias ? 1 : 0;
  in.batch = uint32_t(c.batch_size);
  in.steps = uint32_t(steps);
  sim::Rng rng(c.seed);
  auto model = sim::make_mlp(c.mlp, rng);
  for (const sim::Param& p : model->params()) {
    in.param_names.push_back(p.name);
    {
      const std::vector<double> v = p.t.data().to_vector();
      in.params.emplace_back(v.begin(), v.end());
    }
  }
  const sim::Dataset d = sim::synthetic_regression(c.data_n, c.mlp.layers.front(),
                                                   c.mlp.layers.back(), c.noise, c.seed);
  sim::Loader loader(d, c.batch_size, c.shuffle, c.seed);
  for (int s = 0; s < steps; ++s) {
    const sim::Batch b = loader.next();
    if (b.size != c.batch_size) throw std::runtime_error("a short batch: not supported");
    for (double v : b.x.data().to_vector()) in.x.push_back(float(v));
    for (double v : b.y.data().to_vector()) in.y.push_back(float(v));
  }
  const sim::OptimizerConfig& o = c.optimizer;
  if (o.kind != "adam" || o.weight_decay != 0) throw std::runtime_error("Adam without decay only");
  in.beta1 = float(o.beta1);
  in.beta2 = float(o.beta2);
  in.c1 = float(1.0 - o.beta1);
  in.c2 = float(1.0 - o.beta2);
  in.eps = float(o.eps);
  for (int t = 1; t <= steps; ++t) {
    const double bc1 = 1.0 - std::pow(o.beta1, t);
    const double bc2 = 1.0 - std::pow(o.beta2, t);
    in.step_size_neg.push_back(float(-(o.lr / bc1)));
    in.bc2_sqrt.push_back(float(std::sqrt(bc2)));
  }
  for (const CaseDef& cd : kCases) {
    const sim::TrainConfig cc = case_config(cd.policy, cd.scaler, steps, cd.init_scale);
    ReplayCase rc;
    rc.name = cd.name;
    rc.low = cc.precision.policy.low.fmt == formats::bf16 ? 1 : 0;
    rc.scaler = cc.scaler.kind == sim::ScalerConfig::Kind::dynamic ? 1 : 0;
    rc.init_scale = float(cc.scaler.init_scale);
    rc.growth_factor = cc.scaler.growth_factor;
    rc.backoff_factor = cc.scaler.backoff_factor;
    rc.growth_interval = cc.scaler.growth_interval;
    in.cases.push_back(rc);
  }
  return in;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

ReplayInput load_input() {
  ReplayInput in;
  const std::string err = replay::parse(read_bytes(g_input_path), in);
  if (!err.empty()) throw std::runtime_error(g_input_path + ": " + err);
  return in;
}

uint32_t encode(const sim::DType& dt, double v) {
  if (!dt.is_low()) return std::bit_cast<uint32_t>(float(v));
  Env env;
  return from_f32(dt.fmt, float(v), env);
}

/// `halfway train` on a case, every step as the replay records it: every tagged rounding
/// (Runtime::on_round), then the optimizer's fp32 gradients and the updated parameters.
std::vector<StepRecord> run_sim(const CaseDef& cd, int steps) {
  const sim::TrainConfig c = case_config(cd.policy, cd.scaler, steps, cd.init_scale);
  std::vector<StepRecord> out;
  std::vector<TensorRecord> current;
  sim::TrainOptions o;
  o.on_round = [&](const sim::TraceTag& tag, const sim::DType& dt, const double* v, size_t n) {
    TensorRecord t{tag.name, dt.name(), std::vector<uint32_t>(n)};
    for (size_t i = 0; i < n; ++i) t.bits[i] = encode(dt, v[i]);
    current.push_back(std::move(t));
  };
  sim::train(c, o,
             [&](const sim::StepRow& r, const sim::StepTrace*, const std::vector<sim::Param>& params,
                 const std::vector<std::vector<float>>& grads) {
               StepRecord s;
               s.step = r.step;
               s.loss_scale = r.loss_scale;
               s.found_inf = r.found_inf;
               s.skipped = r.skipped;
               s.growth_tracker = r.growth_tracker;
               s.next_scale = r.next_scale;
               s.tensors = std::move(current);
               current.clear();
               for (size_t p = 0; p < params.size(); ++p) {
                 TensorRecord g{"grads." + params[p].name, "fp32", {}};
                 for (float v : grads[p]) g.bits.push_back(std::bit_cast<uint32_t>(v));
                 s.tensors.push_back(std::move(g));
                 TensorRecord w{"params." + params[p].name, "fp32", {}};
                 for (double v : params[p].t.data().to_vector()) w.bits.push_back(encode(sim::DType::f32(), v));
                 s.tensors.push_back(std::move(w));
               }
               out.push_back(std::move(s));
             });
  return out;
}

const CaseDef& case_def(const std::string& name) {
  for (const CaseDef& cd : kCases)
    if (name == cd.name) return cd;
  throw std::runtime_error("unknown case '" + name + "'");
}

/// Tensors of a step by "name|dtype", in order of appearance (a key may repeat).
std::map<std::string, std::vector<const TensorRecord*>> by_key(const StepRecord& s) {
  std::map<std::string, std::vector<const TensorRecord*>> m;
  for (const TensorRecord& t : s.tensors) m[t.name + "|" + t.dtype].push_back(&t);
  return m;
}

struct Comparison {
  uint64_t steps = 0, tensors = 0, elements = 0;
  uint64_t differing_elements = 0, differing_bits = 0, nan_elements = 0;
  uint64_t missing = 0, extra = 0, size_mismatch = 0, scalar_mismatch = 0;
  std::vector<std::string> examples;
  std::map<std::string, uint64_t> differing_by_name;  ///< differing elements per tensor name
  void note(const std::string& s) {
    if (examples.size() < 12) examples.push_back(s);
  }
  bool equal() const {
    return differing_bits == 0 && differing_elements == 0 && missing == 0 && extra == 0 &&
           size_mismatch == 0 && scalar_mismatch == 0;
  }
};

void compare_scalars(const StepRecord& a, const StepRecord& b, const std::string& where,
                     Comparison& c) {
  if (a.loss_scale != b.loss_scale || a.found_inf != b.found_inf || a.skipped != b.skipped ||
      a.growth_tracker != b.growth_tracker || a.next_scale != b.next_scale) {
    ++c.scalar_mismatch;
    c.note(where + ": scale/found_inf/skipped/tracker differ");
  }
}

/// Simulator vs replay, bit for bit (NaN encodings canonical on both sides).
void compare_steps(const std::vector<StepRecord>& sim, const std::vector<StepRecord>& rep,
                   const std::string& label, Comparison& c) {
  if (sim.size() != rep.size()) {
    ++c.missing;
    c.note(label + ": step counts differ");
  }
  for (size_t s = 0; s < std::min(sim.size(), rep.size()); ++s) {
    ++c.steps;
    const std::string where = label + " step " + std::to_string(s);
    compare_scalars(sim[s], rep[s], where, c);
    const auto ms = by_key(sim[s]), mr = by_key(rep[s]);
    for (const auto& [key, list] : ms) {
      auto it = mr.find(key);
      const size_t have = it == mr.end() ? 0 : it->second.size();
      if (have < list.size()) {
        c.missing += list.size() - have;
        c.note(where + ": " + key + " missing in the replay");
      }
      for (size_t k = 0; k < std::min(have, list.size()); ++k) {
        const TensorRecord &a = *list[k], &b = *it->second[k];
        ++c.tensors;
        if (a.bits.size() != b.bits.size()) {
          ++c.size_mismatch;
          c.note(where + ": " + key + " sizes differ");
          continue;
        }
        c.elements += a.bits.size();
        uint64_t diff = 0;
        for (size_t i = 0; i < a.bits.size(); ++i) {
          const uint32_t x = replay::canonical_bits(a.dtype, a.bits[i]);
          const uint32_t y = replay::canonical_bits(b.dtype, b.bits[i]);
          if (x != a.bits[i] || x == (a.dtype == "fp32" ? 0x7FFFFFFFu : 0x7FFFu)) ++c.nan_elements;
          if (x != y) {
            ++diff;
            c.differing_bits += uint64_t(std::popcount(x ^ y));
            if (diff == 1)
              c.note(where + ": " + key + "[" + std::to_string(i) + "] simulator " +
                     std::to_string(a.bits[i]) + ", replay " + std::to_string(b.bits[i]));
          }
        }
        c.differing_elements += diff;
        if (diff) c.differing_by_name[a.name] += diff;
      }
    }
    for (const auto& [key, list] : mr) {
      auto it = ms.find(key);
      const size_t have = it == ms.end() ? 0 : it->second.size();
      if (have < list.size()) {
        c.extra += list.size() - have;
        c.note(where + ": " + key + " is not a simulator tensor");
      }
    }
  }
}

void print(const Comparison& c, const std::string& label, double seconds) {
  std::printf("%s: %llu steps, %llu tensors (%llu elements) compared; %llu differing elements, "
              "%llu differing bits; missing %llu, extra %llu, size mismatches %llu, step scalars "
              "differing %llu; NaN elements %llu (%.2f s)\n",
              label.c_str(), (unsigned long long)c.steps, (unsigned long long)c.tensors,
              (unsigned long long)c.elements, (unsigned long long)c.differing_elements,
              (unsigned long long)c.differing_bits, (unsigned long long)c.missing,
              (unsigned long long)c.extra, (unsigned long long)c.size_mismatch,
              (unsigned long long)c.scalar_mismatch, (unsigned long long)c.nan_elements, seconds);
  for (const auto& [name, n] : c.differing_by_name)
    std::printf("  %s: %llu differing elements\n", name.c_str(), (unsigned long long)n);
  for (const std::string& e : c.examples) std::printf("  %s\n", e.c_str());
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// "0x0123456789ABCDEF", as the report writes hashes (without JSON's quotes).
std::string unquoted(uint64_t h) {
  const std::string q = hw::hex64(h);
  return q.substr(1, q.size() - 2);
}

// ---- the GPU's report ------------------------------------------------------------------------

/// Compares the "cases" of a replay report with the simulator. Returns the number of failures;
/// `compared` counts the tensors whose hash was checked.
int compare_report(const nlohmann::json& part, const std::vector<uint8_t>& input_bytes,
                   uint64_t& compared, std::vector<std::string>& log) {
  int failures = 0;
  auto fail = [&](const std::string& s) {
    ++failures;
    if (log.size() < 20) log.push_back(s);
  };
  if (part.contains("input") &&
      part["input"].value("fnv1a64", std::string()) != unquoted(replay::fnv1a_bytes(input_bytes)))
    fail("the report was made from a different input file");
  if (!part.contains("cases") || part["cases"].empty()) fail("the report has no cases");
  for (const nlohmann::json& cj : part.value("cases", nlohmann::json::array())) {
    const std::string name = cj.value("case", std::string("?"));
    if (cj.contains("skipped")) {
      log.push_back("case " + name + " not run: " + cj["skipped"].get<std::string>());
      continue;
    }
    const CaseDef& cd = case_def(name);
    const auto& steps = cj.at("step_records");
    const std::vector<StepRecord> sim = run_sim(cd, int(steps.size()));
    if (sim.size() != steps.size()) fail(name + ": step count");
    for (size_t s = 0; s < std::min(sim.size(), steps.size()); ++s) {
      const nlohmann::json& sj = steps[s];
      const std::string where = name + " step " + std::to_string(s);
      StepRecord r;
      r.loss_scale = sj.at("loss_scale").get<float>();
      r.found_inf = sj.at("found_inf").get<bool>();
      r.skipped = sj.at("skipped").get<bool>();
      r.growth_tracker = sj.at("growth_tracker").get<int64_t>();
      r.next_scale = sj.at("next_scale").get<float>();
      Comparison dummy;
      compare_scalars(sim[s], r, where, dummy);
      if (dummy.scalar_mismatch) fail(where + ": scale/found_inf/skipped/tracker differ");
      auto ms = by_key(sim[s]);
      std::map<std::string, size_t> used;
      for (const nlohmann::json& tj : sj.at("tensors")) {
        const std::string key = tj.at(0).get<std::string>() + "|" + tj.at(1).get<std::string>();
        auto it = ms.find(key);
        const size_t k = used[key]++;
        if (it == ms.end() || k >= it->second.size()) {
          fail(where + ": " + key + " is not a simulator tensor");
          continue;
        }
        const TensorRecord& t = *it->second[k];
        ++compared;
        if (tj.at(2).get<size_t>() != t.bits.size()) {
          fail(where + ": " + key + " element count differs");
          continue;
        }
        const std::string hash = unquoted(replay::fnv1a(t.dtype, t.bits));
        if (tj.at(3).get<std::string>() != hash) {
          fail(where + ": " + key + " hash differs (GPU " + tj.at(3).get<std::string>() +
               ", simulator " + hash + ")" +
               (tj.size() > 4 ? ", GPU's first encoding " + tj.at(4).get<std::string>() +
                                    hw::strf(", simulator's %X", t.bits.empty() ? 0 : t.bits[0])
                              : ""));
          continue;
        }
        // The first encodings as the device wrote them (its NaNs are NVIDIA's), compared with
        // NaNs canonical like the hash.
        for (size_t i = 4; i < tj.size() && i - 4 < t.bits.size(); ++i) {
          const uint32_t dev = uint32_t(std::stoul(tj.at(i).get<std::string>(), nullptr, 16));
          if (replay::canonical_bits(t.dtype, dev) != replay::canonical_bits(t.dtype, t.bits[i - 4]))
            fail(where + ": " + key + " first encodings differ");
        }
      }
      for (const auto& [key, list] : ms)
        if (used[key] < list.size()) fail(where + ": " + key + " missing in the report");
    }
  }
  return failures;
}

/// The replay part of a merged report (parts.replay), or a part file itself.
const nlohmann::json* find_replay_part(const nlohmann::json& r) {
  if (r.contains("parts") && r["parts"].contains("replay")) return &r["parts"]["replay"];
  if (r.value("part", std::string()) == "replay") return &r;
  return nullptr;
}

int report_mode(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    std::printf("skipped: no GPU replay report committed (%s not found)\n", path.c_str());
    return 77;
  }
  nlohmann::json r;
  try {
    r = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    std::printf("FAILED: %s is not valid JSON: %s\n", path.c_str(), e.what());
    return 1;
  }
  const nlohmann::json* part = find_replay_part(r);
  if (!part || !part->contains("cases")) {
    std::printf("skipped: no GPU replay report committed (%s has no replay results%s)\n",
                path.c_str(),
                part ? (", status: " + part->value("status", std::string("?"))).c_str() : "");
    return 77;
  }
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t compared = 0;
  std::vector<std::string> log;
  const int failures = compare_report(*part, read_bytes(g_input_path), compared, log);
  for (const std::string& s : log) std::printf("  %s\n", s.c_str());
  std::printf("%s: GPU replay vs simulator: %llu tensor hashes compared, %d failures (%.2f s)\n",
              failures ? "FAILED" : "ok", (unsigned long long)compared, failures,
              seconds_since(t0));
  return failures ? 1 : 0;
}

}  // namespace

// ---- the tests -------------------------------------------------------------------------------

TEST_CASE("the committed replay input is what the simulator generates") {
  REQUIRE_FALSE(g_input_path.empty());
  const std::vector<uint8_t> want = replay::serialize(make_input(kSteps));
  const std::vector<uint8_t> have = read_bytes(g_input_path);
  INFO("regenerate with: test_hw_replay_mlp --write-input hw/replay/default_mlp.bin");
  REQUIRE(have.size() == want.size());
  REQUIRE(have == want);
  ReplayInput in;
  REQUIRE(replay::parse(have, in).empty());
  REQUIRE(in.cases.size() == std::size(kCases));
  REQUIRE(replay::serialize(in) == have);
  // A truncated or extended file is refused.
  std::vector<uint8_t> bad(have.begin(), have.end() - 1);
  REQUIRE_FALSE(replay::parse(bad, in).empty());
  bad = have;
  bad.push_back(0);
  REQUIRE_FALSE(replay::parse(bad, in).empty());
}

TEST_CASE("the replay's step code with NVIDIA's host intrinsics equals the simulator bit for bit") {
  const ReplayInput in = load_input();
  Comparison total;
  for (const ReplayCase& cs : in.cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<StepRecord> sim = run_sim(case_def(cs.name), int(in.steps));
    replay::HostExec ex;
    const std::vector<StepRecord> rep = replay::run_case(in, cs, ex, in.steps);
    Comparison c;
    compare_steps(sim, rep, cs.name, c);
    print(c, cs.name, seconds_since(t0));
    CHECK(c.equal());
    CHECK(c.tensors > 40 * c.steps);  // every step: ~24 roundings + grads + params
    total.steps += c.steps;
    total.tensors += c.tensors;
    total.elements += c.elements;
    total.differing_bits += c.differing_bits;
    // The cases do what they are for: the scale starts where configured; at 2^24 the first
    // steps overflow and are skipped (their gradients hold inf and NaN) until the scale fits.
    if (cs.scaler) CHECK(sim.front().loss_scale == cs.init_scale);
    int64_t skipped = 0;
    for (const StepRecord& r : sim) skipped += r.skipped;
    if (cs.name == "fp16-overflow") {
      CHECK(skipped >= 2);
      CHECK(c.nan_elements > 0);
      CHECK(sim.back().loss_scale < cs.init_scale);
      CHECK(!sim.back().skipped);
    } else {
      CHECK(skipped == 0);
    }
    std::printf("  %s: %lld skipped steps, final scale %g\n", cs.name.c_str(), (long long)skipped,
                double(sim.back().next_scale));
  }
  std::printf("all cases: %llu steps, %llu tensors, %llu elements, %llu differing bits\n",
              (unsigned long long)total.steps, (unsigned long long)total.tensors,
              (unsigned long long)total.elements, (unsigned long long)total.differing_bits);
  REQUIRE(total.differing_bits == 0);
}

TEST_CASE("the comparison sees a one-ulp change and a wrong scaler") {
  // Negative controls: the same comparison must report differences when the replay is given
  // an initial weight one ulp off, or the fp16 case without loss scaling.
  const ReplayInput in = load_input();
  const std::vector<StepRecord> sim = run_sim(case_def("fp16-dynamic"), 3);
  {
    ReplayInput bad = in;
    // 2.weight[16..19] one ulp up (one alone can vanish in Adam's update: a+Δ and a+ulp+Δ can be
    // the two ties around the same even value, as for element 17)
    for (int i = 16; i < 20; ++i) bad.params[2][i] = std::nextafter(bad.params[2][i], 1.0f);
    replay::HostExec ex;
    Comparison c;
    compare_steps(sim, replay::run_case(bad, bad.cases[1], ex, 3), "one ulp", c);
    CHECK_FALSE(c.equal());
    CHECK(c.differing_by_name.count("params.2.weight"));
  }
  {
    ReplayInput bad = in;
    bad.params[2][17] *= 1.0f + 0x1p-9f;  // one to two fp16 ulps: the forward changes
    replay::HostExec ex;
    Comparison c;
    compare_steps(sim, replay::run_case(bad, bad.cases[1], ex, 3), "fp16 ulp", c);
    CHECK(c.differing_by_name.count("2.weight"));
    CHECK(c.differing_by_name.count("2.output"));
    CHECK(c.differing_by_name.count("0.weight.grad"));
  }
  {
    replay::HostExec ex;
    Comparison c;
    compare_steps(sim, replay::run_case(in, in.cases[0], ex, 3), "no scaler", c);
    CHECK_FALSE(c.equal());
    CHECK(c.scalar_mismatch == 3);
    CHECK(c.missing == 2 * 3);  // scaler.output, scaler.grad_input
    CHECK(c.differing_by_name.count("loss.grad_input"));
  }
}

TEST_CASE("a report written like the GPU's is read back and a tampered one is caught") {
  const ReplayInput in = load_input();
  const std::vector<uint8_t> bytes = read_bytes(g_input_path);
  // The device program's report, with the host replay's results and 5 steps per case.
  nlohmann::json part;
  {
    std::string cases = "[";
    for (size_t i = 0; i < in.cases.size(); ++i) {
      replay::HostExec ex;
      const auto recs = replay::run_case(in, in.cases[i], ex, 5);
      cases += (i ? ", " : "") + replay::case_json(in.cases[i], recs, 0, 0.0);
    }
    cases += "]";
    const std::string doc = "{\"part\": \"replay\", \"status\": \"complete\", \"input\": "
                            "{\"fnv1a64\": " + hw::hex64(replay::fnv1a_bytes(bytes)) + "}, \"cases\": " +
                            cases + "}";
    part = nlohmann::json::parse(doc);
  }
  uint64_t compared = 0;
  std::vector<std::string> log;
  CHECK(compare_report(part, bytes, compared, log) == 0);
  for (const auto& s : log) UNSCOPED_INFO(s);
  size_t tensors = 0;
  for (const auto& cj : part["cases"])
    for (const auto& sj : cj["step_records"]) tensors += sj["tensors"].size();
  CHECK(compared == tensors);
  CHECK(tensors == 5 * (44 + 46 + 44 + 46));

  nlohmann::json bad = part;
  auto& t = bad["cases"][1]["step_records"][3]["tensors"][7];
  std::string hh = t[3].get<std::string>();
  hh.back() = hh.back() == '0' ? '1' : '0';
  t[3] = hh;
  log.clear();
  CHECK(compare_report(bad, bytes, compared, log) == 1);
  bad = part;
  bad["cases"][2]["step_records"][0]["next_scale"] = 2.0;
  CHECK(compare_report(bad, bytes, compared, log) == 1);
  bad = part;
  bad["cases"][0]["step_records"][1]["tensors"].erase(0);
  CHECK(compare_report(bad, bytes, compared, log) == 1);
  bad = part;
  bad["input"]["fnv1a64"] = "0x0000000000000000";
  CHECK(compare_report(bad, bytes, compared, log) == 1);
}

/// The device program's report part, computed here with the host intrinsics (a dry run of
/// the campaign's tools and of the comparator without a GPU).
int host_report_mode(const std::string& path) {
  const ReplayInput in = load_input();
  const std::vector<uint8_t> bytes = read_bytes(g_input_path);
  hw::Report& r = hw::report();
  r.open(path, "replay");
  r.set("device", "{\"name\": \"host (NVIDIA's host intrinsics, not a GPU)\", "
                  "\"compute_capability\": \"host\", \"sms\": 0, \"memory_gib\": 0, "
                  "\"driver\": 0, \"runtime\": 0}");
  r.set("input", replay::input_json(bytes, in, in.steps));
  r.set("tensor_columns", replay::kTensorColumns);
  for (const ReplayCase& cs : in.cases) {
    const auto t0 = std::chrono::steady_clock::now();
    replay::HostExec ex;
    const auto recs = replay::run_case(in, cs, ex, in.steps);
    r.append("cases", replay::case_json(cs, recs, 0, seconds_since(t0)));
  }
  r.set("status", hw::Report::quote("complete"));
  r.save();
  std::printf("wrote %s\n", path.c_str());
  return 0;
}

int main(int argc, char** argv) {
  std::vector<char*> rest{argv[0]};
  std::string report, write, host_report;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--input" || a == "--report" || a == "--write-input" || a == "--host-report") &&
        i + 1 < argc) {
      (a == "--input" ? g_input_path : a == "--report" ? report
                                     : a == "--write-input" ? write : host_report) = argv[++i];
    } else {
      rest.push_back(argv[i]);
    }
  }
  try {
    if (!host_report.empty()) return host_report_mode(host_report);
    if (!write.empty()) {
      const std::vector<uint8_t> b = replay::serialize(make_input(kSteps));
      std::ofstream f(write, std::ios::binary);
      f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
      if (!f) {
        std::fprintf(stderr, "cannot write %s\n", write.c_str());
        return 2;
      }
      std::printf("wrote %s (%zu bytes)\n", write.c_str(), b.size());
      return 0;
    }
    if (!report.empty()) return report_mode(report);
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
  return Catch::Session().run(int(rest.size()), rest.data());
}
