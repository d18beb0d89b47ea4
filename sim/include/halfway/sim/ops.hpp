/// \file ops.hpp
/// The differentiable ops. Each one consults the current Context: the policy decides the
/// dtype it computes in (casting its inputs, with casts that are themselves graph nodes whose
/// backward rounds the gradient back into the source dtype); the result is computed exactly or
/// in binary64 and rounded once into that dtype (matmul/linear accumulate with the runtime's
/// accumulation model); each input gradient is computed the same way and rounded once into
/// the input's dtype. Roundings into low-precision dtypes are traced under the current scope:
/// `<scope>.output`, `<scope>.grad_input`, `<scope>.weight` (a parameter's cast),
/// `<scope>.weight.grad`, ...
///
///     Scope s("0");
///     Tensor h = linear(x, w, b);       // x [N, in], w [out, in], b [out]
///     Tensor l = mse(h, y);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "halfway/sim/policy.hpp"
#include "halfway/sim/tensor.hpp"

namespace halfway::sim {

/// A bias's gradient: the column sums of G [rows × n] (binary32 or binary64 storage), each
/// summed in binary64 in row order; the caller rounds them into the bias's dtype. Used by every
/// linear layer's backward here and by halfway.torch.emulate. With threads > 1, parts of the
/// columns are summed on up to that many threads of the pool; the sums are the same.
std::vector<double> bias_grad(const Values& G, int64_t rows, int64_t n, int threads = 1);

/// Cast to `dt` (a graph node: forward rounds into dt, backward rounds the gradient back
/// into the source dtype). Traced as `name` when a rounding into a low dtype happens.
Tensor cast(const Tensor& x, const DType& dt, const std::string& name,
            TraceKind kind = TraceKind::activation);

/// [..., m, k] @ [..., k, n] (same batch dims) or [..., m, k] @ [k, n].
Tensor matmul(const Tensor& a, const Tensor& b);
/// x [..., in] · wᵀ + b, w [out, in], b [out] (b may be an empty Tensor).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

/// Elementwise with numpy broadcasting.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
/// x · c with a Python-style scalar: the result keeps x's dtype (op "mul").
Tensor mul_scalar(const Tensor& x, double c);

enum class GeluApprox : uint8_t { none, tanh };
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::none);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);

/// Over the last dimension.
Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);
/// Mean over rows of −log_softmax(logits)[i, target[i]]; logits [N, C].
Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& target);
/// Mean of (pred − target)²; same shapes.
Tensor mse(const Tensor& pred, const Tensor& target);
/// Over the last dimension, biased variance, affine (w, b of the last dimension's size).
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps = 1e-5);

/// Sum / mean of all elements (a 0-d tensor), or over dimension `dim` (removed).
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, int dim);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, int dim);

Tensor reshape(const Tensor& x, Shape shape);
Tensor transpose(const Tensor& x, int d0, int d1);
/// weight[ids] : ids of shape `ids_shape`, result ids_shape + [dim].
Tensor embedding(const std::vector<int32_t>& ids, const Shape& ids_shape, const Tensor& weight);
/// Entries above the diagonal of the last two dimensions set to the dtype's most negative
/// value (−inf where it has one): the causal mask.
Tensor masked_fill_causal(const Tensor& x);

/// softmax(q·kᵀ/√d [+ causal mask]) · v, built from the ops above; q, k, v [..., T, d].
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal);

}  // namespace halfway::sim
