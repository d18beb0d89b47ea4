// `halfway train CONFIG.toml [--out DIR] [--threads N]`: run one training configuration of the
// simulator and write steps.csv, trace.csv, scale_window.csv, updates.csv, blocks.csv,
// memory.csv and manifest.json.
// `halfway train --bench`: the training benchmark (ratios measured in one run, interleaved).
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "cli_parse.hpp"
#include "commands.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/thread_pool.hpp"
#include "halfway/sim/trainer.hpp"
#include "progress.hpp"
#include "size_option.hpp"
#include "train_bench.hpp"

namespace halfway::cli {

int cmd_train(int argc, char** argv) {
  CLI::App app{"Simulate mixed-precision training and trace every rounding", "halfway train"};
  std::string config, out;
  int threads = halfway::ThreadPool::hardware_threads();
  bool run_bench = false;
  TrainBenchOptions b;
  b.threads = {1};
  if (threads > 1) b.threads.push_back(threads);
  app.add_option("config", config, "the run's TOML config (paths in it are relative to it)");
  app.add_option("--out", out, "output directory (default: the config's name without .toml, "
                               "next to it)");
  app.add_option("--threads", threads, "threads for large matrix products (default: the "
                                       "machine's cores; results do not depend on it)")
      ->check(CLI::Range(1, 256));
  const SizeOption max_memory(app, "--max-memory", "refuse a run whose estimated peak memory "
                                                    "is over SIZE (e.g. 2G, 512M; default: 80% "
                                                    "of physical memory)");
  const SizeOption max_disk(app, "--max-disk", "refuse a run whose estimated output is over "
                                               "SIZE (e.g. 10G; default: the free space where "
                                               "--out is)");
  app.add_flag("--bench", run_bench, "benchmark: halfway's training steps against PyTorch's "
                                     "fp32 steps on the same models, measured in one run "
                                     "(no CONFIG)");
  app.add_option("--bench-steps", b.mlp_steps, "timed steps per MLP run")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--bench-gpt-steps", b.gpt_steps, "timed steps per GPT run")
      ->check(CLI::Range(1, 10000));
  app.add_option("--bench-reps", b.reps, "repetitions, interleaved (the median is reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--bench-threads", b.threads, "thread counts of the GPT rows (default: 1 and "
                                               "the machine's cores)")
      ->delimiter(',')->check(CLI::Range(1, 256));
  app.add_option("--bench-models", b.models, "models: mlp, gpt (default: both)")
      ->delimiter(',')->check(CLI::IsMember({"mlp", "gpt"}));
  app.add_flag("--bench-scaling", b.scaling, "GPT rows over widths 64..384 and depths 1..8 "
                                             "instead (docs/performance.md's plot)");
  app.add_flag("--json", b.json, "with --bench: one JSON record per line");
  if (const char* p = std::getenv("HALFWAY_PYTHON"); p && *p) b.python = p;
  app.add_option("--python", b.python, "Python with PyTorch for --bench (default: "
                                       "$HALFWAY_PYTHON, else python3)");
  if (parse_or_help(app, argc, argv)) return 0;
  if (run_bench) {
    if (!config.empty()) throw InputError("--bench takes no CONFIG");
    return train_bench(b);
  }
  if (config.empty()) throw InputError("missing CONFIG.toml (usage: halfway train CONFIG.toml [--out DIR])");
  sim::TrainOptions o;
  o.threads = threads;
  o.max_memory = max_memory.bytes();
  o.max_disk = max_disk.bytes();
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
  // SIGINT, SIGTERM, SIGHUP, SIGQUIT: stop after the step in progress and write what is
  // complete.
  sim::install_stop_handlers();
  const sim::TrainSummary s = sim::write_run(c, out, o);
  bar.finish();
  if (!s.complete()) {
    const int sig = s.stop_signal;
    std::fprintf(stderr, "halfway train: stopped by %s after %lld of %lld steps; %s holds the "
                 "finished steps (manifest.json: \"complete\": false)\n",
                 sim::signal_name(sig).c_str(), static_cast<long long>(s.steps_done),
                 static_cast<long long>(c.steps), out.c_str());
    // The shell's convention: 130 SIGINT, 143 SIGTERM, 129 SIGHUP, 131 SIGQUIT.
    return 128 + sig;
  }
  std::printf("halfway train: %lld steps, final loss %.9g, %lld skipped, final scale %.9g -> %s\n",
              static_cast<long long>(c.steps), s.final_loss, static_cast<long long>(s.skipped),
              double(s.final_scale), out.c_str());
  return 0;
}

}  // namespace halfway::cli
