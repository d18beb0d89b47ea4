// Sweeps over training configurations: the definition file, its expansion into runs, and the
// results layout shared by `halfway sweep`, `halfway merge` and `halfway run`.
//
// A sweep file is a training config (`base`, a file or inline tables) plus lists:
//
//     base = "config.toml"                  # or inline: [base.model] ... [base.run] ...
//     [axes]                                # cartesian product, in file order
//     "scaler.scale" = { pow2 = [0, 24] }   # 2^0, 2^1, ..., 2^24
//     "run.seed" = [0, 1, 2]
//     [[case]]                              # optional: named groups of settings, crossed
//     name = "fp16-dynamic"                 #   with the axes (case varies slowest)
//     "precision.policy" = "torch-cuda-fp16"
//     "scaler.kind" = "dynamic"
//
// Results: DIR/sweep.json (definition hash, the runs and their settings), DIR/runs/NNNN/ (one
// folder per run: config.toml plus `halfway train`'s files), DIR/sweep.csv (the index).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace halfway::cli {

struct SweepRun {
  int index = 0;
  std::string case_name;                                     ///< "" without [[case]]
  std::vector<std::pair<std::string, std::string>> values;   ///< axis key -> value text
  std::string config_toml;                                   ///< the full config
};

struct SweepDef {
  std::string path, base_dir;
  std::vector<std::string> axis_keys;  ///< in file order
  bool has_cases = false;
  std::vector<SweepRun> runs;
  std::string hash;  ///< hex FNV-1a 64 of the expanded definition
};

/// Parse and expand a sweep file; every run's config is checked (throws InputError naming the
/// run and the bad key before anything runs).
SweepDef load_sweep(const std::string& path);

/// Run the sweep's runs with index % shard_count == shard (0-based) into `out`, resuming.
/// Returns the process exit code.
/// `max_memory`: each run's limit (TrainOptions::max_memory; 0: 80% of physical memory).
/// `max_disk`: the most the runs still to do may write together (estimate_disk; 0: the free
/// space of `out`'s file system), checked before any run starts.
int run_sweep(const SweepDef& d, const std::string& out, int jobs, int shard, int shard_count,
              bool quiet, uint64_t max_memory = 0, uint64_t max_disk = 0);

/// The shard (0-based) and the shard count of this process: `option` ("I/N", --shard; empty:
/// none) and Slurm's job array (SLURM_ARRAY_TASK_ID minus SLURM_ARRAY_TASK_MIN, and
/// SLURM_ARRAY_TASK_COUNT), which must agree when both are given; 0 and 1 without either.
void resolve_shard(const std::string& option, int& shard, int& count);

/// FNV-1a 64 of `s` (the definition hashes of sweeps and bisections), continuing from `h`.
uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull);
/// `v` as 16 lower-case hex digits.
std::string hex64(uint64_t v);

/// The folder name of run `i` under DIR/runs/.
std::string run_dir_name(int i);

}  // namespace halfway::cli
