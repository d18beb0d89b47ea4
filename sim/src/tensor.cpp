#include "halfway/sim/tensor.hpp"

#include <stdexcept>
#include <unordered_set>

#include "halfway/names.hpp"
#include "halfway/sim/context.hpp"

namespace halfway::sim {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

const char* kind_name(TraceKind k) {
  switch (k) {
    case TraceKind::activation: return "activation";
    case TraceKind::weight: return "weight";
    case TraceKind::activation_grad: return "activation_grad";
    case TraceKind::weight_grad: return "weight_grad";
    case TraceKind::tensor: return "tensor";
    case TraceKind::optimizer_state: return "optimizer_state";
    default: return "update";
  }
}

Tensor Tensor::from(Shape shape, std::vector<double> values, DType dt, bool requires_grad) {
  if (sim::numel(shape) != static_cast<int64_t>(values.size()))
    throw InputError("tensor of shape " + shape_str(shape) + " given " +
                     std::to_string(values.size()) + " values");
  auto p = std::make_shared<TensorImpl>();
  p->shape = std::move(shape);
  p->dtype = dt;
  p->data = rounded(default_runtime(), dt, values, nullptr);
  p->requires_grad = requires_grad;
  return Tensor(std::move(p));
}

Tensor Tensor::zeros(Shape shape, DType dt, bool requires_grad) {
  const int64_t n = sim::numel(shape);
  return from(std::move(shape), std::vector<double>(static_cast<size_t>(n), 0.0), dt,
              requires_grad);
}

Tensor Tensor::scalar(double v, DType dt) { return from({}, {v}, dt); }

int64_t Tensor::dim(int i) const {
  const int r = rank();
  if (i < 0) i += r;
  if (i < 0 || i >= r) throw std::out_of_range("dimension out of range");
  return p_->shape[static_cast<size_t>(i)];
}

double Tensor::item() const {
  if (p_->data.size() != 1)
    throw std::logic_error("item() of a tensor with " + std::to_string(p_->data.size()) +
                           " elements");
  return p_->data[0];
}

std::vector<TensorImpl*> topo_order(TensorImpl* root) {
  // Iterative post-order DFS: a node is emitted after all its parents, parents visited in the
  // order the op listed them, so the order (and every rounding sequence) is deterministic.
  std::vector<TensorImpl*> order;
  std::unordered_set<TensorImpl*> seen;
  std::vector<std::pair<TensorImpl*, size_t>> stack;
  stack.emplace_back(root, 0);
  seen.insert(root);
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->parents.size()) {
      TensorImpl* p = node->parents[next++].get();
      if (p->requires_grad && seen.insert(p).second) stack.emplace_back(p, 0);
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  return order;
}

void Tensor::backward(double seed) const {
  if (!p_->requires_grad) throw std::logic_error("backward() of a tensor that needs no grad");
  const auto order = topo_order(p_.get());
  std::vector<double> g(p_->data.size(), seed);
  round_into(runtime(), p_->dtype, g, nullptr);
  if (!p_->grad.empty()) {
    for (size_t i = 0; i < g.size(); ++i) g[i] += p_->grad[i];
    round_into(runtime(), p_->dtype, g, nullptr);
  }
  p_->grad = Values(g, p_->dtype.is_f64());
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    TensorImpl* n = *it;
    if (n->backward_fn && !n->grad.empty()) n->backward_fn();
  }
}

}  // namespace halfway::sim
