#include "halfway/sim/data.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "halfway/names.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/sim/rng.hpp"

namespace halfway::sim {

void check_finite_fp32(const std::vector<double>& values, const std::string& what) {
  for (double v : values)
    if (!std::isfinite(v)) throw InputError(what + " has NaN or inf");
  for (double v : values)
    if (!std::isfinite(static_cast<float>(v))) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9g", v);
      throw InputError(what + " has values beyond the fp32 range (" + buf +
                       " rounds to inf; the largest fp32 is 3.40282347e+38)");
    }
}

Dataset synthetic_regression(int64_t n, int features, int outputs, double noise, uint64_t seed) {
  Rng rng(seed ^ 0x5265677265737331ull);
  Dataset d;
  d.x_shape = {n, features};
  d.y_shape = {n, outputs};
  std::vector<double> w(size_t(features) * size_t(outputs));
  for (double& v : w) v = rng.normal() / std::sqrt(double(features));
  d.x.resize(size_t(n) * size_t(features));
  d.y.resize(size_t(n) * size_t(outputs));
  for (double& v : d.x) v = rng.normal();
  for (int64_t i = 0; i < n; ++i)
    for (int o = 0; o < outputs; ++o) {
      double s = 0;
      for (int f = 0; f < features; ++f)
        s += d.x[size_t(i * features + f)] * w[size_t(f * outputs + o)];
      d.y[size_t(i * outputs + o)] = s + noise * rng.normal();
    }
  return d;
}

Dataset synthetic_blobs(int64_t n, int features, int classes, double spread, uint64_t seed) {
  Rng rng(seed ^ 0x426c6f6273424c42ull);
  Dataset d;
  d.x_shape = {n, features};
  d.y_shape = {n};
  d.y_labels = true;
  std::vector<double> centers(size_t(classes) * size_t(features));
  for (double& c : centers) c = spread * rng.normal();
  d.x.resize(size_t(n) * size_t(features));
  d.y.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const int c = int(rng.below(uint64_t(classes)));
    d.y[size_t(i)] = c;
    for (int f = 0; f < features; ++f)
      d.x[size_t(i * features + f)] = centers[size_t(c * features + f)] + rng.normal();
  }
  return d;
}

Dataset synthetic_sequence(int64_t n, int seq_len, int vocab, bool reverse, uint64_t seed) {
  Rng rng(seed ^ 0x53657175656e6365ull);
  Dataset d;
  d.x_shape = {n, seq_len};
  d.y_shape = {n, seq_len};
  d.x_ids = d.y_labels = true;
  d.x.resize(size_t(n) * size_t(seq_len));
  d.y.resize(d.x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int t = 0; t < seq_len; ++t) {
      const double tok = double(rng.below(uint64_t(vocab)));
      d.x[size_t(i * seq_len + t)] = tok;
      d.y[size_t(i * seq_len + (reverse ? seq_len - 1 - t : t))] = tok;
    }
  return d;
}

std::string read_text_corpus(const std::vector<std::string>& files) {
  std::string corpus;
  for (const std::string& f : files) {
    const size_t left = size_t(kMaxTextBytes) - corpus.size();
    std::error_code ec;  // a file that cannot be sized gets read_text_file's message
    const auto bytes = std::filesystem::file_size(f, ec);
    if (!ec && bytes > left)
      throw InputError("data.text: the corpus is larger than " + std::to_string(kMaxTextBytes) +
                       " bytes, the most it may hold (at '" + f + "')");
    corpus += read_text_file(f, left);  // bounded again: a file may grow while it is read
  }
  if (corpus.empty()) throw InputError("data.text: the corpus is empty");
  return corpus;
}

namespace {

Dataset windows_of(const std::string& corpus, const std::vector<int64_t>& starts, int T) {
  Dataset d;
  const int64_t n = int64_t(starts.size());
  d.x_shape = d.y_shape = {n, T};
  d.x_ids = d.y_labels = true;
  d.x.resize(size_t(n) * size_t(T));
  d.y.resize(d.x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int t = 0; t < T; ++t) {
      const size_t at = size_t(starts[size_t(i)] + t);
      d.x[size_t(i * T + t)] = static_cast<unsigned char>(corpus[at]);
      d.y[size_t(i * T + t)] = static_cast<unsigned char>(corpus[at + 1]);
    }
  return d;
}

}  // namespace

TextSplit text_windows(const std::string& corpus, int seq_len, double val_fraction,
                       uint64_t seed) {
  const int64_t T = seq_len, size = int64_t(corpus.size());
  if (size < T + 1)
    throw InputError("data.text: the corpus has " + std::to_string(size) +
                     " bytes, fewer than model.seq_len + 1 = " + std::to_string(T + 1));
  const int64_t n = (size - 1) / T;
  if (n < 2)
    throw InputError("data.text: the corpus has " + std::to_string(size) + " bytes, " +
                     std::to_string(n) + " window of model.seq_len + 1 = " +
                     std::to_string(T + 1) + " bytes; training and validation need two");
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i * T;
  Rng rng(seed ^ 0x5465787453706c74ull);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  const int64_t nv =
      std::clamp(int64_t(std::llround(val_fraction * double(n))), int64_t(1), n - 1);
  std::vector<int64_t> val(order.begin(), order.begin() + nv), train(order.begin() + nv,
                                                                      order.end());
  std::sort(train.begin(), train.end());
  return {windows_of(corpus, train, seq_len), windows_of(corpus, val, seq_len)};
}

Loader::Loader(const Dataset& d, int64_t batch_size, bool shuffle, uint64_t seed)
    : d_(d), bs_(batch_size), shuffle_(shuffle), seed_(seed) {
  if (batch_size < 1) throw InputError("data.batch_size must be >= 1");
  if (d.n() < 1) throw InputError("the dataset is empty");
}

void Loader::new_epoch() {
  ++epoch_;
  pos_ = 0;
  order_.resize(size_t(d_.n()));
  std::iota(order_.begin(), order_.end(), int64_t(0));
  if (shuffle_) {
    Rng rng(seed_ * 0x9E3779B97F4A7C15ull + uint64_t(epoch_) + 1);
    for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng.below(i)]);
  }
}

Batch Loader::next() {
  if (epoch_ < 0 || pos_ >= d_.n()) new_epoch();
  const int64_t b = std::min(bs_, d_.n() - pos_);
  Batch out;
  out.size = b;
  const int64_t xr = d_.x_shape.size() > 1 ? d_.x_shape[1] : 1;
  const int64_t yr = d_.y_shape.size() > 1 ? d_.y_shape[1] : 1;
  std::vector<double> xs(size_t(b * xr)), ys(size_t(b * yr));
  for (int64_t i = 0; i < b; ++i) {
    const int64_t r = order_[size_t(pos_ + i)];
    std::copy_n(d_.x.begin() + r * xr, xr, xs.begin() + i * xr);
    std::copy_n(d_.y.begin() + r * yr, yr, ys.begin() + i * yr);
  }
  pos_ += b;
  if (d_.x_ids) {
    out.ids.assign(xs.begin(), xs.end());
    out.ids_shape = {b, xr};
  } else {
    out.x = Tensor::from({b, xr}, std::move(xs), DType::f32());
  }
  if (d_.y_labels) {
    out.labels.assign(ys.begin(), ys.end());
  } else {
    out.y = Tensor::from({b, yr}, std::move(ys), DType::f32());
  }
  return out;
}

}  // namespace halfway::sim
