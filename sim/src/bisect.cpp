#include "halfway/sim/bisect.hpp"

#include <algorithm>

#include "halfway/names.hpp"

namespace halfway::sim {

namespace {

struct OpGroup {
  const char* name;
  std::vector<OpKind> ops;
};

/// The op kinds of the list; reshape and transpose are exact and belong to none.
const std::vector<OpGroup>& op_groups() {
  using K = OpKind;
  static const std::vector<OpGroup> groups = {
      {"matmul/linear", {K::matmul, K::linear}},
      {"softmax", {K::softmax, K::log_softmax}},
      {"layer_norm", {K::layer_norm}},
      {"loss", {K::cross_entropy, K::mse}},
      {"elementwise", {K::add, K::sub, K::mul, K::div, K::relu, K::gelu, K::tanh, K::sigmoid,
                       K::exp, K::log, K::sum, K::mean, K::embedding, K::masked_fill}}};
  return groups;
}

bool has_low_ops(const Policy& p) { return p.low.is_low() || p.fp8 || p.blocks.has_value(); }
bool pure(const Policy& p) { return p.param_dtype.is_low() || p.input_dtype.is_low(); }

/// Whether some op of `g` computes in a low-precision dtype under `p`.
bool group_is_low(const Policy& p, const OpGroup& g) {
  for (OpKind k : g.ops) {
    const CastRule r = p.rule(k);
    if ((r == CastRule::lower && has_low_ops(p)) || (pure(p) && r != CastRule::fp32)) return true;
  }
  return false;
}

std::string ops_setting(const OpGroup& g) {
  std::string s = "[precision.ops] ";
  for (size_t i = 0; i < g.ops.size(); ++i)
    s += std::string(i ? ", " : "") + op_name(g.ops[i]) + " = \"fp32\"";
  return s;
}

struct StateDtype {
  const char* name;
  StateFormat OptimizerConfig::*dtype;
};

/// The optimizer states `c`'s optimizer keeps (torch.optim's names).
std::vector<StateDtype> used_states(const OptimizerConfig& o) {
  if (o.kind == "sgd") {
    if (o.momentum == 0) return {};
    return {{"momentum_buffer", &OptimizerConfig::momentum_buffer_dtype}};
  }
  return {{"exp_avg", &OptimizerConfig::exp_avg_dtype},
          {"exp_avg_sq", &OptimizerConfig::exp_avg_sq_dtype}};
}

bool rounding_is_default(const Precision& pr) {
  for (int r = 0; r < kRoleCount; ++r)
    if (pr.rounding_of(Role(r)) != Rounding::near_even) return false;
  return true;
}

/// The model's module scopes (model.cpp's names) and the loss.
std::vector<std::string> layer_scopes(const TrainConfig& c) {
  std::vector<std::string> s;
  if (c.model_kind == "mlp") {
    for (size_t i = 0; i + 1 < c.mlp.layers.size(); ++i) {
      s.push_back(std::to_string(2 * i));
      if (i + 2 < c.mlp.layers.size()) s.push_back(std::to_string(2 * i + 1));
    }
  } else {
    s = {"tok_emb", "pos_emb", "embed"};
    for (int b = 0; b < c.transformer.blocks; ++b) s.push_back("blocks." + std::to_string(b));
    s.push_back("ln_f");
    s.push_back("head");
  }
  s.push_back("loss");
  return s;
}

/// The op sites of the model: the layer scopes, with each transformer block cut into the
/// scopes model.cpp and scaled_dot_product_attention give its ops (the attention's own scope
/// holds only exact reshapes and transposes).
std::vector<std::string> site_scopes(const TrainConfig& c) {
  if (c.model_kind == "mlp") return layer_scopes(c);
  std::vector<std::string> s;
  for (const std::string& l : layer_scopes(c)) {
    if (l.compare(0, 7, "blocks.") != 0) {
      s.push_back(l);
      continue;
    }
    for (const char* site : {"ln1", "attn.q", "attn.k", "attn.v", "attn.scores", "attn.scale",
                             "attn.mask", "attn.softmax", "attn.context", "attn.proj", "res1",
                             "ln2", "mlp.fc1", "mlp.act", "mlp.fc2", "res2"})
      if (c.transformer.causal || std::string(site) != "attn.mask") s.push_back(l + "." + site);
  }
  return s;
}

/// Whether some linear layer's GEMM operands are quantized by an fp8 or block recipe.
bool has_gemm_copies(const Policy& p) {
  if (p.fp8 || p.blocks) return true;
  return std::any_of(p.block_layers.begin(), p.block_layers.end(),
                     [](const BlockLayer& l) { return l.recipe.has_value(); });
}

/// The config's words for optimizer state `name` kept in `f`.
std::string state_setting(const std::string& name, const StateFormat& f) {
  return "optimizer." + name + "_dtype = \"" + f.name() + "\"";
}

/// The setting of a part that promotes optimizer states (to `formats`, fp32 where empty) and,
/// with `weights`, the weights' master copy.
std::string states_setting(bool weights, const std::vector<std::string>& states,
                           const std::vector<StateFormat>& formats) {
  std::string s = weights ? "an fp32 master copy of the weights" : "";
  for (size_t i = 0; i < states.size(); ++i)
    s += (s.empty() ? "" : ", ") +
         state_setting(states[i], i < formats.size() ? formats[i] : StateFormat{});
  return s;
}

PrecisionPart weights_part() {
  PrecisionPart w;
  w.name = "weights";
  w.setting = "precision.params = \"fp32\": an fp32 master copy, the ops still in the low dtype";
  w.weights = true;
  return w;
}

}  // namespace

Granularity parse_granularity(std::string_view name) {
  if (name == "role") return Granularity::role;
  if (name == "op") return Granularity::op;
  if (name == "layer") return Granularity::layer;
  if (name == "tensor") return Granularity::tensor;
  if (name == "operand") return Granularity::operand;
  throw InputError("unknown granularity '" + std::string(name) +
                   "' (granularities: role op layer tensor operand)");
}

const char* granularity_name(Granularity g) {
  switch (g) {
    case Granularity::role: return "role";
    case Granularity::op: return "op";
    case Granularity::layer: return "layer";
    case Granularity::tensor: return "tensor";
    case Granularity::operand: return "operand";
  }
  return "op";
}

namespace {

/// Appends the part `name` with the promotion `setting`; `promote` sets what it promotes.
template <class F>
void add_part(std::vector<PrecisionPart>& parts, std::string name, std::string setting,
              F&& promote) {
  PrecisionPart part;
  part.name = std::move(name);
  part.setting = std::move(setting);
  promote(part);
  parts.push_back(std::move(part));
}

/// The parts of `c` against the fp32 reference (precision_parts without `ref`).
std::vector<PrecisionPart> fp32_parts(const TrainConfig& c, Granularity g) {
  const Precision& pr = c.precision;
  const Policy& p = pr.policy;
  std::vector<PrecisionPart> parts;
  std::vector<std::string> low_states;
  for (const StateDtype& s : used_states(c.optimizer))
    if (!(c.optimizer.*s.dtype == StateFormat{})) low_states.push_back(s.name);
  if (g == Granularity::role) {
    if (has_low_ops(p) || pure(p)) {
      for (Role r : {Role::forward, Role::backward})
        add_part(parts, role_name(r),
                 std::string("every ") + role_name(r) + " rounding into binary32",
                 [&](PrecisionPart& q) { q.roles = {r}; });
    }
    if (p.param_dtype.is_low() || !low_states.empty()) {
      PrecisionPart u = p.param_dtype.is_low() ? weights_part() : PrecisionPart{};
      u.name = "update";
      u.states = low_states;
      u.setting = states_setting(u.weights, u.states, {});
      parts.push_back(u);
    }
    return parts;
  }
  if (g == Granularity::layer && (has_low_ops(p) || pure(p))) {
    for (const std::string& s : layer_scopes(c))
      add_part(parts, "layer " + s, "every op of " + s + " under the fp32 rule",
               [&](PrecisionPart& q) { q.scopes = {s}; });
  }
  if (g == Granularity::tensor && (has_low_ops(p) || pure(p))) {
    for (const std::string& s : site_scopes(c))
      add_part(parts, "tensor " + s,
               "the ops of " + s + " itself (not the names below it) under the fp32 rule",
               [&](PrecisionPart& q) { q.sites = {s}; });
  }
  if (g == Granularity::operand && has_gemm_copies(p)) {
    for (int i = 0; i < kGemmCopyCount; ++i) {
      const GemmCopy copy = GemmCopy(i);
      add_part(parts, std::string("operand ") + gemm_copy_name(copy),
               std::string("every linear layer's ") + gemm_copy_gemm(copy) + " GEMM reads " +
                   gemm_copy_operand(copy) + " unquantized (fp32)",
               [&](PrecisionPart& q) { q.copies = {copy}; });
    }
  }
  for (const OpGroup& grp : g == Granularity::op ? op_groups() : std::vector<OpGroup>{}) {
    // An MLP has no softmax (cross_entropy is one op) and no layer norm.
    const bool used = c.model_kind != "mlp" ||
                      (std::string(grp.name) != "softmax" && std::string(grp.name) != "layer_norm");
    if (used && group_is_low(p, grp))
      add_part(parts, grp.name, ops_setting(grp), [&](PrecisionPart& q) { q.ops = grp.ops; });
  }
  for (const std::string& s : low_states)
    add_part(parts, "optimizer state " + s, state_setting(s, StateFormat{}),
             [&](PrecisionPart& q) { q.states = {s}; });
  if (p.param_dtype.is_low()) parts.push_back(weights_part());
  if (p.input_dtype.is_low())
    add_part(parts, "input cast", "the data in fp32 (no cast to " + p.input_dtype.name() + ")",
             [&](PrecisionPart& q) { q.inputs = true; });
  if (!rounding_is_default(pr))
    add_part(parts, std::string("rounding ") + rounding_name(pr.rounding),
             std::string("precision.rounding = \"") + rounding_name(Rounding::near_even) +
                 "\" (every role)",
             [&](PrecisionPart& q) { q.rounding = true; });
  if (pr.accumulation != &default_accumulation())
    add_part(parts, "accumulation " + pr.accumulation->name,
             "precision.accumulation = \"" + default_accumulation().name + "\"",
             [&](PrecisionPart& q) { q.accumulation = true; });
  return parts;
}

/// The format `o` keeps optimizer state `name` in.
StateFormat state_format(const OptimizerConfig& o, const std::string& name) {
  for (const StateDtype& sd : used_states(o))
    if (name == sd.name) return o.*sd.dtype;
  return StateFormat{};
}

/// Whether policies `a` and `b` compute op `k` alike: the same rule, and behind a lowering
/// rule the same low dtype, fp8 recipe or block recipes; behind a pure policy the same dtypes.
bool same_treatment(const Policy& a, const Policy& b, OpKind k) {
  if (a.rule(k) != b.rule(k) || pure(a) != pure(b) || has_low_ops(a) != has_low_ops(b))
    return false;
  if (pure(a) && (a.param_dtype != b.param_dtype || a.input_dtype != b.input_dtype)) return false;
  if (a.rule(k) != CastRule::lower || !has_low_ops(a)) return true;
  if (a.low != b.low || a.fp8 != b.fp8 || (a.fp8 && !(a.fp8_config == b.fp8_config)))
    return false;
  return k != OpKind::linear || (a.blocks == b.blocks && a.block_layers == b.block_layers);
}

bool same_rounding(const Precision& a, const Precision& b) {
  for (int r = 0; r < kRoleCount; ++r)
    if (a.rounding_of(Role(r)) != b.rounding_of(Role(r))) return false;
  return a.sr_random_bits == b.sr_random_bits &&
         a.sr_pack_random_bits == b.sr_pack_random_bits;
}

/// `part` against the reference `ref` instead of fp32: what `c` already shares with `ref` is
/// taken out of it, what one config can hold is set to `ref`'s own setting; false when
/// nothing of the part is left.
bool against(PrecisionPart& part, const TrainConfig& c, const TrainConfig& ref,
             const std::shared_ptr<const Precision>& to) {
  const Policy &p = c.precision.policy, &q = ref.precision.policy;
  const bool state_part = !part.states.empty() || part.weights;
  std::vector<std::string> states;
  for (const std::string& st : part.states) {
    const StateFormat f = state_format(ref.optimizer, st);
    if (f == state_format(c.optimizer, st)) continue;
    states.push_back(st);
    part.state_formats.push_back(f);
  }
  part.states = states;
  if (q.param_dtype == p.param_dtype) part.weights = false;
  if (q.input_dtype == p.input_dtype) part.inputs = false;
  if (state_part) part.setting = states_setting(part.weights, part.states, part.state_formats);
  if (part.rounding) {
    part.rounding = !same_rounding(c.precision, ref.precision);
    part.reference = to;
    part.setting = std::string("the reference's rounding (precision.rounding = \"") +
                   rounding_name(to->rounding) + "\", its per-role roundings and random bits)";
  }
  if (part.accumulation) {
    part.accumulation = to->accumulation != c.precision.accumulation;
    part.reference = to;
    part.setting = "precision.accumulation = \"" + to->accumulation->name + "\"";
  }
  if (!part.ops.empty()) {
    if (std::all_of(part.ops.begin(), part.ops.end(),
                    [&](OpKind k) { return same_treatment(p, q, k); }))
      part.ops.clear();
    else if (std::any_of(part.ops.begin(), part.ops.end(), [&](OpKind k) {
               return q.rule(k) == CastRule::lower && has_low_ops(q);
             }))
      part.setting += " (fp32, not the reference's low precision: one policy holds one)";
  }
  return !part.ops.empty() || !part.states.empty() || part.weights || part.inputs ||
         part.rounding || part.accumulation || !part.roles.empty() || !part.scopes.empty() ||
         !part.sites.empty() || !part.copies.empty();
}

}  // namespace

std::vector<PrecisionPart> precision_parts(const TrainConfig& c, Granularity g,
                                           const TrainConfig* ref) {
  std::vector<PrecisionPart> parts = fp32_parts(c, g);
  if (!ref) return parts;
  const auto to = std::make_shared<const Precision>(ref->precision);
  std::vector<PrecisionPart> out;
  for (PrecisionPart& part : parts)
    if (against(part, c, *ref, to)) out.push_back(std::move(part));
  return out;
}

TrainConfig promote(const TrainConfig& c, const std::vector<PrecisionPart>& parts) {
  TrainConfig r = c;
  Precision& pr = r.precision;
  Policy& p = pr.policy;
  // The master copy first: it lowers the ops that ran in the weights' dtype, which an op
  // group promoted in the same set then takes back to fp32.
  const bool weights = std::any_of(parts.begin(), parts.end(),
                                   [](const PrecisionPart& q) { return q.weights; });
  if (weights && p.param_dtype != DType::f32()) {
    if (p.low.is_low())
      for (int i = 0; i < kOpCount; ++i)
        if (p.rules[size_t(i)] != CastRule::fp32) p.rules[size_t(i)] = CastRule::lower;
    p.param_dtype = DType::f32();
    p.update = WeightUpdate{};  // Kahan needs low-precision weights
  }
  for (const PrecisionPart& q : parts) {
    for (OpKind k : q.ops) p.set(k, CastRule::fp32);
    for (size_t i = 0; i < q.states.size(); ++i)
      for (const StateDtype& sd : used_states(r.optimizer))
        if (q.states[i] == sd.name)
          r.optimizer.*sd.dtype = i < q.state_formats.size() ? q.state_formats[i] : StateFormat{};
    if (q.inputs) p.input_dtype = DType::f32();
    if (q.rounding) {
      pr.rounding = q.reference ? q.reference->rounding : Rounding::near_even;
      p.role_rounding = q.reference ? q.reference->policy.role_rounding : decltype(p.role_rounding){};
      if (q.reference) {
        pr.sr_random_bits = q.reference->sr_random_bits;
        pr.sr_pack_random_bits = q.reference->sr_pack_random_bits;
      }
    }
    if (q.accumulation) pr.accumulation = q.reference ? q.reference->accumulation : &default_accumulation();
    for (Role role : q.roles) p.promoted_roles[size_t(role)] = true;
    for (const std::string& s : q.scopes) p.fp32_scopes.push_back(s);
    for (const std::string& s : q.sites) p.fp32_sites.push_back(s);
    for (GemmCopy copy : q.copies) p.promoted_copies[size_t(copy)] = true;
  }
  return r;
}

namespace {

/// Part `i` of `g` near-equal parts of `c`.
PartSet chunk(const PartSet& c, int g, int i) {
  const size_t lo = c.size() * size_t(i) / size_t(g), hi = c.size() * size_t(i + 1) / size_t(g);
  return PartSet(c.begin() + long(lo), c.begin() + long(hi));
}

PartSet minus(const PartSet& c, const PartSet& d) {
  PartSet r;
  std::set_difference(c.begin(), c.end(), d.begin(), d.end(), std::back_inserter(r));
  return r;
}

}  // namespace

SearchResult ddmin(int n, double threshold, int batch, const EvaluateSets& eval) {
  SearchResult res;
  PartSet c(static_cast<size_t>(std::max(n, 0)));
  for (int i = 0; i < n; ++i) c[size_t(i)] = i;
  batch = std::max(batch, 1);
  int g = 2;
  while (c.size() >= 2) {
    std::vector<PartSet> cands;
    for (int i = 0; i < g; ++i) cands.push_back(chunk(c, g, i));
    if (g > 2)  // with two chunks each complement is the other chunk
      for (int i = 0; i < g; ++i) cands.push_back(minus(c, cands[size_t(i)]));
    int found = -1;
    for (size_t lo = 0; lo < cands.size() && found < 0; lo += size_t(batch)) {
      const std::vector<PartSet> window(
          cands.begin() + long(lo), cands.begin() + long(std::min(cands.size(), lo + size_t(batch))));
      const std::vector<std::optional<double>> f = eval(window);
      for (size_t j = 0; j < window.size(); ++j) {
        if (!f[j]) {
          res.culprit = c;
          res.finished = false;
          return res;
        }
        if (*f[j] >= threshold) {
          found = int(lo + j);
          break;
        }
      }
    }
    if (found >= 0 && found < g) {
      c = cands[size_t(found)];
      g = 2;
    } else if (found >= g) {
      c = cands[size_t(found)];
      g = std::max(g - 1, 2);
    } else {
      if (size_t(g) >= c.size()) break;
      g = int(std::min(size_t(g) * 2, c.size()));
    }
  }
  res.culprit = c;
  return res;
}

}  // namespace halfway::sim
