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

/// Byte-level text ([data] text): a byte is a token (vocabulary 256).
inline constexpr int kByteVocab = 256;
/// The most files and bytes a text corpus may have. The windows are held as binary64 token
/// ids, inputs and targets: 16 bytes of memory per corpus byte, 256 MiB at this bound.
inline constexpr int64_t kMaxTextFiles = 4096;
inline constexpr int64_t kMaxTextBytes = int64_t(16) << 20;

/// The files concatenated in order. Throws InputError naming the file when one cannot be read
/// or is not a regular file, when the corpus is over kMaxTextBytes, and when it is empty.
std::string read_text_corpus(const std::vector<std::string>& files);

struct TextSplit {
  Dataset train, val;  ///< ids [N, T] and next-byte targets [N, T]
};
/// Windows of seq_len + 1 bytes starting every seq_len bytes (input: the first seq_len bytes,
/// target: the last seq_len), shuffled with `seed`; the first round(val_fraction · N) windows
/// (at least one) are the validation set, in that shuffled order, the others the training set,
/// in corpus order. Throws InputError when the corpus has fewer than two windows.
TextSplit text_windows(const std::string& corpus, int seq_len, double val_fraction,
                       uint64_t seed);

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
