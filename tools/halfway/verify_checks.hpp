// The parts of `halfway verify` (cmd_verify.cpp): its options (verify_options.cpp), its checks
// against the oracle (verify_checks.cpp) and the runner that estimates, runs and reports them
// (cmd_verify.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "halfway/bulk.hpp"
#include "halfway/softfloat.hpp"

namespace halfway::cli::verify_cmd {

/// `halfway verify --help`.
extern const char* const kHelp;

struct Options {
  bool exhaustive = false;
  std::vector<std::string> ops;
  std::vector<Format> formats;
  std::vector<Rounding> modes;
  bool modes_given = false;
  Tininess tininess = Tininess::after_rounding;
  unsigned threads = 0;
  int max_report = 5;
  bool inject = false;
  std::vector<detail::BulkPath> bulk_paths;  ///< --bulk-path, or empty: see build()

  bool has_op(const char* op) const {
    return ops.empty() || std::find(ops.begin(), ops.end(), op) != ops.end();
  }
};

/// The options of the command line (InputError on a bad one), with the defaults filled in.
Options parse_options(int argc, char** argv);

// A check: a named set of cases split into blocks; `run(block)` returns the block's mismatches.
struct Check {
  std::string name;  ///< what is checked
  std::string path;  ///< "scalar", "bulk", ...
  uint64_t cases = 0;
  uint64_t blocks = 0;
  std::function<uint64_t(Check&, uint64_t)> run;

  std::atomic<uint64_t> mismatches{0};
  double seconds = 0;
  double estimate = 0;
  std::mutex mu;
  std::vector<std::string> examples;
  int max_report = 5;

  /// Keep the text of one of the first few mismatches (built only when it will be kept).
  template <class F>
  void note(F&& make) {
    std::lock_guard<std::mutex> lock(mu);
    if (int(examples.size()) < max_report) examples.push_back(make());
  }
};

using CheckList = std::vector<std::unique_ptr<Check>>;

/// The checks the options select, the oracle's spot check against hand-written values first
/// (empty when nothing is selected).
CheckList build(const Options& o);

}  // namespace halfway::cli::verify_cmd
