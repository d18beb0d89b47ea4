#include "halfway/sim/policy.hpp"

#include "halfway/names.hpp"

namespace halfway::sim {

namespace {

const char* const kOpNames[kOpCount] = {
    "matmul", "linear", "add", "sub", "mul", "div", "relu", "gelu", "tanh", "sigmoid", "exp",
    "log", "softmax", "log_softmax", "cross_entropy", "mse", "layer_norm", "sum", "mean",
    "reshape", "transpose", "embedding", "masked_fill"};

std::string all_op_names() {
  std::string s;
  for (const char* n : kOpNames) s += (s.empty() ? "" : " ") + std::string(n);
  return s;
}

// PyTorch's lists (aten/src/ATen/autocast_mode.cpp), restricted to the ops simulated here.
// CUDA: lower_precision_fp = mm/matmul/linear/...; fp32 = exp, log, layer_norm, the losses;
// fp32_set_opt_dtype = softmax, log_softmax, sum (they run in fp32 too); everything else runs
// in its input dtype (binary ops with PyTorch type promotion).
Policy cuda_policy(const std::string& name, const Format& low) {
  Policy p;
  p.name = name;
  p.low = DType::low(low);
  for (OpKind k : {OpKind::matmul, OpKind::linear}) p.set(k, CastRule::lower);
  for (OpKind k : {OpKind::exp, OpKind::log, OpKind::softmax, OpKind::log_softmax,
                   OpKind::cross_entropy, OpKind::mse, OpKind::layer_norm, OpKind::sum})
    p.set(k, CastRule::fp32);
  return p;
}

/// The block-scaled recipes (docs/sim.md, "Block-scaled policies", gives each choice's source).
std::optional<BlockRecipe> block_recipe(const std::string& n) {
  BlockRecipe r;
  if (n == "mxfp8") {
    // MXFP8BlockScaling: fp8_format = E4M3 for every operand, 1×32 blocks, e8m0 scales
    // rounded up (TE's float_to_e8m0).
    r.input = r.weight = r.grad = "mxfp8_e4m3:rceil";
  } else if (n == "mxfp4") {
    // No TE recipe: OCP MX v1.0's MXFP4 (e2m1, 1×32, e8m0 scales by the spec's floor rule).
    r.input = r.weight = r.grad = "mxfp4";
  } else if (n == "nvfp4") {
    // NVFP4BlockScaling: 1×16 inputs and gradients, 16×16 weights, stochastic rounding of
    // the gradients, the random Hadamard transform on the wgrad operands.
    r.input = r.grad = "nvfp4";
    r.weight = "nvfp4_2d";
    r.grad_sr = r.input_rht = r.grad_rht = true;
  } else if (n == "fp8-blockwise") {
    // Float8BlockScaling (DeepSeek-V3): e4m3 everywhere, 1×128 activations and gradients,
    // 128×128 weights, power-of-two scales (TE's default).
    r.input = r.grad = "fp8_block";
    r.weight = "fp8_block_2d";
    r.pow2_scales = true;
  } else {
    return std::nullopt;
  }
  return r;
}

}  // namespace

const char* op_name(OpKind k) { return kOpNames[static_cast<size_t>(k)]; }

OpKind parse_op(std::string_view name) {
  for (int i = 0; i < kOpCount; ++i)
    if (name == kOpNames[i]) return static_cast<OpKind>(i);
  throw InputError("unknown op '" + std::string(name) + "' (ops: " + all_op_names() + ")");
}

const char* rule_name(CastRule r) {
  switch (r) {
    case CastRule::lower: return "lower";
    case CastRule::fp32: return "fp32";
    case CastRule::promote: return "promote";
    default: return "input";
  }
}

CastRule parse_rule(std::string_view name) {
  if (name == "lower") return CastRule::lower;
  if (name == "fp32") return CastRule::fp32;
  if (name == "promote") return CastRule::promote;
  if (name == "input") return CastRule::input;
  throw InputError("unknown cast rule '" + std::string(name) +
                   "' (rules: lower fp32 promote input)");
}

const char* scaling_name(Fp8Scaling s) {
  return s == Fp8Scaling::current ? "current" : "delayed";
}

const char* amax_algo_name(AmaxAlgo a) { return a == AmaxAlgo::most_recent ? "most_recent" : "max"; }

const char* role_name(Role r) {
  switch (r) {
    case Role::forward: return "forward";
    case Role::backward: return "backward";
    default: return "update";
  }
}

const char* update_method_name(UpdateMethod m) {
  return m == UpdateMethod::kahan ? "kahan" : "plain";
}

namespace {

/// `name` against `pattern` whole, `*` matching any run of characters other than '.'.
bool glob_component(std::string_view pattern, std::string_view name) {
  if (pattern.empty()) return name.empty();
  if (pattern[0] == '*') {
    for (size_t i = 0; i <= name.size(); ++i) {
      if (glob_component(pattern.substr(1), name.substr(i))) return true;
      if (i < name.size() && name[i] == '.') break;
    }
    return false;
  }
  return !name.empty() && pattern[0] == name[0] &&
         glob_component(pattern.substr(1), name.substr(1));
}

}  // namespace

bool scope_matches(std::string_view pattern, std::string_view scope) {
  for (size_t end = 0; end <= scope.size(); ++end)
    if ((end == scope.size() || scope[end] == '.') && glob_component(pattern, scope.substr(0, end)))
      return true;
  return false;
}

CastRule Policy::rule_in(OpKind k, const std::string& scope) const {
  for (const std::string& s : fp32_scopes)
    if (scope_matches(s, scope)) return CastRule::fp32;
  for (const std::string& s : fp32_sites)
    if (s == scope) return CastRule::fp32;
  return rule(k);
}

namespace {
struct CopyNames {
  const char *name, *operand, *gemm;
};
constexpr CopyNames kCopies[kGemmCopyCount] = {
    {"X (fprop)", "X", "fprop"},  {"W (fprop)", "W", "fprop"}, {"dY (dgrad)", "dY", "dgrad"},
    {"W (dgrad)", "W", "dgrad"}, {"dY (wgrad)", "dY", "wgrad"}, {"X (wgrad)", "X", "wgrad"}};
}  // namespace

const char* gemm_copy_name(GemmCopy c) { return kCopies[static_cast<size_t>(c)].name; }
const char* gemm_copy_operand(GemmCopy c) { return kCopies[static_cast<size_t>(c)].operand; }
const char* gemm_copy_gemm(GemmCopy c) { return kCopies[static_cast<size_t>(c)].gemm; }

const BlockRecipe* Policy::blocks_in(const std::string& scope) const {
  for (const BlockLayer& l : block_layers)
    if (scope_matches(l.match, scope)) return l.recipe ? &*l.recipe : nullptr;
  return blocks ? &*blocks : nullptr;
}

bool Policy::master_weights() const {
  if (param_dtype != DType::f32()) return false;
  if (fp8 || blocks) return true;
  if (!low.is_low()) return false;
  for (CastRule r : rules)
    if (r == CastRule::lower) return true;
  return false;
}

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = {
      "fp32", "torch-cuda-fp16", "torch-cuda-bf16", "torch-cpu-bf16",
      "pure-fp16", "pure-bf16", "fp8-hybrid", "fp8-current", "fp8-blockwise",
      "mxfp8", "mxfp4", "nvfp4"};
  return names;
}

Policy preset_policy(std::string_view name) {
  const std::string n(name);
  if (n == "fp32") {
    Policy p;
    p.name = n;
    return p;
  }
  if (n == "torch-cuda-fp16") return cuda_policy(n, formats::fp16);
  if (n == "torch-cuda-bf16") return cuda_policy(n, formats::bf16);
  if (n == "torch-cpu-bf16") {
    // CPU autocast lowers only the matmul family and forces the losses to fp32; softmax,
    // exp, layer_norm and sum run in their input dtype (checked against torch 1.13's CPU
    // autocast: cross_entropy and mse_loss return fp32 for bf16 inputs).
    Policy p;
    p.name = n;
    p.low = DType::low(formats::bf16);
    for (OpKind k : {OpKind::matmul, OpKind::linear}) p.set(k, CastRule::lower);
    for (OpKind k : {OpKind::cross_entropy, OpKind::mse}) p.set(k, CastRule::fp32);
    return p;
  }
  if (n == "pure-fp16" || n == "pure-bf16") {
    // `model.half()`: parameters, data and every op in the low dtype, no master copy.
    Policy p;
    p.name = n;
    p.low = DType::low(n == "pure-fp16" ? formats::fp16 : formats::bf16);
    p.param_dtype = p.low;
    p.input_dtype = p.low;
    return p;
  }
  if (n == "fp8-hybrid" || n == "fp8-current") {
    // Transformer Engine's HYBRID recipe: only a linear layer's GEMM operands are fp8 (input
    // and weight in e4m3, the output gradient in e5m2, saturating casts as __NV_SATFINITE),
    // each with its own per-tensor scale; GEMMs accumulate in fp32 and everything else,
    // attention's matmuls included, stays fp32 unless the config opts an op in. fp8-hybrid
    // scales as DelayedScaling, fp8-current as Float8CurrentScaling (same formats).
    Policy p;
    p.name = n;
    p.fp8 = true;
    p.fp8_config.fwd = parse_format("e4m3:sat");
    p.fp8_config.bwd = parse_format("e5m2:sat");
    if (n == "fp8-current") p.fp8_config.scaling = Fp8Scaling::current;
    p.low = DType::low(p.fp8_config.fwd);
    p.set(OpKind::linear, CastRule::lower);
    return p;
  }
  if (auto r = block_recipe(n)) {
    Policy p;
    p.name = n;
    p.blocks = *r;
    p.set(OpKind::linear, CastRule::lower);
    return p;
  }
  std::string list;
  for (const auto& s : policy_names()) list += (list.empty() ? "" : " ") + s;
  throw InputError("unknown policy '" + n + "' (presets: " + list + "; or 'custom')");
}

}  // namespace halfway::sim
