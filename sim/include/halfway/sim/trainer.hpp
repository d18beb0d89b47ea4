/// \file trainer.hpp
/// One training configuration (config.hpp) to result files. A config names a model, data,
/// a loss, an optimizer, a precision policy and a loss scaler; the trainer runs the steps
/// (forward under the policy, scaled backward, unscale/check/skip, optimizer, scale update),
/// the tracer counts every rounding, and the results land as plain files with a manifest:
///
///   steps.csv         one row per step (loss before the update, scale, found_inf, skipped, ...,
///                     the validation loss of text runs)
///   trace.csv         the tracer's records, one row per (step, tensor)
///   scale_window.csv  predicted flushed and overflowing gradient values for loss scales 2^k
///   memory.csv        bytes per category and dtype
///   updates.csv       per traced step and parameter: non-zero and vanished updates, drift
///   blocks.csv        block-scaled GEMM operand copies: events, SNR, block-scale histogram
///   manifest.json     config, seed, version, git revision, summary
///
/// Every file is written atomically; the same config and seed give byte-identical files
/// whatever the thread count.
///
///     TrainConfig c = parse_config_file("run.toml");
///     write_run(c, "out/", {});
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "halfway/sim/config.hpp"
#include "halfway/sim/data.hpp"
#include "halfway/sim/memory.hpp"
#include "halfway/sim/model.hpp"
#include "halfway/sim/tracer.hpp"
#include "halfway/sim/version.hpp"

namespace halfway::sim {

/// One parameter's update in one step (updates.csv).
struct UpdateRow {
  std::string name;
  std::string dtype;
  uint64_t elements = 0;
  uint64_t nonzero = 0;   ///< non-zero updates (see UpdateStats); 0 on a skipped step
  uint64_t vanished = 0;  ///< of those, the ones that left the stored weight unchanged
  /// ‖w − w_ref‖₂ / ‖w_ref‖₂ after the step against the reference run; NaN without one.
  double drift = std::numeric_limits<double>::quiet_NaN();
};

struct StepRow {
  int64_t step = 0;
  double loss = 0;          ///< forward loss of the step, before the update
  float loss_scale = 1;     ///< the scale the backward used
  bool found_inf = false;   ///< inf/NaN in the (scaled) gradients
  bool skipped = false;     ///< optimizer step skipped
  int64_t growth_tracker = 0;  ///< after the update
  float next_scale = 1;        ///< after the update
  std::vector<UpdateRow> updates;  ///< one per parameter, in order
  /// Mean validation cross-entropy (nats per byte) with the parameters this step's forward
  /// used; NaN on steps without a validation.
  double val_loss = std::numeric_limits<double>::quiet_NaN();
};

struct TrainOptions {
  int threads = 1;
  /// Optional: sees every tagged rounding of the run (see `Runtime::on_round`), e.g. to compare
  /// each rounded tensor of each step with another implementation. Steps are delimited by the
  /// StepCallback, which runs after each step's roundings.
  RoundObserver on_round;
  /// Refuse (InputError) a run whose estimated peak memory (estimate_memory) is over this many
  /// bytes; 0: 80% of the physical memory.
  uint64_t max_memory = 0;
  /// write_run refuses (InputError) a run whose estimated output (estimate_disk) is over this
  /// many bytes; 0: the free space of the output's file system.
  uint64_t max_disk = 0;
  /// Optional: called after every step with the steps done and the steps of the run.
  std::function<void(int64_t done, int64_t total)> on_progress;
};

struct TrainSummary {
  std::vector<MemoryRow> memory;
  std::vector<Param> final_params;
  int64_t skipped = 0, found_inf = 0;
  double final_loss = 0;
  float final_scale = 1;
  int k_low = INT_MIN, k_high = INT_MIN;  ///< intersection of the per-step safe windows
  bool window_known = false;
  int64_t steps_done = 0;  ///< fewer than the config's steps when the run was stopped
  int stop_signal = 0;     ///< the signal that stopped the run early (stop_signal()), or 0
  bool complete() const { return stop_signal == 0; }
};

/// Called after every step with the step's row, its trace (null on untraced steps) and the
/// fp32 gradients the optimizer saw (unscaled, except in mistake mode).
using StepCallback = std::function<void(const StepRow&, const StepTrace*,
                                        const std::vector<Param>&,
                                        const std::vector<std::vector<float>>&)>;

/// The fp32 run a config's `run.reference = "fp32"` trains alongside it: the `fp32` preset,
/// near-even rounding, fp32 optimizer state, plain updates, no loss scaling, untraced; the same
/// model, initial weights, data order, optimizer and seed.
TrainConfig reference_config(const TrainConfig& c);

/// Run the configuration. Throws InputError for bad data or initial weights, and for a run
/// whose estimated memory is over `o.max_memory` (checked before anything large is allocated).
/// A stop request (io.hpp: SIGINT/SIGTERM after install_stop_handlers) ends the run after the
/// step in progress; the summary then says how many steps were done.
TrainSummary train(const TrainConfig& c, const TrainOptions& o, const StepCallback& cb);

/// Run and write the result files into `out_dir` (created when missing), removing the
/// temporary files a killed run left there. A run stopped early writes the files of its
/// finished steps, with "complete": false in manifest.json.
TrainSummary write_run(const TrainConfig& c, const std::string& out_dir, const TrainOptions& o);

/// Whether `dir` holds a finished run: a manifest.json that does not say "complete": false
/// (as a run stopped by SIGINT/SIGTERM does). Sweeps resume every run that is not.
bool run_complete(const std::string& dir);

}  // namespace halfway::sim
