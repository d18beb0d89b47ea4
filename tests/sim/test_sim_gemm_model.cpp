// The vector paths of the in-format and block-FMA GEMMs (sim/src/gemm_model.cpp) against the
// scalar path, which is lib's dot() per element (the definition; tests/lib/test_accumulate.cpp
// checks dot() against an independent oracle). Every accumulation preset, every input format it
// takes, the rounding directions a run may choose, and a floored/variant block model; random
// values and adversarial ones (cancellation to exact zeros, subnormal and underflowing products,
// overflow to infinity or NaN, NaN and infinite operands, signed zeros); shapes that are not
// multiples of any vector width or of the strip, k not a multiple of the block. Each vector path
// this CPU has, and the public gemm() at 1 and 2 threads: 0 differing bits, NaN payloads
// included.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../../sim/src/gemm_model.hpp"
#include "halfway/halfway.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/accumulate.hpp"
#include "test_support.hpp"

using namespace halfway;
using namespace halfway::sim;
using namespace halfway::sim::detail;

namespace {

enum class Values { plain, cancel, tiny, huge, specials };

/// A value of `f`, as binary32: random magnitudes around 1 (or the range `v` stresses).
float value_of(const Format& f, std::mt19937& g, Values v) {
  std::uniform_real_distribution<float> u(1.0f, 2.0f);
  std::uniform_int_distribution<int> e(-6, 6);
  float x = std::ldexp(u(g), e(g)) * (g() % 2 ? 1.0f : -1.0f);
  const int emin = f.emin(), emax = int(f.exp_field_max()) - f.bias - 1;
  if (v == Values::tiny && g() % 2) x = std::ldexp(u(g), emin - int(g() % (f.frac_bits + 2)));
  if (v == Values::huge && g() % 3 == 0) x = std::ldexp(u(g), emax - int(g() % 3));
  if (v == Values::specials && g() % 5 == 0) {
    const float pool[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), std::ldexp(1.0f, emin - 1),
                          std::ldexp(1.5f, emax)};
    x = pool[g() % 7];
  }
  if (v == Values::cancel && g() % 4 == 0) x = g() % 2 ? 0.0f : -0.0f;
  Env env;
  return to_f32(f, from_f32(f, x, env), env);
}

struct Operands {
  std::vector<float> A, B, bias;
};

/// A m×k, B k×n, bias n. `cancel`: consecutive steps repeat a and negate b, so chains return to
/// exact zeros and cancel (and cancel across block boundaries).
Operands operands(const Format& in, const Format& acc, int64_t m, int64_t n, int64_t k,
                  std::mt19937& g, Values v) {
  Operands o{std::vector<float>(size_t(m * k)), std::vector<float>(size_t(k * n)),
             std::vector<float>(size_t(n))};
  for (auto& x : o.A) x = value_of(in, g, v);
  for (auto& x : o.B) x = value_of(in, g, v);
  for (auto& x : o.bias) x = value_of(acc, g, v == Values::specials ? v : Values::plain);
  if (v == Values::cancel)
    for (int64_t kk = 1; kk < k; kk += 2) {
      for (int64_t i = 0; i < m; ++i) o.A[size_t(i * k + kk)] = o.A[size_t(i * k + kk - 1)];
      for (int64_t j = 0; j < n; ++j) o.B[size_t(kk * n + j)] = -o.B[size_t((kk - 1) * n + j)];
    }
  return o;
}

std::vector<uint32_t> encode(const Format& f, const std::vector<float>& x) {
  std::vector<uint32_t> e(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    Env env;
    e[i] = from_f32(f, x[i], env);
  }
  return e;
}

int64_t count_differing(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t bad = 0;
  for (size_t e = 0; e < a.size(); ++e) bad += std::memcmp(&a[e], &b[e], 4) != 0;
  return bad;
}

/// The first differing element and its chain's operands, for a failure message.
std::string first_difference(const std::vector<float>& got, const std::vector<float>& want,
                             const Operands& op, int64_t n, int64_t k) {
  for (size_t e = 0; e < got.size(); ++e)
    if (std::memcmp(&got[e], &want[e], 4) != 0) {
      const int64_t i = int64_t(e) / n, j = int64_t(e) % n;
      char buf[96];
      std::snprintf(buf, sizeof buf, "element (%lld, %lld): %a, want %a; a·b:", (long long)i,
                    (long long)j, double(got[e]), double(want[e]));
      std::string s = buf;
      for (int64_t kk = 0; kk < k; ++kk) {
        std::snprintf(buf, sizeof buf, " %a·%a", double(op.A[size_t(i * k + kk)]),
                      double(op.B[size_t(kk * n + j)]));
        s += buf;
      }
      return s;
    }
  return "none";
}

std::vector<GemmModelPath> vector_paths() {
  std::vector<GemmModelPath> p{GemmModelPath::generic};
  if (gemm_model_best_vector_path() != GemmModelPath::generic) p.push_back(GemmModelPath::avx2);
  if (gemm_model_best_vector_path() == GemmModelPath::avx512) p.push_back(GemmModelPath::avx512);
  return p;
}

struct Tally {
  int64_t cases = 0, elements = 0, bad = 0;
};

/// One GEMM: the scalar path against every vector path (rows by gemm_model_rows) and the public
/// gemm() at 1 and 2 threads.
void compare(const AccumulationModel& model, const Format& in, int64_t m, int64_t n, int64_t k,
             const Operands& op, bool bias, const BulkOptions& o, const std::string& what,
             Tally& t) {
  REQUIRE(gemm_model_vectorizable(model, in, o));
  const auto ea = encode(in, op.A), eb = encode(in, op.B), ebias = encode(model.acc, op.bias);
  std::vector<uint32_t> ebt(size_t(n * k));
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) ebt[size_t(j * k + kk)] = eb[size_t(kk * n + j)];
  std::vector<float> want(size_t(m * n), 7.0f);
  const GemmModel g{model, in, n, k, ea.data(), ebt.data(), bias ? ebias.data() : nullptr,
                    op.A.data(), op.B.data(), want.data(), o};
  gemm_model_rows(g, 0, m, GemmModelPath::scalar);
  for (GemmModelPath p : vector_paths()) {
    std::vector<float> got(size_t(m * n), 9.0f);
    GemmModel gv = g;
    gv.C = got.data();
    gemm_model_rows(gv, 0, m, p);
    const int64_t bad = count_differing(got, want);
    INFO(what << " path " << gemm_model_path_name(p) << " m=" << m << " n=" << n << " k=" << k
              << " bias=" << bias << " " << (bad ? first_difference(got, want, op, n, k) : ""));
    CHECK(bad == 0);
    t.bad += bad;
    ++t.cases;
    t.elements += m * n;
  }
  for (int threads : {1, 2}) {
    std::vector<float> got(size_t(m * n), 9.0f);
    gemm(model, in, m, n, k, op.A.data(), op.B.data(), bias ? op.bias.data() : nullptr,
         got.data(), o, threads);
    const int64_t bad = count_differing(got, want);
    INFO(what << " gemm() threads=" << threads << " m=" << m << " n=" << n << " k=" << k);
    CHECK(bad == 0);
    t.bad += bad;
  }
}

/// Every shape class and value class for one model and input format.
void sweep(const AccumulationModel& model, const Format& in, const BulkOptions& o,
           const std::string& what, Tally& t, uint32_t seed) {
  std::mt19937 g(seed);
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 1, 1}, {2, 7, 5}, {3, 17, 37}, {2, 33, 16}, {1, 600, 19},
                          {2, 40, 70}, {1, 5, 0}};
  for (const Shape& s : shapes)
    for (Values v : {Values::plain, Values::cancel, Values::tiny, Values::huge, Values::specials}) {
      const Operands op = operands(in, model.acc, s.m, s.n, s.k, g, v);
      compare(model, in, s.m, s.n, s.k, op, g() % 2 == 0, o,
              what + " values " + std::to_string(int(v)), t);
    }
  // Enough work for gemm() to split rows between 2 threads.
  const Operands op = operands(in, model.acc, 64, 48, 24, g, Values::plain);
  compare(model, in, 64, 48, 24, op, true, o, what + " threaded", t);
}

void report(const char* name, const Tally& t) {
  std::printf("%s: %lld cases, %lld elements, %lld differing (paths:", name, (long long)t.cases,
              (long long)t.elements, (long long)t.bad);
  for (GemmModelPath p : vector_paths()) std::printf(" %s", gemm_model_path_name(p));
  std::printf(")\n");
}

void skip_missing_paths() {
  if (vector_paths().size() < 3)
    halfway_test::skip("this CPU has no AVX2 or no AVX-512: those vector paths were not compared");
}

}  // namespace

TEST_CASE("in-format vector paths give the scalar model's bits", "[sim][gemm]") {
  Tally t;
  const Rounding roundings[] = {Rounding::near_even, Rounding::near_maxMag, Rounding::minMag,
                                Rounding::min, Rounding::max, Rounding::odd};
  uint32_t seed = 1;
  // torch-cpu's small GEMMs resolve into the unfused model (its large ones into fp32).
  for (const char* name : {"in-format", "in-format-unfused", "torch-cpu"})
    for (const Format& f : {formats::fp16, formats::bf16, formats::e4m3, formats::e5m2})
      for (Rounding r : roundings) {
        BulkOptions o;
        o.rounding = r;
        const AccumulationModel model =
            accumulator_by_name(name).resolve(DType::low(f), 2, 2, 2, Layout::nn, o);
        sweep(model, f, o, std::string(name) + " " + format_name(f) + " " + rounding_name(r), t,
              seed++);
      }
  report("in-format", t);
  CHECK(t.bad == 0);
  skip_missing_paths();
}

TEST_CASE("block-FMA vector paths give the scalar model's bits", "[sim][gemm]") {
  Tally t;
  uint32_t seed = 100;
  const BulkOptions o;
  std::vector<std::pair<std::string, AccumulationModel>> models;
  for (const char* name : {"v100", "a100", "h100", "h100-fp16", "h100-fp8"})
    models.emplace_back(name, accumulator_by_name(name).resolve(DType::low(formats::fp16), 2, 2,
                                                                  2, Layout::nn, o));
  // Variants the presets do not cover: two's-complement (floored) alignment, directed and
  // nearest rounding of the block sum, a partial last block, many kept bits.
  AccumulationModel floored = accumulation::a100_fp32;
  floored.floor_alignment = true;
  models.emplace_back("a100 floored", floored);
  for (Rounding r : {Rounding::near_even, Rounding::min, Rounding::max}) {
    AccumulationModel v = accumulation::h100_fp32;
    v.rounding = r;
    v.block = 5;
    v.kept_bits = 40;
    models.emplace_back(std::string("block 5 kept 40 ") + rounding_name(r), v);
  }
  AccumulationModel f16 = accumulation::h100_fp16;
  f16.rounding = Rounding::minMag;
  f16.floor_alignment = true;
  models.emplace_back("h100-fp16 floored rtz", f16);
  for (const auto& [name, model] : models)
    for (const Format& in : {formats::fp16, formats::bf16, formats::e4m3, formats::e5m2})
      sweep(model, in, o, name + " " + format_name(in), t, seed++);
  report("block FMA", t);
  CHECK(t.bad == 0);
  skip_missing_paths();
}

TEST_CASE("models without a proven vector path stay scalar", "[sim][gemm]") {
  BulkOptions o;
  o.rounding = Rounding::stochastic;
  CHECK_FALSE(gemm_model_vectorizable(
      accumulator_by_name("in-format").resolve(DType::low(formats::fp16), 2, 2, 2, Layout::nn, o),
      formats::fp16, o));
  const BulkOptions rne;
  CHECK_FALSE(gemm_model_vectorizable(accumulation::avx512_dpbf16, formats::bf16, rne));
  CHECK_FALSE(gemm_model_vectorizable(accumulation::fp32_sequential, accumulation::kF32, rne));
  AccumulationModel ftz = accumulation::a100_fp32;
  ftz.ftz = true;
  CHECK_FALSE(gemm_model_vectorizable(ftz, formats::fp16, rne));
  CHECK_FALSE(gemm_model_vectorizable(accumulation::a100_fp32, formats::e4m3fnuz, rne));
  CHECK(gemm_model_vectorizable(accumulation::a100_fp32, formats::fp16, rne));
}
