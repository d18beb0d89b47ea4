/// \file tensor.hpp
/// Tensors and the reverse-mode autograd engine, micrograd-style: every op builds its output
/// node and, beside the forward math, the closure that applies the chain rule to its inputs.
/// `backward()` is a topological sort and one reversed loop.
///
///     Tensor x = Tensor::from({2, 3}, {1, 2, 3, 4, 5, 6}, DType::f64(), true);
///     Tensor y = sum(mul(x, x));
///     y.backward();                 // x.grad() == 2·x
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "halfway/sim/dtype.hpp"

namespace halfway::sim {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);

/// What a traced rounding belongs to.
enum class TraceKind : uint8_t {
  activation,       ///< forward activations and casts of activations
  weight,           ///< casts of parameters into a lower precision for the forward pass
  activation_grad,  ///< gradients with respect to activations
  weight_grad,      ///< gradients with respect to parameters (or their low-precision copies)
  update,           ///< optimizer updates rounded into low-precision weights
  tensor,           ///< a tensor of no known role (`halfway analyze` on arrays from a file)
  optimizer_state,  ///< optimizer state (and Kahan compensation) rounded into its dtype
};
const char* kind_name(TraceKind k);

struct TensorImpl {
  Shape shape;
  DType dtype;
  std::vector<double> data;  ///< row-major values, each exactly representable in `dtype`
  std::vector<double> grad;  ///< empty until a gradient arrives; values representable in dtype
  bool requires_grad = false;
  bool is_param = false;
  bool weight = false;        ///< a parameter or a cast of one (trace kinds, memory)
  bool saves_output = false;  ///< the backward keeps this node's own values (memory)
  std::string name;          ///< stable trace name: "0.weight", "1.output", ...
  const char* op = "leaf";   ///< the op that produced this tensor
  std::vector<std::shared_ptr<TensorImpl>> parents;
  std::function<void()> backward_fn;  ///< reads `grad`, accumulates into the parents' grads
  /// Tensors this node keeps alive for its backward (memory accounting).
  std::vector<std::shared_ptr<const TensorImpl>> saved;
};

/// A shared handle to a node of the graph.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> p) : p_(std::move(p)) {}

  /// A leaf tensor. The values are rounded into `dt` (without tracing).
  static Tensor from(Shape shape, std::vector<double> values, DType dt = DType::f32(),
                     bool requires_grad = false);
  static Tensor zeros(Shape shape, DType dt = DType::f32(), bool requires_grad = false);
  static Tensor scalar(double v, DType dt = DType::f32());

  explicit operator bool() const { return p_ != nullptr; }
  TensorImpl* impl() const { return p_.get(); }
  const std::shared_ptr<TensorImpl>& ptr() const { return p_; }

  const Shape& shape() const { return p_->shape; }
  int64_t dim(int i) const;  ///< size of dimension i (negative counts from the end)
  int rank() const { return static_cast<int>(p_->shape.size()); }
  int64_t numel() const { return static_cast<int64_t>(p_->data.size()); }
  const DType& dtype() const { return p_->dtype; }
  const std::vector<double>& data() const { return p_->data; }
  std::vector<double>& data() { return p_->data; }
  const std::vector<double>& grad() const { return p_->grad; }
  bool requires_grad() const { return p_->requires_grad; }
  const std::string& name() const { return p_->name; }
  double item() const;

  /// Backpropagate from this tensor, seeding its gradient with `seed` (rounded into its dtype).
  void backward(double seed = 1.0) const;

 private:
  std::shared_ptr<TensorImpl> p_;
};

/// Nodes reachable from `root`, parents before children, in a deterministic order.
std::vector<TensorImpl*> topo_order(TensorImpl* root);

}  // namespace halfway::sim
