// Block quantization (blocks.hpp) against the separately written reference of block_oracle.cpp:
// every element encoding of e2m1, e2m3, e3m2, e4m3 (and e5m2) at representative scales, the
// ties of every element grid, all-zero blocks, fp32 subnormals, values near fp32's maximum,
// NaN and infinity, mixed-magnitude tensors along either axis, stochastic rounding and the
// Hadamard transform; fixed cases worked out by hand from the definitions in docs/blocks.md.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "block_oracle.hpp"
#include "halfway/blocks.hpp"
#include "halfway/bulk.hpp"
#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"

using namespace halfway;

namespace {

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b, size_t& at) {
  if (a.size() != b.size()) return at = 0, false;
  for (size_t i = 0; i < a.size(); ++i)
    if (bits(a[i]) != bits(b[i]) && !(std::isnan(a[i]) && std::isnan(b[i]))) return at = i, false;
  return true;
}

bool same_codes(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, size_t& at) {
  if (a.size() != b.size()) return at = 0, false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return at = i, false;
  return true;
}

std::string describe(const BlockEvents& e) {
  return "elements " + std::to_string(e.elements) + " blocks " + std::to_string(e.blocks) +
         " saturated " + std::to_string(e.saturated) + " flushed " + std::to_string(e.flushed) +
         " clamped " + std::to_string(e.scales_clamped) + " (harmless " +
         std::to_string(e.scales_clamped_harmless) + ") nan " + std::to_string(e.nan_scales);
}

/// The library's encoding and decoding of x equal the oracle's, bit for bit, with the events,
/// on the thread's current bulk path.
void check_on_path(const BlockScheme& s, const std::vector<float>& x, size_t rows, size_t cols,
                   BlockOptions o) {
  o.per_block_events = true;
  INFO("bulk path " << detail::bulk_path_name(detail::bulk_path()));
  INFO(s.name << " [" << rows << ", " << cols << "] axis "
              << (o.axis == BlockAxis::last ? "last" : "first") << " rounding "
              << rounding_name(o.rounding) << (o.rht ? " rht" : "") << (o.pow2_scales ? " pow2" : ""));
  const BlockEncoding e = encode_blocks(s, x.data(), rows, cols, o);
  const block_oracle::Result want = block_oracle::encode(s, x, rows, cols, o);
  size_t at = 0;
  if (!same_codes(e.codes, want.codes, at)) {
    FAIL("code [" << at / cols << ", " << at % cols << "] x = " << hex(bits(x[at])) << " got "
                  << int(e.codes[at]) << " want " << int(want.codes[at]));
  }
  if (!same_codes(e.scale_codes, want.scale_codes, at))
    FAIL("scale code " << at << " got " << int(e.scale_codes[at]) << " want "
                       << int(want.scale_codes[at]));
  if (!same_bits(e.scales, want.scales, at))
    FAIL("scale " << at << " got " << hex(bits(e.scales[at])) << " want "
                  << hex(bits(want.scales[at])));
  REQUIRE(e.global_scale.has_value() == want.global_scale.has_value());
  if (e.global_scale) CHECK(hex(bits(*e.global_scale)) == hex(bits(*want.global_scale)));
  if (!same_bits(e.global_scales, want.global_scales, at))
    FAIL("line global scale " << at << " of " << e.global_scales.size() << " (want "
                              << want.global_scales.size() << ")");
  CHECK(describe(e.events) == describe(want.events));
  REQUIRE(e.block_events.size() == want.block_events.size());
  BlockEvents sum;
  for (size_t b = 0; b < e.block_events.size(); ++b) {
    if (!(e.block_events[b] == want.block_events[b]))
      FAIL("block " << b << ": " << describe(e.block_events[b]) << " want "
                    << describe(want.block_events[b]));
    sum += e.block_events[b];
  }
  CHECK(describe(sum) == describe(e.events));
  // Without per-block events the kernels count per group of vectors instead: the same codes
  // and totals.
  o.per_block_events = false;
  const BlockEncoding t = encode_blocks(s, x.data(), rows, cols, o);
  if (!same_codes(t.codes, want.codes, at))
    FAIL("without per-block events: code [" << at / cols << ", " << at % cols << "] got "
                                              << int(t.codes[at]) << " want "
                                              << int(want.codes[at]));
  CHECK(t.scale_codes == e.scale_codes);
  CHECK(describe(t.events) == describe(want.events));
  CHECK(t.block_events.empty());
  std::vector<float> y(rows * cols);
  decode_blocks(s, e, y.data());
  if (!same_bits(y, want.decoded, at))
    FAIL("decoded [" << at / cols << ", " << at % cols << "] got " << hex(bits(y[at])) << " want "
                     << hex(bits(want.decoded[at])));
  // quantize_blocks decodes its own encoding without decode_blocks' checks: the same values.
  std::fill(y.begin(), y.end(), 0.0f);
  const BlockEvents q = quantize_blocks(s, x.data(), rows, cols, y.data(), o);
  if (!same_bits(y, want.decoded, at))
    FAIL("quantize_blocks [" << at / cols << ", " << at % cols << "] got " << hex(bits(y[at]))
                             << " want " << hex(bits(want.decoded[at])));
  CHECK(describe(q) == describe(want.events));
}

/// check_on_path on the best path this CPU has (AVX-512 kernels where it has them) and on the
/// reference path (the portable loops).
void check_against_oracle(const BlockScheme& s, const std::vector<float>& x, size_t rows,
                          size_t cols, BlockOptions o = {}) {
  struct Restore {  // the thread's path back even when a check fails
    detail::BulkPath before = detail::bulk_path();
    ~Restore() { detail::set_bulk_path(before); }
  } restore;
  for (detail::BulkPath p : {detail::bulk_path_supported(), detail::BulkPath::reference}) {
    detail::set_bulk_path(p);
    check_on_path(s, x, rows, cols, o);
  }
}

/// Finite values of every encoding of f, both signs, without duplicates of zero.
std::vector<double> element_values(const Format& f) {
  std::vector<double> v;
  for (uint32_t c = 0; c < (1u << f.nbits()); ++c) {
    Env env;
    const double d = to_f64(f, c, env);
    if (std::isfinite(d)) v.push_back(d);
  }
  return v;
}

/// Rows of `block` values: each block starts with `pin` (fixing its amax) and is filled from
/// `values` in order, padding the last block with zeros.
std::vector<float> blocks_of(const std::vector<float>& values, float pin, size_t block,
                             size_t& cols) {
  std::vector<float> x;
  size_t i = 0;
  while (i < values.size()) {
    x.push_back(pin);
    for (size_t k = 1; k < block; ++k) x.push_back(i < values.size() ? values[i++] : 0.0f);
  }
  cols = x.size();
  return x;
}

/// The value v·2^k as an fp32 value when that is exact.
bool exact_f32(double v, int k, float& out) {
  const double d = std::ldexp(v, k);
  if (!(std::fabs(d) <= FLT_MAX)) return false;
  out = float(d);
  return double(out) == d;
}

/// Random values over many binades (with exact zeros, subnormals and a few huge values), as a
/// tensor with outliers has them.
std::vector<float> mixed(size_t n, uint32_t seed, int lo = -30, int hi = 30) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) {
    const uint32_t r = g() % 100;
    if (r < 5) x = 0.0f;
    else if (r < 8) x = bits_f32(g() % 0x800000u | (g() & 0x80000000u));  // subnormal
    else if (r < 9) x = std::ldexp(nd(g), 120);
    else x = std::ldexp(nd(g), lo + int(g() % uint32_t(hi - lo + 1)));
  }
  return v;
}

/// mixed's values without its few near 2^120 (brought back to 2^0): with them, NVFP4's global
/// amax would put most blocks' scales at 0.
std::vector<float> narrowed(std::vector<float> v) {
  for (float& f : v)
    if (std::fabs(f) > 0x1p60f) f = std::ldexp(f, -120);
  return v;
}

const char* kMx[] = {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8"};
/// The MX scale-rule suffixes: none (floor), and each rule by name.
const char* kMxRules[] = {"", ":ceil", ":rceil", ":even"};

/// A scheme name and, for the MX ones, the name with every scale rule.
/// The schemes with power-of-two scales as an option.
bool has_pow2(const BlockScheme& s) {
  return s.family == BlockFamily::fp8_block || s.family == BlockFamily::fp8_rowwise;
}

std::vector<std::string> with_rules(const std::string& name) {
  std::vector<std::string> v{name};
  if (name.rfind("mx", 0) == 0)
    for (const char* r : {":ceil", ":rceil", ":even"}) v.push_back(name + r);
  if (name == "nvfp4") v.push_back("nvfp4:row_scaled");  // a global scale per line
  return v;
}

}  // namespace

TEST_CASE("every MX element encoding at representative scales decodes back to itself") {
  // A block whose amax is elem_max · 2^k gets the scale 2^k by floor, rceil and even; ceil
  // gives it 2^(k+1) (no element maximum is a power of two), covered by the boundary tests.
  for (const char* name : kMx) {
    for (const char* rule : {"", ":rceil", ":even"}) {
      const BlockScheme s = parse_block_scheme(std::string(name) + rule);
      const std::vector<double> vals = element_values(s.element);
      for (int k : {-127, -126, -120, -64, -10, -1, 0, 1, 10, 64, 100, 110}) {
        float pin;
        if (!exact_f32(s.element_max, k, pin)) continue;
        std::vector<float> in;
        for (double v : vals) {
          float f;
          if (exact_f32(v, k, f)) in.push_back(f);  // not below fp32's subnormals at 2^-127
        }
        size_t cols = 0;
        const std::vector<float> x = blocks_of(in, pin, 32, cols);
        INFO(s.name << " scale 2^" << k);
        const BlockEncoding e = encode_blocks(s, x.data(), 1, cols);
        for (uint8_t sc : e.scale_codes) REQUIRE(int(sc) == k + 127);
        std::vector<float> y(cols);
        decode_blocks(s, e, y.data());
        // (MXINT8 has no −0: its elements' −0 decodes to +0.)
        for (size_t i = 0; i < cols; ++i)
          REQUIRE((bits(y[i]) == bits(x[i]) || (s.twos_complement && x[i] == 0.0f)));
        CHECK(e.events.saturated == 0);
        CHECK(e.events.flushed == 0);
        check_against_oracle(s, x, 1, cols);
      }
    }
  }
}

TEST_CASE("MX elements at the ties of every element grid and one fp32 ulp either side") {
  for (const char* name : kMx) {
    for (const char* rule : kMxRules) {
      const BlockScheme s = parse_block_scheme(std::string(name) + rule);
      std::vector<double> vals = element_values(s.element);
      std::sort(vals.begin(), vals.end());
      vals.erase(std::unique(vals.begin(), vals.end()), vals.end());
      for (int k : {-127, -126, -30, 0, 7, 100}) {
        float pin;
        if (!exact_f32(s.element_max, k, pin)) continue;
        std::vector<float> in;
        for (size_t i = 0; i + 1 < vals.size(); ++i) {
          float mid;
          if (!exact_f32((vals[i] + vals[i + 1]) / 2, k, mid)) continue;
          in.push_back(mid);
          in.push_back(std::nextafter(mid, 0.0f));
          in.push_back(std::nextafter(mid, mid > 0 ? FLT_MAX : -FLT_MAX));
        }
        // Beyond the largest element: the floor rule saturates these.
        for (double f : {1.0001, 1.1, 1.5, 1.99}) {
          float v;
          if (exact_f32(std::ldexp(f, s.element_emax + 1) * 0.999, k, v)) {
            in.push_back(v);
            in.push_back(-v);
          }
        }
        size_t cols = 0;
        const std::vector<float> x = blocks_of(in, pin, 32, cols);
        check_against_oracle(s, x, 1, cols);
      }
    }
  }
}

namespace {

/// Blocks of 32 whose amax sits at, one fp32 number below and one above each boundary of the
/// MX scale rules for every e8m0 exponent k in `ks` (and the exponents that clamp below):
/// 2^(k+emax) (floor, ceil), elem_max · 2^k (rceil), (2 − 2^−(m+1)) · 2^(k+emax) (even's
/// carry) and 2^(k+emax+1); values below fp32's range become the nearest fp32 number (the
/// subnormal steps), those above it are left out; fp32's smallest and largest numbers too.
/// Each block also holds −amax, the number below amax and amax / 3.
std::vector<float> rule_boundaries(const BlockScheme& s, const std::vector<int>& ks) {
  const double emax_val = double(s.element_max);
  const int emax = s.element_emax, m = s.element.frac_bits;
  std::vector<float> amax{std::numeric_limits<float>::denorm_min(), FLT_MAX};
  for (int k : ks) {
    for (double b : {std::ldexp(1.0, k + emax), std::ldexp(emax_val, k),
                     std::ldexp(2.0 - std::ldexp(1.0, -(m + 1)), k + emax),
                     std::ldexp(1.0, k + emax + 1)}) {
      if (b > double(FLT_MAX)) continue;
      const float f = float(b);
      if (f == 0.0f) continue;
      amax.push_back(std::nextafter(f, 0.0f));
      amax.push_back(f);
      if (f < FLT_MAX) amax.push_back(std::nextafter(f, FLT_MAX));
    }
  }
  std::vector<float> x;
  for (float a : amax) {
    if (a == 0.0f) continue;
    std::vector<float> blk(32, 0.0f);
    blk[0] = a, blk[1] = -a, blk[2] = std::nextafter(a, 0.0f), blk[3] = a / 3;
    x.insert(x.end(), blk.begin(), blk.end());
  }
  return x;
}

/// Every e8m0 exponent, and those below −127 whose blocks clamp.
std::vector<int> every_exponent() {
  std::vector<int> ks;
  for (int k = -127 - 20; k <= 127; ++k) ks.push_back(k);
  return ks;
}

void check_rule_boundaries(const std::vector<int>& ks) {
  for (const char* name : kMx) {
    for (const char* rule : kMxRules) {
      const BlockScheme s = parse_block_scheme(std::string(name) + rule);
      const std::vector<float> x = rule_boundaries(s, ks);
      INFO(s.name << ": " << x.size() / 32 << " blocks");
      check_against_oracle(s, x, 1, x.size());
    }
  }
}

}  // namespace

TEST_CASE("MX scale rules at their boundaries, every e8m0 code", "[.exhaustive]") {
  check_rule_boundaries(every_exponent());
}

TEST_CASE("MX scale rules at their boundaries, a few e8m0 codes") {
  // The quick subset: the clamped exponents, both ends of e8m0 and around 2^0.
  check_rule_boundaries({-150, -130, -128, -127, -126, -125, -1, 0, 1, 120, 125, 126, 127});
}

TEST_CASE("MX scale rules: the boundary cases tell every pair of rules apart") {
  // The negative control of the boundary tests: were the library to implement one rule in
  // place of another (or the exact rule that the old name ':ceil' followed in place of
  // rceil), the comparison with the oracle would fail on these cases.
  const std::vector<int> ks = {-127, -126, 0, 5};
  for (const char* name : kMx) {
    for (const char* a : kMxRules)
      for (const char* b : kMxRules) {
        if (std::string(a) >= std::string(b)) continue;
        const BlockScheme sa = parse_block_scheme(std::string(name) + a);
        const BlockScheme sb = parse_block_scheme(std::string(name) + b);
        const std::vector<float> x = rule_boundaries(sa, ks);
        INFO(sa.name << " vs " << sb.name);
        CHECK(block_oracle::encode(sa, x, 1, x.size()).scale_codes !=
              encode_blocks(sb, x.data(), 1, x.size()).scale_codes);
      }
    // The exact rule (smallest 2^k with amax ≤ 2^k · elem_max, from amax's significand)
    // differs from rceil's fp32 product on some case.
    const BlockScheme r = parse_block_scheme(std::string(name) + ":rceil");
    const std::vector<float> x = rule_boundaries(r, ks);
    const BlockEncoding e = encode_blocks(r, x.data(), 1, x.size());
    bool differs = false;
    for (size_t b = 0; b < x.size() / 32; ++b) {
      int k = -127 - 40;
      while (std::ldexp(double(r.element_max), k) < double(x[32 * b])) ++k;
      k = std::clamp(k, -127, 127);
      differs |= int(e.scale_codes[b]) != k + 127;
    }
    INFO(name);
    CHECK(differs);
  }
}

TEST_CASE("MX, NVFP4 and blockwise fp8 on mixed-magnitude tensors along either axis") {
  const size_t rows = 256, cols = 256;
  for (const std::string& name : block_scheme_names()) {
    const std::vector<std::string> variants = with_rules(name);
    for (const std::string& v : variants) {
      const BlockScheme s = parse_block_scheme(v);
      for (uint32_t seed : {1u, 2u}) {
        // Narrow ranges give NVFP4 and fp8 blocks within range of the global amax; wide ranges
        // give scales that clamp, underflow and flush.
        // (Four Over Six refuses a tensor amax above fp32 max / 256: no 2^120 values.)
        const std::vector<float> x =
            seed == 1 ? narrowed(mixed(rows * cols, seed, -6, 6))
            : s.family == BlockFamily::nvfp4_4over6 ? narrowed(mixed(rows * cols, seed))
                                                    : mixed(rows * cols, seed);
        for (BlockAxis axis : {BlockAxis::last, BlockAxis::first}) {
          BlockOptions o;
          o.axis = axis;
          check_against_oracle(s, x, rows, cols, o);
          if (has_pow2(s)) {
            o.pow2_scales = true;
            check_against_oracle(s, x, rows, cols, o);
          }
        }
      }
    }
  }
}

TEST_CASE("every lane position of the block maximum, partial vectors and any number of blocks") {
  // The AVX-512 kernels take the block maxima of 16 blocks at once and encode 64 elements at
  // a time, with masked vectors down the columns: rows of 1 to 33 blocks (groups of 64 and
  // remainders of 16 and 32, 16-block groups and remainders), any number of columns for
  // blocks down the columns, and in block b the largest |x| at position 5·b mod the block
  // size, so that over the blocks it takes every position of its vector and every slot of
  // the 16-block reduction.
  for (const std::string& name : block_scheme_names()) {
    const std::vector<std::string> variants = with_rules(name);
    for (const std::string& v : variants) {
      const BlockScheme s = parse_block_scheme(v);
      if (s.block == 0) continue;  // whole rows: "block lengths and tiles of any size"
      for (BlockAxis axis : {BlockAxis::last, BlockAxis::first}) {
        const auto [tr, tc] = block_tile(s, axis);
        // Blocks per row (along rows) or columns (down the columns).
        const std::vector<size_t> widths =
            tc == 1     ? std::vector<size_t>{1, 3, 15, 16, 17, 63, 64, 65, 100}
            : tc == 128 ? std::vector<size_t>{1, 3, 17}
                        : std::vector<size_t>{1, 2, 3, 5, 16, 17, 33};
        for (size_t i = 0; i < widths.size(); ++i) {
          const size_t sc = widths[i];
          const size_t rows = tr * (s.two_d ? 1 : 2), cols = sc * tc;
          std::vector<float> x = mixed(rows * cols, uint32_t(7 + i), -6, 6);
          if (s.family == BlockFamily::nvfp4_4over6) x = narrowed(x);  // amax below max / 256
          const size_t sr = rows / tr, len = tr * tc;
          for (size_t b = 0; b < sr * sc; ++b) {
            const size_t p = (5 * b) % len, r = (b / sc) * tr + p / tc, c = (b % sc) * tc + p % tc;
            const float f = b % 2 ? -1.0f - float(b % 7) / 8 : 1.0f + float(b % 5) / 8;
            x[r * cols + c] = std::ldexp(f, 9);
          }
          BlockOptions o;
          o.axis = axis;
          check_against_oracle(s, x, rows, cols, o);
          if (s.family != BlockFamily::mx) continue;
          // MX: infinities and NaNs in some blocks (NaN scales, and the kernels' per-block
          // counts that such blocks need), at varying positions.
          for (size_t b = 5; b < sr * sc; b += 7) {
            const size_t p = (3 * b) % len, r = (b / sc) * tr + p / tc, c = (b % sc) * tc + p % tc;
            x[r * cols + c] = b % 2 ? std::numeric_limits<float>::quiet_NaN()
                                    : -std::numeric_limits<float>::infinity();
          }
          check_against_oracle(s, x, rows, cols, o);
        }
      }
    }
  }
}

TEST_CASE("blocks along the first axis are the blocks of the transpose along the last") {
  const size_t rows = 128, cols = 256;
  const std::vector<float> x = mixed(rows * cols, 7, -8, 8);
  std::vector<float> xt(rows * cols);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) xt[c * rows + r] = x[r * cols + c];
  for (const char* name : {"mxfp8_e4m3", "mxfp4:rceil", "mxfp4:even", "mxint8", "nvfp4",
                           "fp8_block", "fp8_rowwise", "mxfp4:block=0", "mxfp6_e2m3:block=64",
                           "fp8_block:block=8", "nvfp4:row_scaled"}) {
    const BlockScheme s = parse_block_scheme(name);
    BlockOptions first;
    first.axis = BlockAxis::first;
    first.rht = s.family == BlockFamily::nvfp4;
    BlockOptions last;
    last.rht = first.rht;
    const BlockEncoding a = encode_blocks(s, x.data(), rows, cols, first);
    const BlockEncoding b = encode_blocks(s, xt.data(), cols, rows, last);
    INFO(name);
    REQUIRE(a.scale_rows() == b.scale_cols());
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) REQUIRE(a.codes[r * cols + c] == b.codes[c * rows + r]);
    for (size_t i = 0; i < a.scale_rows(); ++i)
      for (size_t j = 0; j < a.scale_cols(); ++j)
        REQUIRE(bits(a.scales[i * a.scale_cols() + j]) == bits(b.scales[j * b.scale_cols() + i]));
    CHECK(a.events == b.events);
    // Row-scaled: each column's global scale is that row's of the transpose.
    CHECK(a.global_scales == b.global_scales);
    CHECK(a.global_scales.size() == (s.row_scaled ? cols : 0));
  }
}

TEST_CASE("NVFP4: every e2m1 value and tie at every positive finite e4m3 block scale") {
  // Block 0 holds the tensor's amax 2688, so the global encode scale is exactly 1; block b
  // then has amax 6·s for each e4m3 value s and holds every e2m1 value and tie times s.
  const BlockScheme s = parse_block_scheme("nvfp4");
  std::vector<double> e2m1 = element_values(formats::e2m1);
  std::vector<double> pts;
  std::sort(e2m1.begin(), e2m1.end());
  for (size_t i = 0; i < e2m1.size(); ++i) {
    pts.push_back(e2m1[i]);
    if (i + 1 < e2m1.size()) pts.push_back((e2m1[i] + e2m1[i + 1]) / 2);
  }
  std::vector<float> x(16, 0.0f);
  x[0] = 2688.0f;
  for (uint32_t code = 1; code < 0x7F; ++code) {
    Env env;
    const float sv = to_f32(formats::e4m3, code, env);
    std::vector<float> blk{6.0f * sv};
    for (double p : pts) {
      const float v = float(p * sv);
      blk.push_back(v);
      if (std::fabs(p) == 6.0) continue;  // the block's (and at 448 the tensor's) amax
      blk.push_back(std::nextafter(v, FLT_MAX));
      blk.push_back(std::nextafter(v, -FLT_MAX));
    }
    blk.push_back(-0.0f);
    while (blk.size() % 16) blk.push_back(0.0f);
    x.insert(x.end(), blk.begin(), blk.end());
  }
  check_against_oracle(s, x, 1, x.size());
  BlockOptions o;
  o.rounding = Rounding::stochastic;
  o.seed = 12345;
  check_against_oracle(s, x, 1, x.size(), o);
  const BlockEncoding e = encode_blocks(s, x.data(), 1, x.size());
  REQUIRE(e.global_scale);
  CHECK(*e.global_scale == 1.0f);
}

TEST_CASE("blockwise fp8: every e4m3 value at representative scales") {
  for (const char* name : {"fp8_block", "fp8_block_2d"}) {
    const BlockScheme s = parse_block_scheme(name);
    const std::vector<double> vals = element_values(s.element);
    for (int k : {-140, -126, -20, -1, 0, 3, 60, 118}) {
      std::vector<float> in;
      for (double v : vals) {
        float f;
        if (exact_f32(v, k, f)) in.push_back(f);
      }
      float pin;
      REQUIRE(exact_f32(448.0, k, pin));
      size_t cols = 0;
      std::vector<float> x = blocks_of(in, pin, 128, cols);
      if (s.two_d) {  // 128 rows: the row repeated, scaled by 2^-j so tiles see all of it
        const std::vector<float> row = x;
        x.clear();
        for (int r = 0; r < 128; ++r)
          for (float v : row) x.push_back(r == 0 ? v : std::ldexp(v, -(r % 3)));
        check_against_oracle(s, x, 128, cols);
        continue;
      }
      check_against_oracle(s, x, 1, cols);
      BlockOptions o;
      o.pow2_scales = true;
      check_against_oracle(s, x, 1, cols, o);
    }
  }
}

TEST_CASE("stochastic rounding of NVFP4 elements and the random Hadamard transform") {
  const size_t rows = 64, cols = 128;
  const std::vector<float> x = mixed(rows * cols, 11, -4, 4);
  const BlockScheme s = parse_block_scheme("nvfp4");
  // Row-scaled too: each line's amax is that of the transformed values (TE's reference takes
  // the columnwise amax after the transform).
  for (const char* name : {"nvfp4", "nvfp4:row_scaled"}) {
    for (BlockAxis axis : {BlockAxis::last, BlockAxis::first}) {
      BlockOptions o;
      o.axis = axis;
      o.rounding = Rounding::stochastic;
      o.seed = 99;
      o.offset = 1000;
      check_against_oracle(parse_block_scheme(name), x, rows, cols, o);
      o.rht = true;
      check_against_oracle(parse_block_scheme(name), x, rows, cols, o);
      o.rounding = Rounding::near_even;
      check_against_oracle(parse_block_scheme(name), x, rows, cols, o);
    }
  }
  // Another seed gives other codes; the same seed the same ones.
  BlockOptions a, b;
  a.rounding = b.rounding = Rounding::stochastic;
  a.seed = 1;
  b.seed = 2;
  const auto ea = encode_blocks(s, x.data(), rows, cols, a);
  const auto eb = encode_blocks(s, x.data(), rows, cols, b);
  const auto ea2 = encode_blocks(s, x.data(), rows, cols, a);
  CHECK(ea.codes != eb.codes);
  CHECK(ea.codes == ea2.codes);
  // The transform is orthogonal: applied twice it gives the input back up to rounding, and the
  // sign vector is Transformer Engine's.
  float v[16];
  for (int i = 0; i < 16; ++i) v[i] = float(i + 1);
  detail::rht16(v, 1);
  float sum = 0;
  for (float f : v) sum += f * f;
  CHECK(sum == Approx(1496.0f).epsilon(1e-6));  // Σ i² for i = 1..16
  const float signs[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};
  for (int i = 0; i < 16; ++i) CHECK(detail::kRhtSigns[i] == signs[i]);
}

TEST_CASE("the Hadamard transform equals the oracle's bit for bit, both axes, any width") {
  // The quantized codes hide a transformed value's last bits, so the transform itself is
  // compared: the vectorised loops must keep the order k = 0..15 of every sum. Values span
  // 2^-20..2^20 with both signs, so that a changed order changes the rounding.
  for (BlockAxis axis : {BlockAxis::last, BlockAxis::first}) {
    for (size_t cols = 1; cols <= 100; ++cols) {
      const size_t rows = axis == BlockAxis::first ? 48 : 3, width = axis == BlockAxis::first
                                                                   ? cols
                                                                   : 16 * cols;
      const std::vector<float> x = mixed(rows * width, 3 + cols, -20, 20);
      std::vector<float> got = x, want = x;
      detail::apply_rht(got.data(), rows, width, axis);
      block_oracle::hadamard(want, rows, width, axis);
      size_t at = 0;
      INFO("axis " << int(axis) << ", " << rows << " x " << width);
      REQUIRE(same_bits(got, want, at));
    }
  }
  // rht16 with a stride is the same transform.
  const std::vector<float> x = mixed(16 * 5, 7, -20, 20);
  std::vector<float> got = x, want = x;
  for (size_t c = 0; c < 5; ++c) detail::rht16(got.data() + c, 5);
  block_oracle::hadamard(want, 16, 5, BlockAxis::first);
  size_t at = 0;
  CHECK(same_bits(got, want, at));
}

TEST_CASE("element rounding in every direction, round-to-odd and stochastic, every scheme") {
  // Mixed magnitudes (ties, subnormals, values that saturate, products that underflow fp32
  // for MX) along either axis, against the oracle's rounding of the exact (MX) or fp32
  // (NVFP4, fp8_block) scaled value in the same direction.
  const size_t rows = 128, cols = 256;
  const std::vector<float> x = mixed(rows * cols, 21);
  const std::vector<float> narrow = narrowed(mixed(rows * cols, 22, -6, 6));
  struct Mode {
    Rounding r;
    int bits;
    bool packed = false;  // packed draws (BlockOptions::pack_random_bits)
  };
  const Mode modes[] = {{Rounding::near_maxMag, 32},     {Rounding::minMag, 32},
                        {Rounding::min, 32},             {Rounding::max, 32},
                        {Rounding::odd, 32},             {Rounding::stochastic, 1},
                        {Rounding::stochastic, 3},       {Rounding::stochastic, 32},
                        {Rounding::stochastic, 8, true}};
  for (const std::string& name : block_scheme_names()) {
    const BlockScheme s = parse_block_scheme(name);
    if (s.family == BlockFamily::nvfp4_4over6) continue;  // near_even only (refused below)
    for (const Mode& m : modes) {
      for (BlockAxis axis : {BlockAxis::last, BlockAxis::first}) {
        BlockOptions o;
        o.axis = axis;
        o.rounding = m.r;
        o.random_bits = m.bits;
        o.pack_random_bits = m.packed;
        o.seed = 5;
        o.offset = 77;
        INFO("random_bits " << m.bits << (m.packed ? " packed" : ""));
        check_against_oracle(s, s.family == BlockFamily::mx ? x : narrow, rows, cols, o);
        if (has_pow2(s)) {
          o.pow2_scales = true;
          check_against_oracle(s, narrow, rows, cols, o);
        }
      }
    }
  }
  // The negative control: each of these modes gives other codes than near_even on these
  // tensors, so an encoder that ignored the direction would fail the comparisons above. Ties
  // are planted (random values have none, and ties are where near_maxMag differs): in the
  // first block, zeroed, an amax that makes the scale 1 and the tie 1 + 2^−(m+1) of 1 and the
  // next element (near_even keeps 1, whose code is even); NVFP4 first puts the tensor's amax
  // 2688 in the first block (global scale 1) and then amax 6 (scale 6 · fp32(1/6) = 1).
  for (const std::string& name : block_scheme_names()) {
    const BlockScheme s = parse_block_scheme(name);
    if (s.family == BlockFamily::nvfp4_4over6) continue;
    std::vector<float> v = s.family == BlockFamily::mx ? x : narrow;
    const auto [tr, tc] = block_tile(s, BlockAxis::last, rows, cols);
    const size_t first = s.family == BlockFamily::nvfp4 ? tc : 0;  // the block of the tie
    for (size_t r = 0; r < tr; ++r)
      for (size_t c = 0; c < first + tc; ++c) v[r * cols + c] = 0.0f;
    if (s.family == BlockFamily::nvfp4) v[0] = 2688.0f;
    v[first] = s.family == BlockFamily::nvfp4 ? 6.0f : s.element_max;
    v[first + 1] = 1.0f + std::ldexp(1.0f, -(s.element.frac_bits + 1));
    const BlockEncoding rne = encode_blocks(s, v.data(), rows, cols);
    for (const Mode& m : modes) {
      BlockOptions o;
      o.rounding = m.r;
      o.random_bits = m.bits;
      o.pack_random_bits = m.packed;
      INFO(name << " " << rounding_name(m.r) << " random_bits " << m.bits);
      CHECK(block_oracle::encode(s, v, rows, cols, o).codes != rne.codes);
    }
  }
}

TEST_CASE("MX element rounding by hand: ties away from zero, directed, odd") {
  // mxfp4, amax 6 (k = 0): 5 is the tie of 4 and 6, 0.75 of 0.5 and 1, −2.5 of −2 and −3,
  // 0.1 lies between 0 and 0.5. near_maxMag (microxcaling's "nearest"): 6 (0x7), 1 (0x2),
  // −3 (0xD), 0 (0x0). max (toward +inf): 6, 1, −2 (0xC), 0.5 (0x1). min: 4 (0x6), 0.5,
  // −3, 0. minMag: 4, 0.5, −2, 0. odd: truncate and set the last bit when inexact: 5 → 4
  // (0x6) → 0x7 (6); 0.75 → 0.5 (0x1, odd already); −2.5 → −2 (0xC) → 0xD (−3); 0.1 → 0 → 0x1.
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f, x[1] = 5.0f, x[2] = 0.75f, x[3] = -2.5f, x[4] = 0.1f;
  const struct {
    Rounding r;
    int c1, c2, c3, c4;
  } want[] = {{Rounding::near_maxMag, 0x7, 0x2, 0xD, 0x0}, {Rounding::max, 0x7, 0x2, 0xC, 0x1},
              {Rounding::min, 0x6, 0x1, 0xD, 0x0},         {Rounding::minMag, 0x6, 0x1, 0xC, 0x0},
              {Rounding::odd, 0x7, 0x1, 0xD, 0x1},         {Rounding::near_even, 0x6, 0x2, 0xC, 0x0}};
  for (const auto& w : want) {
    INFO(rounding_name(w.r));
    BlockOptions o;
    o.rounding = w.r;
    const BlockEncoding e = encode_blocks(parse_block_scheme("mxfp4"), x.data(), 1, 32, o);
    CHECK(e.scale_codes[0] == 127);
    CHECK(int(e.codes[1]) == w.c1);
    CHECK(int(e.codes[2]) == w.c2);
    CHECK(int(e.codes[3]) == w.c3);
    CHECK(int(e.codes[4]) == w.c4);
  }
  // mxfp8_e4m3 with a block amax of 2^100 (k = 92): 2^−60 scales to 2^−152, which fp32
  // cannot hold; rounded up it is e4m3's smallest subnormal 2^−9 (code 0x01), down 0.
  std::vector<float> y(32, 0.0f);
  y[0] = std::ldexp(1.0f, 100), y[1] = std::ldexp(1.0f, -60), y[2] = -std::ldexp(1.0f, -60);
  BlockOptions up;
  up.rounding = Rounding::max;
  const BlockEncoding e = encode_blocks(parse_block_scheme("mxfp8_e4m3"), y.data(), 1, 32, up);
  CHECK(e.scale_codes[0] == 127 + 92);
  CHECK(e.codes[1] == 0x01);
  CHECK(e.codes[2] == 0x80);
  CHECK(e.events.flushed == 1);
}

TEST_CASE("all-zero blocks, fp32 subnormals, values near fp32 max, NaN and infinity") {
  const float sub = std::numeric_limits<float>::denorm_min();
  std::vector<float> x(32 * 8, 0.0f);
  for (int i = 0; i < 32; ++i) x[32 + i] = float(i) * sub;           // subnormal block
  x[64] = FLT_MAX;                                                  // near fp32 max
  x[65] = -FLT_MAX;
  x[66] = std::nextafter(FLT_MAX, 0.0f);
  x[67] = 1.0f;
  for (int i = 0; i < 32; ++i) x[96 + i] = bits_f32(0x00800000u + uint32_t(i));  // smallest normals
  for (int i = 0; i < 32; ++i) x[128 + i] = bits_f32(0x007FFFFFu - uint32_t(i));  // largest subnormals
  for (int i = 0; i < 32; ++i) x[160 + i] = std::ldexp(1.0f, -149 + i);
  x[192] = -0.0f;
  for (const char* name : {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4",
                           "mxfp4:ceil", "mxfp8_e4m3:ceil", "mxfp4:rceil", "mxfp8_e4m3:rceil",
                           "mxfp8_e4m3:even", "mxint8", "nvfp4", "fp8_block", "fp8_rowwise",
                           "fp8_rowwise_e5m2"}) {
    const BlockScheme s = parse_block_scheme(name);
    // fp8_rowwise: rows of 32, so that each of the blocks above is a row.
    const size_t cols = s.family == BlockFamily::fp8_rowwise ? 32 : x.size();
    const size_t rows = x.size() / cols;
    check_against_oracle(s, x, rows, cols);
    BlockOptions o;
    o.pow2_scales = has_pow2(s);
    if (o.pow2_scales) check_against_oracle(s, x, rows, cols, o);
    const BlockEncoding e = encode_blocks(s, x.data(), rows, cols);
    if (s.family == BlockFamily::mx) {
      CHECK(e.scale_codes[0] == 0);  // all-zero block: 2^-127
      CHECK(e.scale_codes[7] == 0);
      CHECK(e.events.scales_clamped > 0);  // the subnormal blocks need scales below 2^-127
    }
    if (s.family == BlockFamily::fp8_block) {  // an all-zero block has the scale 1
      const std::vector<float> z(256, 0.0f);
      CHECK(encode_blocks(s, z.data(), 2, 128).scales == std::vector<float>{1.0f, 1.0f});
    }
    if (s.family == BlockFamily::fp8_rowwise) {
      // torchao clamps amax to 1e-12: the all-zero rows 0, 6 (−0 only) and 7 get the scale
      // fp32(max / 1e-12); the four rows of fp32 subnormals and smallest normals (amax below
      // 1e-12) are clamped scales, the row holding fp32's maximum is not.
      CHECK(e.scales[0] == float(double(s.element_max) / 1e-12));
      CHECK(e.scales[6] == e.scales[0]);
      CHECK(e.events.scales_clamped == 4);
    }
  }
  // MX: a NaN or an infinity makes the block's scale NaN (e8m0 0xFF), its codes 0 and its
  // decoded values NaN; the other blocks are unaffected.
  std::vector<float> y(64, 1.0f);
  y[3] = std::numeric_limits<float>::infinity();
  y[40] = std::numeric_limits<float>::quiet_NaN();
  y[41] = 1e30f;
  for (const char* name : kMx) {
    const BlockScheme s = parse_block_scheme(name);
    check_against_oracle(s, {y.begin(), y.begin() + 32}, 1, 32);
    const BlockEncoding e = encode_blocks(s, y.data(), 1, 64);
    CHECK(e.scale_codes[0] == 0xFF);
    CHECK(e.scale_codes[1] == 0xFF);
    CHECK(e.events.nan_scales == 2);
    std::vector<float> d(64);
    decode_blocks(s, e, d.data());
    CHECK(std::isnan(d[0]));
  }
  // NVFP4 and blockwise fp8 refuse non-finite values.
  for (const char* name : {"nvfp4", "nvfp4_2d", "fp8_block", "fp8_rowwise"}) {
    const BlockScheme s = parse_block_scheme(name);
    std::vector<float> z(128 * 128, 1.0f);
    z[5] = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_AS(encode_blocks(s, z.data(), 128, 128), InputError);
  }
}

TEST_CASE("worked examples, by hand from the definitions") {
  // mxfp4, floor: amax 5 → floor(log2 5) − emax(e2m1) = 2 − 2 = 0, X = 1 (e8m0 127).
  // 5 is the tie of 4 and 6 → 4 (0x6); 0.3 → 0.5 (0x1); −0.75 is the tie of 0.5 and 1 → −1
  // (0xA); 0.25 is the tie of 0 and 0.5 → 0 (0x0).
  {
    std::vector<float> x(32, 0.0f);
    x[0] = 5.0f, x[1] = 0.3f, x[2] = -0.75f, x[3] = 0.25f;
    const BlockEncoding e = encode_blocks(parse_block_scheme("mxfp4"), x.data(), 1, 32);
    CHECK(e.scale_codes[0] == 127);
    CHECK(e.codes[0] == 0x6);
    CHECK(e.codes[1] == 0x1);
    CHECK(e.codes[2] == 0xA);
    CHECK(e.codes[3] == 0x0);
    CHECK(e.events.saturated == 0);
  }
  // amax 7: floor gives X = 1 and 7 saturates to 6 (0x7); rceil gives the smallest 2^k ≥
  // fp32(7 · fp32(1/6)) = 1.1666…, X = 2 (e8m0 128), and 3.5 is the tie of 3 and 4 → 4 (0x6);
  // ceil: ceil(log2 7) − 2 = 1, X = 2 too; even: 7 = 1.75 · 2^2 rounded to e2m1's one
  // fraction bit is the tie of 1.5 and 2, away from zero 2 · 2^2 = 8: floor(log2 8) − 2 = 1.
  {
    std::vector<float> x(32, 0.0f);
    x[0] = 7.0f;
    const BlockEncoding f = encode_blocks(parse_block_scheme("mxfp4"), x.data(), 1, 32);
    CHECK(f.scale_codes[0] == 127);
    CHECK(f.codes[0] == 0x7);
    CHECK(f.events.saturated == 1);
    for (const char* name : {"mxfp4:rceil", "mxfp4:ceil", "mxfp4:even"}) {
      INFO(name);
      const BlockEncoding c = encode_blocks(parse_block_scheme(name), x.data(), 1, 32);
      CHECK(c.scale_codes[0] == 128);
      CHECK(c.codes[0] == 0x6);
      CHECK(c.events.saturated == 0);
    }
    CHECK(parse_block_scheme("mxfp4:floor").scale_rule == MxScaleRule::floor);
    CHECK(encode_blocks(parse_block_scheme("mxfp4:floor"), x.data(), 1, 32).scale_codes ==
          f.scale_codes);
  }
  // mxfp4, amax 5.5 = 1.375 · 2^2: floor 2 − 2 = 0 (127), 5.5 → 6 (0x7, nearer than 4);
  // ceil: ceil(log2 5.5) = 3, k = 1 (128), 5.5/2 = 2.75 → 3 (0x5); rceil: 5.5/6 ≈ 0.917 → 2^0
  // (127); even: 1.375 to one fraction bit is 1.5 (no carry), k = 0 (127).
  {
    std::vector<float> x(32, 0.0f);
    x[0] = 5.5f;
    const struct {
      const char* name;
      int scale, code;
    } want[] = {{"mxfp4", 127, 0x7}, {"mxfp4:ceil", 128, 0x5}, {"mxfp4:rceil", 127, 0x7},
                {"mxfp4:even", 127, 0x7}};
    for (const auto& w : want) {
      INFO(w.name);
      const BlockEncoding e = encode_blocks(parse_block_scheme(w.name), x.data(), 1, 32);
      CHECK(int(e.scale_codes[0]) == w.scale);
      CHECK(int(e.codes[0]) == w.code);
    }
  }
  // mxfp8_e4m3 (emax 8, 3 fraction bits), amax 150 = 1.171875 · 2^7 (torchao's example):
  // floor 7 − 8 = −1 (126); ceil: ceil(log2 150) − 8 = 0 (127); rceil: 150/448 ≈ 0.335 rounds
  // up to 2^−1 (126); even: 1.171875 · 8 = 9.375 → 9, no carry (126).
  // amax 248 = 1.9375 · 2^7: 1.9375 · 8 = 15.5, the tie, away from zero 16: even carries to
  // 2^8, k = 0 (127), and 248 / 1 is the e4m3 tie of 240 and 256 → 256 (0x78, even); floor
  // k = −1 (126): 496 saturates to 448 (0x7E). amax 247: 15.4375 → 15, even gives 126.
  {
    const struct {
      float amax;
      const char* name;
      int scale, code;
    } want[] = {{150.0f, "mxfp8_e4m3", 126, -1},       {150.0f, "mxfp8_e4m3:ceil", 127, -1},
                {150.0f, "mxfp8_e4m3:rceil", 126, -1}, {150.0f, "mxfp8_e4m3:even", 126, -1},
                {248.0f, "mxfp8_e4m3:even", 127, 0x78}, {248.0f, "mxfp8_e4m3", 126, 0x7E},
                {247.0f, "mxfp8_e4m3:even", 126, -1}};
    for (const auto& w : want) {
      INFO(w.name << " amax " << w.amax);
      std::vector<float> x(32, 0.0f);
      x[0] = w.amax;
      const BlockEncoding e = encode_blocks(parse_block_scheme(w.name), x.data(), 1, 32);
      CHECK(int(e.scale_codes[0]) == w.scale);
      if (w.code >= 0) CHECK(int(e.codes[0]) == w.code);
    }
  }
  // rceil computes amax / 448 as one fp32 product, fp32(1/448) = 0x3B124925 (above 1/448 by
  // a relative 2^−24 · 0.75): amax = 448 · 2^−127 · (1 + 2^−23 / 1.75), the fp32 number above
  // 448 · 2^−127 = 1.75 · 2^−119, gives the exact product 2^−127 · (1 + 1.13 · 10^−7), whose
  // subnormal fp32 neighbours are 2^−127 and 2^−127 · (1 + 2^−22): it rounds to 2^−127, and
  // the code is 0 (k = −127); the element amax / 2^−127 is above 448 and saturates. (The
  // exact rule "the smallest 2^k with amax ≤ 2^k · 448", which the old name ':ceil' followed,
  // gives k = −126, code 1.)
  {
    CHECK(bits(float(1.0 / 448.0)) == 0x3B124925u);
    CHECK(bits(float(1.0 / 6.0)) == 0x3E2AAAABu);
    std::vector<float> x(32, 0.0f);
    x[0] = std::nextafter(std::ldexp(1.75f, -119), 1.0f);
    const BlockEncoding e = encode_blocks(parse_block_scheme("mxfp8_e4m3:rceil"), x.data(), 1, 32);
    CHECK(e.scale_codes[0] == 0);
    CHECK(e.codes[0] == 0x7E);
    CHECK(e.events.saturated == 1);
    CHECK(e.events.scales_clamped == 0);
  }
  // mxfp8_e4m3: amax 1 → X = 2^(0 − 8) (e8m0 119); 1/X = 256 is e4m3 0x78 (field 15, bias 7).
  // 2^-20 / X = 2^-12 is below half e4m3's smallest subnormal 2^-9: flushed to 0.
  {
    std::vector<float> x(32, 0.0f);
    x[0] = 1.0f;
    x[1] = std::ldexp(1.0f, -20);
    const BlockEncoding e = encode_blocks(parse_block_scheme("mxfp8_e4m3"), x.data(), 1, 32);
    CHECK(e.scale_codes[0] == 119);
    CHECK(e.codes[0] == 0x78);
    CHECK(e.codes[1] == 0x00);
    CHECK(e.events.flushed == 1);
  }
  // fp8_block: amax 448 gives the scale 448/448 = 1, so the elements are e4m3(x): 3.0 is 0x44,
  // 464 would be the tie of 448 and 512 but never occurs; −0.0 keeps its sign (0x80).
  {
    std::vector<float> x(128, 0.0f);
    x[0] = 448.0f, x[1] = 3.0f, x[2] = -0.0f;
    const BlockEncoding e = encode_blocks(parse_block_scheme("fp8_block"), x.data(), 1, 128);
    CHECK(e.scales[0] == 1.0f);
    CHECK(e.codes[0] == 0x7E);
    CHECK(e.codes[1] == 0x44);
    CHECK(e.codes[2] == 0x80);
  }
  // nvfp4: global amax 2688 gives the global encode scale 2688/2688 = 1. A block with amax 6:
  // decode scale 6 · fp32(1/6) rounds to 1 (e4m3 0x38), encode scale 1/(1·1) = 1, elements are
  // e2m1(x): 2.5 (tie of 2 and 3) → 2 (0x4), −0.25 (tie of −0 and −0.5) → −0 (0x8), −0.0 → 0.
  {
    std::vector<float> x(32, 0.0f);
    x[0] = 2688.0f;
    x[16] = 6.0f, x[17] = 2.5f, x[18] = -0.25f, x[19] = -0.0f;
    const BlockEncoding e = encode_blocks(parse_block_scheme("nvfp4"), x.data(), 1, 32);
    REQUIRE(e.global_scale);
    CHECK(*e.global_scale == 1.0f);
    CHECK(e.scale_codes[0] == 0x7E);  // 2688/6 = 448
    CHECK(e.scale_codes[1] == 0x38);
    CHECK(e.codes[16] == 0x7);
    CHECK(e.codes[17] == 0x4);
    CHECK(e.codes[18] == 0x8);
    CHECK(e.codes[19] == 0x0);
  }
}

TEST_CASE("worked examples: MXINT8 and torchao's float8 rowwise, by hand") {
  // mxint8: amax 1.999 → k = floor(log2 1.999) − emax_elem 0 = 0 (e8m0 127); each element is
  // x · 64 rounded to an integer, clamped to ±127, in two's complement: 1.999 → 127.94 → 128,
  // beyond 127: saturated, 0x7F; −1.999 → −127 0x81; 1.5 → 96 0x60; −0.5 → −32 0xE0; 1/128 →
  // 0.5, the tie of 0 and 1 → 0 (flushed); 3/128 → 1.5 → 2 (ties to even) 0x02; −1/64 → −1
  // 0xFF; −0.0 → 0x00 (int8 has no −0).
  {
    std::vector<float> x(32, 0.0f);
    x[0] = 1.999f, x[1] = -1.999f, x[2] = 1.5f, x[3] = -0.5f, x[4] = 1.0f / 128;
    x[5] = 3.0f / 128, x[6] = -1.0f / 64, x[7] = -0.0f;
    const BlockScheme s = parse_block_scheme("mxint8");
    const BlockEncoding e = encode_blocks(s, x.data(), 1, 32);
    CHECK(e.scale_codes[0] == 127);
    const std::vector<uint8_t> want{0x7F, 0x81, 0x60, 0xE0, 0x00, 0x02, 0xFF, 0x00};
    CHECK(std::vector<uint8_t>(e.codes.begin(), e.codes.begin() + 8) == want);
    CHECK(e.events.saturated == 2);
    CHECK(e.events.flushed == 1);
    std::vector<float> d(32);
    decode_blocks(s, e, d.data());
    CHECK(d[0] == 127.0f / 64);
    CHECK(d[1] == -127.0f / 64);
    CHECK(d[3] == -0.5f);
    CHECK(d[6] == -1.0f / 64);
    // 0x80 (−128) is an int8 the encoder never writes (the clamp is symmetric, as
    // microxcaling's): it decodes to −2.
    BlockEncoding f = e;
    f.codes[0] = 0x80;
    decode_blocks(s, f, d.data());
    CHECK(d[0] == -2.0f);
  }
  // fp8_rowwise (torchao): a row with amax 2 has the scale fp32(448 / 2) = 224; 1 → 224, e4m3
  // 1.75·2^7 (field 14, fraction 110) 0x76; 2 → 448 0x7E; 0.01 → fp32(0.01·224) ≈ 2.24 →
  // 2.25 (field 8, fraction 001) 0x41, decoded fp32(2.25 / 224). With power-of-two scales,
  // 224 rounds down to 128: 2 → 256 (field 15) 0x78. A second row, amax 0.5: scale 896.
  {
    std::vector<float> x(2 * 16, 0.0f);
    x[0] = 1.0f, x[1] = 2.0f, x[2] = 0.01f, x[16] = 0.5f;
    const BlockScheme s = parse_block_scheme("fp8_rowwise");
    const BlockEncoding e = encode_blocks(s, x.data(), 2, 16);
    CHECK(e.scales == std::vector<float>{224.0f, 896.0f});
    CHECK(e.scale_codes.empty());
    CHECK(e.codes[0] == 0x76);
    CHECK(e.codes[1] == 0x7E);
    CHECK(e.codes[2] == 0x41);
    CHECK(e.codes[16] == 0x7E);
    std::vector<float> d(32);
    decode_blocks(s, e, d.data());
    CHECK(d[2] == 2.25f / 224.0f);
    BlockOptions p2;
    p2.pow2_scales = true;
    const BlockEncoding q = encode_blocks(s, x.data(), 2, 16, p2);
    CHECK(q.scales == std::vector<float>{128.0f, 512.0f});
    CHECK(q.codes[1] == 0x78);
  }
}

TEST_CASE("Four Over Six: each block keeps the scale, to 6 or to 4, of the smaller error") {
  // One 1x16 block per row, tensor amax A = 6 (row 0). Row 0, amax 6: s6 = e4m3(6 · 256 / 6)
  // = 256, s4 = e4m3(384) = 384 (field 15, fraction 100: 0x7C); under s6 the elements are
  // x · 1536 / (6 · 256) = x, under s4 x / 1.5. Row 0 holds 6 and 4.5: to 6 they are 6 and 4
  // (4.5 is the tie of 4 and 6: even, 4; error 0.5), to 4 they are 4 and 3, which decode to 6
  // and 4.5 exactly: row 0 keeps s4. Row 1 (amax 3): 3, 2.5, 0.625. To 6 (s6 = 128, elements
  // 2x): 6, 5 → 4, 1.25 → 1 (ties to even), decoded 3, 2, 0.5: errors 0, 0.5, 0.125, squared
  // sum 0.265625. To 4 (s4 = 192, elements 4x/3): 4, 3.33 → 3, 0.83 → 1, decoded 3, 2.25,
  // 0.75: errors 0, 0.25, 0.125, squared sum 0.078125: row 1 keeps s4 too.
  std::vector<float> x(2 * 16, 0.0f);
  x[0] = 6.0f, x[1] = 4.5f;
  x[16] = 3.0f, x[17] = 2.5f, x[18] = 0.625f;
  const BlockScheme s = parse_block_scheme("nvfp4_4over6");
  const BlockEncoding e = encode_blocks(s, x.data(), 2, 16);
  REQUIRE(e.global_scale);
  CHECK(*e.global_scale == 6.0f);
  CHECK(e.scale_codes[0] == 0x7C);  // 384: the scale to 4
  CHECK(e.scales[0] == 384.0f);
  CHECK(e.codes[0] == 0x6);  // 6 / 1.5 = 4
  CHECK(e.codes[1] == 0x5);  // 4.5 / 1.5 = 3
  std::vector<float> d(32);
  decode_blocks(s, e, d.data());
  CHECK(d[0] == 6.0f);
  CHECK(d[1] == 4.5f);
  // Row 1 by the definition: both candidates' errors in binary64.
  auto err = [&](float sv) {
    double sum = 0;
    for (int i = 16; i < 32; ++i) {
      float y = ((x[i] * 6.0f) * 256.0f) / (6.0f * sv);
      Env env;
      const float q = to_f32(formats::e2m1, from_f32(formats::e2m1, y, env), env);
      const double dv = double(((q * sv) * 6.0f) / 1536.0f) - double(x[i]);
      sum += dv * dv;
    }
    return sum;
  };
  CHECK(err(128.0f) == 0.265625);
  CHECK(err(192.0f) == 0.078125);
  CHECK(e.scales[1] == 192.0f);
  CHECK(e.codes[17] == 0x5);  // 3
  check_against_oracle(s, x, 2, 16);
  // Refused: other roundings, and a tensor amax whose product a · 256 overflows fp32.
  BlockOptions sr;
  sr.rounding = Rounding::stochastic;
  CHECK_THROWS_AS(encode_blocks(s, x.data(), 2, 16, sr), InputError);
  x[5] = 1e37f;
  CHECK_THROWS_AS(encode_blocks(s, x.data(), 2, 16), InputError);
  // An all-zero tensor: every scale 0, every code 0, global scale (amax) 0.
  const std::vector<float> z(32, 0.0f);
  const BlockEncoding ez = encode_blocks(s, z.data(), 2, 16);
  CHECK(*ez.global_scale == 0.0f);
  CHECK(ez.scale_codes == std::vector<uint8_t>{0, 0});
}

TEST_CASE("row-scaled NVFP4 by hand: a row 2^20 smaller keeps its values") {
  // Two rows of one 1x16 block: row 0 holds 6, 3, −1.5, 0.5 (then zeros), row 1 the same
  // times 2^−20. Per tensor, A = 6: g = fp32(2688 / 6) = 448 (0x43E00000), m = fp32(448 ·
  // fp32(1/6)) = 0x1.2aaaacp+6. Row 0: d = fp32(6 · m) = 0x1.c00002p+8 (448.00003), clamped to
  // 448 (harmless), e4m3 code 0x7E; fp32(448 · fp32(1/448)) = 1, so q = 1 and the elements
  // are 6 → 0x7, 3 → 0x5, −1.5 → 0xB, 0.5 → 0x1. Row 1: d = fp32(6·2^−20 · m) =
  // 0x1.c00002p−12, below half of e4m3's smallest subnormal 2^−9: scale 0 (a real clamp), and
  // its four values flush to 0.
  // Row-scaled, row 0 is the same (its amax is the tensor's); row 1 has A = 6·2^−20, g =
  // 448·2^20 (0x4DE00000), m = 0x1.2aaaacp+26, d = 448.00003 again → 448 (harmless), q =
  // 1 / fp32(448 · fp32(1/g)) = 2^20, and the elements are row 0's codes; decoded, each is
  // its value times fp32(448 · 0x1.24924ap−29) = 2^−20, so row 1 comes back exactly.
  // Blocks down the columns: the transpose, the same numbers per column.
  const float vals[4] = {6.0f, 3.0f, -1.5f, 0.5f};
  for (BlockAxis axis : {BlockAxis::last, BlockAxis::first}) {
    const bool last = axis == BlockAxis::last;
    const size_t rows = last ? 2 : 16, cols = last ? 16 : 2;
    std::vector<float> x(32, 0.0f);
    auto at = [&](size_t line, size_t k) -> size_t { return last ? line * 16 + k : k * 2 + line; };
    for (size_t k = 0; k < 4; ++k) {
      x[at(0, k)] = vals[k];
      x[at(1, k)] = std::ldexp(vals[k], -20);
    }
    BlockOptions o;
    o.axis = axis;
    o.per_block_events = true;
    INFO((last ? "rows" : "columns"));
    const BlockEncoding t = encode_blocks(parse_block_scheme("nvfp4"), x.data(), rows, cols, o);
    REQUIRE(t.global_scale);
    CHECK(bits(*t.global_scale) == 0x43E00000u);
    CHECK(t.global_scales.empty());
    CHECK(t.scale_codes == std::vector<uint8_t>{0x7E, 0x00});
    CHECK(t.events.flushed == 4);
    CHECK(t.events.scales_clamped == 2);
    CHECK(t.events.scales_clamped_harmless == 1);
    const BlockEncoding r =
        encode_blocks(parse_block_scheme("nvfp4:row_scaled"), x.data(), rows, cols, o);
    CHECK(!r.global_scale);
    REQUIRE(r.global_scales.size() == 2);
    CHECK(bits(r.global_scales[0]) == 0x43E00000u);
    CHECK(bits(r.global_scales[1]) == 0x4DE00000u);
    CHECK(r.scale_codes == std::vector<uint8_t>{0x7E, 0x7E});
    CHECK(r.events.flushed == 0);
    CHECK(r.events.saturated == 0);
    CHECK(r.events.scales_clamped == 2);
    CHECK(r.events.scales_clamped_harmless == 2);
    const uint8_t codes[4] = {0x7, 0x5, 0xB, 0x1};
    for (size_t k = 0; k < 4; ++k) {
      CHECK(int(t.codes[at(0, k)]) == codes[k]);
      CHECK(int(r.codes[at(0, k)]) == codes[k]);
      CHECK(int(r.codes[at(1, k)]) == codes[k]);
    }
    std::vector<float> yt(32), yr(32);
    decode_blocks(parse_block_scheme("nvfp4"), t, yt.data());
    decode_blocks(parse_block_scheme("nvfp4:row_scaled"), r, yr.data());
    for (size_t k = 0; k < 4; ++k) {
      CHECK(yt[at(0, k)] == vals[k]);
      CHECK(yt[at(1, k)] == 0.0f);  // per tensor: flushed
      CHECK(yr[at(0, k)] == vals[k]);
      CHECK(bits(yr[at(1, k)]) == bits(std::ldexp(vals[k], -20)));  // row-scaled: exact
    }
    // An all-zero row: A = 0, g = fp32 max as for an all-zero tensor, codes 0, decoded 0.
    std::vector<float> z = x;
    for (size_t k = 0; k < 16; ++k) z[at(1, k)] = 0.0f;
    const BlockEncoding rz =
        encode_blocks(parse_block_scheme("nvfp4:row_scaled"), z.data(), rows, cols, o);
    CHECK(bits(rz.global_scales[1]) == bits(FLT_MAX));
    CHECK(rz.scale_codes[1] == 0);
    CHECK(rz.events.scales_clamped == 1);  // only row 0's harmless one
    std::vector<float> yz(32);
    decode_blocks(parse_block_scheme("nvfp4:row_scaled"), rz, yz.data());
    for (size_t k = 0; k < 16; ++k) CHECK(bits(yz[at(1, k)]) == 0u);
  }
}

TEST_CASE("a given global amax: a tensor quantized in parts is the tensor quantized whole") {
  // The analyzer quantizes a tensor in parts, each given the amax its global scales come from
  // (BlockOptions::global_amax): per tensor one value, row-scaled one per line of the part.
  // Parts of whole blocks cut across the lines (columns of blocks for blocks along the rows,
  // rows of blocks for blocks down the columns) give the whole tensor's codes, scales and
  // global scales.
  const size_t rows = 64, cols = 128;
  const std::vector<float> x = narrowed(mixed(rows * cols, 41, -12, 12));
  for (const char* name : {"nvfp4", "nvfp4:row_scaled", "nvfp4_4over6"}) {
    const BlockScheme s = parse_block_scheme(name);
    for (BlockAxis axis : {BlockAxis::last, BlockAxis::first}) {
      INFO(name << (axis == BlockAxis::last ? " rows" : " columns"));
      BlockOptions o;
      o.axis = axis;
      const BlockEncoding whole = encode_blocks(s, x.data(), rows, cols, o);
      // The amax of the tensor, or of each line, over the whole tensor.
      const bool last = axis == BlockAxis::last;
      std::vector<float> line(s.row_scaled ? (last ? rows : cols) : 1, 0.0f);
      for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c) {
          float& a = line[s.row_scaled ? (last ? r : c) : 0];
          a = std::max(a, std::fabs(x[r * cols + c]));
        }
      // Along the rows: parts of 32 columns (rows span 4 parts); down the columns: parts of
      // 16 rows (columns span 4 parts).
      const size_t pr = last ? rows : 16, pc = last ? 32 : cols;
      for (size_t r0 = 0; r0 < rows; r0 += pr)
        for (size_t c0 = 0; c0 < cols; c0 += pc) {
          std::vector<float> part(pr * pc);
          for (size_t r = 0; r < pr; ++r)
            std::copy_n(x.data() + (r0 + r) * cols + c0, pc, part.data() + r * pc);
          BlockOptions p = o;
          p.global_amax = s.row_scaled ? std::span<const float>(line).subspan(last ? r0 : c0,
                                                                               last ? pr : pc)
                                       : std::span<const float>(line);
          const BlockEncoding e = encode_blocks(s, part.data(), pr, pc, p);
          CHECK(e.global_scale == whole.global_scale);
          if (s.row_scaled) {
            for (size_t i = 0; i < e.global_scales.size(); ++i)
              REQUIRE(bits(e.global_scales[i]) ==
                      bits(whole.global_scales[(last ? r0 : c0) + i]));
          }
          for (size_t r = 0; r < pr; ++r)
            for (size_t c = 0; c < pc; ++c)
              REQUIRE(e.codes[r * pc + c] == whole.codes[(r0 + r) * cols + c0 + c]);
          for (size_t i = 0; i < e.scale_rows(); ++i)
            for (size_t j = 0; j < e.scale_cols(); ++j)
              REQUIRE(e.scale_codes[i * e.scale_cols() + j] ==
                      whole.scale_codes[(r0 / whole.tile_rows + i) * whole.scale_cols() +
                                        c0 / whole.tile_cols + j]);
          // The oracle takes the given amax too.
          if (r0 == 0 && c0 == 0) check_against_oracle(s, part, pr, pc, p);
          // Without it, a part's own amax gives other scales (the negative control).
          if (r0 == 0 && c0 == 0)
            CHECK(encode_blocks(s, part.data(), pr, pc, o).scale_codes != e.scale_codes);
        }
    }
  }
  // Bad given amaxes: below a line's own, not finite, too many or too few, to a scheme without
  // a global scale.
  std::vector<float> ones(16 * 32, 1.0f);
  BlockOptions o;
  const float half = 0.5f, inf = std::numeric_limits<float>::infinity(), two[2] = {2.0f, 2.0f};
  for (std::span<const float> g : {std::span<const float>(&half, 1),
                                   std::span<const float>(&inf, 1), std::span<const float>(two)}) {
    o.global_amax = g;
    CHECK_THROWS_AS(encode_blocks(parse_block_scheme("nvfp4"), ones.data(), 16, 32, o),
                    InputError);
  }
  std::vector<float> lines(16, 2.0f);
  o.global_amax = lines;
  CHECK_NOTHROW(encode_blocks(parse_block_scheme("nvfp4:row_scaled"), ones.data(), 16, 32, o));
  lines[3] = 0.5f;
  CHECK_THROWS_AS(encode_blocks(parse_block_scheme("nvfp4:row_scaled"), ones.data(), 16, 32, o),
                  InputError);
  o.global_amax = std::span<const float>(lines).first(15);
  CHECK_THROWS_AS(encode_blocks(parse_block_scheme("nvfp4:row_scaled"), ones.data(), 16, 32, o),
                  InputError);
  o.global_amax = std::span<const float>(two, 1);
  CHECK_THROWS_AS(encode_blocks(parse_block_scheme("mxfp4"), ones.data(), 16, 32, o), InputError);
  CHECK_THROWS_AS(encode_blocks(parse_block_scheme("fp8_block"), ones.data(), 16, 128, o),
                  InputError);
  // Decoding a row-scaled encoding needs one positive finite global scale per line.
  const BlockScheme rs = parse_block_scheme("nvfp4:row_scaled");
  const BlockEncoding e = encode_blocks(rs, ones.data(), 16, 32);
  std::vector<float> y(16 * 32);
  CHECK_NOTHROW(decode_blocks(rs, e, y.data()));
  BlockEncoding bad = e;
  bad.global_scales.pop_back();
  CHECK_THROWS_AS(decode_blocks(rs, bad, y.data()), InputError);
  bad = e;
  bad.global_scale = 1.0f;
  CHECK_THROWS_AS(decode_blocks(rs, bad, y.data()), InputError);
  bad = e;
  bad.global_scales[2] = 0.0f;
  CHECK_THROWS_AS(decode_blocks(rs, bad, y.data()), InputError);
  BlockEncoding per_tensor = encode_blocks(parse_block_scheme("nvfp4"), ones.data(), 16, 32);
  per_tensor.global_scales = e.global_scales;
  CHECK_THROWS_AS(decode_blocks(parse_block_scheme("nvfp4"), per_tensor, y.data()), InputError);
}

TEST_CASE("block lengths and tiles of any size, and whole-dimension blocks") {
  // Lengths the AVX-512 kernels are not specialised for take the portable loops on every
  // path: lengths below, between and above 16, 32 and 128, odd ones, one element per block,
  // the whole dimension (on a tensor that is not square, so that the axis matters), and 2-D
  // tiles that are not square; near_even and stochastic, every family.
  const size_t rows = 120, cols = 240;
  const std::vector<float> x = narrowed(mixed(rows * cols, 31, -6, 6));
  const std::vector<float> wide = mixed(rows * cols, 32);
  for (const char* name :
       {"mxfp8_e4m3:block=8", "mxfp4:rceil:block=24", "mxfp6_e3m2:block=0", "mxint8:block=40",
        "mxfp8_e5m2:block=1", "mxfp4:even:block=120", "nvfp4:block=8", "nvfp4:block=24",
        "nvfp4:block=0", "nvfp4_2d:tile=8x24", "nvfp4_2d:tile=1x5", "fp8_block:block=60",
        "fp8_block:block=0", "fp8_block_2d:tile=24x40", "fp8_block_2d:tile=3x5",
        "fp8_rowwise", "fp8_rowwise_e5m2", "fp8_rowwise:block=30", "mxfp8_e4m3:block=16",
        "mxint8:block=0", "nvfp4_4over6", "nvfp4_4over6:block=24", "nvfp4_4over6_2d:tile=8x24",
        "nvfp4:row_scaled:block=24", "nvfp4:block=8:row_scaled", "nvfp4:row_scaled:block=0"}) {
    const BlockScheme s = parse_block_scheme(name);
    for (BlockAxis axis : {BlockAxis::last, BlockAxis::first}) {
      const auto [tr, tc] = block_tile(s, axis, rows, cols);
      if (rows % tr || cols % tc) continue;  // 16 along the 120 rows
      for (Rounding r : {Rounding::near_even, Rounding::stochastic}) {
        if (s.family == BlockFamily::nvfp4_4over6 && r != Rounding::near_even) continue;
        BlockOptions o;
        o.axis = axis;
        o.rounding = r;
        o.seed = 9;
        check_against_oracle(s, s.family == BlockFamily::mx ? wide : x, rows, cols, o);
        if (has_pow2(s)) {
          o.pow2_scales = true;
          check_against_oracle(s, x, rows, cols, o);
        }
      }
    }
  }
  // The whole dimension is one block per row (axis last) or per column (axis first).
  const BlockScheme whole = parse_block_scheme("mxfp4:block=0");
  CHECK(block_tile(whole, BlockAxis::last, rows, cols) == std::pair<size_t, size_t>{1, cols});
  CHECK(block_tile(whole, BlockAxis::first, rows, cols) == std::pair<size_t, size_t>{rows, 1});
  CHECK_THROWS_AS(block_tile(whole, BlockAxis::last), InputError);
  CHECK(padded_shape(whole, BlockAxis::first, 7, 9) == std::pair<size_t, size_t>{7, 9});
  CHECK(padded_shape(parse_block_scheme("fp8_block_2d:tile=3x5"), BlockAxis::last, 7, 9) ==
        std::pair<size_t, size_t>{9, 10});
  const BlockEncoding e = encode_blocks(whole, x.data(), rows, cols);
  CHECK(e.scale_rows() == rows);
  CHECK(e.scale_cols() == 1);
  // A block of 32 named by its length is the default scheme's block, bit for bit.
  const BlockEncoding a = encode_blocks(parse_block_scheme("mxfp4"), x.data(), 900, 32);
  const BlockEncoding b = encode_blocks(parse_block_scheme("mxfp4:block=32"), x.data(), 900, 32);
  CHECK(a.codes == b.codes);
  CHECK(a.scale_codes == b.scale_codes);
}

TEST_CASE("bad shapes, names and options are one-line input errors") {
  std::vector<float> x(64 * 64, 1.0f);
  CHECK_THROWS_AS(parse_block_scheme("mxfp5"), InputError);
  CHECK_THROWS_AS(parse_block_scheme("nvfp4:ceil"), InputError);
  CHECK_THROWS_AS(parse_block_scheme("nvfp4:rceil"), InputError);
  CHECK_THROWS_AS(parse_block_scheme("mxfp4:round"), InputError);
  CHECK_THROWS_AS(parse_block_scheme("mxfp4:"), InputError);
  CHECK_THROWS_AS(parse_block_scheme("mxfp4:ceil:even"), InputError);
  for (const char* bad : {"mxfp4:block=", "mxfp4:block=-1", "mxfp4:block=x", "mxfp4:block=1e3",
                          "mxfp4:block=16777217", "mxfp4:block=8:block=16", "mxfp4:tile=4x4",
                          "nvfp4_2d:block=8", "nvfp4_2d:tile=8", "nvfp4_2d:tile=0x8",
                          "fp8_block_2d:tile=8x", "fp8_rowwise:rceil", "mxint8:pow2",
                          // row scaling: nvfp4's 1-D blocks only, once
                          "nvfp4_2d:row_scaled", "nvfp4_2d:tile=1x16:row_scaled",
                          "nvfp4_4over6:row_scaled", "nvfp4_4over6_2d:row_scaled",
                          "mxfp4:row_scaled", "mxfp8_e4m3:rceil:row_scaled", "fp8_block:row_scaled",
                          "fp8_rowwise:row_scaled", "nvfp4:row_scaled:row_scaled", "nvfp4:row",
                          "nvfp4:rowscaled", "nvfp4:row_scaled=1"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_block_scheme(bad), InputError);
  }
  CHECK(parse_block_scheme("mxfp4:block=16777216").block == 16777216);
  CHECK(parse_block_scheme("mxfp4:even:block=64").scale_rule == MxScaleRule::even);
  {
    BlockOptions rht32;
    rht32.rht = true;
    CHECK_THROWS_AS(encode_blocks(parse_block_scheme("nvfp4:block=32"), x.data(), 64, 64, rht32),
                    InputError);
  }
  CHECK_NOTHROW(parse_block_scheme("mxfp4:floor"));
  for (MxScaleRule r : {MxScaleRule::floor, MxScaleRule::ceil, MxScaleRule::rceil,
                        MxScaleRule::even})
    CHECK(parse_block_scheme(std::string("mxfp6_e3m2:") + mx_scale_rule_name(r)).scale_rule == r);
  CHECK(std::string(mx_scale_rule_name(MxScaleRule::rceil)) == "rceil");
  const BlockScheme mx = parse_block_scheme("mxfp4");
  CHECK_THROWS_AS(encode_blocks(mx, x.data(), 64, 48), InputError);
  BlockOptions first;
  first.axis = BlockAxis::first;
  CHECK_THROWS_AS(encode_blocks(mx, x.data(), 48, 64, first), InputError);
  CHECK_NOTHROW(encode_blocks(mx, x.data(), 64, 64, first));
  CHECK_THROWS_AS(encode_blocks(parse_block_scheme("nvfp4_2d"), x.data(), 8, 64), InputError);
  BlockOptions sr;
  sr.rounding = Rounding::stochastic;
  CHECK_NOTHROW(encode_blocks(mx, x.data(), 64, 64, sr));
  for (int bad : {0, -1, 33}) {
    sr.random_bits = bad;
    CHECK_THROWS_AS(encode_blocks(mx, x.data(), 64, 64, sr), InputError);
  }
  BlockOptions rht;
  rht.rht = true;
  CHECK_THROWS_AS(encode_blocks(parse_block_scheme("nvfp4_2d"), x.data(), 64, 64, rht),
                  InputError);
  BlockOptions p2;
  p2.pow2_scales = true;
  CHECK_THROWS_AS(encode_blocks(mx, x.data(), 64, 64, p2), InputError);
  BlockEncoding e = encode_blocks(mx, x.data(), 64, 64);
  e.codes[3] = 0x10;  // not an e2m1 code
  std::vector<float> y(64 * 64);
  CHECK_THROWS_AS(decode_blocks(mx, e, y.data()), InputError);
}

TEST_CASE("decode_blocks in row bands on several threads gives the same values",
          "[blocks][decode]") {
  std::mt19937 g(31);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const size_t rows = 512, cols = 512;  // 2^18 values: eight bands of 2^15
  std::vector<float> x(rows * cols);
  for (float& v : x) v = nd(g);
  size_t schemes = 0;
  for (const std::string& name : block_scheme_names()) {
    const BlockScheme s = parse_block_scheme(name);
    INFO(name);
    const BlockEncoding e = encode_blocks(s, x.data(), rows, cols);
    std::vector<float> one(x.size()), many(x.size(), -1.0f);
    decode_blocks(s, e, one.data());
    decode_blocks(s, e, many.data(), 3);
    CHECK(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)) == 0);
    ++schemes;
  }
  CHECK(schemes == block_scheme_names().size());
  CHECK(schemes >= 6);
}

namespace {

/// The first difference between two encodings of one tensor, or "" when they are the same bit
/// for bit (codes, scales, global scales, events, per-block events).
std::string first_difference(const BlockEncoding& a, const BlockEncoding& b) {
  size_t at = 0;
  if (!same_codes(a.codes, b.codes, at)) return "code " + std::to_string(at);
  if (!same_codes(a.scale_codes, b.scale_codes, at)) return "scale code " + std::to_string(at);
  if (!same_bits(a.scales, b.scales, at)) return "scale " + std::to_string(at);
  if (a.global_scale.has_value() != b.global_scale.has_value() ||
      (a.global_scale && bits(*a.global_scale) != bits(*b.global_scale)))
    return "global scale";
  if (!same_bits(a.global_scales, b.global_scales, at)) return "line scale " + std::to_string(at);
  if (describe(a.events) != describe(b.events))
    return "events " + describe(a.events) + " / " + describe(b.events);
  if (a.block_events.size() != b.block_events.size()) return "number of block events";
  for (size_t i = 0; i < a.block_events.size(); ++i)
    if (!(a.block_events[i] == b.block_events[i])) return "events of block " + std::to_string(i);
  return "";
}

}  // namespace

TEST_CASE("encode_blocks in bands on several threads gives the same encoding",
          "[blocks][threads]") {
  // 384 × 256 values: three bands of 2^15 on three threads, fewer for tall tiles (128 × 128
  // gives bands of one and two block rows). Every scheme and scale rule along both axes;
  // nearest-even, stochastic (an odd offset, 8 bits packed or 32) and, for NVFP4, the
  // transform; with and without per-block events; a NaN block (MX) and an all-zero block
  // (every scheme) for the second look at special blocks; on both bulk paths.
  const size_t rows = 384, cols = 256;
  std::vector<float> x = narrowed(mixed(rows * cols, 41, -8, 8));
  std::fill(x.begin() + 5 * cols, x.begin() + 5 * cols + 16, 0.0f);
  std::vector<float> with_nan = x;
  with_nan[7 * cols + 3] = std::numeric_limits<float>::quiet_NaN();
  struct Restore {
    detail::BulkPath before = detail::bulk_path();
    ~Restore() { detail::set_bulk_path(before); }
  } restore;
  size_t compared = 0, parallel = 0;
  for (detail::BulkPath path : {detail::bulk_path_supported(), detail::BulkPath::reference}) {
    detail::set_bulk_path(path);
    for (const std::string& base : block_scheme_names())
      for (const std::string& name : with_rules(base))
        for (BlockAxis axis : {BlockAxis::last, BlockAxis::first})
          for (int mode = 0; mode < 4; ++mode) {
            const BlockScheme s = parse_block_scheme(name);
            BlockOptions o;
            o.axis = axis;
            o.per_block_events = mode % 2 == 1;
            if (mode >= 2) {
              if (s.family == BlockFamily::nvfp4_4over6) continue;
              o.rounding = Rounding::stochastic;
              o.seed = 7;
              o.subsequence = 3;
              o.offset = 1001;
              o.random_bits = mode == 2 ? 8 : 32;
              o.pack_random_bits = mode == 2;
            }
            o.rht = s.family == BlockFamily::nvfp4 && !s.two_d && s.block == 16 && mode != 1;
            const std::vector<float>& v = s.family == BlockFamily::mx ? with_nan : x;
            INFO(detail::bulk_path_name(path) << " " << name << " axis " << int(axis) << " mode "
                                              << mode << (o.rht ? " rht" : ""));
            const BlockEncoding one = encode_blocks(s, v.data(), rows, cols, o);
            const BlockEncoding many = encode_blocks(s, v.data(), rows, cols, o, 3);
            CHECK(first_difference(one, many) == "");
            ++compared;
            const auto [tr, tc] = block_tile(s, axis, rows, cols);
            const size_t least = std::max<size_t>(1, (size_t(1) << 15) / (tr * cols));
            parallel += rows / tr / least >= 2;  // bands of at least 2^15 values
          }
  }
  CHECK(compared >= 2 * 12 * 2 * 3);
  CHECK(parallel >= compared / 2);  // most calls had two or more bands
  // The transform in bands is the oracle's.
  for (BlockAxis axis : {BlockAxis::last, BlockAxis::first}) {
    std::vector<float> got = mixed(rows * cols, 43, -20, 20), want = got;
    detail::apply_rht(got.data(), rows, cols, axis, 3);
    block_oracle::hadamard(want, rows, cols, axis);
    size_t at = 0;
    INFO("axis " << int(axis));
    CHECK(same_bits(got, want, at));
  }
}
