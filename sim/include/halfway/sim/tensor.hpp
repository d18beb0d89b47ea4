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
#include <type_traits>
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

/// An allocator that leaves new elements uninitialized where no value is given.
template <class T>
struct NoInit : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = NoInit<U>;
  };
  NoInit() = default;
  template <class U>
  NoInit(const NoInit<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};

/// A vector whose resize leaves the new elements unwritten: storage that is written before it
/// is read, without a zero fill.
template <class T>
using RawVector = std::vector<T, NoInit<T>>;

/// A tensor's values (or its gradient): binary32 for every dtype but fp64, whose values are
/// binary64. Every format halfway simulates fits binary32 exactly, so a low-precision or fp32
/// tensor holds its values at half the memory of binary64 and hands them to the GEMMs and the
/// bulk roundings without a conversion. Elements read as `double`.
class Values {
 public:
  Values() = default;
  /// n values to be written before they are read (no zero fill).
  static Values uninitialized(size_t n, bool wide) {
    Values v;
    v.wide_ = wide;
    if (wide)
      v.d_.resize(n);
    else
      v.f_.resize(n);
    return v;
  }
  /// v's values, binary32 storage.
  explicit Values(const std::vector<float>& v) : f_(v.begin(), v.end()) {}
  /// v's values; unless `wide`, each must be exactly representable in binary32.
  Values(const std::vector<double>& v, bool wide) : wide_(wide) {
    if (wide)
      d_.assign(v.begin(), v.end());
    else
      f_.assign(v.begin(), v.end());
  }
  size_t size() const { return wide_ ? d_.size() : f_.size(); }
  bool empty() const { return size() == 0; }
  bool wide() const { return wide_; }
  double operator[](size_t i) const { return wide_ ? d_[i] : static_cast<double>(f_[i]); }
  /// The binary32 values (not `wide`).
  float* f32() { return f_.data(); }
  const float* f32() const { return f_.data(); }
  /// The binary64 values (`wide`).
  double* f64() { return d_.data(); }
  const double* f64() const { return d_.data(); }
  /// The values as T, the storage type: float, or double when `wide`.
  template <class T>
  T* as() {
    if constexpr (std::is_same_v<T, double>)
      return f64();
    else
      return f32();
  }
  template <class T>
  const T* as() const {
    if constexpr (std::is_same_v<T, double>)
      return f64();
    else
      return f32();
  }
  /// f(p) with p the storage: a float pointer, or a double pointer when `wide`.
  template <class F>
  decltype(auto) visit(F&& f) {
    return wide_ ? f(f64()) : f(f32());
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    return wide_ ? f(f64()) : f(f32());
  }
  /// The values as binary64.
  std::vector<double> to_vector() const {
    return wide_ ? std::vector<double>(d_.begin(), d_.end())
                 : std::vector<double>(f_.begin(), f_.end());
  }
  void clear() {
    f_.clear();
    d_.clear();
  }

 private:
  RawVector<float> f_;
  RawVector<double> d_;
  bool wide_ = false;
};

struct TensorImpl {
  Shape shape;
  DType dtype;
  Values data;  ///< row-major values, each exactly representable in `dtype`
  Values grad;  ///< empty until a gradient arrives; values representable in dtype
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
  const Values& data() const { return p_->data; }
  const Values& grad() const { return p_->grad; }
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
