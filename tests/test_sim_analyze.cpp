// halfway analyze's core: the same record as the tracer for the same values, results that do
// not depend on how a tensor is split into chunks, and exact sums of squares against an
// independent big-integer oracle (Boost.Multiprecision).
#include <catch2/catch.hpp>

#include <boost/multiprecision/cpp_int.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "halfway/bulk.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/analyze.hpp"
#include "halfway/sim/tracer.hpp"

using namespace halfway;
using namespace halfway::sim;
using boost::multiprecision::cpp_int;

namespace {

/// Values over the whole binary32 range: every exponent, subnormals, zeros, inf and NaN.
std::vector<float> wide_values(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t b = g();
    switch (g() % 16) {
      case 0: b &= 0x807FFFFFu; break;                       // subnormal or zero
      case 1: b = (b & 0x80000000u) | 0x7F800000u; break;    // inf
      case 2: b = 0x7FC00000u | (b & 0x3FFFFFu); break;      // NaN
      case 3: b &= 0x80000000u; break;                       // ±0
      case 4: b = (b & 0x80000000u) | (uint32_t(100 + g() % 40) << 23); break;  // powers of 2
      default: {
        // Exponents near the formats' ranges: 2^-40 .. 2^20.
        const uint32_t e = 87 + g() % 60;
        b = (b & 0x807FFFFFu) | (e << 23);
      }
    }
    std::memcpy(&v[i], &b, 4);
  }
  return v;
}

const std::vector<DType> kFormats = parse_format_list("fp16,bf16,e4m3,e5m2,e4m3:sat,fp16:ftz");

void require_same(const FormatAnalysis& a, const FormatAnalysis& b) {
  REQUIRE(a.record.events == b.record.events);
  REQUIRE(a.record.hist == b.record.hist);
  REQUIRE(a.record.pow2 == b.record.pow2);
  REQUIRE(a.record.nonfinite_in == b.record.nonfinite_in);
  REQUIRE(a.record.max_abs == b.record.max_abs);
  REQUIRE(a.record.min_abs == b.record.min_abs);
  REQUIRE(a.signal == b.signal);
  REQUIRE(a.noise == b.noise);
  REQUIRE(a.flushed == b.flushed);
  REQUIRE(a.k_low == b.k_low);
  REQUIRE(a.k_high == b.k_high);
  REQUIRE(a.window.size() == b.window.size());
  for (size_t i = 0; i < a.window.size(); ++i) {
    REQUIRE(a.window[i].flushed == b.window[i].flushed);
    REQUIRE(a.window[i].overflow == b.window[i].overflow);
  }
}

/// Σ x² exactly, scaled by 2^400 (every square of a binary32 value is an integer multiple of
/// 2^-298), from the value's decomposition by frexp, not from its bits.
cpp_int exact_scaled_square_sum(const std::vector<float>& v) {
  cpp_int s = 0;
  for (float x : v) {
    if (x == 0) continue;
    int e;
    const double m = std::frexp(double(x), &e);       // x = m·2^e, 0.5 <= |m| < 1
    const auto im = int64_t(std::ldexp(m, 24));       // x = im·2^(e-24), exact
    cpp_int sq = cpp_int(im) * im;                    // x² = sq·2^(2e-48)
    const int shift = 2 * e - 48 + 400;
    REQUIRE(shift >= 0);
    s += sq << shift;
  }
  return s;
}

/// The double nearest to s·2^-400 (ties to even), from the big integer's bits.
double round_scaled(const cpp_int& s) {
  if (s == 0) return 0;
  const int top = int(msb(s));
  const int low = std::max(0, top - 52);
  cpp_int mant = s >> low;
  if (low > 0) {
    const cpp_int rem = s - (mant << low);
    const cpp_int half = cpp_int(1) << (low - 1);
    if (rem > half || (rem == half && (mant & 1) != 0)) ++mant;
  }
  return std::ldexp(static_cast<double>(mant), low - 400);
}

}  // namespace

TEST_CASE("analyze gives the tracer's record for the same values", "[sim][analyze]") {
  const std::vector<float> v = wide_values(5000, 1);
  TensorAnalyzer a("x", TraceKind::activation_grad, kFormats);
  a.add(v.data(), v.size());
  const TensorAnalysis r = a.finish({});
  for (size_t j = 0; j < kFormats.size(); ++j) {
    // What halfway train's tracer records for one rounding of these values into the format.
    Tracer tr;
    tr.begin_step(0, 1.0);
    std::vector<float> q(v.size());
    EventCounts ev;
    quantize_f32(kFormats[j].fmt, v.data(), q.data(), v.size(), {}, &ev);
    tr.record({"x", "analyze", TraceKind::activation_grad}, kFormats[j], v.data(), v.size(), ev);
    const StepTrace& st = tr.end_step();
    const TraceRecord& t = st.records.at(0);
    const FormatAnalysis& f = r.formats[j];
    CAPTURE(kFormats[j].name());
    REQUIRE(f.record.events == t.events);
    REQUIRE(f.record.hist == t.hist);
    REQUIRE(f.record.pow2 == t.pow2);
    REQUIRE(f.record.nonfinite_in == t.nonfinite_in);
    REQUIRE(f.record.max_abs == t.max_abs);
    REQUIRE(f.record.min_abs == t.min_abs);
    REQUIRE(f.k_low == st.k_low);
    REQUIRE(f.k_high == st.k_high);
    for (size_t i = 0; i < st.window.size(); ++i) {
      REQUIRE(f.window[i].flushed == st.window[i].flushed);
      REQUIRE(f.window[i].overflow == st.window[i].overflow);
    }
  }
}

TEST_CASE("analyze results do not depend on the chunking", "[sim][analyze]") {
  const std::vector<float> v = wide_values(20000, 2);
  TensorAnalyzer whole("x", TraceKind::tensor, kFormats);
  whole.add(v.data(), v.size());
  const TensorAnalysis w = whole.finish({});
  std::mt19937 g(3);
  for (int trial = 0; trial < 8; ++trial) {
    TensorAnalyzer parts("x", TraceKind::tensor, kFormats);
    for (size_t i = 0; i < v.size();) {
      const size_t k = std::min(v.size() - i, size_t(1 + g() % (trial < 4 ? 7 : 5000)));
      parts.add(v.data() + i, k);
      i += k;
    }
    const TensorAnalysis p = parts.finish({});
    for (size_t j = 0; j < kFormats.size(); ++j) require_same(p.formats[j], w.formats[j]);
  }
  // Another order of the same values: the sums are exact, so not a bit changes.
  std::vector<float> r = v;
  std::shuffle(r.begin(), r.end(), g);
  TensorAnalyzer shuffled("x", TraceKind::tensor, kFormats);
  shuffled.add(r.data(), r.size());
  const TensorAnalysis s = shuffled.finish({});
  for (size_t j = 0; j < kFormats.size(); ++j) {
    REQUIRE(s.formats[j].snr_db() == w.formats[j].snr_db());
    REQUIRE(s.formats[j].flushed_l2_fraction() == w.formats[j].flushed_l2_fraction());
  }
}

TEST_CASE("SquareSum is the exact sum of squares rounded once", "[sim][analyze]") {
  std::mt19937 g(4);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> v = wide_values(1 + g() % 300, uint32_t(100 + trial));
    for (float& x : v)
      if (!std::isfinite(x)) x = 0;
    if (trial % 3 == 0)  // a sum whose rounding needs the lowest bits: tiny next to huge
      v.push_back(std::ldexp(1.0f, -140)), v.push_back(std::ldexp(1.0f, 100));
    SquareSum s;
    for (float x : v) s.add(x);
    REQUIRE(s.value() == round_scaled(exact_scaled_square_sum(v)));
  }
  // A tie: 2^53 + 1 rounds to 2^53 (even), 2^53 + 3 to 2^53 + 4.
  SquareSum t;
  t.add(std::ldexp(1.0f, 26));         // (2^26)² = 2^52
  t.add(std::ldexp(1.0f, 26));         // 2^53
  t.add(1.0f);                         // 2^53 + 1: a tie
  REQUIRE(t.value() == std::ldexp(1.0, 53));
  t.add(1.0f), t.add(1.0f);            // 2^53 + 3
  REQUIRE(t.value() == std::ldexp(1.0, 53) + 4);
}

TEST_CASE("SNR and the norm lost to flushing, by hand", "[sim][analyze]") {
  // fp16: 2^-26 flushes (below half the smallest subnormal 2^-24); 1 + 2^-12 rounds to 1
  // (error 2^-12); 3 is exact; 1e6 overflows and is left out of both sums.
  const std::vector<float> v{std::ldexp(1.0f, -26), 1.0f + std::ldexp(1.0f, -12), 3.0f, 1e6f};
  TensorAnalyzer a("x", TraceKind::tensor, {parse_dtype("fp16")});
  a.add(v.data(), v.size());
  const FormatAnalysis f = a.finish({}).formats[0];
  REQUIRE(f.record.events.flushed == 1);
  REQUIRE(f.record.events.overflow == 1);
  const double x0 = std::ldexp(1.0, -26), x1 = 1.0 + std::ldexp(1.0, -12);
  const double signal = x0 * x0 + x1 * x1 + 9.0;    // exact in double
  const double noise = x0 * x0 + std::ldexp(1.0, -24);
  REQUIRE(f.signal.value() == signal);
  REQUIRE(f.noise.value() == noise);
  REQUIRE(f.flushed.value() == x0 * x0);
  REQUIRE(f.snr_db() == 10.0 * std::log10(signal / noise));
  REQUIRE(f.flushed_l2_fraction() == std::sqrt(x0 * x0 / signal));
  // Exact roundings: infinite SNR; no values: none defined.
  TensorAnalyzer e("e", TraceKind::tensor, {parse_dtype("fp16")});
  const float one = 1.0f;
  e.add(&one, 1);
  REQUIRE(std::isinf(e.finish({}).formats[0].snr_db()));
  TensorAnalyzer z("z", TraceKind::tensor, {parse_dtype("fp16")});
  REQUIRE(std::isnan(z.finish({}).formats[0].snr_db()));
}

TEST_CASE("format lists and scale ranges: bad input is refused", "[sim][analyze]") {
  REQUIRE(parse_format_list("fp16,e4m3").size() == 2);
  REQUIRE_THROWS_AS(parse_format_list("fp16,nosuch"), InputError);
  REQUIRE_THROWS_AS(parse_format_list("fp16,fp16"), InputError);
  REQUIRE_THROWS_AS(parse_format_list("fp32"), InputError);
  REQUIRE_THROWS_AS(parse_format_list(""), InputError);
  REQUIRE(parse_scale_range("-5..7") == std::pair<int, int>(-5, 7));
  REQUIRE_THROWS_AS(parse_scale_range("7..-5"), InputError);
  REQUIRE_THROWS_AS(parse_scale_range("1..x"), InputError);
  REQUIRE_THROWS_AS(parse_scale_range("-1000..0"), InputError);
}
