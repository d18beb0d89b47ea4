/// \file policy.hpp
/// Precision policies, autocast-style: each op is mapped to a cast rule, as PyTorch's
/// `autocast_mode.cpp` does. A lowered op casts its floating inputs to the policy's low dtype;
/// an fp32 op casts low-precision inputs up; "promote" runs in the widest input dtype; "input"
/// leaves the inputs alone (binary ops still promote, as PyTorch's type promotion does). The
/// backward of every cast rounds the gradient back into the source dtype.
///
///     Policy p = preset_policy("torch-cuda-fp16");
///     p.rule(OpKind::softmax) == CastRule::fp32;   // softmax is on the fp32 list
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "halfway/env.hpp"
#include "halfway/sim/dtype.hpp"

namespace halfway::sim {

enum class OpKind : uint8_t {
  matmul, linear, add, sub, mul, div, relu, gelu, tanh, sigmoid, exp, log, softmax,
  log_softmax, cross_entropy, mse, layer_norm, sum, mean, reshape, transpose, embedding,
  masked_fill,
  count_
};
inline constexpr int kOpCount = static_cast<int>(OpKind::count_);
const char* op_name(OpKind k);
/// Throws InputError for an unknown op name.
OpKind parse_op(std::string_view name);

enum class CastRule : uint8_t { input, lower, fp32, promote };  // input = 0: the default
const char* rule_name(CastRule r);
CastRule parse_rule(std::string_view name);

/// How an fp8 cast picks its per-tensor scale (Transformer Engine's recipes).
/// `delayed`: DelayedScaling, from an amax history of earlier casts of the same tensor;
/// `current`: Float8CurrentScaling, from the amax of the tensor being cast.
enum class Fp8Scaling : uint8_t { delayed, current };
/// DelayedScaling's amax_compute_algo: the largest amax of the history, or the latest one.
enum class AmaxAlgo : uint8_t { max, most_recent };

/// fp8 with per-tensor scaling (Transformer Engine's HYBRID recipe): a linear layer's GEMM
/// operands are quantized, input and weight to `fwd`, the output gradient to `bwd`, each with
/// its own scale = fp8 max · 2^-margin / amax; GEMMs accumulate in fp32 and their outputs stay
/// in fp32. Ops a config opts in (`[precision.ops] op = "lower"`) get their own scaled casts.
struct Fp8Config {
  Format fwd;
  Format bwd;
  Fp8Scaling scaling = Fp8Scaling::delayed;
  int amax_history_len = 1024;
  AmaxAlgo amax_compute_algo = AmaxAlgo::max;
  int margin = 0;
  bool operator==(const Fp8Config&) const = default;
};
const char* scaling_name(Fp8Scaling s);

/// Block-scaled GEMM operands (Transformer Engine's MXFP8BlockScaling, NVFP4BlockScaling and
/// Float8BlockScaling; OCP MX for mxfp4): each of a linear layer's three GEMMs reads its own
/// copy of each operand, quantized by lib's blocks.hpp along that GEMM's reduction dimension
/// (fprop: X and W along K; dgrad: dY and W along N; wgrad: dY and X along M), dequantized
/// to fp32 and accumulated in fp32; outputs stay fp32. Schemes are blocks.hpp names.
struct BlockRecipe {
  std::string input;         ///< the activations X (fprop and wgrad copies)
  std::string weight;        ///< the weights W (fprop and dgrad copies)
  std::string grad;          ///< the output gradient dY (dgrad and wgrad copies)
  bool input_sr = false;     ///< X's elements rounded stochastically (both copies)
  bool weight_sr = false;    ///< W's elements rounded stochastically (both copies)
  bool grad_sr = false;      ///< dY's elements rounded stochastically (both copies)
  bool input_rht = false;    ///< random Hadamard transform of X's wgrad copy (along M)
  bool grad_rht = false;     ///< random Hadamard transform of dY's wgrad copy (along M)
  bool pow2_scales = false;  ///< fp8_block, fp8_rowwise: power-of-two scales

  bool stochastic() const { return input_sr || weight_sr || grad_sr; }
  bool operator==(const BlockRecipe&) const = default;
};

/// A per-layer block recipe ([[precision.blocks.layer]]): the linear layers under `match` (a
/// name scope; `*` matches any run of characters within one name) use `recipe`, or, without
/// one, are not quantized (their GEMMs run as the policy's fp32 ops, as TE's layers outside
/// its autocast).
struct BlockLayer {
  std::string match;
  std::optional<BlockRecipe> recipe;
  bool operator==(const BlockLayer&) const = default;
};

/// The six operand copies a linear layer's three GEMMs read (TE's usages): fprop reads X and
/// W, dgrad reads dY and W, wgrad reads dY and X. Under a per-tensor fp8 recipe the two copies
/// of an operand are one quantization; under a block recipe each is its own, blocked along
/// the GEMM's reduction dimension.
enum class GemmCopy : uint8_t { x_fprop, w_fprop, dy_dgrad, w_dgrad, dy_wgrad, x_wgrad };
inline constexpr int kGemmCopyCount = 6;
/// "X (fprop)", "W (fprop)", "dY (dgrad)", "W (dgrad)", "dY (wgrad)", "X (wgrad)".
const char* gemm_copy_name(GemmCopy c);
/// The copy's operand ("X", "W", "dY") and the GEMM that reads it ("fprop", "dgrad", "wgrad").
const char* gemm_copy_operand(GemmCopy c);
const char* gemm_copy_gemm(GemmCopy c);

/// Whether the name scope `scope` is `pattern` or lies below it ("blocks.0" covers
/// "blocks.0.attn.q"; "blocks.*.mlp" covers "blocks.3.mlp.fc1").
bool scope_matches(std::string_view pattern, std::string_view scope);

const char* amax_algo_name(AmaxAlgo a);

/// What a rounding belongs to: the forward pass, the backward pass (gradients, and the loss
/// scaling outside autocast), or the update (the optimizer's writes to the weights and to its
/// state).
enum class Role : uint8_t { forward, backward, update };
inline constexpr int kRoleCount = 3;
const char* role_name(Role r);

/// How the optimizer writes a low-precision weight that has no fp32 master copy: `plain`
/// rounds the fp32 result into the weight's dtype; `kahan` carries what the rounding lost in a
/// compensation buffer and adds it to the next update (see docs/sim.md, "Updates").
enum class UpdateMethod : uint8_t { plain, kahan };
const char* update_method_name(UpdateMethod m);

struct WeightUpdate {
  UpdateMethod method = UpdateMethod::plain;
  DType compensation = DType::f32();  ///< the compensation buffer's dtype (kahan)
};

/// A run's autocast policy. The rest of a run's precision (the accumulation model, the rounding
/// direction, the random bits) is in precision.hpp's Precision, which holds a Policy.
struct Policy {
  std::string name = "fp32";
  DType low = DType::f32();        ///< target of the "lower" rule
  std::array<CastRule, kOpCount> rules{};  ///< default: every op runs in its input dtype
  DType param_dtype = DType::f32();  ///< dtype the parameters are kept in
  DType input_dtype = DType::f32();  ///< data are cast to this before the model
  bool fp8 = false;                  ///< lowered ops use scaled fp8 (fp8_config)
  Fp8Config fp8_config{};
  /// Set: linear layers (the `lower` rule of `linear`) use block-scaled GEMM operands.
  std::optional<BlockRecipe> blocks;
  /// Per-layer recipes, the first that matches a layer's scope wins; other layers use
  /// `blocks`.
  std::vector<BlockLayer> block_layers;

  /// Rounding direction of each role; unset: the run's `rounding`.
  std::array<std::optional<Rounding>, kRoleCount> role_rounding{};
  WeightUpdate update{};
  /// `halfway bisect`'s role promotion: a set role's roundings into a low-precision dtype
  /// round into binary32 instead (the tensors keep their dtype; fp8 casts keep their scale).
  /// Default: none.
  std::array<bool, kRoleCount> promoted_roles{};
  /// `halfway bisect`'s layer promotion: every op under one of these scopes (the scope itself
  /// or a name below it, "blocks.0" covering "blocks.0.attn.q") runs under the fp32 rule.
  std::vector<std::string> fp32_scopes;
  /// `halfway bisect`'s tensor promotion: every op whose name scope is exactly one of these
  /// (not the names below it: "blocks.0.attn" leaves "blocks.0.attn.q" alone) runs under the
  /// fp32 rule.
  std::vector<std::string> fp32_sites;
  /// `halfway bisect`'s operand promotion: a set copy's GEMM reads the operand's own fp32
  /// values instead of its quantized copy. The copy is still made and traced, so every other
  /// rounding and random stream of the run is unchanged. Default: none.
  std::array<bool, kGemmCopyCount> promoted_copies{};

  CastRule rule(OpKind k) const { return rules[static_cast<size_t>(k)]; }
  /// The rule of op `k` under the name scope `scope`: fp32 within fp32_scopes or at one of
  /// fp32_sites, else rule(k).
  CastRule rule_in(OpKind k, const std::string& scope) const;
  /// The block recipe of the linear layers under `scope`: the first matching block_layers
  /// entry's (null for a layer kept unquantized), else `blocks` (null without one).
  const BlockRecipe* blocks_in(const std::string& scope) const;
  Rounding rounding(Role r, Rounding run_default) const {
    return role_rounding[static_cast<size_t>(r)].value_or(run_default);
  }
  void set(OpKind k, CastRule r) { rules[static_cast<size_t>(k)] = r; }
  bool copy_promoted(GemmCopy c) const { return promoted_copies[static_cast<size_t>(c)]; }
  /// Master weights exist when the parameters are fp32 and some op lowers them.
  bool master_weights() const;
};

/// Names of the presets: fp32 torch-cuda-fp16 torch-cuda-bf16 torch-cpu-bf16 pure-fp16
/// pure-bf16 fp8-hybrid fp8-current fp8-blockwise mxfp8 mxfp4 nvfp4.
const std::vector<std::string>& policy_names();
/// A preset by name; throws InputError listing the presets for an unknown name.
Policy preset_policy(std::string_view name);

}  // namespace halfway::sim
