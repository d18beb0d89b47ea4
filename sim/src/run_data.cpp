// A run's data (run_data.hpp): the config's .npz, synthetic data or text windows, checked
// against the model and the loss before the run starts.
#include "run_data.hpp"

#include <cmath>

#include "halfway/names.hpp"
#include "halfway/sim/npz.hpp"

namespace halfway::sim::detail {

namespace {

const NpyArray& need(const NpzFile& f, const char* key, const std::string& what) {
  auto it = f.find(key);
  if (it == f.end()) throw InputError(what + ": array '" + key + "' is missing");
  // After the arrays are read: float64 data must also fit fp32, which the model reads.
  check_finite_fp32(it->second.values, what + ": array '" + key + "'");
  return it->second;
}

void check_ids(const NpyArray& a, const char* key, int64_t limit, const std::string& what) {
  for (double v : a.values)
    if (v != std::floor(v) || v < 0 || v >= double(limit))
      throw InputError(what + ": array '" + key + "' must hold integers in [0, " +
                       std::to_string(limit) + ")");
}

Dataset load_data_unchecked(const TrainConfig& c, uint64_t npz_bytes);

/// `npz_bytes`: the most an .npz's values may take (read_npz's limit).
Dataset load_data(const TrainConfig& c, uint64_t npz_bytes) {
  Dataset d = load_data_unchecked(c, npz_bytes);
  if (c.data_npz.empty()) {
    check_finite_fp32(d.x, "synthetic data: 'x'");
    check_finite_fp32(d.y, "synthetic data: 'y' (data.noise or data.spread too large?)");
  }
  return d;
}

Dataset load_data_unchecked(const TrainConfig& c, uint64_t npz_bytes) {
  const bool mlp = c.model_kind == "mlp";
  const int fin = mlp ? c.mlp.layers.front() : 0, fout = mlp ? c.mlp.layers.back() : 0;
  if (!c.data_npz.empty()) {
    const NpzFile f = read_npz(c.data_npz, npz_bytes);
    const std::string what = "'" + c.data_npz + "'";
    const NpyArray& x = need(f, "x", what);
    const NpyArray& y = need(f, "y", what);
    Dataset d;
    if (x.shape.size() != 2 || x.shape[0] < 1)
      throw InputError(what + ": array 'x' has shape " + shape_str(x.shape) + ", expected 2-D");
    const int64_t N = x.shape[0];
    d.x_shape = x.shape;
    d.x = x.values;
    if (mlp) {
      if (x.shape[1] != fin)
        throw InputError(what + ": array 'x' has shape " + shape_str(x.shape) +
                         ", the model needs [N, " + std::to_string(fin) + "]");
      if (c.loss == "mse") {
        const bool ok = (y.shape.size() == 2 && y.shape[0] == N && y.shape[1] == fout) ||
                        (y.shape.size() == 1 && y.shape[0] == N && fout == 1);
        if (!ok)
          throw InputError(what + ": array 'y' has shape " + shape_str(y.shape) + ", expected [" +
                           std::to_string(N) + ", " + std::to_string(fout) + "]");
        d.y_shape = {N, fout};
      } else {
        if (y.shape != Shape{N})
          throw InputError(what + ": array 'y' has shape " + shape_str(y.shape) +
                           ", expected class labels [" + std::to_string(N) + "]");
        check_ids(y, "y", fout, what);
        d.y_shape = {N};
        d.y_labels = true;
      }
    } else {
      const auto& m = c.transformer;
      if (x.shape[1] > m.seq_len)
        throw InputError(what + ": array 'x' has sequences of length " +
                         std::to_string(x.shape[1]) + " > model.seq_len " +
                         std::to_string(m.seq_len));
      if (y.shape != x.shape)
        throw InputError(what + ": array 'y' has shape " + shape_str(y.shape) + ", expected " +
                         shape_str(x.shape));
      check_ids(x, "x", m.vocab, what);
      check_ids(y, "y", m.vocab, what);
      d.x_ids = d.y_labels = true;
      d.y_shape = y.shape;
    }
    d.y = y.values;
    return d;
  }
  if (mlp) {
    if (c.synthetic == "regression") {
      if (c.loss != "mse") throw InputError("synthetic regression data need loss.kind = \"mse\"");
      return synthetic_regression(c.data_n, fin, fout, c.noise, c.seed);
    }
    if (c.synthetic == "blobs") {
      if (c.loss != "cross_entropy")
        throw InputError("synthetic blobs need loss.kind = \"cross_entropy\"");
      if (fout < 2) throw InputError("synthetic blobs need at least 2 output classes");
      return synthetic_blobs(c.data_n, fin, fout, c.spread, c.seed);
    }
    throw InputError("synthetic '" + c.synthetic + "' data need model.kind = \"transformer\"");
  }
  if (c.synthetic == "copy" || c.synthetic == "reverse")
    return synthetic_sequence(c.data_n, c.transformer.seq_len, c.transformer.vocab,
                              c.synthetic == "reverse", c.seed);
  throw InputError("the transformer needs synthetic = \"copy\" or \"reverse\" or an .npz");
}

}  // namespace

RunData load_run_data(const TrainConfig& c, uint64_t npz_bytes) {
  if (c.text_files.empty()) return {load_data(c, npz_bytes), {}};
  TextSplit s = text_windows(read_text_corpus(c.text_files), c.transformer.seq_len,
                             c.val_fraction, c.seed);
  if (c.val_windows > 0 && c.val_windows < s.val.n()) {
    const size_t keep = size_t(c.val_windows) * size_t(c.transformer.seq_len);
    s.val.x.resize(keep);
    s.val.y.resize(keep);
    s.val.x_shape[0] = s.val.y_shape[0] = c.val_windows;
  }
  return {std::move(s.train), std::move(s.val)};
}

}  // namespace halfway::sim::detail
