// Every op's backward against central finite differences in fp64: the loss is Σ w ⊙ op(x)
// with fixed random weights w, so every output element's gradient path is exercised.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "halfway/bulk.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/context.hpp"
#include "halfway/sim/ops.hpp"
#include "halfway/softfloat.hpp"

using namespace halfway::sim;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor leaf(const Shape& s, std::mt19937_64& g, double lo = -2, double hi = 2) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(size_t(numel(s)));
  for (double& x : v) x = u(g);
  return Tensor::from(s, v, DType::f64(), true);
}

double loss_value(const Fn& f, const std::vector<Tensor>& in, const std::vector<double>& w) {
  const Tensor y = f(in);
  double s = 0;
  for (size_t i = 0; i < w.size(); ++i) s += w[i] * y.data()[i];
  return s;
}

/// Analytic gradients of Σ w ⊙ f(inputs) against central differences; returns the largest
/// relative error seen.
double check(const Fn& f, std::vector<Tensor> inputs, uint64_t seed = 1) {
  std::mt19937_64 g(seed);
  const Tensor y0 = f(inputs);
  std::vector<double> w(size_t(y0.numel()));
  std::uniform_real_distribution<double> u(-1, 1);
  for (double& x : w) x = u(g);
  const Tensor W = Tensor::from(y0.shape(), w, DType::f64());
  const Tensor L = sum(mul(f(inputs), W));
  L.backward();
  double worst = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    REQUIRE(inputs[i].grad().size() == inputs[i].data().size());
    for (size_t j = 0; j < inputs[i].data().size(); ++j) {
      std::vector<Tensor> plus, minus;
      const double x = inputs[i].data()[j];
      const double h = 1e-6 * std::max(1.0, std::fabs(x));
      for (size_t k = 0; k < inputs.size(); ++k) {
        std::vector<double> vp = inputs[k].data().to_vector(), vm = vp;
        if (k == i) {
          vp[j] = x + h;
          vm[j] = x - h;
        }
        plus.push_back(Tensor::from(inputs[k].shape(), vp, DType::f64()));
        minus.push_back(Tensor::from(inputs[k].shape(), vm, DType::f64()));
      }
      const double num = (loss_value(f, plus, w) - loss_value(f, minus, w)) / (2 * h);
      const double ana = inputs[i].grad()[j];
      const double err = std::fabs(num - ana) / std::max({1.0, std::fabs(num), std::fabs(ana)});
      worst = std::max(worst, err);
    }
  }
  return worst;
}

constexpr double kTol = 1e-6;

}  // namespace

TEST_CASE("elementwise ops with broadcasting", "[sim][autograd]") {
  std::mt19937_64 g(7);
  const Shape a{2, 3, 4}, b{3, 1}, c{4};
  CHECK(check([](const auto& v) { return add(v[0], v[1]); }, {leaf(a, g), leaf(b, g)}) < kTol);
  CHECK(check([](const auto& v) { return sub(v[0], v[1]); }, {leaf(a, g), leaf(c, g)}) < kTol);
  CHECK(check([](const auto& v) { return mul(v[0], v[1]); }, {leaf(b, g), leaf(a, g)}) < kTol);
  CHECK(check([](const auto& v) { return div(v[0], v[1]); },
              {leaf(a, g), leaf(c, g, 0.5, 2.0)}) < kTol);
  CHECK(check([](const auto& v) { return mul_scalar(v[0], -0.37); }, {leaf(a, g)}) < kTol);
}

TEST_CASE("activations and pointwise functions", "[sim][autograd]") {
  std::mt19937_64 g(8);
  const Shape s{3, 5};
  // relu away from its kink at 0
  std::vector<double> away = leaf(s, g).data().to_vector();
  for (double& v : away) v = v >= 0 ? v + 0.1 : v - 0.1;
  const Tensor x = Tensor::from(s, away, DType::f64(), true);
  CHECK(check([](const auto& v) { return relu(v[0]); }, {x}) < kTol);
  CHECK(check([](const auto& v) { return gelu(v[0]); }, {leaf(s, g)}) < kTol);
  CHECK(check([](const auto& v) { return gelu(v[0], GeluApprox::tanh); }, {leaf(s, g)}) < kTol);
  CHECK(check([](const auto& v) { return tanh(v[0]); }, {leaf(s, g)}) < kTol);
  CHECK(check([](const auto& v) { return sigmoid(v[0]); }, {leaf(s, g)}) < kTol);
  CHECK(check([](const auto& v) { return exp(v[0]); }, {leaf(s, g)}) < kTol);
  CHECK(check([](const auto& v) { return log(v[0]); }, {leaf(s, g, 0.3, 3.0)}) < kTol);
}

TEST_CASE("matmul and linear", "[sim][autograd]") {
  std::mt19937_64 g(9);
  CHECK(check([](const auto& v) { return matmul(v[0], v[1]); }, {leaf({3, 4}, g), leaf({4, 5}, g)}) <
        kTol);
  CHECK(check([](const auto& v) { return matmul(v[0], v[1]); },
              {leaf({2, 3, 4}, g), leaf({2, 4, 2}, g)}) < kTol);
  CHECK(check([](const auto& v) { return matmul(v[0], v[1]); },
              {leaf({2, 3, 4}, g), leaf({4, 2}, g)}) < kTol);
  CHECK(check([](const auto& v) { return linear(v[0], v[1], v[2]); },
              {leaf({2, 3, 4}, g), leaf({5, 4}, g), leaf({5}, g)}) < kTol);
  CHECK(check([](const auto& v) { return linear(v[0], v[1], Tensor()); },
              {leaf({6, 4}, g), leaf({3, 4}, g)}) < kTol);
}

TEST_CASE("softmax family, losses and layer norm", "[sim][autograd]") {
  std::mt19937_64 g(10);
  CHECK(check([](const auto& v) { return softmax(v[0]); }, {leaf({3, 6}, g)}) < kTol);
  CHECK(check([](const auto& v) { return log_softmax(v[0]); }, {leaf({2, 2, 5}, g)}) < kTol);
  const std::vector<int32_t> t{2, 0, 4, 4};
  CHECK(check([t](const auto& v) { return cross_entropy(v[0], t); }, {leaf({4, 5}, g)}) < kTol);
  CHECK(check([](const auto& v) { return mse(v[0], v[1]); }, {leaf({3, 4}, g), leaf({3, 4}, g)}) <
        kTol);
  CHECK(check([](const auto& v) { return layer_norm(v[0], v[1], v[2]); },
              {leaf({3, 6}, g), leaf({6}, g), leaf({6}, g)}) < kTol);
  CHECK(check([](const auto& v) { return layer_norm(v[0], Tensor(), Tensor(), 1e-3); },
              {leaf({2, 2, 5}, g)}) < kTol);
}

TEST_CASE("reductions and data movement", "[sim][autograd]") {
  std::mt19937_64 g(11);
  CHECK(check([](const auto& v) { return sum(v[0]); }, {leaf({3, 4}, g)}) < kTol);
  CHECK(check([](const auto& v) { return sum(v[0], 1); }, {leaf({2, 3, 4}, g)}) < kTol);
  CHECK(check([](const auto& v) { return mean(v[0]); }, {leaf({3, 4}, g)}) < kTol);
  CHECK(check([](const auto& v) { return mean(v[0], -1); }, {leaf({2, 3, 4}, g)}) < kTol);
  CHECK(check([](const auto& v) { return reshape(v[0], {4, -1}); }, {leaf({2, 3, 4}, g)}) < kTol);
  CHECK(check([](const auto& v) { return transpose(v[0], 0, 2); }, {leaf({2, 3, 4}, g)}) < kTol);
  const std::vector<int32_t> ids{1, 3, 1, 0, 3, 3};  // repeated ids accumulate
  CHECK(check([ids](const auto& v) { return embedding(ids, {2, 3}, v[0]); }, {leaf({4, 5}, g)}) <
        kTol);
  CHECK(check([](const auto& v) { return softmax(masked_fill_causal(v[0])); },
              {leaf({2, 4, 4}, g)}) < kTol);
}

TEST_CASE("scaled dot-product attention", "[sim][autograd]") {
  std::mt19937_64 g(12);
  for (bool causal : {false, true}) {
    CHECK(check([causal](const auto& v) { return scaled_dot_product_attention(v[0], v[1], v[2], causal); },
                {leaf({2, 3, 4}, g), leaf({2, 3, 4}, g), leaf({2, 3, 4}, g)}) < kTol);
  }
}

TEST_CASE("a tensor used twice accumulates both gradients", "[sim][autograd]") {
  Tensor x = Tensor::from({3}, {1.5, -2.0, 0.25}, DType::f64(), true);
  sum(add(mul(x, x), x)).backward();  // d/dx (x² + x) = 2x + 1
  CHECK(x.grad().to_vector() == std::vector<double>{4.0, -3.0, 1.5});
}

TEST_CASE("the finite-difference check catches a wrong backward", "[sim][autograd]") {
  // A deliberately wrong "gradient": detaching one factor halves d(x²)/dx; the harness must
  // see it, or it could not fail.
  std::mt19937_64 g(13);
  auto wrong = [](const std::vector<Tensor>& v) {
    const Tensor c = Tensor::from(v[0].shape(), v[0].data().to_vector(), DType::f64(), false);
    return mul(v[0], c);
  };
  CHECK(check(wrong, {leaf({4}, g)}) > 0.1);
}

namespace {

/// Bits of v's values, each rounded into `fmt` where `low` (as a low-precision tensor holds
/// them), else as stored.
std::vector<uint32_t> stored_bits(const Values& v, const halfway::Format& fmt, bool low) {
  std::vector<float> f(v.f32(), v.f32() + v.size());
  if (low) halfway::quantize_f32(fmt, f.data(), f.data(), f.size());
  std::vector<uint32_t> b(f.size());
  std::memcpy(b.data(), f.data(), f.size() * sizeof(float));
  return b;
}

}  // namespace

TEST_CASE("transcendentals of a dtype of at most 16 bits: looked up by encoding, bit-identical",
          "[sim][autograd]") {
  // ops.cpp looks GELU, its derivative, tanh, sigmoid, exp and log up by the input's encoding
  // (tabulated.hpp). Every encoding of each format (NaNs and infinities included) against the
  // same values as an fp32 tensor, which computes every element, then rounded as the
  // low-precision tensor rounds them: the outputs, and the gradients of the ops whose gradient
  // is a function of the input alone (tanh, sigmoid and exp take theirs from the output, which
  // the low-precision tensor holds rounded).
  using halfway::Format;
  namespace fmts = halfway::formats;
  struct Op {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    bool grad_of_input;
  };
  const std::vector<Op> ops{{"gelu", [](const Tensor& t) { return gelu(t); }, true},
                            {"gelu tanh", [](const Tensor& t) { return gelu(t, GeluApprox::tanh); },
                             true},
                            {"tanh", [](const Tensor& t) { return tanh(t); }, false},
                            {"sigmoid", [](const Tensor& t) { return sigmoid(t); }, false},
                            {"exp", [](const Tensor& t) { return exp(t); }, false},
                            {"log", [](const Tensor& t) { return log(t); }, true}};
  for (const Format& fmt : {fmts::fp16, fmts::bf16, fmts::e4m3, fmts::e5m2, fmts::e2m1}) {
    const size_t count = size_t(1) << fmt.nbits();
    std::vector<double> x(count), w(count);
    for (size_t k = 0; k < count; ++k) {
      halfway::Env env;
      x[k] = halfway::to_f64(fmt, uint32_t(k), env);
      w[k] = k % 3 == 0 ? 1.0 : k % 3 == 1 ? -0.5 : 2.0;
    }
    for (const Op& op : ops) {
      const auto run = [&](DType dt) {
        const Tensor xt = Tensor::from({int64_t(count)}, x, dt, true);
        const Tensor y = op.f(xt);
        sum(mul(y, Tensor::from({int64_t(count)}, w, dt))).backward();
        return std::pair{y.data(), xt.grad()};
      };
      const auto [y_low, g_low] = run(DType::low(fmt));
      const auto [y_32, g_32] = run(DType::f32());
      INFO(halfway::format_name(fmt) << " " << op.name);
      CHECK(stored_bits(y_low, fmt, false) == stored_bits(y_32, fmt, true));
      if (op.grad_of_input) CHECK(stored_bits(g_low, fmt, false) == stored_bits(g_32, fmt, true));
    }
  }
}

TEST_CASE("row ops split over threads give the same bits at any thread count", "[sim][autograd]") {
  // 1024 rows of 64: layer_norm's rows (forward, input gradient) and its weight and bias
  // gradients' columns, softmax's rows, GELU's elements, elementwise mul and add (x used three
  // times: its gradients accumulate) all run in several parts.
  const int64_t R = 1024, D = 64;
  std::mt19937 g(21);
  std::normal_distribution<double> nd(0.0, 2.0);
  std::vector<double> xs(static_cast<size_t>(R * D)), ws(static_cast<size_t>(D)),
      bs(static_cast<size_t>(D)), gs(static_cast<size_t>(R * D));
  for (auto* v : {&xs, &ws, &bs, &gs})
    for (double& e : *v) e = double(float(nd(g)));
  const auto run = [&](int threads) {
    Runtime rt;
    rt.threads = threads;
    ContextGuard guard(nullptr, &rt);
    const Tensor x = Tensor::from({R, D}, xs, DType::f32(), true);
    const Tensor w = Tensor::from({D}, ws, DType::f32(), true);
    const Tensor b = Tensor::from({D}, bs, DType::f32(), true);
    const Tensor y = add(mul(gelu(softmax(layer_norm(x, w, b))), x), x);
    sum(mul(y, Tensor::from({R, D}, gs, DType::f32()))).backward();
    std::vector<double> out = y.data().to_vector();
    for (const Tensor* t : {&x, &w, &b}) {
      const std::vector<double> gv = t->grad().to_vector();
      out.insert(out.end(), gv.begin(), gv.end());
    }
    return out;
  };
  const std::vector<double> one = run(1);
  CHECK(run(2) == one);
  CHECK(run(3) == one);
}

TEST_CASE("transpose in parts over threads moves every element to its place", "[sim][autograd]") {
  // [2, 40, 3, 50, 7] with dims 1 and 3 swapped: 12000 blocks of 7 values, in several parts on
  // 2 and 3 threads; the gradient goes back through the same swap.
  const Shape s{2, 40, 3, 50, 7};
  const size_t n = 2 * 40 * 3 * 50 * 7;
  std::vector<double> xs(n), gs(n);
  for (size_t i = 0; i < n; ++i) xs[i] = double(i), gs[i] = double(i) + 0.5;
  const auto at = [&](int64_t o, int64_t i0, int64_t m, int64_t i1, int64_t k, int64_t n0,
                      int64_t n1) { return size_t((((o * n0 + i0) * 3 + m) * n1 + i1) * 7 + k); };
  for (int threads : {1, 2, 3}) {
    INFO(threads << " threads");
    Runtime rt;
    rt.threads = threads;
    ContextGuard guard(nullptr, &rt);
    const Tensor x = Tensor::from(s, xs, DType::f32(), true);
    const Tensor y = transpose(x, 1, 3);
    REQUIRE(y.shape() == Shape{2, 50, 3, 40, 7});
    sum(mul(y, Tensor::from(y.shape(), gs, DType::f32()))).backward();
    const std::vector<double> yv = y.data().to_vector(), xg = x.grad().to_vector();
    size_t wrong = 0, wrong_grad = 0;
    for (int64_t o = 0; o < 2; ++o)
      for (int64_t i0 = 0; i0 < 40; ++i0)
        for (int64_t m = 0; m < 3; ++m)
          for (int64_t i1 = 0; i1 < 50; ++i1)
            for (int64_t k = 0; k < 7; ++k) {
              const size_t src = at(o, i0, m, i1, k, 40, 50), dst = at(o, i1, m, i0, k, 50, 40);
              wrong += yv[dst] != xs[src];
              wrong_grad += xg[src] != gs[dst];
            }
    CHECK(wrong == 0);
    CHECK(wrong_grad == 0);
  }
}

TEST_CASE("bias_grad in parts over threads: each column summed over the rows in order",
          "[sim][autograd]") {
  // 3000 × 37 values of mixed magnitudes (so a changed order changes the binary64 sums), in
  // binary32 and binary64 storage, on 1, 2 and 3 threads, against the sums written out here.
  const int64_t rows = 3000, n = 37;
  std::mt19937 g(5);
  std::normal_distribution<double> nd;
  std::vector<double> v(size_t(rows * n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(float(std::ldexp(nd(g), int(i % 41) - 20)));
  std::vector<double> want(size_t(n), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) want[size_t(j)] += v[size_t(i * n + j)];
  for (bool wide : {false, true})
    for (int threads : {1, 2, 3}) {
      INFO((wide ? "binary64" : "binary32") << " storage, " << threads << " threads");
      const std::vector<double> got = bias_grad(Values(v, wide), rows, n, threads);
      REQUIRE(got.size() == want.size());
      CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(double)) == 0);
    }
}
