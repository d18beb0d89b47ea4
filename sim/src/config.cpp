// TOML configs → TrainConfig. Every table and key is checked against the known ones, so a
// typo is an error rather than a silently ignored option.
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "halfway/blocks.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/accumulate.hpp"
#include "halfway/sim/config.hpp"
#include "halfway/sim/data.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/sim/precision.hpp"

namespace halfway::sim {

namespace {

using Keys = std::initializer_list<const char*>;

void check_keys(const toml::table& t, const std::string& where, Keys allowed) {
  for (auto&& [k, v] : t) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || k.str() == a;
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += (list.empty() ? "" : " ") + std::string(a);
      throw InputError("unknown option '" + where + std::string(k.str()) + "' (" +
                       (where.empty() ? "tables" : where.substr(0, where.size() - 1) + " options") +
                       ": " + list + ")");
    }
  }
}

const toml::table* table(const toml::table& root, const char* name, bool required) {
  const toml::node* n = root.get(name);
  if (!n) {
    if (required) throw InputError("missing table [" + std::string(name) + "] in the config");
    return nullptr;
  }
  if (!n->is_table()) throw InputError("'" + std::string(name) + "' must be a table");
  return n->as_table();
}

std::string path_of(const std::string& where, const char* key) { return where + key; }

std::optional<std::string> get_str(const toml::table& t, const std::string& where, const char* key,
                                   bool required) {
  const toml::node* n = t.get(key);
  if (!n) {
    if (required) throw InputError("missing field '" + path_of(where, key) + "' in the config");
    return std::nullopt;
  }
  if (!n->is_string()) throw InputError("'" + path_of(where, key) + "' must be a string");
  return std::string(*n->value<std::string_view>());
}

std::optional<double> get_num(const toml::table& t, const std::string& where, const char* key,
                              bool required) {
  const toml::node* n = t.get(key);
  if (!n) {
    if (required) throw InputError("missing field '" + path_of(where, key) + "' in the config");
    return std::nullopt;
  }
  if (n->is_integer()) return double(*n->value<int64_t>());
  if (n->is_floating_point()) return *n->value<double>();
  throw InputError("'" + path_of(where, key) + "' must be a number");
}

std::optional<int64_t> get_int(const toml::table& t, const std::string& where, const char* key,
                               bool required) {
  const toml::node* n = t.get(key);
  if (!n) {
    if (required) throw InputError("missing field '" + path_of(where, key) + "' in the config");
    return std::nullopt;
  }
  if (!n->is_integer()) throw InputError("'" + path_of(where, key) + "' must be an integer");
  return *n->value<int64_t>();
}

std::optional<bool> get_bool(const toml::table& t, const std::string& where, const char* key) {
  const toml::node* n = t.get(key);
  if (!n) return std::nullopt;
  if (!n->is_boolean()) throw InputError("'" + path_of(where, key) + "' must be true or false");
  return *n->value<bool>();
}

std::vector<double> get_num_array(const toml::table& t, const std::string& where, const char* key,
                                  bool required, bool integers) {
  const toml::node* n = t.get(key);
  if (!n) {
    if (required) throw InputError("missing field '" + path_of(where, key) + "' in the config");
    return {};
  }
  const std::string what = "'" + path_of(where, key) + "'";
  if (!n->is_array()) throw InputError(what + " must be an array");
  std::vector<double> out;
  for (const toml::node& e : *n->as_array()) {
    if (e.is_integer())
      out.push_back(double(*e.value<int64_t>()));
    else if (!integers && e.is_floating_point())
      out.push_back(*e.value<double>());
    else
      throw InputError(what + " must hold " + (integers ? "integers" : "numbers"));
  }
  return out;
}

/// `v` when lo <= v <= hi; otherwise an InputError naming the key and the range.
int64_t in_range(int64_t v, int64_t lo, int64_t hi, const std::string& key) {
  if (v < lo || v > hi)
    throw InputError("'" + key + "' must be in " + std::to_string(lo) + ".." + std::to_string(hi) +
                     ", got " + std::to_string(v));
  return v;
}

/// The largest batch and the most steps a run may have (docs/sim.md). Steps are numbered
/// with an int in the tracer.
constexpr int64_t kMaxBatch = int64_t(1) << 24;
constexpr int64_t kMaxSteps = (int64_t(1) << 31) - 1;
constexpr int64_t kMaxDataN = int64_t(1) << 26;

int to_int(int64_t v, const std::string& what) {
  if (v < -(int64_t(1) << 30) || v > (int64_t(1) << 30))
    throw InputError("'" + what + "' is out of range");
  return int(v);
}

std::string resolve(const std::string& base, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return (std::filesystem::path(base) / p).lexically_normal().string();
}

/// fp8-hybrid's options in [precision] (Transformer Engine's recipe names and defaults).
void parse_fp8_options(const toml::table& t, const std::string& w, Policy& p) {
  const bool fp8_keys = t.get("amax_history_len") || t.get("margin") || t.get("fp8_forward") ||
                        t.get("fp8_backward") || t.get("scaling") || t.get("amax_compute_algo");
  if (fp8_keys && !p.fp8)
    throw InputError("amax_history_len/margin/fp8_forward/fp8_backward/scaling/amax_compute_algo "
                     "need policy fp8-hybrid or fp8-current");
  Fp8Config& f = p.fp8_config;
  if (auto v = get_str(t, w, "scaling", false)) {
    if (*v != "delayed" && *v != "current")
      throw InputError("'precision.scaling' must be \"delayed\" or \"current\", got '" + *v + "'");
    f.scaling = *v == "current" ? Fp8Scaling::current : Fp8Scaling::delayed;
  }
  if (f.scaling == Fp8Scaling::current && (t.get("amax_history_len") || t.get("amax_compute_algo")))
    throw InputError("amax_history_len/amax_compute_algo apply to scaling = \"delayed\" only");
  if (auto v = get_int(t, w, "amax_history_len", false)) {
    if (*v < 1 || *v > 1000000)
      throw InputError("'precision.amax_history_len' must be in 1..1000000");
    f.amax_history_len = int(*v);
  }
  if (auto v = get_str(t, w, "amax_compute_algo", false)) {
    if (*v != "max" && *v != "most_recent")
      throw InputError("'precision.amax_compute_algo' must be \"max\" or \"most_recent\", got '" +
                       *v + "'");
    f.amax_compute_algo = *v == "most_recent" ? AmaxAlgo::most_recent : AmaxAlgo::max;
  }
  if (auto v = get_int(t, w, "margin", false)) {
    if (*v < -126 || *v > 126) throw InputError("'precision.margin' must be in -126..126");
    f.margin = int(*v);
  }
  if (auto v = get_str(t, w, "fp8_forward", false)) f.fwd = parse_format(*v);
  if (auto v = get_str(t, w, "fp8_backward", false)) f.bwd = parse_format(*v);
}

/// The optimizer state's dtypes: `state_dtype` for every state, then the per-state keys.
void parse_state_dtypes(const toml::table& t, const std::string& w, OptimizerConfig& o) {
  const bool sgd = o.kind == "sgd";
  if (sgd && (t.get("exp_avg_dtype") || t.get("exp_avg_sq_dtype")))
    throw InputError("exp_avg_dtype/exp_avg_sq_dtype are Adam options");
  if (!sgd && t.get("momentum_buffer_dtype"))
    throw InputError("momentum_buffer_dtype is an SGD option");
  if (sgd && o.momentum == 0 && (t.get("momentum_buffer_dtype") || t.get("state_dtype")))
    throw InputError("SGD without momentum keeps no state (state_dtype/momentum_buffer_dtype)");
  auto dtype = [&](const char* key, StateFormat& d) {
    if (auto v = get_str(t, w, key, false)) d = parse_state_format(*v, w + key);
  };
  StateFormat all;
  dtype("state_dtype", all);
  o.exp_avg_dtype = o.exp_avg_sq_dtype = o.momentum_buffer_dtype = all;
  dtype("exp_avg_dtype", o.exp_avg_dtype);
  dtype("exp_avg_sq_dtype", o.exp_avg_sq_dtype);
  dtype("momentum_buffer_dtype", o.momentum_buffer_dtype);
}

/// Per-role rounding and the weight update (after params and low are known).
void parse_update_options(const toml::table& t, const std::string& w, Policy& p) {
  for (int r = 0; r < kRoleCount; ++r) {
    const std::string key = std::string(role_name(Role(r))) + "_rounding";
    if (auto v = get_str(t, w, key.c_str(), false)) p.role_rounding[size_t(r)] = parse_rounding(*v);
  }
  if (auto v = get_str(t, w, "update", false)) {
    if (*v != "plain" && *v != "kahan")
      throw InputError("'precision.update' must be \"plain\" or \"kahan\", got '" + *v + "'");
    p.update.method = *v == "kahan" ? UpdateMethod::kahan : UpdateMethod::plain;
  }
  const bool kahan = p.update.method == UpdateMethod::kahan;
  auto comp = get_str(t, w, "compensation", false);
  if (comp && !kahan) throw InputError("'precision.compensation' needs precision.update = \"kahan\"");
  if (!kahan) return;
  if (!p.param_dtype.is_low())
    throw InputError("precision.update = \"kahan\" needs low-precision weights without an fp32 "
                     "master copy (precision.params = \"low\"), but the weights are " +
                     p.param_dtype.name());
  if (!comp)
    throw InputError("precision.update = \"kahan\" needs precision.compensation = \"low\" or "
                     "\"fp32\" (the compensation buffer's dtype)");
  if (*comp != "low" && *comp != "fp32")
    throw InputError("'precision.compensation' must be \"low\" or \"fp32\", got '" + *comp + "'");
  p.update.compensation = *comp == "low" ? p.param_dtype : DType::f32();
}

/// The most per-layer block recipes a config may hold, the longest layer pattern, and the
/// most wildcards in one (scope_matches backtracks over them).
constexpr size_t kMaxBlockLayers = 1024, kMaxPatternLength = 256, kMaxPatternStars = 4;

/// The scheme names and options of a block recipe table (w: "precision.blocks." or a layer
/// entry's name) applied over `r`, then checked as a whole.
void apply_recipe_keys(const toml::table& t, const std::string& w, BlockRecipe& r) {
  const std::pair<const char*, std::string*> schemes[] = {
      {"input", &r.input}, {"weight", &r.weight}, {"grad", &r.grad}};
  for (const auto& [key, field] : schemes)
    if (auto v = get_str(t, w, key, false)) {
      try {
        parse_block_scheme(*v);
      } catch (const InputError& e) {
        throw InputError("'" + w + key + "': " + e.what());
      }
      *field = *v;
    }
  const std::pair<const char*, bool*> flags[] = {
      {"input_sr", &r.input_sr},   {"weight_sr", &r.weight_sr}, {"grad_sr", &r.grad_sr},
      {"input_rht", &r.input_rht}, {"grad_rht", &r.grad_rht},   {"pow2_scales", &r.pow2_scales}};
  for (const auto& [key, field] : flags)
    if (auto v = get_bool(t, w, key)) *field = *v;
  // The random Hadamard transform is 16-point: 1x16 nvfp4 wgrad copies only.
  const std::pair<const char*, const std::string*> rht[] = {{"input_rht", &r.input},
                                                            {"grad_rht", &r.grad}};
  for (int i = 0; i < 2; ++i) {
    const bool on = i == 0 ? r.input_rht : r.grad_rht;
    const BlockScheme s = parse_block_scheme(*rht[i].second);
    if (on && (s.family != BlockFamily::nvfp4 || s.two_d || s.block != 16))
      throw InputError("'" + w + rht[i].first + "' needs a 1x16 nvfp4 scheme, not '" +
                       *rht[i].second + "'");
  }
  // Four Over Six selects its scale by the nearest-even elements' errors: no stochastic rounding.
  const std::pair<const char*, std::pair<bool, const std::string*>> sr[] = {
      {"input_sr", {r.input_sr, &r.input}},
      {"weight_sr", {r.weight_sr, &r.weight}},
      {"grad_sr", {r.grad_sr, &r.grad}}};
  for (const auto& [key, v] : sr)
    if (v.first && parse_block_scheme(*v.second).family == BlockFamily::nvfp4_4over6)
      throw InputError("'" + w + key + "': Four Over Six ('" + *v.second + "') takes no "
                       "stochastic rounding; set it to false");
  if (r.pow2_scales)
    for (const std::string* name : {&r.input, &r.weight, &r.grad})
      if (!parse_block_scheme(*name).fp32_scales())
        throw InputError("'" + w + "pow2_scales' applies to fp8_block and fp8_rowwise schemes, "
                         "not '" + *name + "'");
}

/// A layer pattern of [[precision.blocks.layer]]: a name scope, `*` within one name.
std::string layer_pattern(const toml::table& t, const std::string& w) {
  const std::string m = *get_str(t, w, "match", true);
  if (m.empty() || m.size() > kMaxPatternLength ||
      size_t(std::count(m.begin(), m.end(), '*')) > kMaxPatternStars)
    throw InputError("'" + w + "match' must be a layer name of 1.." +
                     std::to_string(kMaxPatternLength) + " characters with at most " +
                     std::to_string(kMaxPatternStars) + " '*'");
  return m;
}

/// [precision.blocks]: the block-scaled preset's recipe, key by key, and its
/// [[precision.blocks.layer]] entries, each a layer pattern with its own recipe (the table's,
/// with the entry's keys applied) or keep = true (not quantized).
void parse_block_options(const toml::table& precision, Policy& p) {
  const toml::node* n = precision.get("blocks");
  if (!n) return;
  if (!n->is_table()) throw InputError("'precision.blocks' must be a table");
  if (!p.blocks)
    throw InputError("'precision.blocks' needs a block-scaled policy (fp8-blockwise, mxfp8, "
                     "mxfp4, nvfp4)");
  const toml::table& t = *n->as_table();
  const std::string w = "precision.blocks.";
  check_keys(t, w, {"input", "weight", "grad", "input_sr", "weight_sr", "grad_sr", "input_rht",
                    "grad_rht", "pow2_scales", "layer"});
  apply_recipe_keys(t, w, *p.blocks);
  const toml::node* layers = t.get("layer");
  if (!layers) return;
  if (!layers->is_array_of_tables())
    throw InputError("'precision.blocks.layer' must be an array of tables ([[precision.blocks.layer]])");
  const toml::array& a = *layers->as_array();
  if (a.size() > kMaxBlockLayers)
    throw InputError("'precision.blocks.layer' holds more than " +
                     std::to_string(kMaxBlockLayers) + " entries");
  for (size_t i = 0; i < a.size(); ++i) {
    const toml::table& e = *a[i].as_table();
    const std::string we = "precision.blocks.layer[" + std::to_string(i) + "].";
    check_keys(e, we, {"match", "keep", "input", "weight", "grad", "input_sr", "weight_sr",
                       "grad_sr", "input_rht", "grad_rht", "pow2_scales"});
    BlockLayer l{layer_pattern(e, we), std::nullopt};
    const bool keep = get_bool(e, we, "keep").value_or(false);
    if (keep && e.size() > 2)
      throw InputError("'" + we + "keep' = true leaves the layer unquantized: it takes no "
                       "scheme or option");
    if (!keep) {
      l.recipe = *p.blocks;
      apply_recipe_keys(e, we, *l.recipe);
    }
    p.block_layers.push_back(std::move(l));
  }
}

/// [data] text = "FILE" or ["FILE", ...] and its validation options: a byte-level language
/// model, so the model must be a causal transformer with a vocabulary of 256.
void parse_text_data(const toml::table& t, const std::string& w, const std::string& base_dir,
                     TrainConfig& c) {
  const toml::node* n = t.get("text");
  std::vector<std::string> files;
  if (n->is_string()) {
    files.push_back(std::string(*n->value<std::string_view>()));
  } else if (n->is_array()) {
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_string()) throw InputError("'data.text' must be a file name or a list of them");
      files.push_back(std::string(*e.value<std::string_view>()));
    }
  } else {
    throw InputError("'data.text' must be a file name or a list of them");
  }
  if (files.empty() || int64_t(files.size()) > kMaxTextFiles)
    throw InputError("'data.text' must name 1.." + std::to_string(kMaxTextFiles) + " files");
  for (const std::string& f : files) {
    if (f.empty()) throw InputError("'data.text' has an empty file name");
    c.text_files.push_back(resolve(base_dir, f));
  }
  if (c.model_kind != "transformer" || c.transformer.vocab != kByteVocab || !c.transformer.causal)
    throw InputError("'data.text' trains a byte-level language model: it needs model.kind = "
                     "\"transformer\", model.vocab = 256 and model.causal = true");
  if (auto v = get_num(t, w, "val_fraction", false)) {
    if (!(*v > 0 && *v < 1)) throw InputError("'data.val_fraction' must be in (0, 1)");
    c.val_fraction = *v;
  }
  if (auto v = get_int(t, w, "val_every", false))
    c.val_every = in_range(*v, 0, kMaxSteps, w + "val_every");
  if (auto v = get_int(t, w, "val_windows", false))
    c.val_windows = in_range(*v, 0, kMaxDataN, w + "val_windows");
}

/// [model]: the MLP or the transformer and their sizes, the optional init .npz.
void parse_model_section(const toml::table& root, const std::string& base_dir, TrainConfig& c) {
  const toml::table& t = *table(root, "model", true);
  const std::string w = "model.";
  c.model_kind = *get_str(t, w, "kind", true);
  if (c.model_kind == "mlp") {
    check_keys(t, w, {"kind", "layers", "activation", "bias", "init"});
    const std::vector<double> widths = get_num_array(t, w, "layers", true, true);
    if (widths.size() < 2) throw InputError("'model.layers' needs at least two widths");
    if (int64_t(widths.size()) > kMaxMlpLayers)
      throw InputError("'model.layers' may have at most " + std::to_string(kMaxMlpLayers) +
                       " widths, got " + std::to_string(widths.size()));
    for (double v : widths) {  // integers as doubles: compare before converting
      if (!(v >= 1 && v <= double(kMaxWidth)))
        throw InputError("'model.layers' widths must be in 1.." + std::to_string(kMaxWidth));
      c.mlp.layers.push_back(int(v));
    }
    if (auto a = get_str(t, w, "activation", false)) c.mlp.activation = *a;
    if (auto b = get_bool(t, w, "bias")) c.mlp.bias = *b;
    check_activation(c.mlp.activation);
  } else if (c.model_kind == "transformer") {
    check_keys(t, w, {"kind", "vocab", "d_model", "heads", "blocks", "seq_len", "mlp_ratio",
                      "activation", "causal", "tie_embeddings", "init"});
    auto& m = c.transformer;
    // Every size in 64 bits against its limit before it becomes an int; products of sizes
    // (d_model * mlp_ratio) are bounded too, so nothing downstream wraps.
    m.vocab = int(in_range(*get_int(t, w, "vocab", true), 2, kMaxWidth, w + "vocab"));
    m.seq_len = int(in_range(*get_int(t, w, "seq_len", true), 1, kMaxSeqLen, w + "seq_len"));
    m.d_model = int(in_range(*get_int(t, w, "d_model", true), 1, kMaxDModel, w + "d_model"));
    if (auto v = get_int(t, w, "heads", false))
      m.heads = int(in_range(*v, 1, m.d_model, w + "heads"));
    if (auto v = get_int(t, w, "blocks", false))
      m.blocks = int(in_range(*v, 1, kMaxBlocks, w + "blocks"));
    if (auto v = get_int(t, w, "mlp_ratio", false))
      m.mlp_ratio = int(in_range(*v, 1, kMaxWidth, w + "mlp_ratio"));
    if (auto a = get_str(t, w, "activation", false)) m.activation = *a;
    if (auto b = get_bool(t, w, "causal")) m.causal = *b;
    if (auto b = get_bool(t, w, "tie_embeddings")) m.tie_embeddings = *b;
    check_activation(m.activation);
    if (m.heads > m.d_model) throw InputError("'model.heads' must be at most 'model.d_model'");
    if (m.d_model % m.heads) throw InputError("'model.d_model' must be a multiple of 'model.heads'");
    if (int64_t(m.d_model) * m.mlp_ratio > kMaxWidth)
      throw InputError("'model.d_model' * 'model.mlp_ratio' (the MLP width) must be at most " +
                       std::to_string(kMaxWidth) + ", got " +
                       std::to_string(int64_t(m.d_model) * m.mlp_ratio));
  } else {
    throw InputError("unknown model kind '" + c.model_kind + "' (mlp transformer)");
  }
  if (auto p = get_str(t, w, "init", false)) c.init_npz = resolve(base_dir, *p);
}

/// [data]: synthetic data, an .npz or text, and the batches.
void parse_data_section(const toml::table& root, const std::string& base_dir, TrainConfig& c) {
  const toml::table& t = *table(root, "data", true);
  const std::string w = "data.";
  check_keys(t, w, {"npz", "synthetic", "text", "val_fraction", "val_every", "val_windows", "n",
                    "noise", "spread", "batch_size", "shuffle"});
  auto npz = get_str(t, w, "npz", false);
  auto syn = get_str(t, w, "synthetic", false);
  const bool text = t.get("text") != nullptr;
  if (int(bool(npz)) + int(bool(syn)) + int(text) > 1)
    throw InputError("'data.npz', 'data.synthetic' and 'data.text' exclude each other");
  if (!npz && !syn && !text)
    throw InputError("missing field 'data.npz' (or 'data.synthetic' or 'data.text') in the config");
  if (npz) c.data_npz = resolve(base_dir, *npz);
  if (text) parse_text_data(t, w, base_dir, c);
  else if (t.get("val_fraction") || t.get("val_every") || t.get("val_windows"))
    throw InputError("'data.val_fraction', 'data.val_every' and 'data.val_windows' need 'data.text'");
  if (syn) {
    c.synthetic = *syn;
    if (c.synthetic != "regression" && c.synthetic != "blobs" && c.synthetic != "copy" &&
        c.synthetic != "reverse")
      throw InputError("unknown synthetic data '" + c.synthetic +
                       "' (regression blobs copy reverse)");
  }
  if (auto v = get_int(t, w, "n", false)) c.data_n = *v;
  if (auto v = get_num(t, w, "noise", false)) c.noise = *v;
  if (auto v = get_num(t, w, "spread", false)) c.spread = *v;
  c.batch_size = *get_int(t, w, "batch_size", true);
  if (auto v = get_bool(t, w, "shuffle")) c.shuffle = *v;
  in_range(c.batch_size, 1, kMaxBatch, "data.batch_size");
  in_range(c.data_n, 1, kMaxDataN, "data.n");
  if (!std::isfinite(c.noise) || !std::isfinite(c.spread))
    throw InputError("'data.noise' and 'data.spread' must be finite");
}

/// [loss]: the loss, which the model kind constrains.
void parse_loss_section(const toml::table& root, TrainConfig& c) {
  const toml::table& t = *table(root, "loss", true);
  check_keys(t, "loss.", {"kind"});
  c.loss = *get_str(t, "loss.", "kind", true);
  if (c.loss != "mse" && c.loss != "cross_entropy")
    throw InputError("unknown loss '" + c.loss + "' (mse cross_entropy)");
  if (c.model_kind == "transformer" && c.loss != "cross_entropy")
    throw InputError("the transformer needs loss.kind = \"cross_entropy\"");
}

/// [optimizer]: the optimizer, its hyperparameters and its state dtypes.
void parse_optimizer_section(const toml::table& root, TrainConfig& c) {
  const toml::table& t = *table(root, "optimizer", true);
  const std::string w = "optimizer.";
  check_keys(t, w, {"kind", "lr", "momentum", "dampening", "nesterov", "weight_decay", "betas",
                    "eps", "state_dtype", "exp_avg_dtype", "exp_avg_sq_dtype",
                    "momentum_buffer_dtype"});
  auto& o = c.optimizer;
  o.kind = *get_str(t, w, "kind", true);
  if (o.kind != "sgd" && o.kind != "adam" && o.kind != "adamw")
    throw InputError("unknown optimizer '" + o.kind + "' (sgd adam adamw)");
  if (o.kind == "adamw") o.weight_decay = 1e-2;
  o.lr = *get_num(t, w, "lr", true);
  if (auto v = get_num(t, w, "momentum", false)) o.momentum = *v;
  if (auto v = get_num(t, w, "dampening", false)) o.dampening = *v;
  if (auto v = get_bool(t, w, "nesterov")) o.nesterov = *v;
  if (auto v = get_num(t, w, "weight_decay", false)) o.weight_decay = *v;
  if (auto v = get_num(t, w, "eps", false)) o.eps = *v;
  const auto betas = get_num_array(t, w, "betas", false, false);
  if (!betas.empty()) {
    if (betas.size() != 2) throw InputError("'optimizer.betas' needs two numbers");
    o.beta1 = betas[0];
    o.beta2 = betas[1];
  }
  if (o.kind != "sgd" && (t.get("momentum") || t.get("dampening") || t.get("nesterov")))
    throw InputError("momentum/dampening/nesterov are SGD options");
  if (o.kind == "sgd" && (t.get("betas") || t.get("eps")))
    throw InputError("betas/eps are Adam options");
  parse_state_dtypes(t, w, o);
  std::vector<Param> none;
  Optimizer probe(o, none);  // validates the values
}

/// [precision]: the policy (a preset or custom) and everything that refines it.
void parse_precision_section(const toml::table& root, TrainConfig& c) {
  const toml::table& t = *table(root, "precision", true);
  const std::string w = "precision.";
  check_keys(t, w, {"policy", "low", "params", "accumulation", "rounding", "ops",
                    "amax_history_len", "margin", "fp8_forward", "fp8_backward", "scaling",
                    "amax_compute_algo", "forward_rounding", "backward_rounding",
                    "update_rounding", "update", "compensation", "sr_random_bits",
                    "sr_pack_random_bits", "blocks"});
  const std::string name = *get_str(t, w, "policy", true);
  Precision& pr = c.precision;
  if (name == "custom") {
    pr.policy = Policy{};
    pr.policy.name = "custom";
    if (!t.get("low")) throw InputError("missing field 'precision.low' (needed by a custom policy)");
  } else {
    pr = preset_precision(name);
  }
  Policy& p = pr.policy;
  if (auto low = get_str(t, w, "low", false)) {
    const DType d = parse_dtype(*low);
    check_value_dtype(d, "precision.low");
    if (p.fp8) {
      throw InputError("'precision.low' does not apply to fp8-hybrid (use fp8_forward/fp8_backward)");
    }
    if (p.blocks)
      throw InputError("'precision.low' does not apply to the block-scaled policy " + name);
    const bool pure = p.param_dtype.is_low();
    p.low = d;
    if (pure) p.param_dtype = p.input_dtype = d;
  }
  if (auto pd = get_str(t, w, "params", false)) {
    if (*pd == "low") {
      p.param_dtype = p.input_dtype = p.low;
    } else {
      p.param_dtype = parse_dtype(*pd);
      if (p.param_dtype.is_f64()) throw InputError("'precision.params' cannot be fp64");
      check_value_dtype(p.param_dtype, "precision.params");
    }
  }
  if (auto a = get_str(t, w, "accumulation", false)) pr.accumulation = &accumulator_by_name(*a);
  if (auto r = get_str(t, w, "rounding", false)) pr.rounding = parse_rounding(*r);
  if (auto b = get_int(t, w, "sr_random_bits", false)) {
    if (*b < 1 || *b > 32) throw InputError("'precision.sr_random_bits' must be in 1..32");
    pr.sr_random_bits = int(*b);
  }
  if (auto pk = get_bool(t, w, "sr_pack_random_bits")) pr.sr_pack_random_bits = *pk;
  if (const toml::node* ops = t.get("ops")) {
    if (!ops->is_table()) throw InputError("'precision.ops' must be a table");
    for (auto&& [k, v] : *ops->as_table()) {
      const OpKind op = parse_op(k.str());
      if (!v.is_string())
        throw InputError("'precision.ops." + std::string(k.str()) + "' must be a string");
      p.set(op, parse_rule(*v.value<std::string_view>()));
      if (p.blocks && op != OpKind::linear && p.rule(op) == CastRule::lower)
        throw InputError("'precision.ops." + std::string(k.str()) + "': the block-scaled policy " +
                         name + " lowers linear layers only");
    }
  }
  parse_fp8_options(t, w, p);
  parse_update_options(t, w, p);
  parse_block_options(t, p);
}

/// [scaler]: none, static or dynamic loss scaling (optional section).
void parse_scaler_section(const toml::table& root, TrainConfig& c) {
  if (const toml::table* tp = table(root, "scaler", false)) {
    const toml::table& t = *tp;
    const std::string w = "scaler.";
    const std::string kind = *get_str(t, w, "kind", true);
    auto& s = c.scaler;
    if (kind == "none") {
      check_keys(t, w, {"kind"});
      s.kind = ScalerConfig::Kind::none;
    } else if (kind == "static") {
      check_keys(t, w, {"kind", "scale", "mistake"});
      s.kind = ScalerConfig::Kind::static_scale;
      s.scale = *get_num(t, w, "scale", true);
    } else if (kind == "dynamic") {
      check_keys(t, w, {"kind", "init_scale", "growth_factor", "backoff_factor",
                        "growth_interval", "mistake"});
      s.kind = ScalerConfig::Kind::dynamic;
      if (auto v = get_num(t, w, "init_scale", false)) s.init_scale = *v;
      if (auto v = get_num(t, w, "growth_factor", false)) s.growth_factor = *v;
      if (auto v = get_num(t, w, "backoff_factor", false)) s.backoff_factor = *v;
      if (auto v = get_int(t, w, "growth_interval", false)) s.growth_interval = *v;
    } else {
      throw InputError("unknown scaler kind '" + kind + "' (none static dynamic)");
    }
    if (auto m = get_bool(t, w, "mistake")) s.mistake = *m;
    validate(s);
  }
}

/// [run]: steps, seed, the reference run.
void parse_run_section(const toml::table& root, TrainConfig& c) {
  const toml::table& t = *table(root, "run", true);
  check_keys(t, "run.", {"steps", "seed", "reference"});
  if (auto r = get_str(t, "run.", "reference", false)) {
    if (*r != "fp32")
      throw InputError("'run.reference' must be \"fp32\" (the only reference run), got '" + *r +
                       "'");
    c.reference = *r;
  }
  c.steps = *get_int(t, "run.", "steps", true);
  if (c.steps < 1) throw InputError("'run.steps' must be >= 1");
  in_range(c.steps, 1, kMaxSteps, "run.steps");
  if (auto s = get_int(t, "run.", "seed", false)) {
    if (*s < 0) throw InputError("'run.seed' must be >= 0");
    c.seed = uint64_t(*s);
  }
}

/// [trace]: the tracer's options (optional section).
void parse_trace_section(const toml::table& root, TrainConfig& c) {
  if (const toml::table* tp = table(root, "trace", false)) {
    const std::string w = "trace.";
    if (tp->contains("underflow_tolerance"))
      throw InputError("'trace.underflow_tolerance' is now 'trace.flush_tolerance' (the fraction of "
                       "values flushed to zero; same meaning)");
    check_keys(*tp, w, {"enabled", "every", "flush_tolerance", "k_min", "k_max"});
    if (auto v = get_bool(*tp, w, "enabled")) c.trace = *v;
    if (auto v = get_int(*tp, w, "every", false)) c.trace_every = *v;
    if (auto v = get_num(*tp, w, "flush_tolerance", false)) c.tracer.flush_tolerance = *v;
    if (auto v = get_int(*tp, w, "k_min", false)) c.tracer.k_min = to_int(*v, w + "k_min");
    if (auto v = get_int(*tp, w, "k_max", false)) c.tracer.k_max = to_int(*v, w + "k_max");
    if (c.trace_every < 1) throw InputError("'trace.every' must be >= 1");
    if (c.tracer.k_min > c.tracer.k_max || c.tracer.k_min < -200 || c.tracer.k_max > 200)
      throw InputError("'trace.k_min'..'trace.k_max' must be an increasing range within ±200");
    if (!(c.tracer.flush_tolerance >= 0 && c.tracer.flush_tolerance <= 1))
      throw InputError("'trace.flush_tolerance' must be in [0, 1]");
  }
}

/// [output]: extra files of a run (optional section).
void parse_output_section(const toml::table& root, TrainConfig& c) {
  if (const toml::table* tp = table(root, "output", false)) {
    check_keys(*tp, "output.", {"weights", "grads"});
    if (auto v = get_bool(*tp, "output.", "weights")) c.save_weights = *v;
    if (auto v = get_bool(*tp, "output.", "grads")) c.save_grads = *v;
  }
}

}  // namespace

namespace {

/// A config's text as TOML, its tables checked; a one-line InputError naming the source.
toml::table parse_root(const std::string& text, const std::string& source_name) {
  if (text.size() > kMaxTextFileBytes)
    throw InputError(source_name + ": a config may hold at most " +
                     std::to_string(kMaxTextFileBytes) + " bytes, this one has " +
                     std::to_string(text.size()));
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    std::string d(e.description());
    for (char& c : d)
      if (c == '\n') c = ' ';
    throw InputError(source_name + ":" + std::to_string(e.source().begin.line) + ": " + d);
  }
  check_keys(root, "", {"model", "data", "loss", "optimizer", "precision", "scaler", "run",
                        "trace", "output"});
  return root;
}

}  // namespace

TrainConfig parse_config(const std::string& text, const std::string& base_dir,
                         const std::string& source_name) {
  const toml::table root = parse_root(text, source_name);
  TrainConfig c;
  c.base_dir = base_dir;
  c.source_name = source_name;
  {
    std::ostringstream js;
    js << toml::json_formatter{root};
    c.config_json = js.str();
  }
  parse_model_section(root, base_dir, c);
  parse_data_section(root, base_dir, c);
  parse_loss_section(root, c);
  parse_optimizer_section(root, c);
  parse_precision_section(root, c);
  parse_scaler_section(root, c);
  parse_run_section(root, c);
  parse_trace_section(root, c);
  parse_output_section(root, c);
  return c;
}

Precision parse_precision_file(const std::string& path) {
  const std::string text = read_text_file(path, kMaxTextFileBytes);
  TrainConfig c;
  parse_precision_section(parse_root(text, std::filesystem::path(path).filename().string()), c);
  return c.precision;
}

TrainConfig parse_config_file(const std::string& path) {
  // A regular file of at most 1 MiB: never a device (/dev/zero) or a FIFO.
  const std::string text = read_text_file(path, kMaxTextFileBytes);
  const std::filesystem::path p(path);
  std::string base = p.parent_path().string();
  if (base.empty()) base = ".";
  return parse_config(text, base, p.filename().string());
}

}  // namespace halfway::sim
