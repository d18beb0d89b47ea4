// `halfway train CONFIG.toml [--out DIR] [--threads N]`: run one training configuration of the
// simulator and write steps.csv, trace.csv, scale_window.csv, updates.csv, memory.csv and
// manifest.json.
// `halfway train --bench`: the training benchmark (ratios measured in one run, interleaved).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <csignal>
#include <unistd.h>

#include "commands.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/sim/thread_pool.hpp"
#include "halfway/sim/trainer.hpp"
#include "progress.hpp"

namespace halfway::cli {

namespace {

// The default MLP of the issue: 10 -> 32 -> 1, ReLU, batch 64, Adam, synthetic regression.
const char* kBenchConfig = R"(
[model]
kind = "mlp"
layers = [10, 32, 1]
activation = "relu"
[data]
synthetic = "regression"
batch_size = 64
[loss]
kind = "mse"
[optimizer]
kind = "adam"
lr = 0.01
[precision]
policy = "POLICY"
[run]
steps = STEPS
seed = 0
)";

// PyTorch on the CPU emulating bf16 training with round-trip casts: every activation, weight,
// gradient and updated weight goes through .bfloat16().float() (what halfway's pure-bf16
// policy rounds). Prints the seconds per step of each repetition.
const char* kTorchScript = R"PY(
import sys, time
import torch
steps, reps = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
def rt(x):
    return x.bfloat16().float()
class RT(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return rt(x)
    @staticmethod
    def backward(ctx, g):
        return rt(g)
q = RT.apply
torch.manual_seed(0)
l1, l2 = torch.nn.Linear(10, 32), torch.nn.Linear(32, 1)
params = list(l1.parameters()) + list(l2.parameters())
with torch.no_grad():
    for p in params:
        p.copy_(rt(p))
opt = torch.optim.Adam(params, lr=0.01)
g = torch.Generator().manual_seed(0)
x = torch.randn(1024, 10, generator=g)
y = x @ (torch.randn(10, 1, generator=g) / 10 ** 0.5) + 0.1 * torch.randn(1024, 1, generator=g)
F = torch.nn.functional
def run():
    pos = 0
    for _ in range(steps):
        if pos >= 1024:
            pos = 0
        xb, yb = x[pos:pos + 64], y[pos:pos + 64]
        pos += 64
        opt.zero_grad()
        h = q(F.linear(q(xb), q(l1.weight), q(l1.bias)))
        h = q(torch.relu(h))
        h = q(F.linear(h, q(l2.weight), q(l2.bias)))
        loss = q(F.mse_loss(h, q(yb)))
        loss.backward()
        opt.step()
        with torch.no_grad():
            for p in params:
                p.copy_(rt(p))
run()  # warm-up
out = []
for _ in range(reps):
    t0 = time.perf_counter()
    run()
    out.append((time.perf_counter() - t0) / steps)
print(" ".join("%.9e" % t for t in out))
)PY";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string replace_all(std::string s, const std::string& a, const std::string& b) {
  for (size_t p; (p = s.find(a)) != std::string::npos;) s.replace(p, a.size(), b);
  return s;
}

/// Seconds per step of a full `halfway train` run (tracing and all output files).
double time_run(const std::string& policy, int steps, const std::string& dir, bool trace = true) {
  std::string cfg = replace_all(kBenchConfig, "POLICY", policy);
  cfg = replace_all(cfg, "STEPS", std::to_string(steps));
  if (!trace) cfg += "[trace]\nenabled = false\n";
  const sim::TrainConfig c = sim::parse_config(cfg, ".", "bench.toml");
  const auto t0 = std::chrono::steady_clock::now();
  sim::write_run(c, dir, {});
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  return dt.count() / steps;
}

/// Run argv[0] (looked up in PATH) with these arguments, no shell in between; its stdout and
/// stderr go to `out`. Returns its exit status, or -1 (the reason in `out`) if it did not run.
int run_captured(const std::vector<std::string>& args, std::string& out) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int fd[2];
  if (::pipe2(fd, O_CLOEXEC) != 0) {
    out = std::string("cannot run ") + args[0] + ": " + std::strerror(errno);
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, fd[1], STDERR_FILENO);
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fd[1]);
  if (err != 0) {
    ::close(fd[0]);
    out = std::string("cannot run ") + args[0] + ": " + std::strerror(err);
    return -1;
  }
  char buf[4096];
  for (ssize_t n; (n = ::read(fd[0], buf, sizeof buf)) != 0;) {
    if (n > 0) out.append(buf, size_t(n));
    else if (errno != EINTR) break;
  }
  ::close(fd[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int bench(int steps, int reps, const std::string& python) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("halfway_bench_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string script = (dir / "torch_emulated_bf16.py").string();
  std::ofstream(script) << kTorchScript;
  std::vector<double> f32, f16, bf16, bf16_plain, torch;
  std::string torch_note;
  time_run("fp32", steps, (dir / "warm").string());
  for (int r = 0; r < reps; ++r) {
    f32.push_back(time_run("fp32", steps, (dir / "fp32").string()));
    f16.push_back(time_run("torch-cuda-fp16", steps, (dir / "fp16").string()));
    bf16.push_back(time_run("pure-bf16", steps, (dir / "bf16").string()));
    bf16_plain.push_back(time_run("pure-bf16", steps, (dir / "bf16p").string(), false));
    if (torch_note.empty()) {
      std::string out;
      const int rc = run_captured({python, script, std::to_string(steps), "1"}, out);
      double t = 0;
      if (rc == 0 && std::istringstream(out) >> t && t > 0) {
        torch.push_back(t);
      } else {
        torch_note = out.substr(0, out.find('\n'));
        if (torch_note.empty()) torch_note = "could not run " + python;
      }
    }
  }
  std::filesystem::remove_all(dir);
  const double m32 = median(f32), m16 = median(f16), mb = median(bf16), mt = median(torch);
  const double mp = median(bf16_plain);
  std::printf("halfway train --bench: default MLP [10, 32, 1], batch 64, Adam, %d steps x %d "
              "repetitions, interleaved, one thread; medians per step\n", steps, reps);
  std::printf("  halfway fp32                       %9.1f us\n", m32 * 1e6);
  std::printf("  halfway torch-cuda-fp16, traced    %9.1f us\n", m16 * 1e6);
  std::printf("  halfway pure-bf16, traced          %9.1f us\n", mb * 1e6);
  std::printf("  halfway pure-bf16, not traced      %9.1f us\n", mp * 1e6);
  if (torch.empty())
    std::printf("  PyTorch emulated bf16              unavailable (%s)\n", torch_note.c_str());
  else
    std::printf("  PyTorch emulated bf16 (CPU)        %9.1f us\n", mt * 1e6);
  std::printf("ratio traced torch-cuda-fp16 / fp32 step in halfway: %.2f (goal <= 3)\n", m16 / m32);
  if (!torch.empty()) {
    // The same work as the PyTorch loop (which traces nothing) is the untraced run.
    std::printf("ratio PyTorch emulated bf16 / halfway pure-bf16 step: %.2f (goal >= 2); "
                "with halfway's full tracing: %.2f\n", mt / mp, mt / mb);
  }
  return 0;
}

}  // namespace

int cmd_train(int argc, char** argv) {
  CLI::App app{"Simulate mixed-precision training and trace every rounding", "halfway train"};
  std::string config, out, python = "python3", max_memory;
  int threads = sim::ThreadPool::hardware_threads(), steps = 300, reps = 5;
  bool run_bench = false;
  app.add_option("config", config, "the run's TOML config (paths in it are relative to it)");
  app.add_option("--out", out, "output directory (default: the config's name without .toml, "
                               "next to it)");
  app.add_option("--threads", threads, "threads for large matrix products (default: the "
                                       "machine's cores; results do not depend on it)")
      ->check(CLI::Range(1, 256));
  app.add_option("--max-memory", max_memory, "refuse a run whose estimated peak memory is over "
                                             "SIZE (e.g. 2G, 512M; default: 80% of physical "
                                             "memory)");
  app.add_flag("--bench", run_bench, "benchmark: traced fp16 vs fp32 steps, and halfway vs "
                                     "PyTorch emulating bf16 (no CONFIG)");
  app.add_option("--bench-steps", steps, "steps per timed run")->check(CLI::Range(1, 1000000));
  app.add_option("--bench-reps", reps, "repetitions (the median is reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--python", python, "Python with PyTorch for --bench");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    throw InputError(msg);
  }
  if (run_bench) {
    if (!config.empty()) throw InputError("--bench takes no CONFIG");
    return bench(steps, reps, python);
  }
  if (config.empty()) throw InputError("missing CONFIG.toml (usage: halfway train CONFIG.toml [--out DIR])");
  sim::TrainOptions o;
  o.threads = threads;
  if (!max_memory.empty()) o.max_memory = sim::parse_memory_size(max_memory);
  const sim::TrainConfig c = sim::parse_config_file(config);
  if (out.empty()) {
    std::filesystem::path p(config);
    out = (p.parent_path() / p.stem()).string();
  }
  // A run that lasts more than 10 s shows a progress bar with an ETA, on a terminal only.
  Progress bar(uint64_t(c.steps), isatty(STDERR_FILENO) != 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  o.on_progress = [&](int64_t done, int64_t total) {
    bar.add(1);
    if (!bar.enabled()) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - t0 < std::chrono::seconds(10) || now - last < std::chrono::milliseconds(250)) return;
    last = now;
    bar.label(std::to_string(done) + "/" + std::to_string(total) + " steps");
    bar.draw();
  };
  // SIGINT/SIGTERM: stop after the step in progress and write what is complete.
  sim::install_stop_handlers();
  const sim::TrainSummary s = sim::write_run(c, out, o);
  bar.finish();
  if (!s.complete()) {
    const int sig = s.stop_signal;
    std::fprintf(stderr, "halfway train: stopped by %s after %lld of %lld steps; %s holds the "
                 "finished steps (manifest.json: \"complete\": false)\n",
                 sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal",
                 static_cast<long long>(s.steps_done), static_cast<long long>(c.steps),
                 out.c_str());
    return 128 + sig;  // the shell's convention: 130 for SIGINT, 143 for SIGTERM
  }
  std::printf("halfway train: %lld steps, final loss %.9g, %lld skipped, final scale %.9g -> %s\n",
              static_cast<long long>(c.steps), s.final_loss, static_cast<long long>(s.skipped),
              double(s.final_scale), out.c_str());
  return 0;
}

}  // namespace halfway::cli
