/// \file config.hpp
/// A run's configuration: the TOML file `halfway train` reads (docs/sim.md's config
/// reference), parsed into a TrainConfig that names the model, the data, the loss, the
/// optimizer, the precision policy, the loss scaler, the trace and the extra outputs. Every
/// table and key is checked, so a typo is an error rather than an ignored option.
///
///     TrainConfig c = parse_config_file("run.toml");
///     Precision p = parse_precision_file("policy.toml");   // its [precision] table alone
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "halfway/sim/model.hpp"
#include "halfway/sim/optim.hpp"
#include "halfway/sim/precision.hpp"
#include "halfway/sim/scaler.hpp"
#include "halfway/sim/tracer.hpp"

namespace halfway::sim {

struct TrainConfig {
  std::string source_name = "config";  ///< file name of the config (manifest)
  std::string base_dir = ".";          ///< relative paths are resolved against this
  std::string config_json = "{}";      ///< the config as JSON (manifest)

  std::string model_kind = "mlp";  ///< mlp | transformer
  MlpConfig mlp;
  TransformerConfig transformer;
  std::string init_npz;  ///< "" or a path (resolved)

  std::string data_npz;   ///< "" or a path (resolved)
  std::string synthetic;  ///< regression | blobs | copy | reverse (when no npz)
  int64_t data_n = 1024;
  double noise = 0.1;
  double spread = 3.0;
  int64_t batch_size = 64;
  bool shuffle = false;
  /// Byte-level language modelling ([data] text): the files, concatenated in order; windows of
  /// seq_len + 1 bytes, a seeded split into training and validation windows.
  std::vector<std::string> text_files;  ///< resolved paths; empty: no text data
  double val_fraction = 0.1;            ///< share of the windows held out for validation
  int64_t val_every = 100;              ///< validation loss every this many steps (0: never)
  int64_t val_windows = 0;              ///< validation windows evaluated (0: all of them)

  std::string loss = "mse";  ///< mse | cross_entropy
  OptimizerConfig optimizer;
  Precision precision;  ///< every precision knob: policy, accumulation, rounding, random bits
  ScalerConfig scaler;
  int64_t steps = 1;
  uint64_t seed = 0;
  /// "" or "fp32": a reference run trained alongside in fp32 (the `fp32` policy, near-even,
  /// fp32 optimizer state, plain updates; same model, data, seed and optimizer), against
  /// which updates.csv reports each parameter's drift.
  std::string reference;

  bool trace = true;
  int64_t trace_every = 1;
  TracerOptions tracer;

  bool save_weights = false;  ///< weights.npz at the end
  bool save_grads = false;    ///< grads.npz: the unscaled fp32 gradients of every step
};

/// Parse a config; relative paths are taken relative to `base_dir`. Throws InputError with a
/// one-line message for unknown tables/options/policies/ops, missing fields, wrong types and
/// invalid values.
TrainConfig parse_config(const std::string& toml_text, const std::string& base_dir,
                         const std::string& source_name = "config");
TrainConfig parse_config_file(const std::string& path);
/// The [precision] table of the config file `path` (a whole `halfway train` config, or one
/// holding only that table), parsed and checked as parse_config does.
Precision parse_precision_file(const std::string& path);

}  // namespace halfway::sim
