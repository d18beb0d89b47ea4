// Accumulation models against an exact oracle. The block-FMA model is recomputed from its
// definition with exact integers (products exact, alignment to the largest exponent by floor
// division, exact sum) and delivered into the accumulator format by the Boost oracle's rounding;
// the sequential models are chains of oracle-rounded operations.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "halfway/accumulate.hpp"
#include "oracle.hpp"

using namespace halfway;
using oracle::cpp_int;

namespace {

struct Term {
  bool neg;
  cpp_int sig;  // value = sig · 2^exp
  int exp;
};

int bit_length(const cpp_int& v) { return v == 0 ? 0 : int(boost::multiprecision::msb(v)) + 1; }

/// The block-FMA model from its definition, one block: exact.
uint64_t block_oracle(const AccumulationModel& m, const oracle::Fmt& in, const oracle::Fmt& acc,
                      const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, size_t lo,
                      size_t hi, uint64_t c, uint8_t& flags) {
  std::vector<Term> terms;
  const oracle::Decoded dc = oracle::decode(acc, c);
  if (dc.kind == oracle::Kind::inf || dc.kind == oracle::Kind::nan) return c;  // finite terms
  if (dc.kind == oracle::Kind::finite) terms.push_back({dc.neg, cpp_int(dc.sig), dc.exp});
  for (size_t i = lo; i < hi; ++i) {
    const oracle::Decoded x = oracle::decode(in, a[i]), y = oracle::decode(in, b[i]);
    if (x.kind != oracle::Kind::finite || y.kind != oracle::Kind::finite) continue;  // zeros
    terms.push_back({x.neg != y.neg, cpp_int(x.sig) * y.sig, x.exp + y.exp});
  }
  if (terms.empty()) return 0;
  int emax = INT32_MIN;
  for (const auto& t : terms) emax = std::max(emax, t.exp + bit_length(t.sig) - 1);
  const int lsb = emax - m.kept_bits;
  cpp_int sum = 0;
  for (const auto& t : terms) {
    cpp_int v = t.exp >= lsb ? cpp_int(t.sig << (t.exp - lsb)) : cpp_int(t.sig >> (lsb - t.exp));
    sum += t.neg ? cpp_int(-v) : v;
  }
  oracle::Exact x;
  if (sum == 0) {
    x.kind = oracle::Kind::zero;
    x.zero_sign_by_rounding = true;
  } else {
    x.kind = oracle::Kind::finite;
    x.neg = sum < 0;
    x.num = x.neg ? cpp_int(-sum) : sum;
    x.den = 1;
    x.e = lsb;
  }
  const oracle::Result r = oracle::deliver(acc, x, m.rounding, Tininess::after_rounding, 0);
  flags |= r.flags;
  return r.enc;
}

std::vector<uint32_t> random_inputs(std::mt19937_64& g, const Format& f, size_t n, int spread) {
  std::vector<uint32_t> v(n);
  for (auto& x : v) {
    // finite values with exponents within +-spread of 1, both signs, some zeros/subnormals
    Env e;
    const double mant = 1.0 + double(g() % 4096) / 4096.0;
    const int ex = int(g() % (2 * spread + 1)) - spread;
    double d = std::ldexp(mant, ex) * ((g() & 1) ? -1 : 1);
    if (g() % 50 == 0) d = 0;
    if (g() % 50 == 0) d = std::ldexp(mant, f.emin() - 3);
    x = from_f64(f, d, e);
    const Class cls = unpack(f, x).cls;
    if (cls != Class::finite && cls != Class::zero) x = from_f64(f, d > 0 ? 1.0 : -1.0, e);
  }
  return v;
}

}  // namespace

TEST_CASE("block-FMA model equals its exact definition", "[accumulate]") {
  std::mt19937_64 g(7);
  const AccumulationModel models[] = {accumulation::v100_fp32, accumulation::a100_fp32,
                                      accumulation::h100_fp32, accumulation::h100_fp16,
                                      accumulation::h100_fp8_fp32,
                                      {AccumulationModel::Kind::block_fma, formats::fp32,
                                       Rounding::near_even, 4, 40}};
  uint64_t checks = 0, bad = 0;
  for (const auto& m : models) {
    for (const Format& in : {formats::fp16, formats::bf16, formats::e4m3, formats::e5m2}) {
      const oracle::Fmt fin(in), facc(m.acc);
      for (int t = 0; t < 1500; ++t) {
        const size_t n = 1 + g() % 70;
        const int spread = (t % 3 == 0) ? 20 : 4;  // wide spreads exercise truncation
        auto a = random_inputs(g, in, n, spread), b = random_inputs(g, in, n, spread);
        Env env;
        const uint32_t c0 = (t % 2) ? from_f64(m.acc, 1.0, env) : 0u;
        env = Env{};
        const uint32_t got = dot(m, in, a.data(), b.data(), int(n), c0, env);
        uint8_t want_flags = 0;
        uint64_t want = c0;
        for (size_t lo = 0; lo < n; lo += size_t(m.block))
          want = block_oracle(m, fin, facc, a, b, lo, std::min(n, lo + size_t(m.block)), want,
                              want_flags);
        ++checks;
        if (got != want || env.flags != want_flags) {
          if (++bad < 5)
            FAIL_CHECK("block " << m.block << " kept " << m.kept_bits << " n " << n << ": got "
                                << oracle::show(facc, got) << " want " << oracle::show(facc, want));
        }
      }
    }
  }
  INFO(checks << " dot products");
  CHECK(bad == 0);
}

TEST_CASE("block-FMA truncation loses what the literature says it loses", "[accumulate]") {
  // 1 + 4 · 2^-26 under V100 (no extra bits, truncation toward zero) stays 1; with the exact
  // model (many kept bits, RNE) it is 1 + 2^-24. Values from the definition, not the code.
  const uint32_t a[4] = {0x3C00, 0x3C00, 0x3C00, 0x3C00};  // 1.0 in fp16
  const uint32_t b[4] = {0x0010, 0x0010, 0x0010, 0x0010};  // 2^-20 in fp16 (subnormal)
  Env env;
  const uint32_t one = 0x3F800000;
  // products 2^-20 each: 4 · 2^-20 = 2^-18 is kept by every model (within 23 bits of 1).
  CHECK(dot(accumulation::v100_fp32, formats::fp16, a, b, 4, one, env) == 0x3F800020);
  const uint32_t tiny[4] = {0x0001, 0x0001, 0x0001, 0x0001};  // 2^-24 each
  // 2^-24 is 24 bits below 1: truncated away by V100 (23 kept bits) and A100 (24 keeps it).
  CHECK(dot(accumulation::v100_fp32, formats::fp16, a, tiny, 4, one, env) == one);
  CHECK(dot(accumulation::a100_fp32, formats::fp16, a, tiny, 4, one, env) == 0x3F800002);
}

TEST_CASE("sequential models are chains of correctly rounded operations", "[accumulate]") {
  std::mt19937_64 g(11);
  uint64_t bad = 0;
  const oracle::Fmt f32(formats::fp32), f16(formats::fp16);
  for (int t = 0; t < 3000; ++t) {
    const size_t n = 1 + g() % 40;
    auto a = random_inputs(g, formats::fp16, n, 6), b = random_inputs(g, formats::fp16, n, 6);
    // fp32 sequential fma: oracle chain
    Env env;
    const uint32_t got = dot(accumulation::fp32_sequential, formats::fp16, a.data(), b.data(),
                             int(n), 0u, env);
    uint64_t c = 0;
    for (size_t i = 0; i < n; ++i) {
      const oracle::Decoded x = oracle::decode(f16, a[i]), y = oracle::decode(f16, b[i]);
      const oracle::Decoded z = oracle::decode(f32, c);
      // the fp16 inputs are exact in fp32: decode them as fp32 values
      const uint64_t xa = oracle::deliver(f32, oracle::value_of(x), Rounding::near_even,
                                          Tininess::after_rounding, 0).enc;
      const uint64_t yb = oracle::deliver(f32, oracle::value_of(y), Rounding::near_even,
                                          Tininess::after_rounding, 0).enc;
      c = oracle::deliver(f32, oracle::fma(oracle::decode(f32, xa), oracle::decode(f32, yb), z),
                          Rounding::near_even, Tininess::after_rounding, 0).enc;
    }
    if (got != c && ++bad < 5) FAIL_CHECK("fp32 sequential: got " << got << " want " << c);
    // in-format fp16 accumulation with a rounding per multiply and per add
    const AccumulationModel m16{AccumulationModel::Kind::sequential, formats::fp16,
                                Rounding::near_even, 1, 10};
    env = Env{};
    const uint32_t got16 = dot(m16, formats::fp16, a.data(), b.data(), int(n), 0u, env);
    uint64_t c16 = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t p = oracle::deliver(f16, oracle::mul(oracle::decode(f16, a[i]),
                                                          oracle::decode(f16, b[i])),
                                         Rounding::near_even, Tininess::after_rounding, 0).enc;
      c16 = oracle::deliver(f16, oracle::add(oracle::decode(f16, p), oracle::decode(f16, c16)),
                            Rounding::near_even, Tininess::after_rounding, 0).enc;
    }
    const bool nan = ((got16 & 0x7FFF) > 0x7C00) && ((c16 & 0x7FFF) > 0x7C00);
    if (got16 != c16 && !nan && ++bad < 5)
      FAIL_CHECK("fp16 sequential: got " << got16 << " want " << c16);
  }
  CHECK(bad == 0);
}

TEST_CASE("block-FMA special operands follow IEEE", "[accumulate]") {
  const uint32_t one = 0x3C00, inf = 0x7C00, ninf = 0xFC00, qnan = 0x7E00, snan = 0x7D00,
                 zero = 0x0000;
  auto run = [](std::initializer_list<uint32_t> a, std::initializer_list<uint32_t> b, uint32_t c,
                uint8_t& flags) {
    Env env;
    const uint32_t r = dot(accumulation::h100_fp32, formats::fp16, std::data(a), std::data(b),
                           int(a.size()), c, env);
    flags = env.flags;
    return r;
  };
  uint8_t fl;
  CHECK(run({one, inf}, {one, one}, 0, fl) == 0x7F800000);  // 1 + inf = inf, exact
  CHECK(fl == 0);
  CHECK((run({inf, ninf}, {one, one}, 0, fl) & 0x7FFFFFFF) > 0x7F800000);  // inf − inf
  CHECK(fl == flag::invalid);
  CHECK((run({inf}, {zero}, 0, fl) & 0x7FFFFFFF) > 0x7F800000);  // inf · 0
  CHECK(fl == flag::invalid);
  CHECK((run({qnan, one}, {one, one}, 0, fl) & 0x7FFFFFFF) > 0x7F800000);  // quiet NaN
  CHECK(fl == 0);
  CHECK((run({snan}, {one}, 0, fl) & 0x7FFFFFFF) > 0x7F800000);  // signalling NaN
  CHECK(fl == flag::invalid);
  CHECK(run({zero}, {one}, 0x80000000, fl) == 0x00000000);  // −0 + (+0·1) = +0
  CHECK(run({0x8000}, {one}, 0x80000000, fl) == 0x80000000);  // −0 + (−0·1) = −0
}

namespace {

/// A random bf16 encoding for the flushing tests: normals over the whole range, subnormals
/// and zeros of either sign.
uint32_t random_bf16(std::mt19937_64& g) {
  const uint32_t s = (g() & 1) ? 0x8000u : 0u;
  switch (g() % 8) {
    case 0: return s;
    case 1: return s | uint32_t(1 + g() % 0x7F);  // subnormal
    case 2: return s | uint32_t(((1 + g() % 40) << 7) | (g() & 0x7F));  // tiny products
    default: return s | uint32_t(((1 + g() % 254) << 7) | (g() & 0x7F));
  }
}

}  // namespace

TEST_CASE("vdpbf16ps model: odd element first, DAZ, FTZ after rounding, by the oracle",
          "[accumulate]") {
  // Independent chain: two oracle fmas per lane in the documented order; inputs and the
  // accumulator decoded with DAZ, each step delivered with FTZ (tininess after rounding).
  Format bf16daz = formats::bf16, f32z = formats::fp32;
  bf16daz.daz = true;
  f32z.daz = f32z.ftz = true;
  const oracle::Fmt fin(bf16daz), facc(f32z);
  std::mt19937_64 g(11);
  uint64_t bad = 0, flushed = 0;
  for (int t = 0; t < 200000; ++t) {
    uint32_t a[2] = {random_bf16(g), random_bf16(g)}, b[2] = {random_bf16(g), random_bf16(g)};
    uint32_t c = static_cast<uint32_t>(g());
    if ((c & 0x7F800000u) == 0x7F800000u) c &= 0x807FFFFFu;  // finite accumulators
    if (t % 4 == 0) c &= 0x807FFFFFu;                        // subnormal or zero
    uint64_t want = c;
    for (int k : {1, 0}) {
      const oracle::Exact x = oracle::fma(oracle::decode(fin, a[k]), oracle::decode(fin, b[k]),
                                          oracle::decode(facc, want));
      want = oracle::deliver(facc, x, Rounding::near_even, Tininess::after_rounding, 0).enc;
    }
    Env env;
    const uint32_t got = dot(accumulation::avx512_dpbf16, formats::bf16, a, b, 2, c, env);
    flushed += want != c && (want & 0x7FFFFFFFu) == 0;
    if (got != want && ++bad < 5)
      FAIL_CHECK("a " << std::hex << a[0] << "," << a[1] << " b " << b[0] << "," << b[1] << " c "
                      << c << ": got " << got << " want " << want);
  }
  CHECK(bad == 0);
  CHECK(flushed > 100);  // the cases reach the flushing paths
}

TEST_CASE("vdpbf16ps model: hand-derived cases", "[accumulate]") {
  const AccumulationModel& m = accumulation::avx512_dpbf16;
  auto lane = [&](uint32_t a0, uint32_t a1, uint32_t b0, uint32_t b1, uint32_t c) {
    const uint32_t a[2] = {a0, a1}, b[2] = {b0, b1};
    Env env;
    return dot(m, formats::bf16, a, b, 2, c, env);
  };
  const uint32_t one = 0x3F80, zero = 0;
  // A subnormal bf16 input and a subnormal accumulator read as zero: +0.
  CHECK(lane(0x0001, zero, one, zero, 0x00400000u) == 0x00000000u);
  // 2^-126 − 2^-151 is tiny before rounding but rounds (ties to even) to 2^-126: kept, since
  // tininess is detected after rounding. Product: 2^-76 · (−2^-75).
  CHECK(lane(0x19800000u >> 16, zero, 0x9A000000u >> 16, zero, 0x00800000u) == 0x00800000u);
  // 1.5·2^-126 − 2^-126 = 2^-127 (subnormal) is flushed to +0.
  CHECK(lane(0x3F80, zero, 0x8080, zero, 0x00C00000u) == 0x00000000u);
  // Order: the odd element first. c = 2^24, odd product 3, even product −1: 2^24 + 3 is a
  // tie and rounds to 2^24 + 4, minus 1 is a tie again: 2^24 + 4. Even first: 2^24 − 1 is
  // exact, plus 3 is 2^24 + 2, exact.
  const uint32_t two24 = 0x4B800000u, three = 0x4040, neg1 = 0xBF80;
  CHECK(lane(neg1, three, one, one, two24) == 0x4B800002u);
  AccumulationModel even_first = m;
  even_first.period = 0;
  const uint32_t a[2] = {neg1, three}, b[2] = {one, one};
  Env env;
  CHECK(dot(even_first, formats::bf16, a, b, 2, two24, env) == 0x4B800001u);
  // NaN priority: low element, high element, accumulator; a NaN accumulator wins over inf·0.
  CHECK(lane(0x7FC1, 0x7FC2, one, one, 0x7FC00003u) == 0x7FC10000u);
  CHECK(lane(one, 0x7FC2, one, one, 0x7FC00003u) == 0x7FC20000u);
  CHECK(lane(0x7F80, zero, zero, one, 0x7FC00003u) == 0x7FC00003u);
  CHECK(lane(0x7F80, zero, zero, one, 0) == 0xFFC00000u);  // inf·0 alone: default NaN
}

TEST_CASE("an operand permutation forms interleaved blocks", "[accumulate]") {
  // Block 8 of 16 products, blocks {0,1,4,5,...} and {2,3,6,7,...}: the oracle of the
  // contiguous model on explicitly permuted operands.
  AccumulationModel m{AccumulationModel::Kind::block_fma, formats::fp32, Rounding::minMag, 8, 24};
  m.period = 16;
  for (int j = 0, k = 0; k < 16; ++k)
    if ((k / 2) % 2 == 0) m.order[j++] = uint8_t(k);
  for (int j = 8, k = 0; k < 16; ++k)
    if ((k / 2) % 2 == 1) m.order[j++] = uint8_t(k);
  const oracle::Fmt fin(formats::fp16), facc(formats::fp32);
  std::mt19937_64 g(5);
  uint64_t bad = 0;
  for (int t = 0; t < 3000; ++t) {
    auto a = random_inputs(g, formats::fp16, 16, 12), b = random_inputs(g, formats::fp16, 16, 12);
    std::vector<uint32_t> pa(16), pb(16);
    for (int j = 0; j < 16; ++j) pa[j] = a[m.order[j]], pb[j] = b[m.order[j]];
    Env env;
    const uint32_t got = dot(m, formats::fp16, a.data(), b.data(), 16, 0x3F800000u, env);
    uint8_t fl = 0;
    uint64_t want = 0x3F800000u;
    for (size_t lo = 0; lo < 16; lo += 8) want = block_oracle(m, fin, facc, pa, pb, lo, lo + 8, want, fl);
    bad += got != want;
  }
  CHECK(bad == 0);
}

TEST_CASE("AMX model: two chains from +0, then + C, worked by hand", "[accumulate]") {
  const Format bf16 = formats::bf16;
  const AccumulationModel m = accumulation::amx_bf16;
  Env env;
  // bf16 encodings: 1.0 = 0x3F80, 2^-24 = 0x3380, 0 = 0x0000.
  // Products: 1 (even chain), 2^-24 (odd), 0 (even), 2^-24 (odd); C = +0.
  const uint32_t a[4] = {0x3F80, 0x3380, 0x0000, 0x3380}, b[4] = {0x3F80, 0x3F80, 0x3F80, 0x3F80};
  // E = 1; O = 2^-24 + 2^-24 = 2^-23 exactly; R = 1 + 2^-23 = 0x3F800001; + C = 0x3F800001.
  CHECK(dot(m, bf16, a, b, 4, 0u, env) == 0x3F800001u);
  // One chain (Intel's pseudo-code): 1 + 2^-24 is a tie, to even 1; again 1: 0x3F800000.
  AccumulationModel one = m;
  one.chains = 1;
  CHECK(dot(one, bf16, a, b, 4, 0u, env) == 0x3F800000u);
  // C joins last: with C = -1, R + C = (1 + 2^-23) - 1 = 2^-23 = 0x34000000.
  // With C = 2^-23 and products 1, 2^-24: E = 1, O = 2^-24, R = 1 (a tie, to even), and then
  // 1 + 2^-23; a chain from C would give 2^-23 + 1 = 1 + 2^-23, then + 2^-24 (a tie, to even
  // 1 + 2^-22), so the order shows.
  CHECK(dot(m, bf16, a, b, 4, 0xBF800000u, env) == 0x34000000u);
  const uint32_t a2[2] = {0x3F80, 0x3380};
  CHECK(dot(m, bf16, a2, b, 2, 0x34000000u, env) == 0x3F800001u);
  AccumulationModel from_c = accumulation::avx512_dpbf16;  // one chain from C, even first
  from_c.period = 0;
  CHECK(dot(from_c, bf16, a2, b, 2, 0x34000000u, env) == 0x3F800002u);
  // A second instruction (K > 32) starts its chains from +0 again, with the first's result as C:
  // 33 products of 1·1 give 32 (E = O = 16) and then 32 + 1 = 33.
  std::vector<uint32_t> ones(33, 0x3F80);
  CHECK(dot(m, bf16, ones.data(), ones.data(), 33, 0u, env) == 0x42040000u);
  // Subnormal bf16 inputs read as zero (DAZ); a NaN C wins over a NaN product.
  const uint32_t sub[2] = {0x0001, 0x3F80};
  CHECK(dot(m, bf16, sub, b, 2, 0u, env) == 0x3F800000u);
  const uint32_t nan_a[2] = {0x7FA1, 0x3F80};
  CHECK(dot(m, bf16, nan_a, b, 2, 0x7F812345u, env) == 0x7FC12345u);
  CHECK(dot(m, bf16, nan_a, b, 2, 0u, env) == 0x7FE10000u);
}

namespace {
/// fp16 / e4m3 encodings of exact values (the tests' inputs are all representable).
uint32_t h16(double x) {
  Env env;
  return from_f32(formats::fp16, float(x), env);
}
uint32_t e4m3(double x) {
  Env env;
  return from_f32(formats::e4m3, float(x), env);
}
uint32_t f32(double x) {
  Env env;
  return from_f32(formats::fp32, float(x), env);
}
}  // namespace

TEST_CASE("MMA-Sim presets: worked examples", "[accumulate][mmasim]") {
  Env env;
  SECTION("MMA-Sim's Volta example differs from the normalised alignment by one ulp") {
    // From MMA-Sim's comparison on 21,600 dot products (v100, fp16 inputs, fp32 accumulator).
    const uint32_t a[4] = {0xbf25, 0x3e2b, 0xbf41, 0xbe6b}, b[4] = {0x3e6d, 0x3ef3, 0x3fc4, 0x3e69};
    CHECK(dot(accumulation::mmasim_volta, formats::fp16, a, b, 4, 0x3eb941a6u, env) == 0xc0bd7513u);
    CHECK(dot(accumulation::v100_fp32, formats::fp16, a, b, 4, 0x3eb941a6u, env) == 0xc0bd7514u);
  }
  SECTION("a product in [2, 4) keeps one more bit under the unnormalised alignment") {
    // Products 1.5·1.5 = 2.25 (unnormalised exponent 0, normalised 1), 2^-23, 2^-23, 0.
    // Unnormalised: the grid is 2^-23, both small terms stay: 2.25 + 2^-22 = 0x40100001.
    // Normalised: the grid is 2^-22, both truncate to 0: 2.25 = 0x40100000.
    const uint32_t a[4] = {h16(1.5), h16(0x1p-12), h16(0x1p-12), 0};
    const uint32_t b[4] = {h16(1.5), h16(0x1p-11), h16(0x1p-11), 0};
    CHECK(dot(accumulation::mmasim_volta, formats::fp16, a, b, 4, 0u, env) == 0x40100001u);
    CHECK(dot(accumulation::v100_fp32, formats::fp16, a, b, 4, 0u, env) == 0x40100000u);
  }
  SECTION("a subnormal operand aligns at its format's smallest exponent") {
    // 2^-24 (fp16's smallest subnormal, read as exponent -14) · 2^15: alignment exponent 1,
    // value 2^-9. With 1·1 and 2^-12·2^-11 = 2^-23: the unnormalised grid is 2^(1-23), which
    // drops 2^-23: 1 + 2^-9 = 0x3F804000; the normalised grid 2^-23 keeps it: 0x3F804001.
    const uint32_t a[4] = {h16(0x1p-24), h16(1), h16(0x1p-12), 0};
    const uint32_t b[4] = {h16(0x1p15), h16(1), h16(0x1p-11), 0};
    CHECK(dot(accumulation::mmasim_volta, formats::fp16, a, b, 4, 0u, env) == 0x3F804000u);
    CHECK(dot(accumulation::v100_fp32, formats::fp16, a, b, 4, 0u, env) == 0x3F804001u);
  }
  SECTION("cancellation to zero and mixed signs") {
    const uint32_t a[4] = {h16(3), h16(-3), h16(0.5), h16(-0.5)}, b[4] = {h16(7), h16(7), h16(2), h16(2)};
    CHECK(dot(accumulation::mmasim_hopper, formats::fp16, a, b, 4, 0u, env) == 0u);
    // c = -1 with products 21, -21, 1, -1: exactly -1.
    CHECK(dot(accumulation::mmasim_hopper, formats::fp16, a, b, 4, f32(-1), env) == f32(-1));
  }
  SECTION("Hopper fp8: each instruction's output keeps 13 fraction bits (FP22)") {
    // Products 1, 1 and 2^-6·2^-7 = 2^-13 (2^-7 is an e4m3 subnormal): the exact sum 2 + 2^-13
    // has 12 fraction bits above 2^-13 at exponent 1, so e8m13 truncates it to 2.0; with 23
    // fraction bits (h100-fp8) it is 2.0001220703125.
    const uint32_t a[3] = {e4m3(1), e4m3(1), e4m3(0x1p-6)}, b[3] = {e4m3(1), e4m3(1), e4m3(0x1p-7)};
    CHECK(dot(accumulation::mmasim_hopper_fp8, formats::e4m3, a, b, 3, 0u, env) == f32(2.0));
    CHECK(dot(accumulation::h100_fp8_fp32, formats::e4m3, a, b, 3, 0u, env) ==
          f32(2.0001220703125));
  }
  SECTION("promotion into fp32 every 64 products keeps what the FP22 accumulator drops") {
    // 64 e4m3 products: block 0 = {1, 1, 2^-13, 0...}, block 1 = {2^-12, 0...}; C = 1024.
    std::vector<uint32_t> a(64, 0), b(64, 0);
    a[0] = a[1] = b[0] = b[1] = e4m3(1);
    a[2] = e4m3(0x1p-6), b[2] = e4m3(0x1p-7);
    a[32] = e4m3(0x1p-6), b[32] = e4m3(0x1p-6);
    // No promotion: C = 1024 sets a 2^-3 grid; both small products vanish: 1026.
    CHECK(dot(accumulation::mmasim_hopper_fp8, formats::e4m3, a.data(), b.data(), 64, f32(1024),
              env) == f32(1026));
    // Promotion: from +0, block 0 gives 2.0 (2^-13 truncated), block 1 then 2 + 2^-12 exactly;
    // 1024 + 2.000244140625 in fp32, nearest even: 1026.000244140625 = 0x44804002.
    AccumulationModel m = accumulation::mmasim_hopper_fp8;
    m.promote = 64;
    CHECK(dot(m, formats::e4m3, a.data(), b.data(), 64, f32(1024), env) == 0x44804002u);
  }
  SECTION("fp16 accumulator: the exact sum rounded to nearest even") {
    const uint32_t a[3] = {h16(1), h16(0x1p-11), h16(0x1p-10)}, b[3] = {h16(1), h16(1), h16(1)};
    // 1 + 2^-11: a tie, to even 1.0; 1 + 2^-11 + 2^-10 = 1 + 3·2^-11: a tie, to even 1 + 2^-9.
    CHECK(dot(accumulation::mmasim_hopper_fp16, formats::fp16, a, b, 2, 0u, env) == 0x3C00u);
    CHECK(dot(accumulation::mmasim_hopper_fp16, formats::fp16, a, b, 3, 0u, env) == 0x3C02u);
  }
  SECTION("any NaN or invalid operation gives NVIDIA's canonical NaN") {
    const uint32_t inf = h16(INFINITY);
    const uint32_t a[2] = {inf, h16(1)}, b[2] = {h16(1), h16(-INFINITY)};
    CHECK(dot(accumulation::mmasim_hopper, formats::fp16, a, b, 2, 0u, env) == 0x7FFFFFFFu);
    const uint32_t n[2] = {0xFE01, h16(1)}, one[2] = {h16(1), h16(1)};  // a negative sNaN
    CHECK(dot(accumulation::mmasim_hopper, formats::fp16, n, one, 2, 0u, env) == 0x7FFFFFFFu);
    CHECK(dot(accumulation::mmasim_hopper_fp16, formats::fp16, n, one, 2, 0u, env) == 0x7FFFu);
    CHECK(dot(accumulation::mmasim_hopper, formats::fp16, one, one, 2, 0xFF812345u, env) ==
          0x7FFFFFFFu);
  }
}
