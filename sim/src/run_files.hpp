// The result files of a run as it goes (run_files.cpp), internal to sim/: steps.csv,
// trace.csv, scale_window.csv, updates.csv, blocks.csv, memory.csv, weights.npz and grads.npz,
// each under a temporary name until the folder is published with its manifest.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "halfway/sim/io.hpp"
#include "halfway/sim/npz.hpp"
#include "halfway/sim/trainer.hpp"

namespace halfway::sim::detail {

/// The files of a run: steps.csv, trace.csv, scale_window.csv, updates.csv, blocks.csv and
/// grads.npz's gradients, written as the run goes, and memory.csv and weights.npz, written
/// at its end; all under temporary names until publish(). Rows are assembled with csv.hpp
/// (std::to_chars: locale-free, shortest round-trip text) and written with one call per step
/// and file.
class RunFiles {
 public:
  RunFiles(const TrainConfig& c, const std::string& d);

  void add_step(const StepRow& r, const StepTrace* st, const std::vector<Param>& params,
                const std::vector<std::vector<float>>& grads);

  /// Write memory.csv and weights.npz, and flush every file to disk under its temporary
  /// name: the step that fails on a full disk, with the folder untouched.
  void finish(const TrainSummary& sum);

  /// The files written, in run_file_names()'s order (run_files.cpp).
  std::vector<std::string> outputs() const;

  /// Replace the folder's files with these, manifest last (publish_folder).
  void publish(const std::string& manifest);

  /// Optimizer state rounded into a low-precision dtype: values flushed to zero or
  /// overflowed, summed over the traced steps (manifest summary).
  uint64_t state_values = 0, state_flushed = 0, state_overflow = 0;

 private:
  template <class T>
  void num(T v);
  void sep() { line_ += ','; }

  void step_row(const StepRow& r, const StepTrace* st);
  void trace_rows(const StepTrace& st);
  /// Scales are predicted from low-precision gradient roundings; with none there is nothing to
  /// predict (fp32) and no rows are written.
  void window_rows(const StepTrace& st);
  void update_rows(const StepRow& r);
  void block_rows(const StepTrace& st);

  const TrainConfig& c_;
  std::string dir_;
  AtomicFile steps_, trace_, window_, updates_, blocks_;
  std::unique_ptr<AtomicFile> memory_;
  std::unique_ptr<NpzWriter> grads_, weights_;
  std::string line_;
};

}  // namespace halfway::sim::detail
