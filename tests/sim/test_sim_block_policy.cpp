// Block-scaled policies (mxfp8, mxfp4, nvfp4, fp8-blockwise): a linear layer's three GEMMs
// against fp32 GEMMs of operands quantized here with lib's quantize_blocks along the axis each
// GEMM reduces over (zero-padded to whole blocks), the recipes' stochastic rounding and
// Hadamard transform only where TE puts them, blocks.csv's records, config errors, and
// byte-identical runs at any thread count.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <future>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "halfway/blocks.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/block_quant.hpp"
#include "halfway/sim/context.hpp"
#include "halfway/sim/fp8.hpp"
#include "halfway/sim/ops.hpp"
#include "halfway/sim/policy.hpp"
#include "halfway/sim/tracer.hpp"
#include "halfway/sim/trainer.hpp"
#include "configs.hpp"
#include "scratch.hpp"

using namespace halfway;
using namespace halfway::sim;
namespace fs = std::filesystem;

namespace {

using Mat = std::vector<float>;

/// Values over a few binades, both signs, so that blocks get different scales.
std::vector<double> spread(size_t n, int salt) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = std::sin(double(i) * 0.7 + salt) * std::ldexp(1.0, int((i * 7 + size_t(salt)) % 9) - 4);
  return v;
}

/// x (rows×cols) zero-padded to prows×pcols, quantized by lib along `axis`.
Mat quantized(const std::string& scheme, const std::vector<double>& x, size_t rows, size_t cols,
              size_t prows, size_t pcols, BlockAxis axis, bool pow2 = false) {
  Mat p(prows * pcols, 0.0f), q(prows * pcols);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) p[r * pcols + c] = float(x[r * cols + c]);
  BlockOptions o;
  o.axis = axis;
  o.pow2_scales = pow2;
  quantize_blocks(parse_block_scheme(scheme), p.data(), prows, pcols, q.data(), o);
  return q;
}

/// C[i][j] = Σ_k A(i,k)·B(k,j) by sequential fp32 fused multiply-adds (k = 0, 1, ...), the
/// accessors reading the padded copies; the leading m×n.
template <class FA, class FB>
Mat fp32_gemm(size_t m, size_t n, size_t k, FA a, FB b) {
  Mat c(m * n);
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (size_t kk = 0; kk < k; ++kk) acc = std::fma(a(i, kk), b(kk, j), acc);
      c[i * n + j] = acc;
    }
  return c;
}

Mat as_floats(const Values& v) { return Mat(v.f32(), v.f32() + v.size()); }

struct LinearRun {
  Mat y, dx, dw;
};

/// y = linear(x, w, b) under `p`, then loss = Σ y·C, so that dY = C exactly.
LinearRun run_linear(const Policy& p, Runtime& rt, size_t M, size_t K, size_t N,
                     const std::vector<double>& xv, const std::vector<double>& wv,
                     const std::vector<double>& bv, const std::vector<double>& cv) {
  ContextGuard g(&p, &rt);
  Tensor x = Tensor::from({int64_t(M), int64_t(K)}, xv, DType::f32(), true);
  Tensor w = Tensor::from({int64_t(N), int64_t(K)}, wv, DType::f32(), true);
  Tensor b = Tensor::from({int64_t(N)}, bv, DType::f32(), true);
  Tensor c = Tensor::from({int64_t(M), int64_t(N)}, cv, DType::f32());
  Tensor y = linear(x, w, b);
  Tensor loss = sum(mul(y, c));
  loss.backward();
  return {as_floats(y.data()), as_floats(x.grad()), as_floats(w.grad())};
}

size_t up(size_t n, size_t t) { return (n + t - 1) / t * t; }

/// The three GEMMs of a block-scaled linear layer computed here: fprop along K, dgrad along N
/// (dY rows, W columns), wgrad along M (both down the columns), each reduction dimension
/// padded to `t` (the schemes' block along it), W's other dimension to `tw2` (2-D tiles).
/// Copies in `promoted` are x itself, zero-padded (`halfway bisect`'s operand promotion).
LinearRun expected(const BlockRecipe& r, size_t M, size_t K, size_t N, size_t t, size_t tw2,
                   const std::vector<double>& xv, const std::vector<double>& wv,
                   const std::vector<double>& bv, const std::vector<double>& cv,
                   const std::array<bool, kGemmCopyCount>& promoted = {}) {
  const bool p2 = r.pow2_scales;
  const size_t Kp = up(K, t), Np = up(N, t), Nw = up(N, tw2), Kw = up(K, tw2), Mp = up(M, t);
  const auto quantized = [&](GemmCopy c, const std::string& scheme, const std::vector<double>& x,
                             size_t rows, size_t cols, size_t prows, size_t pcols, BlockAxis a,
                             bool pow2) {
    if (!promoted[size_t(c)]) return ::quantized(scheme, x, rows, cols, prows, pcols, a, pow2);
    Mat q(prows * pcols, 0.0f);
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j) q[i * pcols + j] = float(x[i * cols + j]);
    return q;
  };
  using G = GemmCopy;
  // fprop: X [M,Kp] (1×t) and W [Nw,Kp] along K.
  const Mat xq = quantized(G::x_fprop, r.input, xv, M, K, M, Kp, BlockAxis::last, p2);
  const Mat wq = quantized(G::w_fprop, r.weight, wv, N, K, Nw, Kp, BlockAxis::last, p2);
  LinearRun e;
  e.y = fp32_gemm(M, N, Kp, [&](size_t i, size_t k) { return xq[i * Kp + k]; },
                  [&](size_t k, size_t j) { return wq[j * Kp + k]; });
  for (size_t i = 0; i < M; ++i)
    for (size_t j = 0; j < N; ++j) e.y[i * N + j] = e.y[i * N + j] + float(bv[j]);
  // dgrad: dY [M,Np] along N, W [Np,Kw] down the columns.
  const Mat gd = quantized(G::dy_dgrad, r.grad, cv, M, N, M, Np, BlockAxis::last, p2);
  const Mat wd = quantized(G::w_dgrad, r.weight, wv, N, K, Np, Kw, BlockAxis::first, p2);
  e.dx = fp32_gemm(M, K, Np, [&](size_t i, size_t n) { return gd[i * Np + n]; },
                   [&](size_t n, size_t k) { return wd[n * Kw + k]; });
  // wgrad: dY [Mp,N] and X [Mp,K] down the columns.
  const Mat gw = quantized(G::dy_wgrad, r.grad, cv, M, N, Mp, N, BlockAxis::first, p2);
  const Mat xw = quantized(G::x_wgrad, r.input, xv, M, K, Mp, K, BlockAxis::first, p2);
  e.dw = fp32_gemm(N, K, Mp, [&](size_t n, size_t m) { return gw[m * N + n]; },
                   [&](size_t m, size_t k) { return xw[m * K + k]; });
  return e;
}

fs::path scratch(const std::string& name) {
  return halfway_test::scratch_dir("block_policy", name);
}

using halfway_test::slurp;

std::string transformer(const std::string& policy, const std::string& precision = "") {
  const std::string line = "policy = \"" + policy + "\"\n";
  std::string c = halfway_test::config(
      "transformer", {{"data.n", "64"}, {"optimizer.lr", "0.003"}, {"precision.policy", "\"" + policy + "\""},
                      {"[scaler]", std::nullopt}, {"run.steps", "2"}, {"run.seed", "3"}});
  // The test's [precision] keys and tables, right after the policy.
  return c.insert(c.find(line) + line.size(), precision + "\n");
}

}  // namespace

TEST_CASE("block presets lower linear only and keep fp32 master weights", "[sim][blocks]") {
  for (const char* n : {"mxfp8", "mxfp4", "nvfp4", "fp8-blockwise"}) {
    INFO(n);
    const Policy p = preset_policy(n);
    REQUIRE(p.blocks);
    CHECK(!p.fp8);
    CHECK(p.master_weights());
    for (int i = 0; i < kOpCount; ++i)
      CHECK(p.rule(OpKind(i)) == (OpKind(i) == OpKind::linear ? CastRule::lower : CastRule::input));
  }
  CHECK(preset_policy("fp8-blockwise").blocks->pow2_scales);
  CHECK(!preset_policy("mxfp8").blocks->pow2_scales);
  CHECK(preset_policy("nvfp4").blocks->grad_sr);
  CHECK(preset_policy("nvfp4").blocks->input_rht);
  CHECK(preset_policy("nvfp4").blocks->grad_rht);
  CHECK(!preset_policy("nvfp4").blocks->input_sr);
  CHECK(!preset_policy("nvfp4").blocks->weight_sr);
  const Policy c = preset_policy("fp8-current");
  CHECK(c.fp8);
  CHECK(c.fp8_config.scaling == Fp8Scaling::current);
  CHECK(format_name(c.fp8_config.fwd) == "e4m3:sat");
  CHECK(format_name(c.fp8_config.bwd) == "e5m2:sat");
}

TEST_CASE("a block-scaled linear layer's three GEMMs read copies blocked along their own "
          "reduction dimension", "[sim][blocks]") {
  struct Case {
    const char* policy;
    size_t M, K, N, t, tw2;
  };
  // Divisible shapes, then shapes that leave partial blocks (zero padding).
  for (const Case& c : {Case{"mxfp8", 64, 64, 32, 32, 1}, Case{"mxfp8", 40, 48, 20, 32, 1},
                        Case{"mxfp4", 64, 96, 32, 32, 1},
                        Case{"fp8-blockwise", 128, 128, 128, 128, 128},
                        Case{"fp8-blockwise", 24, 48, 20, 128, 128}}) {
    INFO(c.policy << " M=" << c.M << " K=" << c.K << " N=" << c.N);
    const Policy p = preset_policy(c.policy);
    const auto xv = spread(c.M * c.K, 1), wv = spread(c.N * c.K, 2), bv = spread(c.N, 3);
    const auto cv = spread(c.M * c.N, 4);
    Runtime rt;
    const LinearRun got = run_linear(p, rt, c.M, c.K, c.N, xv, wv, bv, cv);
    const LinearRun want = expected(*p.blocks, c.M, c.K, c.N, c.t, c.tw2, xv, wv, bv, cv);
    CHECK(got.y == want.y);
    CHECK(got.dx == want.dx);
    CHECK(got.dw == want.dw);
    // The test can fail: the forward's copies along K are not the wgrad's along M, so a wgrad
    // from the wrong copy differs.
    if (c.t == 32) {
      const Mat xq = quantized(p.blocks->input, xv, c.M, c.K, c.M, up(c.K, 32), BlockAxis::last);
      const Mat xw = quantized(p.blocks->input, xv, c.M, c.K, up(c.M, 32), c.K, BlockAxis::first);
      bool differ = false;
      for (size_t m = 0; m < c.M; ++m)
        for (size_t k = 0; k < c.K; ++k) differ |= xq[m * up(c.K, 32) + k] != xw[m * c.K + k];
      CHECK(differ);
    }
  }
}

TEST_CASE("a promoted operand copy: its GEMM reads the operand itself, every other copy and "
          "stream stays the run's", "[sim][blocks][bisect]") {
  const size_t M = 40, K = 48, N = 20;
  const auto xv = spread(M * K, 1), wv = spread(N * K, 2), bv = spread(N, 3);
  const auto cv = spread(M * N, 4);
  Runtime r0;
  const LinearRun plain = run_linear(preset_policy("mxfp4"), r0, M, K, N, xv, wv, bv, cv);
  for (int i = 0; i < kGemmCopyCount; ++i) {
    INFO(gemm_copy_name(GemmCopy(i)));
    Policy p = preset_policy("mxfp4");
    p.promoted_copies[size_t(i)] = true;
    Runtime rt;
    const LinearRun got = run_linear(p, rt, M, K, N, xv, wv, bv, cv);
    const LinearRun want = expected(*p.blocks, M, K, N, 32, 1, xv, wv, bv, cv, p.promoted_copies);
    CHECK(got.y == want.y);
    CHECK(got.dx == want.dx);
    CHECK(got.dw == want.dw);
    // The test can fail: exactly the GEMM that reads the copy changes.
    const bool fprop = i <= 1, dgrad = i == 2 || i == 3;
    CHECK((got.y != plain.y) == fprop);
    CHECK((got.dx != plain.dx) == dgrad);
    CHECK((got.dw != plain.dw) == (!fprop && !dgrad));
  }
  // nvfp4 rounds dY stochastically: promoting the dgrad copy leaves the wgrad copy's stream,
  // and so its bits, as they were.
  Policy q = preset_policy("nvfp4");
  Runtime ra, rb;
  const LinearRun base = run_linear(q, ra, M, K, N, xv, wv, bv, cv);
  q.promoted_copies[size_t(GemmCopy::dy_dgrad)] = true;
  const LinearRun got = run_linear(q, rb, M, K, N, xv, wv, bv, cv);
  CHECK(got.dw == base.dw);
  CHECK(got.dx != base.dx);
}

TEST_CASE("a promoted fp8 operand copy: with both operands of a GEMM promoted, that GEMM is the "
          "fp32 linear layer's, bit for bit", "[sim][fp8][bisect]") {
  const size_t M = 24, K = 40, N = 20;
  const auto xv = spread(M * K, 1), wv = spread(N * K, 2), bv = spread(N, 3);
  const auto cv = spread(M * N, 4);
  const auto run = [&](const Policy& p) {
    Fp8State st(p.fp8_config);
    Runtime rt;
    if (p.fp8) rt.fp8 = &st;
    return run_linear(p, rt, M, K, N, xv, wv, bv, cv);
  };
  const LinearRun fp32 = run(preset_policy("fp32"));
  const LinearRun fp8 = run(preset_policy("fp8-current"));
  using G = GemmCopy;
  const std::pair<G, G> gemms[] = {{G::x_fprop, G::w_fprop}, {G::dy_dgrad, G::w_dgrad},
                                   {G::dy_wgrad, G::x_wgrad}};
  for (int g = 0; g < 3; ++g) {
    INFO("GEMM " << g);
    const auto pick = [&](const LinearRun& r) { return g == 0 ? r.y : g == 1 ? r.dx : r.dw; };
    Policy both = preset_policy("fp8-current");
    both.promoted_copies[size_t(gemms[g].first)] = both.promoted_copies[size_t(gemms[g].second)] = true;
    const LinearRun b = run(both);
    CHECK(pick(b) == pick(fp32));
    // The other two GEMMs still read their fp8 copies.
    for (int o = 0; o < 3; ++o)
      if (o != g) CHECK((o == 0 ? b.y : o == 1 ? b.dx : b.dw) == (o == 0 ? fp8.y : o == 1 ? fp8.dx : fp8.dw));
    // One operand alone: neither the fp8 GEMM nor the fp32 one (the test can fail).
    Policy one = preset_policy("fp8-current");
    one.promoted_copies[size_t(gemms[g].first)] = true;
    const LinearRun h = run(one);
    CHECK(pick(h) != pick(fp32));
    CHECK(pick(h) != pick(fp8));
  }
}

TEST_CASE("2-D weight tiles give the forward and the dgrad the same weight copy",
          "[sim][blocks]") {
  const std::vector<double> wv = spread(32 * 48, 5);
  const Mat a = quantized("nvfp4_2d", wv, 32, 48, 32, 48, BlockAxis::last);
  const Mat b = quantized("nvfp4_2d", wv, 32, 48, 32, 48, BlockAxis::first);
  CHECK(a == b);
  const Mat c = quantized("nvfp4", wv, 32, 48, 32, 48, BlockAxis::last);
  const Mat d = quantized("nvfp4", wv, 32, 48, 32, 48, BlockAxis::first);
  CHECK(c != d);
}

TEST_CASE("nvfp4: stochastic rounding on gradients only, the Hadamard transform on the wgrad "
          "operands only", "[sim][blocks]") {
  const Policy p = preset_policy("nvfp4");
  const size_t M = 32, K = 32, N = 16;
  const auto xv = spread(M * K, 1), wv = spread(N * K, 2), bv = spread(N, 3);
  const auto cv = spread(M * N, 4);
  Tracer tr;
  Runtime r1, r2;
  r1.rounding.seed = 1;
  r2.rounding.seed = 2;
  r1.tracer = &tr;
  tr.begin_step(0, 1.0);
  const LinearRun a = run_linear(p, r1, M, K, N, xv, wv, bv, cv);
  const StepTrace& st = tr.end_step();
  const LinearRun b = run_linear(p, r2, M, K, N, xv, wv, bv, cv);
  // The forward has no stochastic rounding; both gradient GEMMs read stochastically rounded dY.
  CHECK(a.y == b.y);
  CHECK(a.dx != b.dx);
  CHECK(a.dw != b.dw);
  // The same seed gives the same bits.
  Runtime r3;
  r3.rounding.seed = 1;
  const LinearRun c = run_linear(p, r3, M, K, N, xv, wv, bv, cv);
  CHECK(c.dx == a.dx);
  CHECK(c.dw == a.dw);
  // precision.sr_random_bits applies to the recipe's stochastic rounding too: one random bit
  // gives other gradients, the forward stays.
  Runtime r4;
  r4.rounding.seed = 1;
  r4.rounding.random_bits = 1;
  const LinearRun d = run_linear(p, r4, M, K, N, xv, wv, bv, cv);
  CHECK(d.y == a.y);
  CHECK(d.dx != a.dx);
  CHECK(d.dw != a.dw);
  // The fprop result is the fp32 GEMM of the 1×16 input and the 16×16 weight copies.
  const Mat xq = quantized("nvfp4", xv, M, K, M, K, BlockAxis::last);
  const Mat wq = quantized("nvfp4_2d", wv, N, K, N, K, BlockAxis::last);
  Mat y = fp32_gemm(M, N, K, [&](size_t i, size_t k) { return xq[i * K + k]; },
                    [&](size_t k, size_t j) { return wq[j * K + k]; });
  for (size_t i = 0; i < M; ++i)
    for (size_t j = 0; j < N; ++j) y[i * N + j] = y[i * N + j] + float(bv[j]);
  CHECK(a.y == y);
  // Every copy is traced once, with the recipe's scheme, axis, rounding and transform.
  std::map<std::string, const BlockRecord*> by;
  for (const BlockRecord& rec : st.blocks)
    by[rec.name.substr(rec.name.rfind('.') + 1) + "/" + rec.gemm] = &rec;
  struct Want {
    const char* key;
    const char* scheme;
    BlockAxis axis;
    bool sr, rht;
  };
  REQUIRE(by.size() == 6);
  for (const Want& w : {Want{"input/fprop", "nvfp4", BlockAxis::last, false, false},
                        Want{"weight/fprop", "nvfp4_2d", BlockAxis::last, false, false},
                        Want{"weight/dgrad", "nvfp4_2d", BlockAxis::first, false, false},
                        Want{"input/wgrad", "nvfp4", BlockAxis::first, false, true},
                        Want{"grad_output/dgrad", "nvfp4", BlockAxis::last, true, false},
                        Want{"grad_output/wgrad", "nvfp4", BlockAxis::first, true, true}}) {
    INFO(w.key);
    REQUIRE(by.count(w.key));
    const BlockRecord& rec = *by[w.key];
    CHECK(rec.scheme == w.scheme);
    CHECK(rec.axis == w.axis);
    CHECK(rec.sr == w.sr);
    CHECK(rec.rht == w.rht);
    CHECK(rec.events.elements == (w.key[0] == 'w' ? N * K : w.key[0] == 'i' ? M * K : M * N));
  }
  // The wgrad copy's SNR is against the transformed values; H/4 is orthogonal, so their
  // energy is the input's up to fp32 rounding (a consistency check, not an exactness claim).
  double energy = 0;
  for (double v : xv) energy += double(float(v)) * double(float(v));
  CHECK(by["input/wgrad"]->signal == Approx(energy).epsilon(1e-5));
  CHECK(by["input/fprop"]->signal == energy);
  CHECK(by["input/wgrad"]->signal != energy);
  // The noise too is against the transformed values: against the input itself the decoded
  // transform would be noise as large as the signal (about -3 dB); nvfp4's own is far below.
  CHECK(by["input/wgrad"]->snr_db() > 10.0);
  CHECK(by["input/wgrad"]->snr_db() == Approx(by["input/fprop"]->snr_db()).margin(6.0));
}

TEST_CASE("a NaN in an nvfp4 or fp8_block operand gives NaN results, not an error",
          "[sim][blocks]") {
  for (const char* n : {"nvfp4", "fp8-blockwise", "mxfp8"}) {
    INFO(n);
    const Policy p = preset_policy(n);
    auto xv = spread(32 * 32, 1);
    xv[5] = std::numeric_limits<double>::quiet_NaN();
    Runtime rt;
    const LinearRun r = run_linear(p, rt, 32, 32, 16, xv, spread(16 * 32, 2), spread(16, 3),
                                   spread(32 * 16, 4));
    CHECK(std::isnan(r.y[0]));   // row 0 holds the NaN
    CHECK(std::isnan(r.dw[5]));  // column 5 of X feeds column 5 of dW
  }
}

TEST_CASE("blocks.csv: SNR, events and the scale histogram of one copy", "[sim][blocks]") {
  BlockRecord r;
  CHECK(std::isnan(r.snr_db()));  // all zero: no signal
  r.signal = 4;
  CHECK(std::isinf(r.snr_db()));  // exact
  r.noise = 0.04;
  CHECK(r.snr_db() == Approx(20.0).epsilon(1e-12));
  // A traced mxfp8 copy of a known tensor: one 1×32 block holding 1..32 (amax 32: e8m0 scale
  // 2^(ceil(log2(fp32(32 · fp32(1/448))))) = 2^-3, rceil) and one of zeros.
  const Policy p = preset_policy("mxfp8");
  Tracer tr;
  Runtime rt;
  rt.tracer = &tr;
  tr.begin_step(7, 1.0);
  std::vector<double> xv(64, 0.0);
  for (size_t i = 0; i < 32; ++i) xv[i] = double(i + 1);
  {
    ContextGuard g(&p, &rt);
    Scope s("lin");
    Tensor x = Tensor::from({1, 64}, xv, DType::f32());
    Tensor w = Tensor::from({1, 64}, std::vector<double>(64, 1.0), DType::f32());
    linear(x, w, Tensor());
  }
  const StepTrace& st = tr.end_step();
  REQUIRE(st.blocks.size() == 2);
  const BlockRecord& x = st.blocks[0];
  CHECK(x.name == "lin.input");
  CHECK(x.gemm == "fprop");
  CHECK(x.events.elements == 64);
  CHECK(x.events.blocks == 2);
  CHECK(x.scale_hist == std::map<int, uint64_t>{{-3, 1}, {-127, 1}});
  // 1..32 at scale 2^-3 become 8..256 in e4m3: 8..16 exact, then spacing 2, 4, 8, 16 (17 is
  // 136, a tie between 128 and 144 that goes to 128's even significand: 16).
  const Mat q = quantized("mxfp8_e4m3:rceil", xv, 1, 64, 1, 64, BlockAxis::last);
  CHECK(q[16] == 16.0f);
  CHECK(q[31] == 32.0f);
  double noise = 0, signal = 0;
  for (size_t i = 0; i < 64; ++i) {
    noise += (xv[i] - double(q[i])) * (xv[i] - double(q[i]));
    signal += xv[i] * xv[i];
  }
  CHECK(noise > 0);
  CHECK(x.signal == signal);
  CHECK(x.noise == noise);
  std::string line;
  append_block_columns(line, st.step, x);
  CHECK(line.rfind("7,lin.input,fprop,linear,activation,mxfp8_e4m3:rceil,-1,0,0,64,2,", 0) == 0);
  const std::string tail = ",-127,-3,-127:1;-3:1";
  CHECK(line.substr(line.size() - tail.size()) == tail);
}

TEST_CASE("[precision.blocks]: every key reaches the recipe, the layers' own recipes by name",
          "[sim][blocks]") {
  const TrainConfig c = parse_config(
      transformer("nvfp4", R"([precision.blocks]
weight = "nvfp4"
input_sr = true
weight_sr = true
grad_sr = false
input_rht = false
[[precision.blocks.layer]]
match = "head"
keep = true
[[precision.blocks.layer]]
match = "blocks.*.mlp"
input = "mxfp8_e4m3:rceil"
weight = "mxfp8_e4m3:rceil:block=64"
grad = "mxfp8_e4m3:rceil"
grad_rht = false
)"),
      ".");
  const Policy& p = c.precision.policy;
  REQUIRE(p.blocks);
  CHECK(p.blocks->input == "nvfp4");
  CHECK(p.blocks->weight == "nvfp4");
  CHECK(p.blocks->grad == "nvfp4");
  CHECK(p.blocks->input_sr);
  CHECK(p.blocks->weight_sr);
  CHECK(!p.blocks->grad_sr);
  CHECK(!p.blocks->input_rht);
  CHECK(p.blocks->grad_rht);
  REQUIRE(p.block_layers.size() == 2);
  CHECK(p.blocks_in("head") == nullptr);
  const BlockRecipe* mlp = p.blocks_in("blocks.0.mlp.fc1");
  REQUIRE(mlp);
  CHECK(mlp->weight == "mxfp8_e4m3:rceil:block=64");
  CHECK(mlp->input_sr);  // the table's keys, then the entry's
  CHECK(p.blocks_in("blocks.0.attn.q") == &*p.blocks);
  // A run: the kept layer has no copies; the MLP's copies carry their own schemes; the others
  // the table's, with the stochastic rounding it asks for.
  const fs::path d = scratch("layers");
  write_run(c, d.string(), TrainOptions{});
  std::istringstream csv(slurp(d / "blocks.csv"));
  std::string line;
  std::getline(csv, line);
  std::map<std::string, std::set<std::string>> schemes;
  size_t rows = 0, sr_input = 0;
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
    REQUIRE(f.size() > 8);
    const std::string layer = f[1].substr(0, f[1].rfind('.'));
    schemes[layer].insert(f[5]);
    ++rows;
    sr_input += f[1].size() > 6 && f[1].substr(f[1].size() - 6) == ".input" && f[7] == "1";
  }
  CHECK(rows > 0);
  CHECK(schemes.count("head") == 0);
  CHECK(schemes["blocks.0.mlp.fc1"] ==
        std::set<std::string>{"mxfp8_e4m3:rceil", "mxfp8_e4m3:rceil:block=64"});
  CHECK(schemes["blocks.0.attn.q"] == std::set<std::string>{"nvfp4"});
  CHECK(sr_input > 0);
  fs::remove_all(d);
}

TEST_CASE("torchao's float8 rowwise recipe through [precision.blocks]: whole-row copies along "
          "each GEMM's reduction dimension", "[sim][blocks]") {
  Policy p = preset_policy("fp8-blockwise");
  p.blocks->input = p.blocks->weight = p.blocks->grad = "fp8_rowwise";
  p.blocks->pow2_scales = true;  // torchao's rowwise recipe rounds its scales to powers of two
  const size_t M = 24, K = 40, N = 20;
  const auto xv = spread(M * K, 1), wv = spread(N * K, 2), bv = spread(N, 3);
  const auto cv = spread(M * N, 4);
  Runtime rt;
  const LinearRun got = run_linear(p, rt, M, K, N, xv, wv, bv, cv);
  const LinearRun want = expected(*p.blocks, M, K, N, 1, 1, xv, wv, bv, cv);
  CHECK(got.y == want.y);
  CHECK(got.dx == want.dx);
  CHECK(got.dw == want.dw);
  // The test can fail: without power-of-two scales the elements round differently (with them,
  // any block length gives the same values here: no element leaves e4m3's normal range).
  Policy q = p;
  q.blocks->pow2_scales = false;
  Runtime r2;
  CHECK(run_linear(q, r2, M, K, N, xv, wv, bv, cv).y != want.y);
}

TEST_CASE("block policies: config errors are one-line input errors", "[sim][blocks]") {
  CHECK_THROWS_WITH(parse_config(transformer("mxfp8", "low = \"bf16\""), "."),
                    Catch::Contains("'precision.low' does not apply to the block-scaled policy"));
  CHECK_THROWS_WITH(parse_config(transformer("nvfp4", "[precision.ops]\nmatmul = \"lower\""), "."),
                    Catch::Contains("lowers linear layers only"));
  // Opting linear out is allowed: nothing is block-scaled then.
  CHECK_NOTHROW(parse_config(transformer("nvfp4", "[precision.ops]\nlinear = \"input\""), "."));
  CHECK_THROWS_WITH(parse_config(transformer("mxfp4", "margin = 1"), "."),
                    Catch::Contains("need policy fp8-hybrid or fp8-current"));
  struct Bad {
    const char* policy;
    const char* toml;
    const char* says;
  };
  for (const Bad& b :
       {Bad{"fp8-hybrid", "[precision.blocks]\ninput = \"nvfp4\"", "needs a block-scaled policy"},
        Bad{"nvfp4", "[precision.blocks]\ninput = \"nvfp5\"", "'precision.blocks.input'"},
        Bad{"nvfp4", "[precision.blocks]\ncolor = 1", "unknown option 'precision.blocks.color'"},
        Bad{"nvfp4", "[precision.blocks]\ninput_sr = 1", "must be true or false"},
        Bad{"mxfp8", "[precision.blocks]\ninput_rht = true", "needs a 1x16 nvfp4 scheme"},
        Bad{"nvfp4", "[precision.blocks]\ngrad = \"nvfp4:block=32\"",
            "'precision.blocks.grad_rht' needs a 1x16 nvfp4 scheme"},
        Bad{"mxfp8", "[precision.blocks]\npow2_scales = true", "applies to fp8_block and fp8_rowwise"},
        Bad{"nvfp4", "[precision.blocks]\nlayer = 3", "must be an array of tables"},
        Bad{"nvfp4", "[precision.blocks]\ngrad = \"nvfp4_4over6\"\ngrad_rht = false",
            "'precision.blocks.grad_sr': Four Over Six"},
        Bad{"nvfp4", "[[precision.blocks.layer]]\nkeep = true", "missing field 'precision.blocks.layer[0].match'"},
        Bad{"nvfp4", "[[precision.blocks.layer]]\nmatch = \"head\"\nkeep = true\ninput = \"nvfp4\"",
            "takes no scheme or option"},
        Bad{"nvfp4", "[[precision.blocks.layer]]\nmatch = \"*.*.*.*.*\"", "at most 4 '*'"},
        Bad{"nvfp4", "[[precision.blocks.layer]]\nmatch = \"\"", "must be a layer name"},
        Bad{"nvfp4", "[[precision.blocks.layer]]\nmatch = \"head\"\nweight = \"mxfp4:tile=4x4\"",
            "'precision.blocks.layer[0].weight'"}}) {
    INFO(b.toml);
    CHECK_THROWS_WITH(parse_config(transformer(b.policy, b.toml), "."), Catch::Contains(b.says));
  }
}

TEST_CASE("block policies: byte-identical results at 1 and 2 threads", "[sim][blocks]") {
  for (const char* n : {"nvfp4", "fp8-blockwise"}) {
    INFO(n);
    const TrainConfig c = parse_config(transformer(n), ".");
    const fs::path a = scratch(std::string(n) + "1"), b = scratch(std::string(n) + "2");
    TrainOptions one, two;
    two.threads = 2;
    write_run(c, a.string(), one);
    write_run(c, b.string(), two);
    for (const char* f : {"steps.csv", "trace.csv", "blocks.csv", "manifest.json"}) {
      INFO(f);
      const std::string x = slurp(a / f);
      CHECK(!x.empty());
      CHECK(x == slurp(b / f));
    }
    const std::string blocks = slurp(a / "blocks.csv");
    CHECK(std::count(blocks.begin(), blocks.end(), '\n') > 1);
    fs::remove_all(a);
    fs::remove_all(b);
  }
}

TEST_CASE("block copies: padding and the finiteness check in parts give the same copy",
          "[sim][blocks]") {
  // 300 × 200 padded to fp8_block_2d's 128 × 128 tiles (384 × 256: three row bands, one of
  // them all padding) and to nvfp4's 1 × 16 blocks (300 × 208); with a NaN, which lib refuses
  // for both schemes and the simulator turns into a NaN copy.
  std::vector<double> v(300 * 200);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(double(i)) * 3.0;
  for (const bool nan : {false, true})
    for (const char* scheme : {"fp8_block_2d", "nvfp4"}) {
      std::vector<double> in = v;
      if (nan) in[123 * 200 + 7] = std::numeric_limits<double>::quiet_NaN();
      const Values x(in, false);
      BlockCopy c;
      c.scheme = scheme;
      const auto [tr, tc] = copy_tile(c);
      const size_t pr = (300 + tr - 1) / tr * tr, pc = (200 + tc - 1) / tc * tc;
      const auto run = [&](int threads) {
        Runtime rt;
        rt.threads = threads;
        const Values q = block_copy(rt, c, TraceTag{"x", "linear", TraceKind::activation}, x, 300,
                                    200, pr, pc);
        return std::vector<float>(q.f32(), q.f32() + pr * pc);
      };
      const std::vector<float> one = run(1), three = run(3);
      INFO(scheme << (nan ? " with a NaN" : ""));
      CHECK(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)) == 0);
      // lib refuses a NaN for both schemes: the whole copy is NaN; else the padded corner is 0.
      const auto nans = std::count_if(one.begin(), one.end(), [](float f) { return std::isnan(f); });
      CHECK(size_t(nans) == (nan ? one.size() : 0));
      CHECK((nan || one.back() == 0.0f));
    }
}

TEST_CASE("block records: made on another thread, they keep their order and merge in call order",
          "[sim][blocks]") {
  // On two or more threads a copy's record is summed on a background thread; the records the
  // step ends with must be the one-thread ones: the same order of first appearance, and
  // merges (binary64 sums) in call order. Copies of "x" (fprop), then a NaN copy of "y" (its
  // record is made at once), then "x" again (merged), then "z".
  std::vector<double> v(96 * 64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(double(i) * 0.37) * std::exp2(double(i % 9));
  std::vector<double> with_nan = v;
  with_nan[5] = std::numeric_limits<double>::quiet_NaN();
  const auto run = [&](int threads) {
    Tracer tracer;
    Runtime rt;
    rt.threads = threads;
    rt.tracer = &tracer;
    tracer.begin_step(0, 1.0);
    BlockCopy c;
    c.scheme = "nvfp4";
    c.gemm = "fprop";
    for (const auto& [name, values] : {std::pair{"x", &v}, std::pair{"y", &with_nan},
                                       std::pair{"x", &v}, std::pair{"z", &v}}) {
      const Values x(*values, false);
      block_copy(rt, c, TraceTag{name, "linear", TraceKind::activation}, x, 96, 64, 96, 64);
    }
    return tracer.end_step().blocks;
  };
  const std::vector<BlockRecord> one = run(1), two = run(2);
  REQUIRE(one.size() == 3);
  REQUIRE(two.size() == one.size());
  for (size_t i = 0; i < one.size(); ++i) {
    INFO(one[i].name);
    CHECK(two[i].name == one[i].name);
    CHECK(two[i].events.elements == one[i].events.elements);
    CHECK(two[i].zero_scales == one[i].zero_scales);
    CHECK(two[i].scale_hist == one[i].scale_hist);
    CHECK(std::memcmp(&two[i].signal, &one[i].signal, sizeof(double)) == 0);
    CHECK(std::memcmp(&two[i].noise, &one[i].noise, sizeof(double)) == 0);
  }
  CHECK(one[0].name == "x");
  CHECK(one[1].name == "y");
  CHECK(one[0].events.elements == 2 * 96 * 64);  // merged
}

TEST_CASE("tracer: a record still pending keeps its place; merges follow the calls",
          "[sim][blocks]") {
  // 1 + 2^-53 + 2^-53 is 1 in binary64 added left to right (ties to even), 1 + 2^-52 when
  // the two small sums come first: the merged signal tells the order.
  const auto record = [](const char* name, double signal) {
    BlockRecord r;
    r.name = name;
    r.gemm = "fprop";
    r.signal = signal;
    return r;
  };
  Tracer t;
  t.begin_step(0, 1.0);
  std::promise<BlockRecord> first;
  t.record_blocks_later(first.get_future());
  t.record_blocks(record("b", 3.0));
  t.record_blocks(record("a", std::ldexp(1.0, -53)));
  t.record_blocks(record("a", std::ldexp(1.0, -53)));
  first.set_value(record("a", 1.0));
  const StepTrace& s = t.end_step();
  REQUIRE(s.blocks.size() == 2);
  CHECK(s.blocks[0].name == "a");
  CHECK(s.blocks[0].signal == 1.0);
  CHECK(s.blocks[1].name == "b");
}

TEST_CASE("add_block_errors: the step's sums alone are the definition's, bit for bit",
          "[sim][blocks]") {
  // The definition written out here: binary64 running sums over the blocks in row-major order,
  // each block's elements in row-major order; zero scales; std::ilogb of the finite non-zero
  // scales. Values span 2^-140..2^20 (fp8_block's fp32 scales of the tiniest blocks are
  // subnormal), with zero blocks and, for MX, a NaN block.
  const size_t rows = 128, cols = 128;
  std::vector<float> x(rows * cols);
  uint32_t state = 12345;
  for (size_t i = 0; i < x.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    const size_t r = i / cols, c = i % cols;  // one magnitude per 32 × 32 tile
    const int exp = int(((r / 32) * 4 + c / 32) % 9) * 20 - 140;
    x[i] = std::ldexp(float(int(state >> 8) - (1 << 23)) / float(1 << 23), exp);
  }
  std::fill(x.begin() + 3 * cols, x.begin() + 4 * cols, 0.0f);
  for (size_t j = 0; j < cols; ++j) x[5 * cols + j] = std::ldexp(float(j + 1), -150);  // tiny
  struct Case {
    const char* scheme;
    BlockAxis axis;
  };
  for (const Case c : {Case{"mxfp8_e4m3", BlockAxis::last}, Case{"mxfp8_e4m3", BlockAxis::first},
                       Case{"nvfp4", BlockAxis::last}, Case{"nvfp4", BlockAxis::first},
                       Case{"nvfp4_2d", BlockAxis::last}, Case{"fp8_block", BlockAxis::last},
                       Case{"fp8_block", BlockAxis::first}}) {
    INFO(c.scheme << " axis " << int(c.axis));
    const BlockScheme s = parse_block_scheme(c.scheme);
    std::vector<float> v = x;
    if (s.family == BlockFamily::mx) v[70] = std::numeric_limits<float>::quiet_NaN();
    BlockOptions o;
    o.axis = c.axis;
    const BlockEncoding e = encode_blocks(s, v.data(), rows, cols, o);
    std::vector<float> q(v.size());
    decode_blocks(s, e, q.data());
    const size_t tr = e.tile_rows, tc = e.tile_cols, sc = e.scale_cols();
    for (size_t block_rows : {e.scale_rows(), e.scale_rows() / 2}) {
      BlockRecord want;
      for (size_t br = 0; br < block_rows; ++br)
        for (size_t bc = 0; bc < sc; ++bc) {
          for (size_t i = br * tr; i < (br + 1) * tr; ++i)
            for (size_t j = bc * tc; j < (bc + 1) * tc; ++j) {
              const double a = v[i * cols + j], d = a - double(q[i * cols + j]);
              want.signal += a * a;
              want.noise += d * d;
            }
          const float scale = e.scales[br * sc + bc];
          if (scale == 0.0f) ++want.zero_scales;
          else if (std::isfinite(scale)) ++want.scale_hist[std::ilogb(scale)];
        }
      BlockRecord sums, each;
      add_block_errors(sums, e, v.data(), q.data(), block_rows);
      size_t seen = 0;
      add_block_errors(each, e, v.data(), q.data(), block_rows, [&](const BlockStat&) { ++seen; });
      CHECK(seen == block_rows * sc);
      for (const BlockRecord* got : {&sums, &each}) {
        CHECK(std::memcmp(&got->signal, &want.signal, sizeof(double)) == 0);
        CHECK(std::memcmp(&got->noise, &want.noise, sizeof(double)) == 0);
        CHECK(got->zero_scales == want.zero_scales);
        CHECK(got->scale_hist == want.scale_hist);
      }
      // NVFP4's scales are relative to the tensor's amax: most of these blocks' are zero.
      if (s.family != BlockFamily::nvfp4 && block_rows > 0) CHECK(want.scale_hist.size() >= 3);
    }
  }
}
