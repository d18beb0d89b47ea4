// Optimizers: PyTorch's update rules on values where the fp32 arithmetic is exact (so the
// expected values are worked out by hand), Adam against the closed form of its first steps,
// and vanishing updates of low-precision weights.
#include <catch2/catch.hpp>

#include <cmath>

#include "halfway/sim/optim.hpp"
#include "halfway/sim/tracer.hpp"

using namespace halfway;
using namespace halfway::sim;

namespace {

std::vector<Param> one_param(double v, DType dt = DType::f32()) {
  Tensor t = Tensor::from({1}, {v}, dt, true);
  t.impl()->is_param = t.impl()->weight = true;
  t.impl()->name = "p";
  return {{"p", t}};
}

// SGD at lr 0.25 on one fp32 parameter at 1, stepped with the gradient 0.5: its value after
// each of `steps` steps.
std::vector<double> sgd_values(double momentum, bool nesterov, double weight_decay, int steps) {
  Runtime rt;
  auto ps = one_param(1.0);
  OptimizerConfig c;
  c.kind = "sgd";
  c.lr = 0.25;
  c.momentum = momentum;
  c.nesterov = nesterov;
  c.weight_decay = weight_decay;
  Optimizer o(c, ps);
  std::vector<double> values;
  for (int i = 0; i < steps; ++i) {
    o.step({{0.5f}}, rt);
    values.push_back(ps[0].t.data()[0]);
  }
  return values;
}

}  // namespace

TEST_CASE("SGD, momentum, Nesterov, weight decay", "[sim][optim]") {
  CHECK(sgd_values(0.0, false, 0.0, 1) == std::vector<double>{0.875});
  // buf = g = 0.5, then buf = 0.5·0.5 + 0.5 = 0.75
  CHECK(sgd_values(0.5, false, 0.0, 2) == std::vector<double>{0.875, 0.6875});
  // d = 0.5 + 0.5·1 = 1; buf = 1; d = 1 + 0.5·1 = 1.5; p = 1 - 0.375
  CHECK(sgd_values(0.5, true, 0.5, 1) == std::vector<double>{0.625});
}

TEST_CASE("Adam and AdamW follow torch.optim's formulas", "[sim][optim]") {
  Runtime rt;
  // Closed form in binary64 of the first two Adam steps; fp32 agrees to a few ulps.
  auto adam_ref = [](double p, double g1, double g2, double lr, double wd, bool decoupled) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    double m = 0, v = 0;
    for (int t = 1; t <= 2; ++t) {
      double g = t == 1 ? g1 : g2;
      if (decoupled) p *= 1 - lr * wd; else g += wd * p;
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      p -= lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
    }
    return p;
  };
  for (const char* kind : {"adam", "adamw"}) {
    auto ps = one_param(1.0);
    OptimizerConfig c;
    c.kind = kind;
    c.lr = 0.01;
    c.weight_decay = 0.1;
    Optimizer o(c, ps);
    o.step({{0.5f}}, rt);
    o.step({{-0.25f}}, rt);
    const double want = adam_ref(1.0, 0.5, -0.25, 0.01, 0.1, std::string(kind) == "adamw");
    CHECK(std::fabs(ps[0].t.data()[0] - want) < 4e-7);
  }
  // L2 (Adam) and decoupled (AdamW) weight decay differ by far more than the tolerance above,
  // so swapping them would fail.
  CHECK(std::fabs(adam_ref(1, 0.5, -0.25, 0.01, 0.1, true) - adam_ref(1, 0.5, -0.25, 0.01, 0.1, false)) >
        25 * 4e-7);
}

TEST_CASE("low-precision weights: vanished updates are counted", "[sim][optim]") {
  // fp16 weight 1.0: an SGD step of 2^-13 (< half an ulp, 2^-11) vanishes; 2^-9 does not.
  const DType F16 = DType::low(formats::fp16);
  Tracer tr;
  Runtime rt;
  rt.tracer = &tr;
  for (double step : {std::ldexp(1.0, -13), std::ldexp(1.0, -9)}) {
    auto ps = one_param(1.0, F16);
    OptimizerConfig c;
    c.kind = "sgd";
    c.lr = step;
    Optimizer o(c, ps);
    tr.begin_step(0, 1.0);
    o.step({{1.0f}}, rt);
    const StepTrace st = tr.end_step();
    REQUIRE(st.records.size() == 1);
    CHECK(st.records[0].name == "p.update");
    CHECK(st.records[0].kind == TraceKind::update);
    const bool vanishes = step < std::ldexp(1.0, -11);
    CHECK(st.records[0].vanished == (vanishes ? 1u : 0u));
    CHECK(st.records[0].small_update == (vanishes ? 1u : 0u));  // |w| >= 2048·|Δw|
    CHECK(ps[0].t.data()[0] == (vanishes ? 1.0 : 1.0 - step));
  }
}
