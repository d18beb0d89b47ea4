// manifest.json (manifest.hpp): the run's build, seed and config as JSON, the policy as it was
// resolved (each role's rounding, the fp8 and block recipes, every op's rule), the optimizer
// state's formats, the files written and the summary of the steps.
#include "manifest.hpp"

#include <nlohmann/json.hpp>

#include "halfway/names.hpp"
#include "halfway/sim/accumulate.hpp"
#include "run_files.hpp"

namespace halfway::sim::detail {

namespace {

/// A block recipe as the manifest records it (the keys of [precision.blocks]).
nlohmann::json block_recipe_json(const BlockRecipe& b) {
  return {{"input", b.input},         {"weight", b.weight},       {"grad", b.grad},
          {"input_sr", b.input_sr},   {"weight_sr", b.weight_sr}, {"grad_sr", b.grad_sr},
          {"input_rht", b.input_rht}, {"grad_rht", b.grad_rht},   {"pow2_scales", b.pow2_scales}};
}

/// The manifest's "policy": the resolved policy, its per-role roundings and update, fp8 recipe
/// and the rule of every op.
nlohmann::json policy_json(const Precision& pr) {
  const Policy& p = pr.policy;
  nlohmann::json pol;
  pol["name"] = p.name;
  pol["low"] = p.low.name();
  pol["params"] = p.param_dtype.name();
  pol["inputs"] = p.input_dtype.name();
  pol["master_weights"] = p.master_weights();
  pol["accumulation"] = pr.accumulation->name;
  pol["rounding"] = rounding_name(pr.rounding);
  if (p.role_rounding != decltype(p.role_rounding){}) {
    nlohmann::json roles = nlohmann::json::object();
    for (int r = 0; r < kRoleCount; ++r)
      roles[role_name(Role(r))] = rounding_name(pr.rounding_of(Role(r)));
    pol["role_rounding"] = roles;
  }
  if (p.promoted_roles != decltype(p.promoted_roles){}) {
    nlohmann::json roles = nlohmann::json::array();
    for (int r = 0; r < kRoleCount; ++r)
      if (p.promoted_roles[size_t(r)]) roles.push_back(role_name(Role(r)));
    pol["promoted_roles"] = roles;
  }
  if (!p.fp32_scopes.empty()) pol["fp32_scopes"] = p.fp32_scopes;
  if (!p.fp32_sites.empty()) pol["fp32_sites"] = p.fp32_sites;
  if (p.promoted_copies != decltype(p.promoted_copies){}) {
    nlohmann::json copies = nlohmann::json::array();
    for (int c = 0; c < kGemmCopyCount; ++c)
      if (p.promoted_copies[size_t(c)]) copies.push_back(gemm_copy_name(GemmCopy(c)));
    pol["promoted_copies"] = copies;
  }
  pol["update"] = update_method_name(p.update.method);
  if (p.update.method == UpdateMethod::kahan)
    pol["compensation"] = p.update.compensation.name();
  bool block_sr = p.blocks && p.blocks->stochastic();
  for (const BlockLayer& l : p.block_layers) block_sr = block_sr || (l.recipe && l.recipe->stochastic());
  if (pr.rounding == Rounding::stochastic || block_sr) {
    pol["sr_random_bits"] = pr.sr_random_bits;
    if (pr.sr_pack_random_bits) pol["sr_pack_random_bits"] = true;
  }
  if (p.fp8) {
    pol["fp8_forward"] = format_name(p.fp8_config.fwd);
    pol["fp8_backward"] = format_name(p.fp8_config.bwd);
    pol["scaling"] = scaling_name(p.fp8_config.scaling);
    if (p.fp8_config.scaling == Fp8Scaling::delayed) {
      pol["amax_history_len"] = p.fp8_config.amax_history_len;
      pol["amax_compute_algo"] = amax_algo_name(p.fp8_config.amax_compute_algo);
    }
    pol["margin"] = p.fp8_config.margin;
  }
  if (const auto& b = p.blocks) {
    pol["blocks"] = block_recipe_json(*b);
    if (!p.block_layers.empty()) {
      nlohmann::json layers = nlohmann::json::array();
      for (const BlockLayer& l : p.block_layers)
        layers.push_back({{"match", l.match},
                          {"recipe", l.recipe ? block_recipe_json(*l.recipe) : nullptr}});
      pol["blocks"]["layer"] = layers;
    }
  }
  nlohmann::json rules = nlohmann::json::object();
  for (int i = 0; i < kOpCount; ++i)
    rules[op_name(OpKind(i))] = rule_name(p.rule(OpKind(i)));
  pol["rules"] = rules;
  return pol;
}

/// The manifest's "optimizer_state": each state's dtype.
nlohmann::json optimizer_state_json(const OptimizerConfig& oc) {
  nlohmann::json st = nlohmann::json::object();
  if (oc.kind == "sgd") {
    if (oc.momentum != 0) st["momentum_buffer"] = oc.momentum_buffer_dtype.name();
  } else {
    st["exp_avg"] = oc.exp_avg_dtype.name();
    st["exp_avg_sq"] = oc.exp_avg_sq_dtype.name();
  }
  return st;
}

/// The manifest's "summary": the steps, the final loss and scale, the steps with inf/NaN
/// gradients and the skipped ones, the memory, the optimizer state's roundings, the safe window.
nlohmann::json summary_json(const TrainConfig& c, const TrainSummary& sum, const RunFiles& files) {
  nlohmann::json s;
  s["steps"] = c.steps;
  s["final_loss"] = sum.final_loss;
  s["final_scale"] = sum.final_scale;
  s["found_inf_steps"] = sum.found_inf;
  s["skipped_steps"] = sum.skipped;
  s["memory_bytes"] = total_bytes(sum.memory);
  if (files.state_values)
    s["optimizer_state"] = {{"values", files.state_values},
                            {"flushed", files.state_flushed},
                            {"overflow", files.state_overflow}};
  if (sum.window_known && sum.k_low != INT_MIN)
    s["safe_window"] = {{"k_low", sum.k_low}, {"k_high", sum.k_high}};
  else
    s["safe_window"] = nullptr;
  return s;
}

}  // namespace

std::string run_manifest(const TrainConfig& c, const TrainSummary& sum, const RunFiles& files) {
  using nlohmann::json;
  json m;
  m["halfway_version"] = sim_version();
  m["git_revision"] = git_revision();
  m["seed"] = c.seed;
  m["config_file"] = c.source_name;
  // A run stopped by SIGINT/SIGTERM holds the files of its finished steps only.
  m["complete"] = sum.complete();
  m["steps_done"] = sum.steps_done;
  try {
    m["config"] = json::parse(c.config_json);
  } catch (const json::exception&) {
    m["config"] = c.config_json;  // TOML values JSON cannot hold (inf, nan): keep the text
  }
  m["policy"] = policy_json(c.precision);
  m["optimizer_state"] = optimizer_state_json(c.optimizer);
  m["reference"] = c.reference.empty() ? json(nullptr) : json(c.reference);
  m["outputs"] = files.outputs();
  m["summary"] = summary_json(c, sum, files);
  return m.dump(2) + "\n";
}

}  // namespace halfway::sim::detail
