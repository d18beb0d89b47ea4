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

// ---------------------------------------------------------------------------------------------
// Block schemes (analyze_blocks.hpp).

namespace {

/// Normal values of mixed magnitude, 2^lo .. 2^hi, random signs; some zeros.
std::vector<float> mixed_values(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> v(n);
  for (float& x : v) {
    const double e = lo + (hi - lo) * u(g);
    x = float(std::exp2(e) * (g() & 1 ? -1 : 1));
    if (g() % 23 == 0) x = 0;
  }
  return v;
}

ValueReader reader(const std::vector<float>& v) {
  return [&v](uint64_t at, float* out, size_t n) {
    REQUIRE(at + n <= v.size());
    std::copy(v.begin() + long(at), v.begin() + long(at + n), out);
  };
}

struct Detailed {
  BlockAnalysis a;
  std::vector<std::string> rows;
};

Detailed run_blocks(const std::string& scheme, const BlockView& v, const std::vector<float>& x,
                    size_t chunk) {
  Detailed d;
  d.a = analyze_blocks(parse_block_scheme(scheme), v, reader(x), chunk, [&](const BlockDetail& b) {
    std::string line;
    append_block_detail_columns(line, 0, "t", scheme, b);
    d.rows.push_back(line);
  });
  return d;
}

/// The scheme names and row-scaled NVFP4 (an option, not a name of its own).
std::vector<std::string> with_row_scaled(std::vector<std::string> names) {
  names.push_back("nvfp4:row_scaled");
  return names;
}

void require_same(const BlockAnalysis& a, const BlockAnalysis& b) {
  REQUIRE(a.record.events == b.record.events);
  REQUIRE(std::memcmp(&a.record.signal, &b.record.signal, sizeof(double)) == 0);
  REQUIRE(std::memcmp(&a.record.noise, &b.record.noise, sizeof(double)) == 0);
  REQUIRE(a.record.zero_scales == b.record.zero_scales);
  REQUIRE(a.record.scale_hist == b.record.scale_hist);
  REQUIRE(a.clamped_harmless == b.clamped_harmless);
  REQUIRE(a.clamped_real == b.clamped_real);
  REQUIRE(a.clipped_blocks == b.clipped_blocks);
}

/// The whole tensor (a matrix that divides into blocks) in one call of lib's encode_blocks:
/// the numbers analyze_blocks must give, counted here from the encoding directly.
BlockAnalysis whole_tensor(const std::string& scheme, const std::vector<float>& x, size_t rows,
                           size_t cols, BlockAxis axis) {
  const BlockScheme s = parse_block_scheme(scheme);
  BlockOptions o;
  o.axis = axis;
  o.per_block_events = true;
  const BlockEncoding e = encode_blocks(s, x.data(), rows, cols, o);
  std::vector<float> q(x.size());
  decode_blocks(s, e, q.data());
  BlockAnalysis a;
  a.record.events = e.events;
  const size_t sc = e.scale_cols();
  for (size_t br = 0; br < e.scale_rows(); ++br)
    for (size_t bc = 0; bc < sc; ++bc) {
      const BlockEvents& be = e.block_events[br * sc + bc];
      const float scale = e.scales[br * sc + bc];
      if (scale == 0) ++a.record.zero_scales;
      else if (std::isfinite(scale)) ++a.record.scale_hist[int(std::floor(std::log2(scale)))];
      for (size_t i = br * e.tile_rows; i < (br + 1) * e.tile_rows; ++i)
        for (size_t j = bc * e.tile_cols; j < (bc + 1) * e.tile_cols; ++j) {
          const double xv = x[i * cols + j], d = xv - q[i * cols + j];
          a.record.signal += xv * xv;
          a.record.noise += d * d;
        }
      const bool top = s.family == BlockFamily::nvfp4 && scale == 448.0f;
      (top ? a.clamped_harmless : a.clamped_real) += be.scales_clamped;
      a.clipped_blocks += be.saturated > 0;
    }
  return a;
}

}  // namespace

TEST_CASE("block views: the axis the blocks run along", "[sim][analyze][blocks]") {
  BlockView v = block_view({4, 5, 6}, -1);
  CHECK((v.count == 1 && v.rows == 20 && v.cols == 6 && v.axis == BlockAxis::last));
  v = block_view({4, 5, 6}, 1);
  CHECK((v.count == 4 && v.rows == 5 && v.cols == 6 && v.axis == BlockAxis::first));
  CHECK(v.tensor_axis == 1);
  v = block_view({4, 5, 6}, 0);
  CHECK((v.count == 1 && v.rows == 4 && v.cols == 30 && v.axis == BlockAxis::first));
  v = block_view({}, -1);  // 0-d: one value
  CHECK((v.count == 1 && v.rows == 1 && v.cols == 1));
  CHECK(block_view({7}, 0).axis == BlockAxis::last);
  CHECK_THROWS_WITH(block_view({4, 5}, 2), Catch::Contains("axis 2 is out of range"));
  CHECK_THROWS_WITH(block_view({4, 5}, -3), Catch::Contains("axis -3 is out of range"));
  CHECK(block_count(parse_block_scheme("mxfp4"), block_view({3, 33}, -1)) == 3 * 2);
  CHECK(block_count(parse_block_scheme("nvfp4_2d"), block_view({17, 33}, 0)) == 2 * 3);
}

TEST_CASE("analyze_blocks equals one call of encode_blocks on the whole tensor",
          "[sim][analyze][blocks]") {
  // 256×256 values of 2^-6..2^0 times a scale per row of 2^-40..2^10 (NVFP4 gives the rows
  // far below the amax zero scales, and clamps the top block at 448), every scheme, both
  // axes, in chunks of one block (one tile), a few blocks and the whole tensor.
  const size_t rows = 256, cols = 256;
  std::vector<float> x = mixed_values(rows * cols, 5, -6, 0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) x[r * cols + c] *= std::exp2(-40.0 + 50.0 * r / rows);
  bool saw_harmless = false, saw_real = false;
  for (const std::string& scheme : with_row_scaled(block_scheme_names()))
    for (BlockAxis axis : {BlockAxis::last, BlockAxis::first}) {
      INFO(scheme << (axis == BlockAxis::first ? " axis 0" : " axis -1"));
      const BlockAnalysis want = whole_tensor(scheme, x, rows, cols, axis);
      const BlockView v = block_view({rows, cols}, axis == BlockAxis::first ? 0 : -1);
      for (size_t chunk : {size_t(1), size_t(3000), size_t(1) << 20}) {
        INFO("chunk " << chunk);
        require_same(run_blocks(scheme, v, x, chunk).a, want);
      }
      saw_harmless |= want.clamped_harmless > 0;
      saw_real |= want.clamped_real > 0;
    }
  CHECK(saw_harmless);  // the cases reach both kinds of clamp
  CHECK(saw_real);
}

TEST_CASE("analyze_blocks does not depend on the chunk size, padding and 3-d views included",
          "[sim][analyze][blocks]") {
  std::mt19937 g(11);
  const std::vector<std::vector<uint64_t>> shapes = {{37, 70}, {3, 20, 33}, {200}, {130, 5}};
  for (const std::string& scheme : with_row_scaled(block_scheme_names()))
    for (const std::vector<uint64_t>& shape : shapes)
      for (int axis : {-1, 0, 1}) {
        if (axis >= int(shape.size())) continue;
        INFO(scheme << " axis " << axis << " shape[0] " << shape[0]);
        uint64_t n = 1;
        for (uint64_t d : shape) n *= d;
        const std::vector<float> x = mixed_values(size_t(n), g(), -40, 12);
        const BlockView v = block_view(shape, axis);
        const Detailed whole = run_blocks(scheme, v, x, size_t(1) << 22);
        REQUIRE(whole.a.record.events.blocks == block_count(parse_block_scheme(scheme), v));
        REQUIRE(whole.rows.size() == whole.a.record.events.blocks);
        REQUIRE(whole.a.values == n);
        for (size_t chunk : {size_t(1), size_t(17), size_t(500), size_t(4096)}) {
          const Detailed part = run_blocks(scheme, v, x, chunk);
          require_same(part.a, whole.a);
          REQUIRE(part.rows == whole.rows);
        }
      }
}

TEST_CASE("analyze_blocks: NVFP4's per-tensor scale is the whole tensor's (negative control)",
          "[sim][analyze][blocks]") {
  // Quantizing the two halves of a tensor by separate calls gives each half its own global
  // scale: different numbers than the whole tensor's. analyze_blocks' chunks must not.
  const size_t rows = 64, cols = 64;
  std::vector<float> x = mixed_values(rows * cols, 9, -12, 0);
  x[0] = 1000;  // the amax lies in the first half
  const BlockAnalysis whole = whole_tensor("nvfp4", x, rows, cols, BlockAxis::last);
  const std::vector<float> top(x.begin(), x.begin() + long(rows * cols / 2)),
      bottom(x.begin() + long(rows * cols / 2), x.end());
  BlockAnalysis halves = whole_tensor("nvfp4", top, rows / 2, cols, BlockAxis::last);
  const BlockAnalysis b = whole_tensor("nvfp4", bottom, rows / 2, cols, BlockAxis::last);
  halves.record.merge(b.record);
  CHECK(halves.record.noise != whole.record.noise);
  require_same(run_blocks("nvfp4", block_view({rows, cols}, -1), x, cols * 8).a, whole);
  // Row-scaled down the columns: each half's own column amaxes give other numbers than the
  // whole columns'; chunks of 16 rows (a column spans 4) and of one block must not.
  for (size_t i = 0; i < rows; ++i) x[i * cols + 5] = std::ldexp(x[i * cols + 5], i < 32 ? 12 : 0);
  const BlockAnalysis rs = whole_tensor("nvfp4:row_scaled", x, rows, cols, BlockAxis::first);
  const std::vector<float> top_rs(x.begin(), x.begin() + long(rows * cols / 2)),
      bottom_rs(x.begin() + long(rows * cols / 2), x.end());
  BlockAnalysis halves_rs = whole_tensor("nvfp4:row_scaled", top_rs, rows / 2, cols,
                                         BlockAxis::first);
  halves_rs.record.merge(
      whole_tensor("nvfp4:row_scaled", bottom_rs, rows / 2, cols, BlockAxis::first).record);
  CHECK(halves_rs.record.noise != rs.record.noise);
  for (size_t chunk : {size_t(1), cols * 16})
    require_same(run_blocks("nvfp4:row_scaled", block_view({rows, cols}, 0), x, chunk).a, rs);
  // Along the rows: a row cut into runs of one block.
  const BlockAnalysis rr = whole_tensor("nvfp4:row_scaled", x, rows, cols, BlockAxis::last);
  require_same(run_blocks("nvfp4:row_scaled", block_view({rows, cols}, -1), x, 1).a, rr);
}

TEST_CASE("analyze_blocks: NaN and infinity, scale exponents by hand", "[sim][analyze][blocks]") {
  std::vector<float> x(64, 1.0f);
  x[40] = std::numeric_limits<float>::infinity();
  const BlockView v = block_view({64}, -1);
  // MX: the block that holds it gets the NaN scale, the other is 1 (2^0 · e2m1 1.0 for the
  // floor rule: amax 1 = 2^0, k = 0 - 2 = -2: scale 2^-2).
  const BlockAnalysis mx = run_blocks("mxfp4", v, x, 1).a;
  CHECK(mx.record.events.nan_scales == 1);
  CHECK(mx.record.scale_hist == std::map<int, uint64_t>{{-2, 1}});
  CHECK(mx.scale_exp_mean() == -2);
  CHECK(mx.scale_exp_std() == 0);
  // NVFP4 and fp8_block define no result: every block is a NaN scale, as the tracer records.
  for (const char* s : {"nvfp4", "fp8_block"}) {
    const Detailed d = run_blocks(s, v, x, 1);
    CHECK(d.a.record.events.nan_scales == d.a.record.events.blocks);
    CHECK(std::isnan(d.a.record.signal));
    CHECK(std::isnan(d.a.scale_exp_mean()));
    CHECK(d.rows.empty());
  }
  // Scale exponents -2 (two blocks) and 1 (one): mean -1, standard deviation sqrt(2).
  std::vector<float> y(96, 1.0f);
  for (size_t i = 64; i < 96; ++i) y[i] = 8.0f;
  const BlockAnalysis m = run_blocks("mxfp4", block_view({96}, -1), y, 1).a;
  CHECK(m.record.scale_hist == std::map<int, uint64_t>{{-2, 2}, {1, 1}});
  CHECK(m.scale_exp_mean() == -1);
  CHECK(m.scale_exp_std() == Approx(std::sqrt(2.0)).epsilon(1e-15));
  CHECK(m.clipped_fraction() == 0);
}

TEST_CASE("analysis format lists take block schemes", "[sim][analyze][blocks]") {
  const AnalysisFormats f = parse_analysis_formats("bf16,mxfp8_e4m3,mxfp4,nvfp4,fp8_block,e4m3");
  REQUIRE(f.elements.size() == 2);
  REQUIRE(f.blocks.size() == 4);
  CHECK(f.blocks[2].name == "nvfp4");
  CHECK_THROWS_WITH(parse_analysis_formats("mxfp4,mxfp4"), Catch::Contains("given twice"));
  CHECK_THROWS_WITH(parse_analysis_formats("mxfp5"), Catch::Contains("nor a block scheme"));
  CHECK_THROWS_WITH(parse_analysis_formats("fp16,"), Catch::Contains("empty format name"));
  CHECK_THROWS(parse_analysis_formats("mxfp4:bogus"));
  CHECK_THROWS(parse_analysis_formats("fp32"));
}
