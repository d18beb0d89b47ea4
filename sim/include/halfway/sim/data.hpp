/// \file data.hpp
/// Datasets: arrays `x`, `y` from numpy `.npz`, or seeded synthetic data — regression
/// y = x·w + noise, classification from Gaussian blobs, and a sequence task (copy or reverse
/// a random token sequence). A Loader hands out batches in order (optionally reshuffled each
/// epoch with the run's seed), like a DataLoader with drop_last=False.
///
///     Dataset d = synthetic_regression(1024, 10, 1, 0.1, seed);
///     Loader ld(d, 64, false, seed);   Batch b = ld.next();
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "halfway/sim/model.hpp"

namespace halfway::sim {

struct Dataset {
  Shape x_shape;               ///< [N, F] features or [N, T] token ids
  std::vector<double> x;
  bool x_ids = false;
  Shape y_shape;               ///< [N, O] targets, [N] class labels or [N, T] token ids
  std::vector<double> y;
  bool y_labels = false;
  int64_t n() const { return x_shape.empty() ? 0 : x_shape[0]; }
};

/// Throw InputError "`what` has NaN or inf" when a value is not finite, and "`what` has values
/// beyond the fp32 range" when one becomes infinite as float32 (|v| > FLT_MAX after rounding):
/// data and initial weights enter the model as fp32 (or lower).
void check_finite_fp32(const std::vector<double>& values, const std::string& what);

Dataset synthetic_regression(int64_t n, int features, int outputs, double noise, uint64_t seed);
Dataset synthetic_blobs(int64_t n, int features, int classes, double spread, uint64_t seed);
Dataset synthetic_sequence(int64_t n, int seq_len, int vocab, bool reverse, uint64_t seed);

class Loader {
 public:
  Loader(const Dataset& d, int64_t batch_size, bool shuffle, uint64_t seed);
  Batch next();

 private:
  void new_epoch();
  const Dataset& d_;
  int64_t bs_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = -1, pos_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace halfway::sim
