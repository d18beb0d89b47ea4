// `halfway train --bench`: halfway's training step against PyTorch's on the same model and
// machine, measured in the same run (train_bench.cpp).
#pragma once

#include <string>
#include <vector>

namespace halfway::cli {

struct TrainBenchOptions {
  int mlp_steps = 300;          ///< timed steps per MLP run
  int gpt_steps = 3;            ///< timed steps per GPT run (after one untimed step)
  int reps = 5;                 ///< repetitions, interleaved; the median is reported
  std::vector<int> threads;     ///< thread counts for the GPT rows (the MLP runs on one)
  std::vector<std::string> models{"mlp", "gpt"};
  bool scaling = false;         ///< GPT rows over a grid of widths and depths instead
  bool json = false;            ///< one JSON record per line instead of the table
  std::string python = "python3";
};

/// Runs the benchmark and prints its rows; returns the exit code.
int train_bench(const TrainBenchOptions& o);

}  // namespace halfway::cli
