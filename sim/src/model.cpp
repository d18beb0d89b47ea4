#include "halfway/sim/model.hpp"

#include <cmath>
#include <set>

#include "halfway/names.hpp"
#include "halfway/sim/context.hpp"
#include "halfway/sim/data.hpp"

namespace halfway::sim {

void Model::add_param(const std::string& name, Shape shape, std::vector<double> values) {
  Tensor t = Tensor::from(std::move(shape), std::move(values), DType::f32(), true);
  t.impl()->is_param = true;
  t.impl()->weight = true;
  t.impl()->name = name;
  params_.push_back({name, t});
}

void Model::load(const NpzFile& f, const std::string& what) {
  std::set<std::string> used;
  for (Param& prm : params_) {
    auto it = f.find(prm.name);
    if (it == f.end()) throw InputError(what + ": array '" + prm.name + "' is missing");
    const NpyArray& a = it->second;
    if (a.shape != prm.t.shape())
      throw InputError(what + ": array '" + prm.name + "' has shape " + shape_str(a.shape) +
                       ", the model needs " + shape_str(prm.t.shape()));
    check_finite_fp32(a.values, what + ": array '" + prm.name + "'");
    prm.t.impl()->data = rounded(default_runtime(), prm.t.dtype(), a.values, nullptr);
    used.insert(prm.name);
  }
  for (const auto& [name, arr] : f)
    if (!used.count(name))
      throw InputError(what + ": unknown array '" + name + "' (not a parameter of this " +
                       kind() + ")");
}

void Model::set_param_dtype(const DType& dt) {
  for (Param& prm : params_) {
    prm.t.impl()->dtype = dt;
    round_into(default_runtime(), dt, prm.t.impl()->data, nullptr);
  }
}

void check_activation(const std::string& a) {
  if (a != "relu" && a != "gelu" && a != "gelu_tanh" && a != "tanh" && a != "sigmoid")
    throw InputError("unknown activation '" + a + "' (relu gelu gelu_tanh tanh sigmoid)");
}

namespace {

Tensor activate(const std::string& a, const Tensor& x) {
  if (a == "relu") return relu(x);
  if (a == "gelu") return gelu(x, GeluApprox::none);
  if (a == "gelu_tanh") return gelu(x, GeluApprox::tanh);
  if (a == "tanh") return tanh(x);
  return sigmoid(x);
}

std::vector<double> uniform_values(Rng& rng, int64_t n, double bound) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = rng.uniform(-bound, bound);
  return v;
}

class Mlp final : public Model {
 public:
  Mlp(const MlpConfig& c, Rng& rng) : c_(c) {
    if (c.layers.size() < 2) throw InputError("model.layers needs at least two widths");
    if (int64_t(c.layers.size()) > kMaxMlpLayers)
      throw InputError("model.layers has more than " + std::to_string(kMaxMlpLayers) + " widths");
    for (int w : c.layers)
      if (w < 1 || w > kMaxWidth)
        throw InputError("model.layers widths must be in 1.." + std::to_string(kMaxWidth));
    check_activation(c.activation);
    for (size_t i = 0; i + 1 < c.layers.size(); ++i) {
      const int fin = c.layers[i], fout = c.layers[i + 1];
      const double bound = 1.0 / std::sqrt(double(fin));
      const std::string base = std::to_string(2 * i);
      add_param(base + ".weight", {fout, fin}, uniform_values(rng, int64_t(fout) * fin, bound));
      if (c.bias) add_param(base + ".bias", {fout}, uniform_values(rng, fout, bound));
    }
  }
  std::string kind() const override { return "mlp"; }
  Tensor forward(const Batch& b) override {
    Tensor h = b.x;
    size_t pi = 0;
    const size_t nl = c_.layers.size() - 1;
    for (size_t i = 0; i < nl; ++i) {
      {
        Scope s(std::to_string(2 * i));
        const Tensor& w = p(pi++);
        Tensor bias;
        if (c_.bias) bias = p(pi++);
        h = linear(h, w, bias);
      }
      if (i + 1 < nl) {
        Scope s(std::to_string(2 * i + 1));
        h = activate(c_.activation, h);
      }
    }
    return h;
  }

 private:
  MlpConfig c_;
};

class Transformer final : public Model {
 public:
  Transformer(const TransformerConfig& c, Rng& rng) : c_(c) {
    if (c.vocab < 2 || c.d_model < 1 || c.heads < 1 || c.blocks < 1 || c.seq_len < 1 ||
        c.mlp_ratio < 1)
      throw InputError("transformer sizes must be positive (vocab >= 2)");
    if (c.vocab > kMaxWidth || c.d_model > kMaxDModel || c.seq_len > kMaxSeqLen ||
        c.blocks > kMaxBlocks)
      throw InputError("transformer sizes over the limits (vocab, d_model, seq_len, blocks: " +
                       std::to_string(kMaxWidth) + ", " + std::to_string(kMaxDModel) + ", " +
                       std::to_string(kMaxSeqLen) + ", " + std::to_string(kMaxBlocks) + ")");
    if (c.d_model % c.heads)
      throw InputError("model.d_model must be a multiple of model.heads");
    check_activation(c.activation);
    // d_model * mlp_ratio in 64 bits: an int product of two valid-looking sizes can wrap.
    const int64_t hidden = int64_t(c.d_model) * c.mlp_ratio;
    if (hidden > kMaxWidth)
      throw InputError("model.d_model * model.mlp_ratio = " + std::to_string(hidden) +
                       " is more than " + std::to_string(kMaxWidth));
    const int d = c.d_model, h = int(hidden);
    auto normal = [&](int64_t n) {
      std::vector<double> v(static_cast<size_t>(n));
      for (double& x : v) x = rng.normal();
      return v;
    };
    auto lin = [&](const std::string& n, int fin, int fout) {
      const double bound = 1.0 / std::sqrt(double(fin));
      add_param(n + ".weight", {fout, fin}, uniform_values(rng, int64_t(fout) * fin, bound));
      add_param(n + ".bias", {fout}, uniform_values(rng, fout, bound));
    };
    auto ln = [&](const std::string& n) {
      add_param(n + ".weight", {d}, std::vector<double>(size_t(d), 1.0));
      add_param(n + ".bias", {d}, std::vector<double>(size_t(d), 0.0));
    };
    add_param("tok_emb.weight", {c.vocab, d}, normal(int64_t(c.vocab) * d));
    add_param("pos_emb.weight", {c.seq_len, d}, normal(int64_t(c.seq_len) * d));
    for (int b = 0; b < c.blocks; ++b) {
      const std::string p = "blocks." + std::to_string(b);
      ln(p + ".ln1");
      lin(p + ".attn.q", d, d);
      lin(p + ".attn.k", d, d);
      lin(p + ".attn.v", d, d);
      lin(p + ".attn.proj", d, d);
      ln(p + ".ln2");
      lin(p + ".mlp.fc1", d, h);
      lin(p + ".mlp.fc2", h, d);
    }
    ln("ln_f");
    if (!c.tie_embeddings) lin("head", d, c.vocab);
  }
  std::string kind() const override { return "transformer"; }

  Tensor forward(const Batch& bt) override {
    const int64_t B = bt.ids_shape.at(0), T = bt.ids_shape.at(1);
    if (T > c_.seq_len)
      throw InputError("sequence length " + std::to_string(T) + " exceeds model.seq_len " +
                       std::to_string(c_.seq_len));
    const int d = c_.d_model, H = c_.heads, dh = d / H;
    size_t pi = 0;
    auto next = [&]() -> const Tensor& { return p(pi++); };
    Tensor x;
    {
      Scope s("tok_emb");
      x = embedding(bt.ids, bt.ids_shape, next());
    }
    Tensor pos;
    {
      Scope s("pos_emb");
      std::vector<int32_t> pid(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) pid[size_t(t)] = int32_t(t);
      pos = embedding(pid, {T}, next());
    }
    {
      Scope s("embed");
      x = add(x, pos);
    }
    auto lin = [&](const std::string& n, const Tensor& in) {
      Scope s(n);
      const Tensor& w = next();
      const Tensor& b = next();
      return linear(in, w, b);
    };
    auto ln = [&](const std::string& n, const Tensor& in) {
      Scope s(n);
      const Tensor& w = next();
      const Tensor& b = next();
      return layer_norm(in, w, b);
    };
    auto heads = [&](const Tensor& t) {  // [B, T, d] -> [B, H, T, dh]
      return transpose(reshape(t, {B, T, H, dh}), 1, 2);
    };
    for (int blk = 0; blk < c_.blocks; ++blk) {
      const std::string p = "blocks." + std::to_string(blk);
      Tensor a = ln(p + ".ln1", x);
      Tensor q = lin(p + ".attn.q", a), k = lin(p + ".attn.k", a), v = lin(p + ".attn.v", a);
      Tensor att;
      {
        Scope s(p + ".attn");
        att = scaled_dot_product_attention(heads(q), heads(k), heads(v), c_.causal);
        att = reshape(transpose(att, 1, 2), {B, T, d});
      }
      att = lin(p + ".attn.proj", att);
      {
        Scope s(p + ".res1");
        x = add(x, att);
      }
      Tensor m = ln(p + ".ln2", x);
      m = lin(p + ".mlp.fc1", m);
      {
        Scope s(p + ".mlp.act");
        m = activate(c_.activation, m);
      }
      m = lin(p + ".mlp.fc2", m);
      {
        Scope s(p + ".res2");
        x = add(x, m);
      }
    }
    x = ln("ln_f", x);
    if (c_.tie_embeddings) {
      Scope s("head");
      x = linear(x, p(0), Tensor());  // tok_emb.weight [vocab, d_model], no bias
    } else {
      x = lin("head", x);
    }
    return reshape(x, {B * T, c_.vocab});
  }

 private:
  TransformerConfig c_;
};

}  // namespace

std::unique_ptr<Model> make_mlp(const MlpConfig& c, Rng& rng) {
  return std::make_unique<Mlp>(c, rng);
}

std::unique_ptr<Model> make_transformer(const TransformerConfig& c, Rng& rng) {
  return std::make_unique<Transformer>(c, rng);
}

}  // namespace halfway::sim
