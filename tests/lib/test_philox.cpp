// The stochastic-rounding generator: Philox4x32-10 against the published Random123
// known-answer vectors and against values of cuRAND's own generator, the vectorised draws
// against the scalar ones, streams of different seeds against each other, the bias of few-bit
// stochastic rounding against its exact formula (exhaustively), and rounding frequencies
// against their probabilities (a stated binomial bound).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <unordered_set>
#include <vector>

#include "halfway/bulk.hpp"
#include "halfway/softfloat.hpp"
#include "test_support.hpp"

using namespace halfway;

namespace {

struct PathScope {
  explicit PathScope(detail::BulkPath p) : saved(detail::set_bulk_path(p)) {}
  ~PathScope() { detail::set_bulk_path(saved); }
  detail::BulkPath saved;
};

/// Every implementation of the bulk calls this CPU runs (the reference always).
std::vector<detail::BulkPath> all_paths() {
  std::vector<detail::BulkPath> v{detail::BulkPath::reference};
  const detail::BulkPath best = detail::bulk_path_supported();
  if (best >= detail::BulkPath::avx2) v.push_back(detail::BulkPath::avx2);
  if (best >= detail::BulkPath::avx512) v.push_back(detail::BulkPath::avx512);
  return v;
}

float f32_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

}  // namespace

// Random123 1.14, tests/kat_vectors, the three "philox4x32 10" lines: counter (x y z w), key
// (k0 k1), result (x y z w).
TEST_CASE("Philox4x32-10 reproduces the Random123 known-answer vectors", "[philox]") {
  struct Kat {
    Philox4x32 ctr;
    uint32_t k0, k1;
    Philox4x32 want;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, 0, 0, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       0xffffffff,
       0xffffffff,
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       0xa4093822,
       0x299f31d0,
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const Philox4x32 got = philox4x32_10(k.ctr, uint64_t(k.k1) << 32 | k.k0);
    INFO("counter " << std::hex << k.ctr.x << " " << k.ctr.y << " " << k.ctr.z << " " << k.ctr.w);
    CHECK(got == k.want);
  }
}

// Values of NVIDIA's implementation: cuRAND's host generator (curandCreateGeneratorHost,
// CURAND_RNG_PSEUDO_PHILOX4_32_10, curandSetPseudoRandomGeneratorSeed, curandSetGeneratorOffset,
// curandGenerate). Its element p (offset included) is curand() of thread t = ⌊p/4⌋ mod 65536
// after curand_init(seed, t, 4·⌊p/2^18⌋ + p mod 4): the (seed, subsequence, index) listed.
// test_curand_host checks millions of them against libcurand where it is installed.
TEST_CASE("sr_bits follows cuRAND's curand_init(seed, subsequence, offset)", "[philox]") {
  struct Draw {
    uint64_t seed, subsequence, index;
    uint32_t want;
  };
  const Draw draws[] = {
      {0x0ull, 0ull, 0ull, 0x6627e8d5u},  // = the first known-answer vector
      {0x0ull, 0ull, 1ull, 0xe169c58du},
      {0x0ull, 0ull, 2ull, 0xbc57ac4cu},
      {0x0ull, 0ull, 3ull, 0x9b00dbd8u},
      {0x0ull, 1ull, 0ull, 0x844515e1u},
      {0x0ull, 1ull, 1ull, 0xf08d6eaau},
      {0xfedcba9876543210ull, 53392ull, 15ull, 0x515cdac6u},
      {0xfedcba9876543210ull, 53393ull, 12ull, 0x60f26bc7u},
      {0xfedcba9876543210ull, 53393ull, 13ull, 0x5580adf8u},
      {0xfedcba9876543210ull, 53393ull, 14ull, 0x3659115fu},
      {0xfedcba9876543210ull, 53393ull, 15ull, 0x16e45791u},
      {0xfedcba9876543210ull, 53394ull, 12ull, 0xbbf564dau},
      // Index 2^44 + k: the counter's second word is non-zero.
      {0x134d8d9ull, 1ull, 17592186044418ull, 0x57e49c0au},
      {0x134d8d9ull, 1ull, 17592186044419ull, 0xa6a68167u},
      {0x134d8d9ull, 2ull, 17592186044416ull, 0x98c0ef24u},
      {0x134d8d9ull, 2ull, 17592186044417ull, 0x18a07629u},
      {0x134d8d9ull, 2ull, 17592186044418ull, 0x1eb92ab0u},
      {0x134d8d9ull, 2ull, 17592186044419ull, 0x1446c324u},
  };
  for (const Draw& d : draws) {
    INFO("seed " << d.seed << " subsequence " << d.subsequence << " index " << d.index);
    CHECK(sr_bits(d.seed, d.subsequence, d.index) == d.want);
    Env e{Rounding::stochastic, d.seed};
    e.sr_subsequence = d.subsequence;
    e.sr_counter = d.index;
    CHECK(e.next_random() == d.want);
    CHECK(e.sr_counter == d.index + 1);
  }
}

TEST_CASE("bulk sr_bits equals the scalar draws on every path", "[philox][bulk]") {
  struct Stream {
    uint64_t seed, subsequence, offset;
  };
  const uint64_t wrap = (uint64_t(1) << 34) - 4 * 37;  // the counter's first word wraps inside
  const Stream streams[] = {{0, 0, 0},           {7, 0, 1},
                            {7, 3, 2},           {0xDEADBEEFCAFEF00Dull, 1ull << 40, 3},
                            {42, ~0ull, wrap + 1}, {42, 5, ~0ull - 1000}};
  for (detail::BulkPath p : all_paths()) {
    PathScope scope(p);
    for (const Stream& s : streams)
      for (int bits : {32, 7, 1, 0})
        for (size_t n : {size_t(0), size_t(1), size_t(3), size_t(5), size_t(63), size_t(64),
                         size_t(65), size_t(1000)}) {
          BulkOptions o;
          o.seed = s.seed;
          o.subsequence = s.subsequence;
          o.offset = s.offset;
          o.random_bits = bits;
          std::vector<uint32_t> got(n + 1, 0xABCDEF01u);
          halfway::sr_bits(o, got.data(), n);
          INFO("path " << detail::bulk_path_name(p) << " offset " << s.offset << " bits " << bits
                       << " n " << n);
          bool same = true;
          for (size_t i = 0; i < n; ++i)
            same &= got[i] == (halfway::sr_bits(s.seed, s.subsequence, s.offset + i) &
                               sr_mask(bits));
          CHECK(same);
          CHECK(got[n] == 0xABCDEF01u);  // nothing written past the end
        }
  }
}

TEST_CASE("packed draws: each draw's fields serve consecutive elements, on every path",
          "[philox][bulk]") {
  // With pack_random_bits, k = floor(32/r) elements share a draw: element e reads field e mod
  // k of draw floor(e/k), field 0 the draw's top r bits. Checked by putting each draw back
  // together from its k elements' bits (the fields, shifted back down, fill the draw's top k·r
  // bits), for offsets inside a draw and across Philox counters, and r where k·r < 32.
  const uint64_t seed = 0x9E3779B97F4A7C15ull, sub = 11;
  for (detail::BulkPath p : all_paths()) {
    PathScope scope(p);
    for (int r : {1, 3, 5, 8, 11, 16})
      for (uint64_t offset : {uint64_t(0), uint64_t(1), uint64_t(7), (uint64_t(1) << 34) - 5})
        for (size_t n : {size_t(1), size_t(5), size_t(200), size_t(5000)}) {
          const uint32_t k = 32 / uint32_t(r);
          BulkOptions o;
          o.seed = seed, o.subsequence = sub, o.offset = offset, o.random_bits = r;
          o.pack_random_bits = true;
          std::vector<uint32_t> got(n + 1, 0xABCDEF01u);
          halfway::sr_bits(o, got.data(), n);
          INFO("path " << detail::bulk_path_name(p) << " r " << r << " offset " << offset
                       << " n " << n);
          std::map<uint64_t, uint32_t> rebuilt, fields;  // draw -> its bits, fields seen
          bool in_mask = true, scalar_same = true;
          for (size_t i = 0; i < n; ++i) {
            const uint64_t e = offset + i;
            in_mask &= (got[i] & ~sr_mask(r)) == 0;
            rebuilt[e / k] |= got[i] >> (uint32_t(r) * uint32_t(e % k));
            ++fields[e / k];
            Env env;
            env.sr_seed = seed, env.sr_subsequence = sub, env.sr_counter = e;
            env.sr_random_bits = r, env.sr_pack = true;
            scalar_same &= env.next_random() == got[i];
          }
          CHECK(in_mask);
          CHECK(scalar_same);
          const uint32_t top = sr_mask(int(k) * r);  // the bits the k fields cover
          bool whole = true;
          for (const auto& [d, bits] : rebuilt)
            if (fields[d] == k) whole &= bits == (halfway::sr_bits(seed, sub, d) & top);
          CHECK(whole);
          CHECK(got[n] == 0xABCDEF01u);
        }
    // More than 16 bits: one draw per element, packed or not.
    BulkOptions o;
    o.seed = seed, o.random_bits = 17, o.pack_random_bits = true;
    std::vector<uint32_t> got(100);
    halfway::sr_bits(o, got.data(), got.size());
    bool same = true;
    for (size_t i = 0; i < got.size(); ++i)
      same &= got[i] == (halfway::sr_bits(seed, 0, i) & sr_mask(17));
    CHECK(same);
  }
}

// The old generator made seeds shifted windows of one sequence (seed 0 and seed 52,777 agreed
// 28,657 elements apart; seeds 2^32 and 0x85EBCA6B were identical). Here no two consecutive
// draws (64 bits) of one stream appear consecutively anywhere in another: a shared window of
// length 2 would be a coincidence of probability ~2^-64 per pair of positions.
TEST_CASE("streams of different seeds and subsequences share no window", "[philox]") {
  struct Id {
    uint64_t seed, subsequence;
  };
  std::vector<Id> ids = {{0, 0}, {52777, 0}, {uint64_t(1) << 32, 0}, {0x85EBCA6Bu, 0}};
  for (uint64_t s = 1; s <= 48; ++s) ids.push_back({s, 0});
  for (uint64_t s = 1; s <= 8; ++s) ids.push_back({0, s});
  constexpr uint64_t kLen = 4096;
  std::unordered_set<uint64_t> seen;
  size_t shared = 0;
  for (const Id& id : ids) {
    std::vector<uint64_t> pairs;
    uint32_t prev = sr_bits(id.seed, id.subsequence, 0);
    for (uint64_t i = 1; i < kLen; ++i) {
      const uint32_t cur = sr_bits(id.seed, id.subsequence, i);
      pairs.push_back(uint64_t(prev) << 32 | cur);
      prev = cur;
    }
    for (uint64_t v : pairs) shared += seen.count(v);
    seen.insert(pairs.begin(), pairs.end());
  }
  CHECK(shared == 0);
}

namespace {

/// For each value R of `bits` random bits, a stream index of (seed, 0) whose draw's top bits
/// are R: then Env at that index rounds with exactly those random bits.
std::vector<uint64_t> index_per_draw(uint64_t seed, int bits) {
  std::vector<uint64_t> idx(size_t(1) << bits, ~0ull);
  size_t found = 0;
  for (uint64_t i = 0; found < idx.size(); ++i) {
    const uint32_t top = sr_bits(seed, 0, i) >> (32 - bits);
    if (idx[top] == ~0ull) {
      idx[top] = i;
      ++found;
    }
  }
  return idx;
}

}  // namespace

// Few-bit stochastic rounding, exhaustively: f32 → bf16 drops t = 16 fraction bits, so a value
// lies at f = rem/2^16 of the spacing u above its lower neighbour, rem in [0, 2^16). With r
// random bits, rounding with each of the 2^r possible draws must go up for exactly ⌊f·2^r⌋ of
// them, so the exact bias, averaged over the draws, is
//     E[round(x)] − x = −sign(x) · u · frac(f·2^r) / 2^r      (toward zero, |bias| < u·2^-r),
// and averaged over all rem it is −sign(x)·u·(1 − 2^(r−t)) / 2^(r+1). Checked for every rem and
// every draw, in integers (units of u·2^-16), for a normal, a negative and a subnormal
// binade of bf16.
TEST_CASE("few-bit stochastic rounding: exact bias for every truncated value and draw",
          "[philox][stochastic]") {
  constexpr int t = 16;
  struct Binade {
    uint32_t base;        // f32 bits of the lower neighbour (rem = 0)
    uint32_t lo_enc;      // its bf16 encoding
    const char* what;
  };
  const Binade binades[] = {{0x3F800000u, 0x3F80u, "[1, 2)"},
                            {0xBF800000u, 0xBF80u, "(-2, -1]"},
                            {5u << 16, 5u, "bf16 subnormals"}};
  for (int r : {1, 2, 3, 5, 8}) {
    const std::vector<uint64_t> idx = index_per_draw(0x5EED, r);
    for (const Binade& b : binades) {
      INFO(b.what << ", " << r << " random bits");
      long long total_bias = 0;  // units of u·2^-t, summed over rem
      bool all_match = true;
      for (uint32_t rem = 0; rem < (1u << t); ++rem) {
        const float x = f32_of(b.base + rem);
        long long ups = 0;
        for (size_t R = 0; R < idx.size(); ++R) {
          Env e{Rounding::stochastic, 0x5EED};
          e.sr_counter = idx[R];
          e.sr_random_bits = r;
          const uint32_t got = from_f32(formats::bf16, x, e);
          if (got == b.lo_enc + 1) {
            ++ups;
          } else if (got != b.lo_enc) {
            all_match = false;
          }
        }
        // ups must be ⌊f·2^r⌋ = rem >> (t − r); the bias, ups·2^(t−r) − rem, must be
        // −(rem mod 2^(t−r)), i.e. −frac(f·2^r)·2^(t−r).
        const long long bias = ups * (1ll << (t - r)) - rem;
        all_match &= ups == (rem >> (t - r)) && bias == -(long long)(rem & ((1u << (t - r)) - 1));
        total_bias += bias;
      }
      CHECK(all_match);
      // Mean over rem: −(1 − 2^(r−t))/2 · 2^(t−r) in units of u·2^-t, times 2^t values.
      CHECK(total_bias == -((1ll << t) * ((1ll << (t - r)) - 1)) / 2);
    }
  }
}

// Rounding frequencies against their probabilities: N = 2^18 consecutive draws of one stream
// round the same value; the count of "up" is Binomial(N, p) with p = ⌊f·2^r⌋/2^r. A check
// passes when |count − N·p| ≤ 5·sqrt(N·p·(1−p)) (a correct generator fails a check with
// probability ~6e-7; the seeds are fixed, so the outcome is reproducible); for p = 0 or 1 the
// count must be exact. Through the bulk call on every path, so the vector draws are covered.
TEST_CASE("stochastic rounding frequencies match their probabilities", "[philox][stochastic]") {
  constexpr size_t N = size_t(1) << 18;
  struct Case {
    double f;  // fraction of the fp16 spacing above 1.0 (exact in 10 + 13 bits)
    int bits;
    bool packed = false;  // packed draws: floor(32/bits) consecutive roundings per draw
  };
  const Case cases[] = {{0.5, 32},     {0.1, 32},     {0.9, 32},       {1.0 / 3, 32},
                        {0.1, 3},      {0.3, 3},      {0.99, 3},       {0.7, 1},
                        {0.2, 8},      {0x1p-13, 32}, {0x1p-13, 12},   {0x1p-13, 13},
                        {0.2, 8, true}, {0.7, 1, true}, {0.3, 3, true}, {0.6, 12, true}};
  for (detail::BulkPath path : all_paths()) {
    PathScope scope(path);
    for (const Case& c : cases) {
      const uint32_t rem = uint32_t(std::floor(c.f * 8192));  // the 13 dropped bits
      const float x = f32_of(0x3F800000u + rem);
      const double p =
          c.bits >= 13 ? rem / 8192.0 : std::floor(rem / 8192.0 * (1 << c.bits)) / (1 << c.bits);
      std::vector<float> in(N, x), out(N);
      BulkOptions o;
      o.rounding = Rounding::stochastic;
      o.seed = 20240601;
      o.subsequence = 9;
      o.random_bits = c.bits;
      o.pack_random_bits = c.packed;
      quantize_f32(formats::fp16, in.data(), out.data(), N, o);
      size_t up = 0, other = 0;
      for (float v : out) {
        if (v == 1.0f + 0x1p-10f) {
          ++up;
        } else if (v != 1.0f) {
          ++other;
        }
      }
      const double bound = 5 * std::sqrt(N * p * (1 - p));
      INFO("path " << detail::bulk_path_name(path) << " f=" << c.f << " bits " << c.bits
                   << (c.packed ? " packed" : "") << " p=" << p << " up " << up << " of " << N);
      CHECK(other == 0);
      CHECK(std::fabs(double(up) - N * p) <= bound);
    }
  }
}
