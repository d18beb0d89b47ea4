// `halfway verify [--exhaustive] [--op OP] [--format F] [--rounding R] [--threads N]`: check the
// library, scalar routines and bulk kernels alike, against the independent oracle in
// verify_oracle.hpp, bit for bit, flags and bulk event counts included.
//
// The quick run (the default, seconds) covers every encoding of the 16-bit formats through
// conversions and square root, every pair of the formats of at most 10 bits through + − × ÷,
// sampled f32 inputs and sampled 16-bit pairs, in every deterministic rounding direction, plus
// the oracle against values written by hand and its short path against its general path.
// `--exhaustive` adds all 2^32 f32 inputs into each format in every direction (bulk kernel; the
// scalar routine in near_even) and all 2^32 pairs of each 16-bit format for + − × ÷ (bulk
// kernel, near_even unless --rounding says otherwise). Work is split into blocks of 65536 cases
// that threads take in turn; each check keeps its mismatch count and its first few mismatches.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "halfway/names.hpp"
#include "halfway/thread_pool.hpp"
#include "progress.hpp"
#include "verify_checks.hpp"

namespace halfway::cli {

namespace {

using namespace verify_cmd;
using Clock = std::chrono::steady_clock;

/// Run the listed blocks of a check on up to `threads` threads; the calling thread draws the
/// bar (when it is shown). Each block adds `weight` to the bar.
void run_blocks(Check& c, unsigned threads, const std::vector<uint64_t>& blocks, uint64_t weight,
                Progress* bar) {
  std::atomic<size_t> next{0};
  auto worker = [&]() {
    while (true) {
      const size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= blocks.size()) return;
      c.mismatches.fetch_add(c.run(c, blocks[i]), std::memory_order_relaxed);
      if (bar) bar->add(weight);
    }
  };
  // The workers, and one more part that draws the bar until the blocks are taken (run last
  // when the pool runs the parts inline, so it never waits for work that has not started).
  const int n = int(std::max<size_t>(1, std::min<size_t>(threads, blocks.size())));
  ThreadPool::global().run(n + 1, [&](int part) {
    if (part < n) return worker();
    while (bar && bar->enabled() && next.load() < blocks.size()) {
      bar->draw();
      for (int i = 0; i < 20 && next.load() < blocks.size(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// The blocks of each check left after the estimate, and what each weighs on the bar.
struct Plan {
  std::vector<std::vector<uint64_t>> rest;
  std::vector<uint64_t> weight;  ///< estimated µs per block
  uint64_t total_weight = 0;
  double estimate = 0;           ///< seconds, the probes' included
};

/// Estimate: run a few evenly spaced blocks of each check on all threads (they count as done)
/// and scale their time by the number of blocks left.
Plan estimate_checks(CheckList& checks, unsigned threads) {
  Plan p;
  p.rest.resize(checks.size());
  p.weight.resize(checks.size());
  for (size_t k = 0; k < checks.size(); ++k) {
    Check& c = *checks[k];
    const uint64_t probes = std::min<uint64_t>(c.blocks, 2 * uint64_t(threads));
    std::vector<uint64_t> probe;
    for (uint64_t j = 0; j < probes; ++j) probe.push_back(j * c.blocks / probes);
    const auto t0 = Clock::now();
    run_blocks(c, threads, probe, 0, nullptr);
    c.seconds = seconds_since(t0);
    c.estimate = c.seconds / double(probes) * double(c.blocks - probes);
    p.estimate += c.seconds + c.estimate;
    for (uint64_t blk = 0, j = 0; blk < c.blocks; ++blk) {
      if (j < probe.size() && probe[j] == blk) {
        ++j;
        continue;
      }
      p.rest[k].push_back(blk);
    }
    p.weight[k] = std::max<uint64_t>(1, uint64_t(1e6 * c.seconds / double(probes)));  // µs
    p.total_weight += p.weight[k] * p.rest[k].size();
  }
  return p;
}

/// Runs the blocks the estimate left, check by check, under one progress bar.
void run_rest(CheckList& checks, unsigned threads, const Plan& p) {
  Progress bar(p.total_weight);  // in estimated microseconds, so the ETA weighs checks right
  for (size_t k = 0; k < checks.size(); ++k) {
    Check& c = *checks[k];
    bar.label(c.name + " [" + c.path + "]");
    const auto t0 = Clock::now();
    run_blocks(c, threads, p.rest[k], p.weight[k], &bar);
    c.seconds += seconds_since(t0);
  }
}

/// Mismatch examples, then the summary table; the number of checks with mismatches.
size_t print_report(const CheckList& checks) {
  size_t failed = 0;
  for (const auto& c : checks) {
    if (c->mismatches == 0) continue;
    ++failed;
    fmt::print("MISMATCH in {} [{}]: {} of {} cases; first {}:\n", c->name, c->path,
               c->mismatches.load(), c->cases, c->examples.size());
    for (const auto& e : c->examples) fmt::print("  {}\n", e);
  }
  size_t w = 5;
  for (const auto& c : checks) w = std::max(w, c->name.size());
  size_t pw = 4;
  for (const auto& c : checks) pw = std::max(pw, c->path.size());
  fmt::print("\n{:<{}}  {:<{}}  {:>14}  {:>10}  {:>8}\n", "check", w, "path", pw, "cases",
             "mismatches", "seconds");
  for (const auto& c : checks)
    fmt::print("{:<{}}  {:<{}}  {:>14}  {:>10}  {:>8.2f}\n", c->name, w, c->path, pw, c->cases,
               c->mismatches.load(), c->seconds);
  return failed;
}

}  // namespace

int cmd_verify(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(kHelp, stdout);
      return 0;
    }
  const Options o = parse_options(argc, argv);
  CheckList checks = build(o);
  if (checks.empty())
    throw InputError("nothing to check: add sub mul div and sqrt are checked for formats of at "
                     "most 16 bits");

  uint64_t total_cases = 0;
  for (const auto& c : checks) total_cases += c->cases;
  fmt::print("halfway verify: {} checks, {} cases, {} thread{}{}\n", checks.size(), total_cases,
             o.threads, o.threads == 1 ? "" : "s", o.exhaustive ? ", exhaustive" : "");
  std::fflush(stdout);
  const auto start = Clock::now();
  const Plan plan = estimate_checks(checks, o.threads);
  fmt::print("estimated time: {} (measured on {} blocks per check)\n",
             Progress::duration(plan.estimate), 2 * o.threads);
  std::fflush(stdout);
  run_rest(checks, o.threads, plan);
  const double elapsed = seconds_since(start);
  const size_t failed = print_report(checks);
  fmt::print("\n{} cases in {} ({:.1f} s, estimated {:.1f} s) on {} thread{}\n", total_cases,
             Progress::duration(elapsed), elapsed, plan.estimate, o.threads,
             o.threads == 1 ? "" : "s");
  if (failed) {
    fmt::print("FAIL: {} of {} checks have mismatches\n", failed, checks.size());
    return 1;
  }
  fmt::print("OK: all {} checks agree with the oracle\n", checks.size());
  return 0;
}

}  // namespace halfway::cli
