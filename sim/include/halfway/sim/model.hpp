/// \file model.hpp
/// Models with PyTorch state_dict names, so initial parameters can come from a real PyTorch
/// run: an MLP laid out as `nn.Sequential(Linear, act, Linear, act, ..., Linear)` ("0.weight",
/// "0.bias", "2.weight", ...) and a tiny transformer (token and position embeddings, one or
/// more pre-LayerNorm blocks of attention and MLP, a final LayerNorm and a linear head, optionally
/// tied to the token embedding): causal, it is a GPT-style decoder.
///
///     auto m = make_mlp({{10, 32, 1}, "relu"}, rng);
///     Tensor pred = m->forward(batch);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "halfway/sim/npz.hpp"
#include "halfway/sim/ops.hpp"
#include "halfway/sim/rng.hpp"

namespace halfway::sim {

struct Param {
  std::string name;
  Tensor t;  ///< a leaf with is_param, weight and requires_grad set
};

/// A batch: float inputs `x` [B, F] or token ids [B, T]; float targets `y` or class labels.
struct Batch {
  Tensor x;
  std::vector<int32_t> ids;
  Shape ids_shape;
  Tensor y;
  std::vector<int32_t> labels;
  int64_t size = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  /// Predictions (MLP) or logits [B·T, V] (transformer).
  virtual Tensor forward(const Batch& b) = 0;
  virtual std::string kind() const = 0;
  std::vector<Param>& params() { return params_; }
  /// Replace every parameter by the array of the same name; throws InputError when one is
  /// missing, has the wrong shape, is not finite, or the file has an unknown name.
  void load(const NpzFile& f, const std::string& what);
  /// Keep the parameters in `dt` (pure low-precision policies), rounding them once.
  void set_param_dtype(const DType& dt);

 protected:
  void add_param(const std::string& name, Shape shape, std::vector<double> values);
  const Tensor& p(size_t i) const { return params_[i].t; }
  std::vector<Param> params_;
};

/// The largest sizes a model may have (docs/sim.md lists them per config key). Larger ones are
/// refused before anything is allocated; what fits is bounded again by the memory estimate
/// (memory.hpp, --max-memory).
inline constexpr int64_t kMaxWidth = int64_t(1) << 24;  ///< MLP widths, vocab, d_model·mlp_ratio
inline constexpr int64_t kMaxMlpLayers = 1024;          ///< widths in model.layers
inline constexpr int64_t kMaxDModel = int64_t(1) << 16;
inline constexpr int64_t kMaxSeqLen = int64_t(1) << 16;
inline constexpr int64_t kMaxBlocks = 1024;

struct MlpConfig {
  std::vector<int> layers;          ///< widths, input first
  std::string activation = "relu";  ///< relu gelu gelu_tanh tanh sigmoid
  bool bias = true;
};

struct TransformerConfig {
  int vocab = 16;
  int d_model = 32;
  int heads = 2;
  int blocks = 1;
  int seq_len = 8;
  int mlp_ratio = 4;
  std::string activation = "gelu";
  bool causal = false;
  /// The head reuses the token embedding's weight (no `head.*` parameters, no head bias), as
  /// GPT-2 does.
  bool tie_embeddings = false;
};

/// Throw InputError for an unknown activation name.
void check_activation(const std::string& name);
/// PyTorch's default initialisation (U(±1/√fan_in) for Linear, N(0,1) for Embedding,
/// LayerNorm 1 and 0) drawn from `rng`.
std::unique_ptr<Model> make_mlp(const MlpConfig& c, Rng& rng);
std::unique_ptr<Model> make_transformer(const TransformerConfig& c, Rng& rng);

}  // namespace halfway::sim
