// Precision policies: the dtype each op computes in under the presets (the expected dtypes
// were read off PyTorch 1.13: CPU autocast empirically, CUDA from autocast_mode.cpp's lists),
// the backward of casts, master weights and pure policies.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "halfway/names.hpp"
#include "halfway/sim/context.hpp"
#include "halfway/sim/fp8.hpp"
#include "halfway/sim/ops.hpp"
#include "halfway/sim/policy.hpp"
#include "halfway/sim/precision.hpp"

using namespace halfway;
using namespace halfway::sim;

namespace {

const DType F32 = DType::f32();
const DType F16 = DType::low(formats::fp16);
const DType BF16 = DType::low(formats::bf16);

Tensor t(const Shape& s, DType dt, bool grad = false) {
  std::vector<double> v(size_t(numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25 * double(i % 7) - 0.5;
  return Tensor::from(s, v, dt, grad);
}

}  // namespace

TEST_CASE("torch-cpu-bf16 output dtypes match PyTorch's CPU autocast", "[sim][policy]") {
  // torch 1.13, `with torch.autocast('cpu', dtype=torch.bfloat16)`, fp32 and bf16 inputs:
  // linear/matmul -> bf16; relu gelu tanh sigmoid exp log softmax log_softmax layer_norm sum
  // mean -> input dtype; cross_entropy, mse -> fp32; add/mul with an fp32 operand -> fp32.
  const Policy p = preset_policy("torch-cpu-bf16");
  Runtime rt;
  ContextGuard g(&p, &rt);
  const Tensor x = t({4, 8}, F32), xb = t({4, 8}, BF16), w = t({3, 8}, F32);
  CHECK(linear(x, w, Tensor()).dtype() == BF16);
  CHECK(matmul(x, transpose(w, 0, 1)).dtype() == BF16);
  for (const Tensor& in : {x, xb}) {
    CHECK(relu(in).dtype() == in.dtype());
    CHECK(gelu(in).dtype() == in.dtype());
    CHECK(tanh(in).dtype() == in.dtype());
    CHECK(exp(in).dtype() == in.dtype());
    CHECK(softmax(in).dtype() == in.dtype());
    CHECK(log_softmax(in).dtype() == in.dtype());
    CHECK(layer_norm(in, Tensor(), Tensor()).dtype() == in.dtype());
    CHECK(sum(in).dtype() == in.dtype());
    CHECK(mean(in).dtype() == in.dtype());
    CHECK(mse(in, in).dtype() == F32);
    CHECK(cross_entropy(in, {0, 1, 2, 3}).dtype() == F32);
    CHECK(add(in, x).dtype() == F32);
    CHECK(mul(in, x).dtype() == F32);
  }
}

TEST_CASE("torch-cuda-fp16 follows autocast_mode.cpp's CUDA lists", "[sim][policy]") {
  const Policy p = preset_policy("torch-cuda-fp16");
  Runtime rt;
  ContextGuard g(&p, &rt);
  const Tensor x = t({4, 8}, F32), xh = t({4, 8}, F16), w = t({3, 8}, F32);
  CHECK(linear(x, w, Tensor()).dtype() == F16);
  // fp32 list / fp32_set_opt_dtype: run in fp32 even from fp16 inputs
  CHECK(softmax(xh).dtype() == F32);
  CHECK(log_softmax(xh).dtype() == F32);
  CHECK(exp(xh).dtype() == F32);
  CHECK(sum(xh).dtype() == F32);
  CHECK(layer_norm(xh, Tensor(), Tensor()).dtype() == F32);
  CHECK(mse(xh, xh).dtype() == F32);
  // everything else: input dtype (mean is not on any list)
  CHECK(relu(xh).dtype() == F16);
  CHECK(mean(xh).dtype() == F16);
  CHECK(add(xh, xh).dtype() == F16);
  CHECK(add(xh, x).dtype() == F32);
  // the bf16 variant uses the same lists
  const Policy pb = preset_policy("torch-cuda-bf16");
  ContextGuard g2(&pb, &rt);
  CHECK(linear(x, w, Tensor()).dtype() == BF16);
  CHECK(softmax(t({2, 3}, BF16)).dtype() == F32);
}

TEST_CASE("the backward of a cast rounds the gradient into the source dtype", "[sim][policy]") {
  // fp16 leaf -> fp32 -> ·(1/3): the fp32 gradient 1/3 comes back as the fp16 nearest to 1/3,
  // 0x3555 = 0.333251953125.
  Tensor x = Tensor::from({2}, {1.0, 2.0}, F16, true);
  const Tensor third = Tensor::from({2}, {1.0 / 3.0, 1.0 / 3.0}, F32);
  sum(mul(cast(x, F32, "x"), third)).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0.333251953125, 0.333251953125});
  // fp32 leaf -> fp16 -> ·3: the gradient 3 is exact, carried back into fp32 unchanged.
  Tensor y = Tensor::from({1}, {0.1}, F32, true);
  sum(mul(cast(y, F16, "y"), Tensor::from({1}, {3.0}, F16))).backward();
  CHECK(y.grad().to_vector() == std::vector<double>{3.0});
}

TEST_CASE("a lowered op's weight gradient is rounded in fp16 and underflows", "[sim][policy]") {
  // w is fp32 (master); linear runs in fp16, so dL/dw is formed in fp16: a product of size
  // 2^-30 is below fp16's smallest subnormal and becomes 0 (and the fp32 master sees 0).
  const Policy p = preset_policy("torch-cuda-fp16");
  Runtime rt;
  Tensor w = Tensor::from({1, 1}, {0.5}, F32, true);
  const Tensor x = Tensor::from({1, 1}, {std::ldexp(1.0, -15)}, F32);
  Tensor out;
  {
    ContextGuard g(&p, &rt);
    out = linear(x, w, Tensor());
  }
  CHECK(out.dtype() == F16);
  out.backward(std::ldexp(1.0, -15));  // upstream gradient 2^-15: dL/dw = 2^-30
  CHECK(w.grad().to_vector() == std::vector<double>{0.0});
  // Without the policy, fp32 keeps it.
  Tensor w2 = Tensor::from({1, 1}, {0.5}, F32, true);
  linear(x, w2, Tensor()).backward(std::ldexp(1.0, -15));
  CHECK(w2.grad().to_vector() == std::vector<double>{std::ldexp(1.0, -30)});
}

TEST_CASE("policy presets and names", "[sim][policy]") {
  CHECK(preset_policy("torch-cuda-fp16").master_weights());
  CHECK(!preset_policy("fp32").master_weights());
  CHECK(!preset_policy("pure-bf16").master_weights());
  CHECK(preset_policy("pure-fp16").param_dtype == F16);
  CHECK(preset_policy("fp8-hybrid").fp8);
  CHECK(preset_policy("fp8-hybrid").master_weights());
  CHECK_THROWS_AS(preset_policy("torch-tpu-fp16"), InputError);
  CHECK_THROWS_AS(parse_op("conv2d"), InputError);
  CHECK_THROWS_AS(parse_rule("lowest"), InputError);
  CHECK(parse_rule("promote") == CastRule::promote);
  for (int i = 0; i < kOpCount; ++i) CHECK(parse_op(op_name(OpKind(i))) == OpKind(i));
}

namespace {

/// The scales an Fp8State uses for casts of one tensor whose amaxes are `amaxes` (each cast is
/// the one-element tensor {amax}), plus the scale it would use next.
std::vector<float> fp8_scales(Fp8Config cfg, const std::vector<double>& amaxes) {
  cfg.fwd = parse_format("e4m3:sat");
  Fp8State st(cfg);
  Runtime rt;
  std::vector<float> out;
  std::vector<double> q;
  for (double a : amaxes) out.push_back(st.quantize("x", cfg.fwd, &a, 1, q, rt, nullptr));
  out.push_back(st.scale("x"));
  return out;
}

}  // namespace

TEST_CASE("fp8 scales follow TE's DelayedScaling and Float8CurrentScaling", "[sim][policy][fp8]") {
  // e4m3's largest finite value is 448. Delayed, history of 3, "max": each scale is
  // 448 / max(the last three amaxes), the first one 1.
  Fp8Config d;
  d.amax_history_len = 3;
  CHECK(fp8_scales(d, {2, 8, 1, 0.5, 0.25}) == std::vector<float>{1, 224, 56, 56, 56, 448});
  d.amax_compute_algo = AmaxAlgo::most_recent;
  CHECK(fp8_scales(d, {2, 8, 1, 0.5, 0.25}) == std::vector<float>{1, 224, 56, 448, 896, 1792});
  d.margin = 1;  // 448 * 2^-1 / amax
  CHECK(fp8_scales(d, {2, 8}) == std::vector<float>{1, 112, 28});
  d.margin = 0;
  // An amax of 0 or inf keeps the previous scale; NaN values do not enter the amax (fmaxf).
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(fp8_scales(d, {4, 0, inf}) == std::vector<float>{1, 112, 112, 112});
  {
    Fp8State st(d);
    Runtime rt;
    std::vector<double> q, x{std::nan(""), 4.0};
    st.quantize("x", parse_format("e4m3:sat"), x.data(), 2, q, rt, nullptr);
    CHECK(st.scale("x") == 112.0f);
    CHECK(std::isnan(q[0]));
    CHECK(q[1] == 4.0);
  }
  // A quotient that overflows binary32 becomes FLT_MAX.
  CHECK(fp8_scales(d, {1e-38})[1] == std::numeric_limits<float>::max());
  // Current scaling: the cast's own amax; 1 for an all-zero tensor.
  Fp8Config c;
  c.scaling = Fp8Scaling::current;
  CHECK(fp8_scales(c, {3, 0}) == std::vector<float>{448.0f / 3.0f, 1, 1});
  {
    Fp8State st(c);
    Runtime rt;
    std::vector<double> q, x{3.0, -1.5};
    st.quantize("x", parse_format("e4m3:sat"), x.data(), 2, q, rt, nullptr);
    CHECK(q == std::vector<double>{448.0, -224.0});  // 3·(448/3) = 447.99997 rounds to 448
  }
}

TEST_CASE("fp8-hybrid lowers only linear; an opted-in op gets scaled fp8, outputs stay fp32",
          "[sim][policy][fp8]") {
  Policy p = preset_policy("fp8-hybrid");
  for (int i = 0; i < kOpCount; ++i)
    CHECK(p.rule(OpKind(i)) == (OpKind(i) == OpKind::linear ? CastRule::lower : CastRule::input));
  Fp8State st(p.fp8_config);
  Runtime rt;
  rt.fp8 = &st;
  ContextGuard g(&p, &rt);
  // An unscaled e4m3 cast would flush 2^-12 (e4m3's smallest subnormal is 2^-9).
  Tensor a = Tensor::from({2, 2}, {std::ldexp(1.0, -12), 0, 0, std::ldexp(1.0, -12)}, F32, true);
  Tensor b = Tensor::from({2, 2}, {1, 2, 3, 4}, F32, true);
  Tensor y = matmul(a, b);
  CHECK(y.dtype() == F32);
  CHECK(y.data()[0] == std::ldexp(1.0, -12));
  // Opted in: an fp8 GEMM with per-tensor scales (current scaling): the products of the scaled
  // operands accumulate in fp32 and the sum is multiplied by 1/s_a · 1/s_b in fp32.
  p.set(OpKind::matmul, CastRule::lower);
  p.fp8_config.scaling = Fp8Scaling::current;
  Fp8State st2(p.fp8_config);
  rt.fp8 = &st2;
  Tensor b2 = Tensor::from({2, 2}, {1, 2, 2, 4}, F32, true);
  Tensor y2 = matmul(a, b2);
  CHECK(y2.dtype() == F32);
  const float sa = 448.0f / std::ldexp(1.0f, -12), sb = 448.0f / 4.0f, sg = 57344.0f;
  // a·s_a = 448 and b·s_b = 112, 224, 224, 448: all e4m3 values, so only the epilogue rounds.
  CHECK(y2.data()[0] == double((448.0f * 112.0f) * ((1.0f / sa) * (1.0f / sb))));
  y2.backward(1.0);
  // dA = Gq·Bqᵀ·(1/s_g·1/s_b) with Gq = 57344 (e5m2's largest value, scale 57344 / 1).
  CHECK(a.grad()[0] == double((sg * (112.0f + 224.0f)) * ((1.0f / sg) * (1.0f / sb))));
  // Another op opted in reads its input dequantized and computes in fp32.
  p.set(OpKind::relu, CastRule::lower);
  Tensor r = relu(Tensor::from({3}, {0.1, -2, 7}, F32));
  CHECK(r.dtype() == F32);
  CHECK(r.data()[2] == 7.0);
  CHECK(r.data()[0] == 0.1015625);  // scale 448/7 = 64: 6.4 rounds to e4m3's 6.5, 6.5/64
}

TEST_CASE("a preset's precision: its policy, its accumulation and the run's defaults",
          "[sim][policy]") {
  for (const std::string& name : policy_names()) {
    INFO(name);
    const Precision p = preset_precision(name);
    CHECK(p.policy.name == name);
    REQUIRE(p.accumulation != nullptr);
    // CPU autocast's GEMMs accumulate as PyTorch's CPU matmul; the CUDA and fp8/block presets
    // as cuBLAS with an fp32 compute type.
    CHECK(p.accumulation->name == (name == "torch-cpu-bf16" ? "torch-cpu" : "fp32"));
    CHECK(p.rounding == Rounding::near_even);
    CHECK(p.sr_random_bits == kSrRandomBits);
  }
  CHECK_THROWS_AS(preset_precision("fp12"), InputError);
  Precision p = preset_precision("torch-cuda-fp16");
  p.rounding = Rounding::stochastic;
  p.policy.role_rounding[size_t(Role::update)] = Rounding::near_even;
  CHECK(p.rounding_of(Role::forward) == Rounding::stochastic);
  CHECK(p.rounding_of(Role::update) == Rounding::near_even);
  p.sr_random_bits = 8;
  p.accumulation = &accumulator_by_name("h100");
  Runtime rt;
  CHECK(rt.accumulator == &default_accumulation());  // a Runtime never holds a null model
  apply_precision(rt, p, 42);
  CHECK(rt.accumulator == p.accumulation);
  CHECK(rt.rounding.rounding == Rounding::stochastic);
  CHECK(rt.rounding.seed == 42);
  CHECK(rt.rounding.random_bits == 8);
}
