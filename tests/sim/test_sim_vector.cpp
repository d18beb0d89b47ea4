// The simulator's AVX-512 kernels against their definitions.
//
// GELU (sim/src/gelu_simd.cpp) against the definition, restated here as the
// simulator has always computed it: y = fl32(0.5·x·(1 + erf(x/√2))) and the gradient
// fl32(g·(0.5·(1 + erf(x/√2)) + x·(1/√(2π))·exp(−x²/2))), in binary64 with glibc's erf and exp.
// (1) The two hypotheses the kernels' proof rests on: the table values lie within 2^-50 of
//     glibc's erf(x/√2) and of the derivative chain, 16 times inside the 2^-46 margin; on a
//     spread sample here, on every fp32 input below 8 in magnitude under `exhaustive`.
// (2) The kernels' results, bit for bit, on the same inputs and on special values (±0,
//     subnormals, ±inf, NaN, |x| ≥ 8), with gradients of every class; and that the table
//     decides almost every element (else the kernel would be correct and no faster).
// (3) sim::gelu on an fp32 tensor, forward and backward, with and without AVX-512.
//
// Adam's element loop (sim/src/adam_rows.cpp) against its scalar loop, the code optim.cpp ran
// before, on every option (Adam, AdamW, L2 weight decay, Kahan) and on special values (±0,
// subnormals, ±inf, NaN in the gradient and the state), with tails and in parts on two
// threads: identical bits, NaNs included.
//
// The tracer's fused pass (sim/src/trace_simd.cpp) against add_values and add_rounding, the
// tracer's definition: the same record on values of every class, formats and lengths.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "../../sim/src/adam_rows.hpp"
#include "../../sim/src/gelu_simd.hpp"
#include "halfway/cpu.hpp"
#include "halfway/softfloat.hpp"
#include "halfway/bulk.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/ops.hpp"
#include "halfway/sim/tracer.hpp"
#include "test_support.hpp"

using namespace halfway::sim;
using halfway::bits_f32;
using halfway::f32_bits;

namespace {

double erf_part(double v) { return std::erf(v / 1.41421356237309504880); }
float forward(float x) {
  const double v = x;
  return static_cast<float>(0.5 * v * (1.0 + erf_part(v)));
}
double derivative(double v) {
  return 0.5 * (1.0 + erf_part(v)) + v * 0.39894228040143267794 * std::exp(-0.5 * v * v);
}
float backward(float g, float x) { return static_cast<float>(double(g) * derivative(x)); }

/// Identical bits; any NaN for a NaN (the payload is the hardware's, in both).
bool same(float a, float b) { return std::isnan(a) ? std::isnan(b) : f32_bits(a) == f32_bits(b); }

bool need_avx512() {
  if (halfway::cpu::target() == halfway::cpu::Target::avx512) return true;
  halfway_test::skip("the GELU table kernels need AVX-512; this CPU runs the scalar chain only");
  return false;
}

/// A gradient for input x: every class (zeros, subnormals, huge, ±inf, NaN) among ordinary ones.
float gradient_for(uint32_t i) {
  const uint32_t h = (i * 0x9E3779B1u) ^ (i >> 15);
  switch (h % 61) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return std::numeric_limits<float>::infinity();
    case 3: return std::numeric_limits<float>::quiet_NaN();
    case 4: return bits_f32(h >> 9);                   // a subnormal
    case 5: return bits_f32(0x7f000000u | (h >> 9));  // huge
    default: return bits_f32((h & 0x80000000u) | 0x3c000000u | (h >> 9 & 0x7fffffu)) * 64;
  }
}

struct Tally {
  double worst_e = 0, worst_d = 0;
  size_t covered = 0, mismatches = 0, called = 0, called_grad = 0, n = 0;
  void add(const Tally& o) {
    worst_e = std::max(worst_e, o.worst_e), worst_d = std::max(worst_d, o.worst_d);
    covered += o.covered, mismatches += o.mismatches, called += o.called;
    called_grad += o.called_grad, n += o.n;
  }
};

/// Checks (1) and (2) on the inputs x.
Tally check(const std::vector<float>& x) {
  const size_t n = x.size();
  std::vector<double> e(n), d(n);
  std::vector<float> g(n), y(n), dx(n);
  for (size_t i = 0; i < n; ++i) g[i] = gradient_for(f32_bits(x[i]));
  Tally t;
  t.n = n;
  detail::gelu_erf_table_values(x.data(), n, e.data(), d.data());
  t.called = detail::gelu_erf_rows(x.data(), n, y.data());
  t.called_grad = detail::gelu_erf_grad_rows(g.data(), x.data(), n, dx.data());
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    if (std::fabs(v) < 8) {
      ++t.covered;
      t.worst_e = std::max(t.worst_e, std::fabs(e[i] - erf_part(v)));
      t.worst_d = std::max(t.worst_d, std::fabs(d[i] - derivative(v)));
    } else if (!std::isnan(e[i]) || !std::isnan(d[i])) {
      ++t.mismatches;  // past the tables, the kernels must not use them
    }
    if (!same(y[i], forward(x[i])) || !same(dx[i], backward(g[i], x[i]))) ++t.mismatches;
  }
  return t;
}

void require_tally(const Tally& t) {
  INFO("inputs " << t.n << ", below 8 in magnitude " << t.covered << ", worst |e - erf| 2^"
                 << std::log2(t.worst_e) << ", worst |d - D| 2^" << std::log2(t.worst_d)
                 << ", scalar calls " << t.called << " forward, " << t.called_grad << " backward");
  CHECK(t.mismatches == 0);
  CHECK(t.worst_e <= 0x1p-50);
  CHECK(t.worst_d <= 0x1p-50);
  // Outside the tables every element calls the scalar chain. Inside, the margin sends there
  // the values within 2^-46 of a rounding boundary, and, forward, most x below about -5,
  // where 1 + erf(x/√2) < 10^-6 carries the margin into the fp32 result: on every fp32 input
  // 1.07% of those below 8 in magnitude, on the sample far fewer. At most 2 in 100.
  CHECK(t.called <= (t.n - t.covered) + t.covered / 50);
  CHECK(t.called_grad <= (t.n - t.covered) + t.covered / 50);
}

}  // namespace

TEST_CASE("GELU table kernels: a spread of fp32 inputs, bit for bit", "[avx512]") {
  if (!need_avx512()) return;
  std::vector<float> x;
  // Every 4099th encoding (all exponents, both signs), then the region activations live in.
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) x.push_back(bits_f32(uint32_t(u)));
  std::mt19937 r(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int i = 0; i < 1 << 20; ++i) x.push_back(normal(r));
  for (float s : {0.0f, -0.0f, 8.0f, -8.0f, 7.9999995f, -7.9999995f, 1e-45f, -1e-45f, 1e-38f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), 3.4e38f, -3.4e38f})
    x.push_back(s);
  // Interval edges: every multiple of 1/2 and its neighbours.
  for (int k = -16; k <= 16; ++k)
    for (int dlt = -3; dlt <= 3; ++dlt) x.push_back(bits_f32(uint32_t(int64_t(f32_bits(0.5f * float(k))) + dlt)));
  require_tally(check(x));
}

TEST_CASE("GELU table kernels: every fp32 input", "[.][exhaustive][avx512]") {
  if (!need_avx512()) return;
  constexpr uint64_t kParts = 256, kPart = (uint64_t(1) << 32) / kParts;
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<Tally> part(threads);
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      std::vector<float> x(kPart);
      for (uint64_t p = w; p < kParts; p += threads) {
        for (uint64_t i = 0; i < kPart; ++i) x[i] = bits_f32(uint32_t(p * kPart + i));
        part[w].add(check(x));
      }
    });
  for (auto& th : pool) th.join();
  Tally all;
  for (const Tally& t : part) all.add(t);
  CHECK(all.n == (uint64_t(1) << 32));
  require_tally(all);
}

TEST_CASE("sim::gelu on fp32: the same bits with and without AVX-512", "[avx512]") {
  if (!need_avx512()) return;
  std::mt19937 r(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> xs(4099), gs(4099);
  for (auto& v : xs) v = normal(r);
  for (size_t i = 0; i < gs.size(); ++i) gs[i] = gradient_for(uint32_t(i * 7919));
  const auto run = [&](bool vector) {
    const uint32_t old = halfway::cpu::set_disabled_for_test(vector ? 0u : halfway::cpu::avx512f);
    const Shape shape{int64_t(xs.size())};
    const Tensor x = Tensor::from(shape, std::vector<double>(xs.begin(), xs.end()), DType::f32(), true);
    const Tensor y = gelu(x, GeluApprox::none);
    // The gradient reaching y is w·1, exactly gs.
    sum(mul(y, Tensor::from(shape, std::vector<double>(gs.begin(), gs.end()), DType::f32()))).backward();
    halfway::cpu::set_disabled_for_test(old);
    std::vector<float> out(y.data().f32(), y.data().f32() + xs.size());
    out.insert(out.end(), x.grad().f32(), x.grad().f32() + xs.size());
    return out;
  };
  const std::vector<float> vec = run(true), scalar = run(false);
  REQUIRE(vec.size() == scalar.size());
  size_t differ = 0;
  for (size_t i = 0; i < vec.size(); ++i) differ += !same(vec[i], scalar[i]);
  CHECK(differ == 0);
}

TEST_CASE("Adam element loop: the vector path gives the scalar loop's bits", "[avx512]") {
  if (!need_avx512()) return;
  std::mt19937 r(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float specials[] = {0.0f, -0.0f, 1e-41f, -1e-44f, 3e38f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), bits_f32(0x7fc12345u)};
  const auto fill = [&](std::vector<float>& v, float scale, bool nonnegative, int rare) {
    for (auto& x : v) {
      x = r() % 997 < unsigned(rare) ? specials[r() % 9] : normal(r) * scale;
      if (nonnegative) x = std::fabs(x);
    }
  };
  size_t cases = 0;
  for (int variant = 0; variant < 6; ++variant)
    for (size_t n : {size_t(1), size_t(15), size_t(16), size_t(17), size_t(1000), size_t(70001)})
      for (int rare : {0, 30}) {
        detail::AdamScalars s{};
        s.adamw = variant % 3 == 1;
        s.kahan = variant >= 3;
        s.wd = variant % 3 == 0 ? 0.0f : 0.01f;
        s.decay = 1.0f - 1e-3f * s.wd;
        s.decays = s.adamw;
        s.b1 = 0.9f, s.c1 = 0.1f, s.b2 = 0.999f, s.c2 = 0.001f;
        s.bc2_sqrt = std::sqrt(0.001999f), s.eps = 1e-8f, s.step_size_neg = -0.01f;
        if (variant == 5) s.step_size_neg = 0.0f;
        std::vector<float> g(n), old(n), m(n), v(n);
        fill(g, 1e-3f, false, rare), fill(old, 1.0f, false, rare), fill(m, 1e-3f, false, rare);
        fill(v, 1e-6f, true, rare);
        const auto run = [&](bool vector) {
          std::vector<float> p = old, mm = m, vv = v, du(n, -1.0f);
          std::vector<uint8_t> nz(n, 2);
          const detail::AdamArrays a{n, g.data(), old.data(), p.data(), mm.data(), vv.data(),
                                     s.kahan ? du.data() : nullptr, nz.data()};
          if (vector) detail::adam_rows(s, a, n > 1000 ? 2 : 1);  // parts on the pool
          else detail::adam_rows_scalar(s, a, 0, n);
          std::vector<uint32_t> out;
          for (const auto* vec : {&p, &mm, &vv, &du})
            for (float f : *vec) out.push_back(f32_bits(f));
          for (uint8_t b : nz) out.push_back(b);
          return out;
        };
        CHECK(run(true) == run(false));
        ++cases;
      }
  CHECK(cases == 72);
}

// ---------------------------------------------------------------------------------------------
// The tracer's fused pass (sim/src/trace_simd.cpp) against add_values and add_rounding: the
// same record, every field, on values of every class, over several formats and lengths (tails,
// passes and chunks of 2^16).

namespace {

/// Values of every class the tracer sorts: ordinary values of a wide spread of magnitudes,
/// values beyond the formats' ranges, zeros, subnormals, exact powers of two, ±inf, NaN.
std::vector<float> tracer_values(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    const uint32_t h = g();
    switch (h % 41) {
      case 0: x = 0.0f; break;
      case 1: x = -0.0f; break;
      case 2: x = std::numeric_limits<float>::infinity(); break;
      case 3: x = std::numeric_limits<float>::quiet_NaN(); break;
      case 4: x = bits_f32(g() >> 9); break;                              // subnormal
      case 5: x = std::ldexp(1.0f, int(g() % 250) - 125); break;           // power of two
      case 6: x = bits_f32(0x7f000000u | (g() >> 9)); break;              // huge
      case 7: x = std::ldexp(1.0f, -30) * float(g() % 7); break;          // flushes in fp16
      default: x = std::ldexp(float(g() >> 8) / 16777216.0f, int(h % 40) - 24);
    }
    if (g() & 1) x = -x;
  }
  return v;
}

void require_same_record(const TraceRecord& a, const TraceRecord& b) {
  REQUIRE(a.hist == b.hist);
  REQUIRE(a.pow2 == b.pow2);
  REQUIRE(a.signal == b.signal);
  REQUIRE(a.noise == b.noise);
  REQUIRE(a.flushed_sq == b.flushed_sq);
  REQUIRE(a.max_abs == b.max_abs);
  REQUIRE(a.min_abs == b.min_abs);
  REQUIRE(a.nonfinite_in == b.nonfinite_in);
}

}  // namespace

TEST_CASE("tracer: the fused AVX-512 pass gives add_values' and add_rounding's record",
          "[avx512]") {
  if (!need_avx512()) return;
  for (const char* name : {"fp16", "bf16", "e4m3", "e5m2", "e2m1", "e3m4:fn"}) {
    const halfway::Format f = halfway::parse_format(name);
    for (size_t n : {size_t(1), size_t(15), size_t(16), size_t(17), size_t(1023), size_t(1025),
                     size_t(70001)}) {
      INFO(name << ", n = " << n);
      std::vector<float> x = tracer_values(n, uint32_t(n * 31 + 7));
      // The format's largest magnitude, in the signal, and the next binary32 value, beyond it.
      halfway::Env env;
      const float fmax = float(halfway::to_f64(f, f.max_mag(), env));
      for (size_t i = 0; i < n; i += 13) x[i] = (i / 13) % 2 ? fmax : -std::nextafter(fmax, 1e38f);
      std::vector<float> q(n);
      halfway::quantize_f32(f, x.data(), q.data(), n, halfway::BulkOptions{});
      TraceRecord separate, fused;
      add_values(separate, x.data(), n);
      add_rounding(separate, f, x.data(), q.data(), n);
      add_values_and_rounding(fused, f, x.data(), q.data(), n);
      require_same_record(separate, fused);
      // In place: the pass stores q over the values it reads; the record is the same.
      TraceRecord in_place;
      std::vector<float> y = x;
      add_values_and_rounding(in_place, f, y.data(), q.data(), n, y.data());
      require_same_record(separate, in_place);
      REQUIRE(std::memcmp(y.data(), q.data(), n * sizeof(float)) == 0);
      // Added onto a record that already holds values (the extremes keep the older ones).
      add_values(separate, x.data(), n / 2);
      add_rounding(separate, f, x.data(), q.data(), n / 2);
      add_values_and_rounding(fused, f, x.data(), q.data(), n / 2);
      require_same_record(separate, fused);
    }
  }
  // Each class alone: a pass of zeros, of NaNs, of one flushed value, of powers of two.
  const halfway::Format fp16 = halfway::parse_format("fp16");
  for (float v : {0.0f, std::numeric_limits<float>::quiet_NaN(), std::ldexp(1.0f, -30),
                  std::ldexp(1.0f, -3), 1e30f, bits_f32(1u)}) {
    const std::vector<float> x(100, v);
    std::vector<float> q(x.size());
    halfway::quantize_f32(fp16, x.data(), q.data(), x.size(), halfway::BulkOptions{});
    TraceRecord separate, fused;
    add_values(separate, x.data(), x.size());
    add_rounding(separate, fp16, x.data(), q.data(), x.size());
    add_values_and_rounding(fused, fp16, x.data(), q.data(), x.size());
    require_same_record(separate, fused);
  }
}
