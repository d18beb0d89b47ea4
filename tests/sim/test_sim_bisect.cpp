// `halfway bisect`'s pieces: which parts a config's precision has, what promoting each does to
// the config, and the delta-debugging search on planted gap functions (single culprits, pairs
// that only close the gap together, budgets that run out), with the runs it needs counted.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <set>

#include "halfway/names.hpp"
#include "halfway/sim/bisect.hpp"

using namespace halfway;
using namespace halfway::sim;

namespace {

const char* const kMlp =
    "[model]\nkind = \"mlp\"\nlayers = [4, 8, 1]\n"
    "[data]\nsynthetic = \"regression\"\nbatch_size = 8\nn = 32\n[loss]\nkind = \"mse\"\n";
const char* const kTransformer =
    "[model]\nkind = \"transformer\"\nvocab = 8\nseq_len = 4\nd_model = 8\n"
    "[data]\nsynthetic = \"copy\"\nbatch_size = 8\nn = 32\n[loss]\nkind = \"cross_entropy\"\n";

TrainConfig config(const std::string& precision, const std::string& optimizer = "",
                   const std::string& model = kMlp) {
  return parse_config(model + "[optimizer]\nkind = \"adam\"\nlr = 0.01\n" + optimizer +
                          "[precision]\n" + precision + "[run]\nsteps = 2\n",
                      ".");
}

std::vector<std::string> names(const std::vector<PrecisionPart>& ps) {
  std::vector<std::string> r;
  for (const auto& p : ps) r.push_back(p.name);
  return r;
}

const PrecisionPart& part(const std::vector<PrecisionPart>& ps, const std::string& n) {
  for (const auto& p : ps)
    if (p.name == n) return p;
  FAIL("no part " << n);
  return ps.front();
}

using V = std::vector<std::string>;

}  // namespace

TEST_CASE("bisect: the parts of a config's precision") {
  CHECK(precision_parts(config("policy = \"fp32\"\n"), Granularity::op).empty());
  CHECK(precision_parts(config("policy = \"fp32\"\n"), Granularity::role).empty());
  // The CUDA preset lowers the matmul family only; an MLP has no softmax or layer norm.
  CHECK(names(precision_parts(config("policy = \"torch-cuda-fp16\"\n"), Granularity::op)) ==
        V{"matmul/linear"});
  CHECK(names(precision_parts(config("policy = \"torch-cuda-bf16\"\n",
                                     "exp_avg_sq_dtype = \"fp16\"\n"),
                              Granularity::op)) == V{"matmul/linear", "optimizer state exp_avg_sq"});
  CHECK(names(precision_parts(config("policy = \"pure-bf16\"\n"), Granularity::op)) ==
        V{"matmul/linear", "loss", "elementwise", "weights", "input cast"});
  CHECK(names(precision_parts(config("policy = \"pure-bf16\"\nrounding = \"rtz\"\n"),
                              Granularity::role)) == V{"forward", "backward", "update"});
  const auto t = precision_parts(
      config("policy = \"custom\"\nlow = \"fp16\"\n[precision.ops]\nsoftmax = \"lower\"\n", "",
             kTransformer),
      Granularity::op);
  CHECK(names(t) == V{"softmax"});
  CHECK(t[0].setting == "[precision.ops] softmax = \"fp32\", log_softmax = \"fp32\"");
  CHECK(names(precision_parts(config("policy = \"torch-cpu-bf16\"\n"), Granularity::op)) ==
        V{"matmul/linear", "accumulation torch-cpu"});
  CHECK_THROWS_AS(parse_granularity("tensors"), InputError);
  // Layers: every module scope and the loss, then the parts that belong to no layer.
  CHECK(names(precision_parts(config("policy = \"torch-cuda-bf16\"\n",
                                     "exp_avg_sq_dtype = \"fp16\"\n"),
                              Granularity::layer)) ==
        V{"layer 0", "layer 1", "layer 2", "layer loss", "optimizer state exp_avg_sq"});
}

TEST_CASE("bisect: op sites and GEMM operand copies as parts") {
  // Tensors: each transformer block cut into its op sites; an MLP's sites are its layers.
  const auto t = precision_parts(config("policy = \"torch-cuda-fp16\"\n", "", kTransformer),
                                 Granularity::tensor);
  CHECK(names(t) == V{"tensor tok_emb",           "tensor pos_emb",
                      "tensor embed",             "tensor blocks.0.ln1",
                      "tensor blocks.0.attn.q",   "tensor blocks.0.attn.k",
                      "tensor blocks.0.attn.v",   "tensor blocks.0.attn.scores",
                      "tensor blocks.0.attn.scale", "tensor blocks.0.attn.softmax",
                      "tensor blocks.0.attn.context", "tensor blocks.0.attn.proj",
                      "tensor blocks.0.res1",     "tensor blocks.0.ln2",
                      "tensor blocks.0.mlp.fc1",  "tensor blocks.0.mlp.act",
                      "tensor blocks.0.mlp.fc2",  "tensor blocks.0.res2",
                      "tensor ln_f",              "tensor head",
                      "tensor loss"});
  // A causal model's attention also masks.
  const auto causal = precision_parts(
      config("policy = \"torch-cuda-fp16\"\n", "",
             std::string(kTransformer).replace(std::string(kTransformer).find("[data]"), 0,
                                               "causal = true\n")),
      Granularity::tensor);
  CHECK(names(causal)[8] == "tensor blocks.0.attn.scale");
  CHECK(names(causal)[9] == "tensor blocks.0.attn.mask");
  const TrainConfig st = promote(config("policy = \"torch-cuda-fp16\"\n", "", kTransformer),
                                 {part(t, "tensor blocks.0.attn.softmax")});
  CHECK(st.precision.policy.fp32_sites == V{"blocks.0.attn.softmax"});
  CHECK(st.precision.policy.fp32_scopes.empty());
  CHECK(names(precision_parts(config("policy = \"torch-cuda-fp16\"\n"), Granularity::tensor)) ==
        V{"tensor 0", "tensor 1", "tensor 2", "tensor loss"});
  // Operands: the six copies of an fp8 or block recipe, then the parts of no layer.
  const V copies{"operand X (fprop)", "operand W (fprop)", "operand dY (dgrad)",
                 "operand W (dgrad)", "operand dY (wgrad)", "operand X (wgrad)"};
  for (const char* pol : {"mxfp4", "nvfp4", "fp8-hybrid", "fp8-current"}) {
    INFO(pol);
    CHECK(names(precision_parts(config(std::string("policy = \"") + pol + "\"\n"),
                                Granularity::operand)) == copies);
  }
  const TrainConfig c = config("policy = \"mxfp4\"\n", "exp_avg_sq_dtype = \"fp16\"\n");
  const auto ops = precision_parts(c, Granularity::operand);
  CHECK(names(ops).back() == "optimizer state exp_avg_sq");
  CHECK(ops[3].setting == "every linear layer's dgrad GEMM reads W unquantized (fp32)");
  const TrainConfig w = promote(c, {ops[3], ops[4]});
  CHECK(w.precision.policy.promoted_copies ==
        std::array<bool, kGemmCopyCount>{false, false, false, true, true, false});
  CHECK(w.precision.policy.rules == c.precision.policy.rules);
  CHECK(w.optimizer.exp_avg_sq_dtype == c.optimizer.exp_avg_sq_dtype);
  // A policy without quantized GEMM operands has no operand parts.
  CHECK(names(precision_parts(config("policy = \"torch-cuda-bf16\"\n"), Granularity::operand))
            .empty());
  for (Granularity g : {Granularity::role, Granularity::op, Granularity::layer,
                        Granularity::tensor, Granularity::operand})
    CHECK(parse_granularity(granularity_name(g)) == g);
}

TEST_CASE("bisect: against a reference config, the parts it shares are none, the rest take its "
          "settings where one config can hold them") {
  const TrainConfig ref = config(
      "policy = \"torch-cuda-bf16\"\nrounding = \"stochastic\"\nsr_random_bits = 8\n",
      "exp_avg_sq_dtype = \"bf16\"\n");
  const TrainConfig c = config(
      "policy = \"torch-cuda-bf16\"\naccumulation = \"h100\"\nrounding = \"rtz\"\n",
      "exp_avg_sq_dtype = \"fp16\"\nexp_avg_dtype = \"bf16\"\n");
  const auto ps = precision_parts(c, Granularity::op, &ref);
  // matmul/linear is bf16 in both: no part.
  CHECK(names(ps) == V{"optimizer state exp_avg", "optimizer state exp_avg_sq",
                       "rounding minMag", "accumulation h100"});
  const TrainConfig all = promote(c, ps);
  CHECK(all.optimizer.exp_avg_dtype == StateFormat{});
  CHECK(all.optimizer.exp_avg_sq_dtype == DType::low(formats::bf16));
  CHECK(all.precision.rounding == Rounding::stochastic);
  CHECK(all.precision.sr_random_bits == 8);
  CHECK(all.precision.accumulation == ref.precision.accumulation);
  CHECK(all.precision.policy.rules == ref.precision.policy.rules);
  CHECK(part(ps, "optimizer state exp_avg_sq").setting == "optimizer.exp_avg_sq_dtype = \"bf16\"");
  CHECK(part(ps, "accumulation h100").setting == "precision.accumulation = \"fp32\"");
  // Without a reference, the same config's parts go to fp32 and near-even.
  CHECK(promote(c, precision_parts(c, Granularity::op)).precision.rounding == Rounding::near_even);
  // An op group the reference lowers to another dtype is promoted to fp32, and says so.
  const TrainConfig f16 = config("policy = \"torch-cuda-fp16\"\n");
  const auto mm = precision_parts(f16, Granularity::op, &ref);
  CHECK(names(mm) == V{"matmul/linear"});
  CHECK(mm[0].setting.find("fp32, not the reference's low precision") != std::string::npos);
  // Against itself: nothing to promote.
  CHECK(precision_parts(c, Granularity::op, &c).empty());
}

TEST_CASE("bisect: a promoted op site covers its own scope only") {
  Policy p = preset_policy("torch-cuda-fp16");
  p.fp32_sites = {"blocks.0.attn", "2"};
  CHECK(p.rule_in(OpKind::matmul, "blocks.0.attn") == CastRule::fp32);
  CHECK(p.rule_in(OpKind::linear, "blocks.0.attn.q") == CastRule::lower);
  CHECK(p.rule_in(OpKind::linear, "blocks.0") == CastRule::lower);
  CHECK(p.rule_in(OpKind::linear, "2") == CastRule::fp32);
  CHECK(p.rule_in(OpKind::linear, "20") == CastRule::lower);
}

TEST_CASE("bisect: a promoted layer covers its scope and the names below it") {
  Policy p = preset_policy("torch-cuda-fp16");
  p.fp32_scopes = {"blocks.0", "2"};
  CHECK(p.rule_in(OpKind::linear, "blocks.0") == CastRule::fp32);
  CHECK(p.rule_in(OpKind::linear, "blocks.0.attn.q") == CastRule::fp32);
  CHECK(p.rule_in(OpKind::linear, "blocks.01") == CastRule::lower);
  CHECK(p.rule_in(OpKind::linear, "blocks.1.attn.q") == CastRule::lower);
  CHECK(p.rule_in(OpKind::linear, "2") == CastRule::fp32);
  CHECK(p.rule_in(OpKind::linear, "20") == CastRule::lower);
  CHECK(p.rule_in(OpKind::linear, "") == CastRule::lower);
  CHECK(p.rule_in(OpKind::add, "head") == CastRule::input);
}

TEST_CASE("bisect: promoting a part changes only that part") {
  const TrainConfig c = config("policy = \"torch-cuda-bf16\"\n",
                               "exp_avg_dtype = \"bf16\"\nexp_avg_sq_dtype = \"fp16\"\n");
  const auto ps = precision_parts(c, Granularity::op);
  const TrainConfig s = promote(c, {part(ps, "optimizer state exp_avg_sq")});
  CHECK(s.optimizer.exp_avg_sq_dtype == DType::f32());
  CHECK(s.optimizer.exp_avg_dtype == DType::low(formats::bf16));
  CHECK(s.precision.policy.rules == c.precision.policy.rules);
  const TrainConfig m = promote(c, {part(ps, "matmul/linear")});
  CHECK(m.precision.policy.rule(OpKind::linear) == CastRule::fp32);
  CHECK(m.precision.policy.rule(OpKind::matmul) == CastRule::fp32);
  CHECK(m.optimizer.exp_avg_sq_dtype == DType::low(formats::fp16));
  // Every part promoted: nothing of the policy computes in bf16 any more.
  const TrainConfig all = promote(c, ps);
  CHECK(precision_parts(all, Granularity::op).empty());
}

TEST_CASE("bisect: fp32 master weights keep the ops in the low dtype") {
  const TrainConfig c = config("policy = \"pure-bf16\"\n");
  const auto ps = precision_parts(c, Granularity::op);
  const TrainConfig w = promote(c, {part(ps, "weights")});
  CHECK(w.precision.policy.param_dtype == DType::f32());
  CHECK(w.precision.policy.input_dtype == DType::low(formats::bf16));
  CHECK(w.precision.policy.rule(OpKind::linear) == CastRule::lower);
  CHECK(w.precision.policy.master_weights());
  // With an op group in the same set, in either order, that group goes to fp32.
  for (const auto& set : {std::vector<PrecisionPart>{part(ps, "weights"), part(ps, "loss")},
                          std::vector<PrecisionPart>{part(ps, "loss"), part(ps, "weights")}}) {
    const TrainConfig x = promote(c, set);
    CHECK(x.precision.policy.rule(OpKind::mse) == CastRule::fp32);
    CHECK(x.precision.policy.rule(OpKind::linear) == CastRule::lower);
  }
  const auto roles = precision_parts(c, Granularity::role);
  CHECK(part(roles, "update").setting == "an fp32 master copy of the weights");
  const auto states = precision_parts(
      config("policy = \"torch-cuda-bf16\"\n", "exp_avg_sq_dtype = \"fp16\"\n"), Granularity::role);
  CHECK(part(states, "update").setting == "optimizer.exp_avg_sq_dtype = \"fp32\"");
  CHECK_FALSE(part(states, "update").weights);
  const TrainConfig f = promote(c, {part(roles, "forward")});
  CHECK(f.precision.policy.promoted_roles == std::array<bool, kRoleCount>{true, false, false});
  CHECK(f.precision.policy.param_dtype == DType::low(formats::bf16));
}

namespace {

/// A planted gap: parts in `need` must all be promoted; each closes an equal share, and the
/// rest 0 (with `pair`, only both together close anything).
struct Planted {
  std::set<int> need;
  bool pair = false;
  int runs = 0;
  int budget = 1000;
  std::vector<std::optional<double>> operator()(const std::vector<PartSet>& sets) {
    std::vector<std::optional<double>> r;
    for (const PartSet& s : sets) {
      if (runs >= budget) {
        r.push_back(std::nullopt);
        continue;
      }
      ++runs;
      int hit = 0;
      for (int i : s) hit += need.count(i) ? 1 : 0;
      if (pair) r.push_back(hit == int(need.size()) ? 1.0 : 0.0);
      else r.push_back(double(hit) / double(need.size()));
    }
    return r;
  }
};

}  // namespace

TEST_CASE("bisect: ddmin names a single culprit in about 2 log2(n) runs") {
  for (int n : {1, 2, 3, 5, 8, 13}) {
    for (int culprit = 0; culprit < n; ++culprit) {
      Planted p{{culprit}};
      const SearchResult r = ddmin(n, 0.9, 1, std::ref(p));
      CHECK(r.finished);
      CHECK(r.culprit == PartSet{culprit});
      int log2n = 0;
      while ((1 << log2n) < n) ++log2n;
      CHECK(p.runs <= 2 * log2n);
    }
  }
}

TEST_CASE("bisect: ddmin finds a pair that only closes the gap together") {
  for (int n : {2, 4, 6, 9}) {
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) {
        Planted p{{a, b}, true};
        const SearchResult r = ddmin(n, 0.9, 1, std::ref(p));
        CHECK(r.culprit == PartSet{a, b});
        CHECK(p.runs <= n * n);
      }
  }
  // Two parts that close half each: both are needed for 90%.
  Planted half{{1, 4}};
  CHECK(ddmin(6, 0.9, 1, std::ref(half)).culprit == PartSet{1, 4});
}

TEST_CASE("bisect: the answer does not depend on the batch size") {
  for (int batch : {1, 2, 3, 8}) {
    Planted p{{2, 5}, true};
    CHECK(ddmin(7, 0.9, batch, std::ref(p)).culprit == PartSet{2, 5});
    Planted q{{3}};
    CHECK(ddmin(7, 0.9, batch, std::ref(q)).culprit == PartSet{3});
  }
}

TEST_CASE("bisect: a spent budget ends the search with the smallest set found") {
  Planted p{{6}};
  p.budget = 2;
  const SearchResult r = ddmin(8, 0.9, 1, std::ref(p));
  CHECK_FALSE(r.finished);
  CHECK(r.culprit == PartSet{4, 5, 6, 7});  // the second half closed it; then no more runs
  // Every part needed: nothing can be left out.
  Planted all{{0, 1, 2, 3, 4, 5, 6, 7}};
  const SearchResult a = ddmin(8, 0.9, 1, std::ref(all));
  CHECK(a.finished);
  CHECK(a.culprit.size() == 8);
}
