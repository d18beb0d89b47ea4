// `halfway train --bench`: halfway's training step against PyTorch's, on the same model and
// machine, in the same run. Every halfway run and every PyTorch run is repeated `reps` times,
// interleaved, and the medians are compared; a row's ratio is halfway / reference, and its
// goal the ratio it must not exceed. Each side times steps after its first (no set-up, no
// warm-up), so the ratio compares steady-state steps. Both wall time and the process's CPU time
// are measured: on a loaded machine the wall ratio moves with the load, the CPU one much less.
#include "train_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <time.h>
#include <unistd.h>

#include "commands.hpp"
#include "format_util.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/sim/trainer.hpp"
#include "spawn.hpp"

namespace halfway::cli {

namespace {

/// A model both sides build: the default MLP, or a GPT-style decoder.
struct BenchModel {
  std::string kind;  ///< "mlp" or "gpt"
  int blocks = 4, d_model = 256, heads = 4, seq = 128, batch = 16, vocab = 256, mlp_ratio = 4;

  std::string label() const {
    if (kind == "mlp") return "mlp 10-32-1 relu, batch 64, adam";
    return "gpt blocks " + std::to_string(blocks) + " d_model " + std::to_string(d_model) +
           " heads " + std::to_string(heads) + " seq " + std::to_string(seq) + " batch " +
           std::to_string(batch) + " vocab " + std::to_string(vocab);
  }

  /// halfway's config: `policy`, traced or not, `steps` steps.
  std::string config(const std::string& policy, bool trace, int steps) const {
    std::string c;
    if (kind == "mlp") {
      c = "[model]\nkind = \"mlp\"\nlayers = [10, 32, 1]\nactivation = \"relu\"\n"
          "[data]\nsynthetic = \"regression\"\nbatch_size = 64\n[loss]\nkind = \"mse\"\n"
          "[optimizer]\nkind = \"adam\"\nlr = 0.01\n";
    } else {
      c = "[model]\nkind = \"transformer\"\nvocab = " + std::to_string(vocab) +
          "\nd_model = " + std::to_string(d_model) + "\nheads = " + std::to_string(heads) +
          "\nblocks = " + std::to_string(blocks) + "\nseq_len = " + std::to_string(seq) +
          "\nmlp_ratio = " + std::to_string(mlp_ratio) +
          "\nactivation = \"gelu\"\ncausal = true\n[data]\nsynthetic = \"copy\"\nbatch_size = " +
          std::to_string(batch) + "\nn = " + std::to_string(4 * batch) +
          "\n[loss]\nkind = \"cross_entropy\"\n[optimizer]\nkind = \"adam\"\nlr = 0.001\n";
    }
    c += "[precision]\npolicy = \"" + policy + "\"\n";
    if (policy == "torch-cuda-fp16") c += "[scaler]\nkind = \"dynamic\"\n";
    c += "[run]\nsteps = " + std::to_string(steps) + "\nseed = 0\n";
    if (!trace) c += "[trace]\nenabled = false\n";
    return c;
  }

  nlohmann::json spec() const {
    return {{"model", kind}, {"blocks", blocks}, {"d_model", d_model}, {"heads", heads},
            {"seq", seq},    {"batch", batch},   {"vocab", vocab},     {"mlp_ratio", mlp_ratio}};
  }
};

// PyTorch's side. `spec` (argv[1], JSON) names the model, the mode (fp32, or "emulated-bf16":
// the MLP with every activation, weight, gradient and updated weight rounded by
// .bfloat16().float(), what halfway's pure-bf16 policy rounds), the threads and the steps.
// Prints one JSON object: the reference's description (PyTorch version, threads, the BLAS
// library actually loaded) and the seconds per step after one untimed step.
const char* kTorchScript = R"PY(
import json, os, sys, time
spec = json.loads(sys.argv[1])
threads = str(spec["threads"])
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = threads
# OpenBLAS runs its own threads beside PyTorch's OpenMP ones; OpenMP threads that spin after
# their loops take the cores from the BLAS threads (a 2-thread GPT step: 0.97 s spinning,
# 0.33 s passive), so they wait passively, PyTorch's fastest configuration here.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch
import torch.nn.functional as F
torch.set_num_threads(spec["threads"])
torch.manual_seed(0)

def blas_name():
    torch.ones(64, 64) @ torch.ones(64, 64)
    libs = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            base = os.path.basename(os.path.realpath(path))
            if any(k in base for k in ("openblas", "mkl_", "blis", "libblas")):
                libs.add(os.path.realpath(path))
    for lib in sorted(libs):
        if "openblas" in lib:
            import ctypes
            try:
                f = ctypes.CDLL(lib).openblas_get_config
                f.restype = ctypes.c_char_p
                return "OpenBLAS (" + f().decode().strip() + ")"
            except (OSError, AttributeError):
                return "OpenBLAS"
        if "mkl" in lib:
            return "MKL"
        if "blis" in lib:
            return "BLIS"
    return "the reference BLAS" if libs else "no BLAS library loaded"

def mlp(emulate):
    rt = (lambda x: x.bfloat16().float()) if emulate else (lambda x: x)
    class RT(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return rt(x)
        @staticmethod
        def backward(ctx, g):
            return rt(g)
    q = RT.apply if emulate else (lambda x: x)
    l1, l2 = torch.nn.Linear(10, 32), torch.nn.Linear(32, 1)
    params = list(l1.parameters()) + list(l2.parameters())
    with torch.no_grad():
        for p in params:
            p.copy_(rt(p))
    opt = torch.optim.Adam(params, lr=0.01)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 10, generator=g)
    y = x @ (torch.randn(10, 1, generator=g) / 10 ** 0.5) + 0.1 * torch.randn(1024, 1, generator=g)
    pos = [0]
    def step():
        if pos[0] >= 1024:
            pos[0] = 0
        xb, yb = x[pos[0]:pos[0] + 64], y[pos[0]:pos[0] + 64]
        pos[0] += 64
        opt.zero_grad()
        h = q(F.linear(q(xb), q(l1.weight), q(l1.bias)))
        h = q(torch.relu(h))
        h = q(F.linear(h, q(l2.weight), q(l2.bias)))
        loss = q(F.mse_loss(h, q(yb)))
        loss.backward()
        opt.step()
        if emulate:
            with torch.no_grad():
                for p in params:
                    p.copy_(rt(p))
    return step

class Block(torch.nn.Module):
    def __init__(self, d, heads, ratio):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))
        self.proj = torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, ratio * d), torch.nn.Linear(ratio * d, d)
    def forward(self, x, mask):
        B, T, d = x.shape
        a = self.ln1(x)
        split = lambda t: t.view(B, T, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(self.q(a)), split(self.k(a)), split(self.v(a))
        s = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        s = s.masked_fill(mask[:T, :T], float("-inf"))
        att = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
        x = x + self.proj(att)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

def gpt(s):
    d, T, B, V = s["d_model"], s["seq"], s["batch"], s["vocab"]
    tok, pos = torch.nn.Embedding(V, d), torch.nn.Embedding(T, d)
    blocks = torch.nn.ModuleList(Block(d, s["heads"], s["mlp_ratio"]) for _ in range(s["blocks"]))
    ln_f, head = torch.nn.LayerNorm(d), torch.nn.Linear(d, V)
    params = [p for m in (tok, pos, blocks, ln_f, head) for p in m.parameters()]
    opt = torch.optim.Adam(params, lr=0.001)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(0))
    def step():
        opt.zero_grad()
        x = tok(ids) + pos(torch.arange(T))
        for b in blocks:
            x = b(x, mask)
        loss = F.cross_entropy(head(ln_f(x)).view(B * T, V), ids.view(B * T))
        loss.backward()
        opt.step()
    return step

step = mlp(spec["mode"] == "emulated-bf16") if spec["model"] == "mlp" else gpt(spec)
step()
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(spec["steps"]):
    step()
dt = (time.perf_counter() - t0) / spec["steps"]
cpu = (time.process_time() - c0) / spec["steps"]
mode = "fp32 eager" if spec["mode"] == "fp32" else "fp32 eager emulating bf16 by round-trip casts"
print(json.dumps({"reference": "PyTorch %s %s, %s thread(s), %s" % (
    torch.__version__, mode, threads, blas_name()), "seconds_per_step": dt,
    "cpu_seconds_per_step": cpu}))
)PY";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v[v.size() / 2];
}

/// Seconds per step, wall and CPU (every thread of the process).
struct StepTime {
  double wall = NAN, cpu = NAN;
};

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

/// The time per step of a full `halfway train` run (outputs and all), from the end of its
/// first step to the end of its last.
StepTime time_halfway(const std::string& config, int threads, const std::string& dir) {
  const sim::TrainConfig c = sim::parse_config(config, ".", "bench.toml");
  sim::TrainOptions o;
  o.threads = threads;
  std::chrono::steady_clock::time_point first, last;
  double cpu_first = 0, cpu_last = 0;
  o.on_progress = [&](int64_t done, int64_t) {
    (done == 1 ? first : last) = std::chrono::steady_clock::now();
    (done == 1 ? cpu_first : cpu_last) = process_cpu_seconds();
  };
  sim::write_run(c, dir, o);
  const std::chrono::duration<double> dt = last - first;
  const double steps = double(c.steps - 1);
  return {dt.count() / steps, (cpu_last - cpu_first) / steps};
}

/// One PyTorch measurement: the reference's description and its time per step, or why not
/// (the CPU time is optional in the protocol: a reference may report wall time alone).
struct TorchResult {
  std::string reference;
  std::optional<double> seconds, cpu_seconds;
};

TorchResult time_torch(const std::string& python, const std::string& script,
                       const BenchModel& m, const std::string& mode, int threads, int steps) {
  nlohmann::json spec = m.spec();
  spec["mode"] = mode;
  spec["threads"] = threads;
  spec["steps"] = steps;
  std::string out;
  const int rc = run_captured({python, script, spec.dump()}, out);
  if (rc == 0) {
    const std::string last = out.substr(out.rfind('\n', out.size() - 2) + 1);
    const auto j = nlohmann::json::parse(last.empty() ? out : last, nullptr, false);
    if (j.is_object() && j.contains("reference") && j["reference"].is_string() &&
        j.contains("seconds_per_step") && j["seconds_per_step"].is_number() &&
        j["seconds_per_step"].get<double>() > 0) {
      TorchResult t{j["reference"].get<std::string>(), j["seconds_per_step"].get<double>(), {}};
      if (j.contains("cpu_seconds_per_step") && j["cpu_seconds_per_step"].is_number() &&
          j["cpu_seconds_per_step"].get<double>() > 0)
        t.cpu_seconds = j["cpu_seconds_per_step"].get<double>();
      return t;
    }
  }
  std::string why = out.substr(0, out.find('\n'));
  if (why.empty()) why = python + " exited " + std::to_string(rc);
  return {"unavailable: " + printable(why), std::nullopt, std::nullopt};
}

/// What one row compares: a halfway configuration against a PyTorch mode.
struct Case {
  std::string name;  ///< e.g. "gpt torch-cuda-fp16 traced"
  BenchModel model;
  std::string policy;
  bool trace;
  std::string torch_mode;
  int threads;
  std::optional<double> goal_max;
};

struct Row {
  Case c;
  StepTime halfway;
  TorchResult torch;
};

std::vector<Case> cases(const TrainBenchOptions& o) {
  std::vector<Case> cs;
  const auto want = [&](const char* k) {
    return std::find(o.models.begin(), o.models.end(), k) != o.models.end();
  };
  if (!o.scaling && want("mlp")) {
    const BenchModel m{"mlp"};
    cs.push_back({"mlp fp32", m, "fp32", true, "fp32", 1, 2.0});
    cs.push_back({"mlp torch-cuda-fp16 traced", m, "torch-cuda-fp16", true, "fp32", 1, 3.0});
    // halfway must be at least twice as fast as PyTorch emulating the same roundings.
    cs.push_back({"mlp pure-bf16 untraced", m, "pure-bf16", false, "emulated-bf16", 1, 0.5});
  }
  std::vector<BenchModel> gpts;
  if (o.scaling) {
    for (int d : {64, 128, 256, 384}) gpts.push_back({"gpt", 4, d});
    for (int b : {1, 2, 8}) gpts.push_back({"gpt", b, 256});
  } else if (want("gpt")) {
    gpts.push_back({"gpt"});
  }
  for (const BenchModel& m : gpts)
    for (int t : o.threads) {
      cs.push_back({"gpt fp32", m, "fp32", true, "fp32", t, 1.0});
      cs.push_back({"gpt torch-cuda-fp16 traced", m, "torch-cuda-fp16", true, "fp32", t, 1.5});
      if (o.scaling) continue;
      cs.push_back({"gpt mxfp8 traced", m, "mxfp8", true, "fp32", t, 2.0});
      cs.push_back({"gpt nvfp4 traced", m, "nvfp4", true, "fp32", t, 2.0});
    }
  return cs;
}

/// a / b in JSON, null where either is missing.
nlohmann::json json_ratio(std::optional<double> a, std::optional<double> b) {
  return a && b && std::isfinite(*a) ? nlohmann::json(*a / *b) : nlohmann::json(nullptr);
}

nlohmann::json json_or_null(std::optional<double> v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::optional<double> micros(std::optional<double> seconds) {
  return seconds ? std::optional<double>(*seconds * 1e6) : std::nullopt;
}

void print_json(const Row& r) {
  const double h = r.halfway.wall * 1e6, hc = r.halfway.cpu * 1e6;
  const std::optional<double> ref = micros(r.torch.seconds), ref_cpu = micros(r.torch.cpu_seconds);
  nlohmann::json j = {{"name", r.c.name},       {"model", r.c.model.label()},
                      {"threads", r.c.threads}, {"halfway_us", h},
                      {"halfway_cpu_us", json_or_null(hc)}, {"reference", r.torch.reference}};
  j["reference_us"] = json_or_null(ref);
  j["reference_cpu_us"] = json_or_null(ref_cpu);
  j["ratio"] = json_ratio(h, ref);
  j["cpu_ratio"] = json_ratio(hc, ref_cpu);
  j["goal_max"] = json_or_null(r.c.goal_max);
  std::printf("%s\n", j.dump().c_str());
}

void print_table_row(const Row& r) {
  const double h = r.halfway.wall * 1e6, hc = r.halfway.cpu * 1e6;
  const std::optional<double> ref = micros(r.torch.seconds), ref_cpu = micros(r.torch.cpu_seconds);
  std::printf("%-28s %-58s %2d thr  halfway %11.1f us", r.c.name.c_str(),
              r.c.model.label().c_str(), r.c.threads, h);
  if (ref) std::printf("  reference %11.1f us  ratio %6.2f", *ref, h / *ref);
  else std::printf("  reference %s", r.torch.reference.c_str());
  if (ref_cpu && std::isfinite(hc)) std::printf("  cpu ratio %6.2f", hc / *ref_cpu);
  if (r.c.goal_max)
    std::printf("  (goal <= %g%s)", *r.c.goal_max,
                !ref ? "" : h / *ref <= *r.c.goal_max ? ", met" : ", MISSED");
  std::printf("\n");
}

void print_rows(const std::vector<Row>& rows, bool json) {
  for (const Row& r : rows) json ? print_json(r) : print_table_row(r);
  if (!json && !rows.empty()) {
    std::printf("references:\n");
    std::map<std::string, int> seen;
    for (const Row& r : rows)
      if (!seen[r.torch.reference]++) std::printf("  %s\n", r.torch.reference.c_str());
  }
}

}  // namespace

int train_bench(const TrainBenchOptions& o) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("halfway_bench_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string script = (dir / "torch_reference.py").string();
  std::ofstream(script) << kTorchScript;
  const std::vector<Case> cs = cases(o);
  // PyTorch's side once per model, mode and thread count in each repetition; rows share it.
  const auto key = [](const Case& c) {
    return c.model.label() + "|" + c.torch_mode + "|" + std::to_string(c.threads);
  };
  std::vector<std::vector<double>> hs(cs.size()), hcs(cs.size());
  std::map<std::string, std::vector<double>> ts, tcs;
  std::map<std::string, std::string> refs;
  for (int rep = 0; rep < o.reps; ++rep) {
    std::map<std::string, int> done;
    for (size_t i = 0; i < cs.size(); ++i) {
      const Case& c = cs[i];
      const int steps = c.model.kind == "mlp" ? o.mlp_steps : o.gpt_steps;
      const StepTime h = time_halfway(c.model.config(c.policy, c.trace, steps + 1), c.threads,
                                      (dir / "run").string());
      hs[i].push_back(h.wall);
      hcs[i].push_back(h.cpu);
      const std::string k = key(c);
      if (done[k]++ || refs[k].rfind("unavailable", 0) == 0) continue;  // once; no retries
      const TorchResult t = time_torch(o.python, script, c.model, c.torch_mode, c.threads, steps);
      refs[k] = t.reference;
      if (t.seconds) ts[k].push_back(*t.seconds);
      if (t.cpu_seconds) tcs[k].push_back(*t.cpu_seconds);
    }
  }
  std::filesystem::remove_all(dir);
  std::vector<Row> rows;
  for (size_t i = 0; i < cs.size(); ++i) {
    const std::string k = key(cs[i]);
    TorchResult t{refs[k], std::nullopt, std::nullopt};
    if (!ts[k].empty()) t.seconds = median(ts[k]);
    if (!tcs[k].empty()) t.cpu_seconds = median(tcs[k]);
    rows.push_back({cs[i], {median(hs[i]), median(hcs[i])}, t});
  }
  if (!o.json)
    std::printf("halfway train --bench: %d repetitions interleaved, medians of the seconds per "
                "step after the first; ratio = halfway / reference (wall time), cpu ratio the "
                "same in process CPU time\n", o.reps);
  print_rows(rows, o.json);
  return 0;
}

}  // namespace halfway::cli
