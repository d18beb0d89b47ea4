// Precision policies: the dtype each op computes in under the presets (the expected dtypes
// were read off PyTorch 1.13: CPU autocast empirically, CUDA from autocast_mode.cpp's lists),
// the backward of casts, master weights and pure policies.
#include <catch2/catch.hpp>

#include <cmath>

#include "halfway/names.hpp"
#include "halfway/sim/context.hpp"
#include "halfway/sim/ops.hpp"
#include "halfway/sim/policy.hpp"

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
  CHECK(x.grad() == std::vector<double>{0.333251953125, 0.333251953125});
  // fp32 leaf -> fp16 -> ·3: the gradient 3 is exact, carried back into fp32 unchanged.
  Tensor y = Tensor::from({1}, {0.1}, F32, true);
  sum(mul(cast(y, F16, "y"), Tensor::from({1}, {3.0}, F16))).backward();
  CHECK(y.grad() == std::vector<double>{3.0});
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
  CHECK(w.grad() == std::vector<double>{0.0});
  // Without the policy, fp32 keeps it.
  Tensor w2 = Tensor::from({1, 1}, {0.5}, F32, true);
  linear(x, w2, Tensor()).backward(std::ldexp(1.0, -15));
  CHECK(w2.grad() == std::vector<double>{std::ldexp(1.0, -30)});
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
