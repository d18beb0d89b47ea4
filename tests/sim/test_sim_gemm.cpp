// The simulator's GEMM.
// (1) The fp32 sequential-FMA GEMM's fast paths (sim/src/gemm_f32.cpp) against the definition,
//     an independent per-element loop: c = fma(a[i][kk], b[kk][j], c) for kk = 0..k-1 from +0,
//     then c + bias[j]. Every path this CPU has, on every shape class (whole tiles, partial row
//     blocks, vector and scalar column tails, k = 0) and on special values (±0, subnormals,
//     ±inf, NaN, huge products that overflow): identical bits, NaN for NaN.
// (2) Every named accumulation resolves into lib's AccumulationModel, and a block-FMA GEMM
//     gives lib's dot per element. (3) The persistent thread pool: every part exactly once,
//     nested and concurrent callers, and GEMMs with the same bits at any thread count.
#include <catch2/catch.hpp>

#include <atomic>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "../../sim/src/gemm_f32.hpp"
#include "halfway/cpu.hpp"
#include "halfway/halfway.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/accumulate.hpp"
#include "halfway/thread_pool.hpp"
#include "test_support.hpp"

using namespace halfway::sim::detail;

namespace {

std::vector<float> values(size_t n, std::mt19937& g, bool specials) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const float pool[] = {0.0f, -0.0f, 1e-40f, -3e-39f, std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(), 3e38f, -2e38f, 1.0f};
  std::vector<float> v(n);
  for (auto& x : v) x = specials && g() % 23 == 0 ? pool[g() % 10] : u(g);
  return v;
}

/// The fp32 GEMM's definition: one FMA chain per element from +0, in k order, then + bias.
std::vector<float> definition(const std::vector<float>& A, const std::vector<float>& B,
                              const float* bias, int64_t m, int64_t n, int64_t k) {
  std::vector<float> want(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float c = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) c = std::fma(A[size_t(i * k + kk)], B[size_t(kk * n + j)], c);
      want[size_t(i * n + j)] = bias ? c + bias[j] : c;
    }
  return want;
}

bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

}  // namespace

TEST_CASE("fp32 GEMM fast paths give the definition's bits", "[sim][gemm]") {
  std::vector<GemmF32Path> paths{GemmF32Path::scalar};
  if (gemm_f32_best_path() != GemmF32Path::scalar) paths.push_back(GemmF32Path::avx2);
  if (gemm_f32_best_path() == GemmF32Path::avx512) paths.push_back(GemmF32Path::avx512);
  std::mt19937 g(7);
  int64_t cases = 0, elements = 0;
  for (int64_t m : {1, 5, 6, 7, 13})
    for (int64_t n : {1, 7, 8, 15, 16, 31, 32, 33, 70})
      for (int64_t k : {0, 1, 5, 64})
        for (bool specials : {false, true})
          for (bool bias : {false, true}) {
            const auto A = values(size_t(m * k), g, specials);
            const auto B = values(size_t(k * n), g, specials);
            const auto bv = values(size_t(n), g, specials);
            const std::vector<float> want = definition(A, B, bias ? bv.data() : nullptr, m, n, k);
            for (GemmF32Path p : paths) {
              std::vector<float> C(size_t(m * n), 12345.0f);
              const GemmF32 args{n, k, A.data(), B.data(), bias ? bv.data() : nullptr, C.data()};
              gemm_f32_rows(args, 0, m, p);
              int64_t bad = 0;
              for (size_t e = 0; e < C.size(); ++e) bad += !same(C[e], want[e]);
              INFO(gemm_f32_path_name(p) << " m=" << m << " n=" << n << " k=" << k);
              CHECK(bad == 0);
              ++cases;
              elements += m * n;
            }
          }
  std::printf("fp32 GEMM: %lld cases, %lld elements on paths:", (long long)cases,
              (long long)elements);
  for (GemmF32Path p : paths) std::printf(" %s", gemm_f32_path_name(p));
  std::printf(", 0 differing bits expected\n");
  if (paths.size() < 3)
    halfway_test::skip(std::string("this CPU has no ") +
                       (paths.size() == 1 ? "AVX2+FMA or AVX-512" : "AVX-512") +
                       ": those GEMM paths were not compared");
}

TEST_CASE("fp32 GEMM with packed B panels: the definition's bits, in any split of the rows",
          "[sim][gemm]") {
  // B larger than L1 (k · n > 16 Ki floats) and two or more 6-row blocks: the whole tiles read
  // packed panels, 8 blocks of rows at a time; the rest of the rows and columns read B itself.
  const GemmF32Path best = gemm_f32_best_path();
  if (best == GemmF32Path::scalar) {
    halfway_test::skip("this CPU has no AVX2+FMA or AVX-512");
    return;
  }
  std::vector<GemmF32Path> paths{GemmF32Path::avx2};
  if (best == GemmF32Path::avx512) paths.push_back(GemmF32Path::avx512);
  std::mt19937 g(11);
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{61, 101, 260}, {13, 290, 64},
                                {110, 67, 300}, {12, 2048, 9}})
    for (bool specials : {false, true}) {
      const auto A = values(size_t(m * k), g, specials);
      const auto B = values(size_t(k * n), g, specials);
      const auto bv = values(size_t(n), g, specials);
      const std::vector<float> want = definition(A, B, bv.data(), m, n, k);
      for (GemmF32Path p : paths)
        for (int64_t split : {int64_t(0), int64_t(5), m / 2}) {  // rows [0, split), [split, m)
          std::vector<float> C(size_t(m * n), 12345.0f);
          const GemmF32 args{n, k, A.data(), B.data(), bv.data(), C.data()};
          gemm_f32_rows(args, 0, split, p);
          gemm_f32_rows(args, split, m, p);
          int64_t bad = 0;
          for (size_t e = 0; e < C.size(); ++e) bad += !same(C[e], want[e]);
          INFO(gemm_f32_path_name(p) << " m=" << m << " n=" << n << " k=" << k << " split "
                                     << split);
          CHECK(bad == 0);
        }
    }
  if (best != GemmF32Path::avx512) halfway_test::skip("this CPU has no AVX-512: only AVX2 ran");
}

TEST_CASE("transposing a GEMM operand moves every value, in 16 x 16 blocks and without", "[sim][gemm]") {
  const bool avx512 = halfway::cpu::target() == halfway::cpu::Target::avx512;
  for (bool vector : {true, false}) {
    const uint32_t before = halfway::cpu::set_disabled_for_test(vector ? 0u : halfway::cpu::avx512f);
    for (int64_t rows : {1, 15, 16, 17, 33, 100, 300})
      for (int64_t cols : {1, 7, 16, 31, 48, 70, 230})
        for (int threads : {1, 3}) {  // 300 × 230: strips of columns in parts on the pool
          std::vector<float> src(size_t(rows * cols)), dst(size_t(rows * cols), -1.0f);
          for (size_t i = 0; i < src.size(); ++i) src[i] = float(i) + 0.5f;
          transpose_f32(src.data(), rows, cols, dst.data(), threads);  // src is cols × rows
          int64_t bad = 0;
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j)
              bad += dst[size_t(i * cols + j)] != src[size_t(j * rows + i)];
          INFO((vector ? "vector" : "portable") << " rows=" << rows << " cols=" << cols
                                                << " threads=" << threads);
          CHECK(bad == 0);
        }
    halfway::cpu::set_disabled_for_test(before);
  }
  if (!avx512) halfway_test::skip("this CPU has no AVX-512: the 16 x 16 blocks did not run");
}

TEST_CASE("every named accumulation resolves into lib's model, and block FMAs follow lib's dot",
          "[sim][gemm]") {
  using namespace halfway;
  using namespace halfway::sim;
  const DType f16 = DType::low(formats::fp16);
  BulkOptions o;
  // Names and what they resolve to for an fp16 GEMM (and fp32 ones always sequential fp32).
  CHECK(accumulation_names().size() == 16);
  for (const std::string& name : accumulation_names()) {
    const AccumulationModel f32 =
        accumulator_by_name(name).resolve(DType::f32(), 4, 4, 4, Layout::nn, o);
    CHECK(f32.kind == AccumulationModel::Kind::sequential_fma);
    CHECK(f32.acc == accumulation::kF32);
  }
  CHECK(accumulator_by_name("in-format").resolve(f16, 4, 4, 4, Layout::nn, o).acc == formats::fp16);
  CHECK(accumulator_by_name("torch-cpu").resolve(f16, 16, 16, 17, Layout::nn, o).acc ==
        accumulation::kF32);
  CHECK(accumulator_by_name("torch-cpu").resolve(f16, 4, 4, 4, Layout::nn, o).kind ==
        AccumulationModel::Kind::sequential);
  CHECK(accumulator_by_name("a100").resolve(f16, 4, 4, 4, Layout::nn, o).block == 8);
  CHECK_THROWS_AS(accumulator_by_name("tpu"), InputError);

  // gemm() under each block preset: per element, lib's dot from +0, then + bias in the
  // accumulator format with round-to-nearest-even.
  std::mt19937 g(3);
  std::uniform_int_distribution<int> e(-12, 12);
  std::uniform_real_distribution<float> u(1.0f, 2.0f);
  const int64_t m = 3, n = 5, k = 37;
  auto fp16_values = [&](size_t cnt) {
    std::vector<float> v(cnt);
    for (auto& x : v) {
      Env env;
      x = to_f32(formats::fp16,
                 from_f32(formats::fp16, std::ldexp(u(g), e(g)) * (g() % 2 ? 1.0f : -1.0f), env),
                 env);
    }
    return v;
  };
  const auto A = fp16_values(size_t(m * k)), B = fp16_values(size_t(k * n)),
             bias = fp16_values(size_t(n));
  for (const char* name : {"v100", "a100", "h100", "h100-fp16", "mmasim-volta", "mmasim-ampere",
                           "mmasim-hopper", "mmasim-hopper-fp16", "amx-bf16", "avx512-dpbf16"}) {
    const AccumulationModel model = accumulator_by_name(name).resolve(f16, m, n, k, Layout::nn, o);
    std::vector<float> C(size_t(m * n)), F(size_t(m * n));
    gemm(model, formats::fp16, m, n, k, A.data(), B.data(), bias.data(), C.data(), o, 1);
    gemm(accumulation::fp32_sequential, formats::fp16, m, n, k, A.data(), B.data(), bias.data(),
         F.data(), o, 1);
    int64_t bad = 0, differs = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        std::vector<uint32_t> a(static_cast<size_t>(k)), b(static_cast<size_t>(k));
        Env env;
        for (int64_t kk = 0; kk < k; ++kk) {
          a[size_t(kk)] = from_f32(formats::fp16, A[size_t(i * k + kk)], env);
          b[size_t(kk)] = from_f32(formats::fp16, B[size_t(kk * n + j)], env);
        }
        uint32_t acc = dot(model, formats::fp16, a.data(), b.data(), int(k), 0, env);
        Env rne;
        acc = halfway::add(model.acc, acc, from_f32(model.acc, bias[size_t(j)], rne), rne);
        bad += !same(C[size_t(i * n + j)], to_f32(model.acc, acc, rne));
        differs += !same(C[size_t(i * n + j)], F[size_t(i * n + j)]);
      }
    INFO(name << ": " << differs << " of " << m * n << " elements differ from fp32 accumulation");
    CHECK(bad == 0);
    CHECK(differs > 0);  // the model is really applied: its truncation shows on these values
  }
}

TEST_CASE("the persistent thread pool runs every part once, deterministically", "[sim][pool]") {
  using halfway::ThreadPool;
  ThreadPool& pool = ThreadPool::global();
  for (int parts : {1, 2, 3, 8, 17}) {
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(parts));
      pool.run(parts, [&](int p) { hits[size_t(p)]++; });
      int bad = 0;
      for (auto& h : hits) bad += h.load() != 1;
      REQUIRE(bad == 0);
    }
  }
  // A run from inside a part runs inline; two callers at once are served one after the other.
  std::atomic<int> inner{0};
  pool.run(4, [&](int) { pool.run(3, [&](int) { inner++; }); });
  CHECK(inner == 12);
  std::atomic<int> total{0};
  std::thread other([&] {
    for (int i = 0; i < 100; ++i) pool.run(3, [&](int) { total++; });
  });
  for (int i = 0; i < 100; ++i) pool.run(5, [&](int) { total++; });
  other.join();
  CHECK(total == 800);
  // A GEMM split over 1, 2, 3 and 8 threads: the same bits.
  const int64_t m = 301, n = 67, k = 129;
  std::mt19937 g(11);
  const auto A = values(size_t(m * k), g, true), B = values(size_t(k * n), g, true);
  std::vector<float> ref(size_t(m * n));
  halfway::sim::gemm(halfway::accumulation::fp32_sequential, halfway::accumulation::kF32, m, n, k,
                     A.data(), B.data(), nullptr, ref.data(), {}, 1);
  for (int threads : {2, 3, 8}) {
    std::vector<float> C(size_t(m * n));
    halfway::sim::gemm(halfway::accumulation::fp32_sequential, halfway::accumulation::kF32, m, n,
                       k, A.data(), B.data(), nullptr, C.data(), {}, threads);
    int64_t bad = 0;
    for (size_t e = 0; e < C.size(); ++e) bad += !same(C[e], ref[e]);
    INFO(threads << " threads");
    CHECK(bad == 0);
  }
}

TEST_CASE("fp8 GEMMs accumulate as Transformer Engine's do under Hopper names", "[sim][gemm]") {
  using namespace halfway;
  using namespace halfway::sim;
  for (const char* name : {"fp32", "in-format", "torch-cpu", "v100", "a100", "mmasim-volta",
                           "mmasim-ampere", "amx-bf16"})
    for (Fp8Gemm g : {Fp8Gemm::fprop, Fp8Gemm::dgrad, Fp8Gemm::wgrad}) {
      const AccumulationModel m = fp8_gemm_model(accumulator_by_name(name), g);
      CHECK(m.kind == AccumulationModel::Kind::sequential_fma);  // exact fp32, as before
      CHECK(m.acc == accumulation::kF32);
    }
  for (const char* name : {"h100", "h100-fp16", "h100-fp8", "mmasim-hopper", "mmasim-hopper-fp16",
                           "mmasim-hopper-fp8"}) {
    const Accumulation& acc = accumulator_by_name(name);
    const AccumulationModel f = fp8_gemm_model(acc, Fp8Gemm::fprop);
    const bool mmasim = std::string(name).rfind("mmasim", 0) == 0;
    CHECK(f.kind == AccumulationModel::Kind::block_fma);
    CHECK(f.block == 32);
    CHECK(f.kept_bits == 13);
    CHECK(f.promote == 0);  // fast accumulation: the whole K in the fp8 accumulator
    CHECK(f.unnormalized_alignment == mmasim);
    CHECK(int(f.step_frac_bits) == (mmasim ? 13 : 0));
    for (Fp8Gemm g : {Fp8Gemm::dgrad, Fp8Gemm::wgrad})
      CHECK(fp8_gemm_model(acc, g).promote == kFp8SplitPromotion);  // split accumulator
  }
  // Mixed operands: e4m3 with e5m2 is given as e5m3, which holds both exactly.
  const Format mixed = fp8_gemm_format(formats::e4m3, formats::e5m2);
  CHECK(mixed.exp_bits == 5);
  CHECK(mixed.frac_bits == 3);
  CHECK(fp8_gemm_format(formats::e4m3, formats::e4m3) == formats::e4m3);
  for (uint32_t e = 0; e < 256; ++e)
    for (const Format& f : {formats::e4m3, formats::e5m2}) {
      Env env;
      const float v = to_f32(f, e, env);
      if (std::isnan(v)) continue;
      CHECK(to_f32(mixed, from_f32(mixed, v, env), env) == v);
    }
}
