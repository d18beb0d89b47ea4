/// \file bisect.hpp
/// Which part of a precision policy costs the loss: the parts of a config that can be
/// promoted to the fp32 reference's precision one at a time, the promotion itself (a config
/// transformation), and the adaptive group search (delta debugging, Zeller and Hildebrandt's
/// ddmin) that `halfway bisect` runs over them.
///
///     TrainConfig c = parse_config_file("run.toml");
///     std::vector<PrecisionPart> parts = precision_parts(c, Granularity::op);
///     TrainConfig fixed = promote(c, {parts[1]});   // e.g. optimizer state exp_avg_sq -> fp32
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "halfway/sim/config.hpp"
#include "halfway/sim/precision.hpp"

namespace halfway::sim {

/// How finely `halfway bisect` cuts a policy into parts: the three roles (forward, backward,
/// update), the op kinds and optimizer states, the model's layers, its single op sites
/// (`tensor`: the tensors one name scope rounds, not the scopes below it), or the six GEMM
/// operand copies of an fp8 or block recipe's linear layers (`operand`); the last three with
/// the optimizer states and the other parts that belong to no layer.
enum class Granularity : uint8_t { role, op, layer, tensor, operand };
/// Throws InputError naming the granularities for an unknown name.
Granularity parse_granularity(std::string_view name);
const char* granularity_name(Granularity g);

/// One part of a config's precision, and what promoting it to fp32 changes.
struct PrecisionPart {
  std::string name;      ///< what users call it: "softmax", "optimizer state exp_avg_sq", ...
  std::string setting;   ///< the promotion in the config's words: "precision.ops.softmax = fp32"
  std::vector<OpKind> ops;           ///< ops whose rule becomes fp32
  std::vector<std::string> states;   ///< optimizer states (torch.optim names) kept in fp32
  bool weights = false;  ///< low-precision weights get an fp32 master copy (AMP-style)
  bool inputs = false;   ///< the data are no longer cast to the low dtype
  bool rounding = false; ///< every rounding direction back to near-even
  bool accumulation = false;  ///< matmul/linear accumulate with the `fp32` model
  /// Roles whose roundings into low-precision dtypes round into binary32 instead
  /// (Policy::promoted_roles; the tensors keep their dtype).
  std::vector<Role> roles;
  /// Layers (name scopes) whose ops all run under the fp32 rule (Policy::fp32_scopes).
  std::vector<std::string> scopes;
  /// Op sites (exact name scopes) whose ops run under the fp32 rule (Policy::fp32_sites).
  std::vector<std::string> sites;
  /// GEMM operand copies read unquantized (Policy::promoted_copies).
  std::vector<GemmCopy> copies;
  /// Against a reference config: the format each of `states` takes (empty: fp32), and the
  /// reference's precision whose rounding or accumulation a `rounding` or `accumulation` part
  /// takes (null: near-even and the `fp32` model).
  std::vector<StateFormat> state_formats;
  std::shared_ptr<const Precision> reference;
};

/// The parts of `c`'s precision that differ from the fp32 reference at granularity `g`, in
/// a fixed order. Op groups: matmul/linear, softmax (softmax, log_softmax), layer_norm, loss
/// (cross_entropy, mse), elementwise (every other op); then each optimizer state kept in low
/// precision, the low-precision weights, the input cast, a non-default rounding or
/// accumulation. Roles: forward, backward, update (weights, optimizer state and the update
/// rounding). Layers: every module scope of the model (an MLP's "0", "1", ...; a
/// transformer's tok_emb, pos_emb, embed, blocks.N, ln_f, head) and the loss, then the op
/// granularity's parts that are not op groups. Tensors: likewise, with each block cut into its
/// op sites (blocks.N.ln1, .attn.q, .attn.k, .attn.v, .attn.scores, .attn.scale, .attn.mask
/// (causal models), .attn.softmax, .attn.context, .attn.proj, .res1, .ln2, .mlp.fc1, .mlp.act,
/// .mlp.fc2, .res2). Operands: the six copies X (fprop), W (fprop),
/// dY (dgrad), W (dgrad), dY (wgrad), X (wgrad) of an fp8 or block recipe, then the parts
/// that are not op groups. Empty for an fp32 config.
///
/// With `ref` (a reference run's config; null: the fp32 reference), only the parts in which `c`
/// differs from `ref` are listed, and each is promoted to `ref`'s own setting where one config
/// can hold it beside the rest of `c`'s precision: an optimizer state's format, the rounding,
/// the accumulation, an op group or the weights or the input cast that `ref` keeps in fp32.
/// Everything else (an op group `ref` lowers to another dtype or recipe, a role, a layer, an op
/// site, an operand copy) is promoted to fp32, and the part's `setting` says so.
std::vector<PrecisionPart> precision_parts(const TrainConfig& c, Granularity g,
                                           const TrainConfig* ref = nullptr);

/// `c` with every part of `parts` promoted to fp32 (the order of `parts` does not matter).
TrainConfig promote(const TrainConfig& c, const std::vector<PrecisionPart>& parts);

/// A candidate: indices into the part list, ascending.
using PartSet = std::vector<int>;

/// Evaluates candidates for the search: for each set, the fraction of the gap that promoting
/// it closes, or nullopt when it could not be run (the run budget is spent). The sets of one
/// call are independent (they may run in parallel).
using EvaluateSets = std::function<std::vector<std::optional<double>>(const std::vector<PartSet>&)>;

struct SearchResult {
  PartSet culprit;       ///< 1-minimal: no member can be left out and still close `threshold`
  bool finished = true;  ///< false: the budget ran out; `culprit` is the smallest set found
};

/// ddmin over parts 0..n-1, assuming the full set closes at least `threshold` of the gap
/// (the caller checks it): tries the set's `g` chunks, then their complements, keeps the first
/// (in that order) that closes at least `threshold`, and otherwise splits finer, until no
/// single member can be left out. `batch` candidates are handed to `eval` at a time (at least
/// 1); the answer does not depend on it, only the number of runs spent past the first success.
SearchResult ddmin(int n, double threshold, int batch, const EvaluateSets& eval);

}  // namespace halfway::sim
