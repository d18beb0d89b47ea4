// halfway's scalar operations against the independent exact oracle (oracle.hpp): random and
// boundary operands for every operation, every preset and several custom formats, every
// rounding direction (stochastic included, with the same random bits) and both tininess modes.
// Results are compared bit for bit (NaNs by the documented sign/payload rule) together with
// all five exception flags.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <random>

#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"
#include "oracle.hpp"

using halfway::Format;
using halfway::Rounding;
using halfway::Tininess;
using oracle::Fmt;
using oracle::Tally;

namespace {

const char* const kFormats[] = {
    "fp16",  "bf16",      "tf32",         "fp32",     "e4m3",     "e5m2",     "e4m3fnuz",
    "e5m2fnuz", "e2m3",   "e3m2",         "e2m1",     "e8m0",     "e5m7",     "e3m4:fnuz",
    "fp16:ftz:daz", "bf16:sat", "e4m3:sat", "e5m2:sat", "fp16:ftz", "e4m3fnuz:daz:ftz",
    "e5m0",  "fp16:overflow_nan", "e4m0:bias=8",
};

struct Subject {
  std::string name;
  Format format;
  Fmt o;
  std::vector<uint64_t> bounds;
  explicit Subject(const char* n)
      : name(n), format(halfway::parse_format(n)), o(format), bounds(oracle::boundary_encodings(o)) {}
};

const std::vector<Subject>& subjects() {
  static const std::vector<Subject> s = [] {
    std::vector<Subject> v;
    for (const char* n : kFormats) v.emplace_back(n);
    return v;
  }();
  return s;
}

const Fmt& binary32() {
  static const Fmt f(8, 23);
  return f;
}
const Fmt& binary64() {
  static const Fmt f(11, 52);
  return f;
}

/// A random operand: a boundary encoding one time in four, otherwise uniform bits.
uint64_t operand(const Subject& s, std::mt19937_64& g) {
  if (g() % 4 == 0) return s.bounds[g() % s.bounds.size()];
  return g() & (s.o.enc_count() - 1);
}

std::string enc_str(const Subject& s, uint64_t e) { return oracle::show(s.o, e); }

void report(const Tally& t) {
  std::printf("  %-44s %10llu checks %6llu mismatches\n", t.what.c_str(),
              (unsigned long long)t.checks, (unsigned long long)t.mismatches);
  if (t.mismatches) std::printf("    by format:%s\n", t.breakdown().c_str());
  for (const auto& m : t.first) UNSCOPED_INFO(t.what << ": " << m);
  CHECK(t.mismatches == 0);
}

constexpr int kPairs = 12000;  // random operand tuples per operation and format

}  // namespace

// The oracle itself against values published in the specifications and in TestFloat's
// examples (docs/numerics-reference.md), so that the comparisons below do not rest on the
// oracle alone.
TEST_CASE("the oracle reproduces published values", "[oracle][self]") {
  namespace fl = halfway::flag;
  struct Spot {
    const char* format;
    double x;
    Rounding r;
    Tininess t;
    uint64_t enc;
    uint8_t flags;
  };
  const auto rne = Rounding::near_even;
  const auto after = Tininess::after_rounding, before = Tininess::before_rounding;
  const Spot spots[] = {
      {"fp16", 65504.0, rne, after, 0x7BFF, 0},
      {"fp16", 65519.99, rne, after, 0x7BFF, fl::inexact},
      {"fp16", 65520.0, rne, after, 0x7C00, fl::overflow | fl::inexact},  // tie goes to "even" inf
      // Toward zero, 65520 rounds to 65504 with an unbounded exponent: no overflow (IEEE 7.4);
      // 65536 does overflow, and the result is the largest finite value.
      {"fp16", 65520.0, Rounding::minMag, after, 0x7BFF, fl::inexact},
      {"fp16", 65536.0, Rounding::minMag, after, 0x7BFF, fl::overflow | fl::inexact},
      {"fp16", -65536.0, Rounding::max, after, 0xFBFF, fl::overflow | fl::inexact},
      {"fp16", 0x1p-25, rne, after, 0x0000, fl::underflow | fl::inexact},  // tie with 0 -> even
      {"fp16", 0x1.000002p-25, rne, after, 0x0001, fl::underflow | fl::inexact},
      {"fp16", 0x1p-24, rne, after, 0x0001, 0},
      {"fp16", 1.0 / 3.0, rne, after, 0x3555, fl::inexact},
      {"fp16", double(0.1f), rne, after, 0x2E66, fl::inexact},
      // (1 - 2^-12)·2^-14 rounds to 2^-14: not tiny after rounding, tiny before.
      {"fp16", (1.0 - 0x1p-12) * 0x1p-14, rne, after, 0x0400, fl::inexact},
      {"fp16", (1.0 - 0x1p-12) * 0x1p-14, rne, before, 0x0400, fl::underflow | fl::inexact},
      {"e4m3", 448.0, rne, after, 0x7E, 0},
      {"e4m3", 464.0, rne, after, 0x7E, fl::inexact},  // OCP: the tie 464 goes to 448
      {"e4m3", 464.5, rne, after, 0x7F, fl::overflow | fl::inexact},
      {"e4m3:sat", 1e6, rne, after, 0x7E, fl::overflow | fl::inexact},
      {"e4m3", 0x1p-9, rne, after, 0x01, 0},
      {"e5m2", 57344.0, rne, after, 0x7B, 0},
      {"e5m2", 61440.0, rne, after, 0x7C, fl::overflow | fl::inexact},  // the tie overflows
      {"e5m2", 61439.0, rne, after, 0x7B, fl::inexact},
      {"e4m3fnuz", 240.0, rne, after, 0x7F, 0},
      {"e4m3fnuz", -0.0, rne, after, 0x00, 0},  // no negative zero
      {"e4m3fnuz", 1e6, rne, after, 0x80, fl::overflow | fl::inexact},
      {"e2m1", 6.0, rne, after, 0x7, 0},
      {"e2m1", 5.0, rne, after, 0x6, fl::inexact},  // tie 4|6 -> even encoding 0x6 (4.0)
      {"e2m1", 100.0, rne, after, 0x7, fl::overflow | fl::inexact},
      {"e2m1", 0.25, rne, after, 0x0, fl::underflow | fl::inexact},
      {"e8m0", 0x1p-127, rne, after, 0x00, 0},
      {"e8m0", 0x1p-128, rne, after, 0x00, fl::underflow | fl::inexact},
      {"e8m0", 0x1p127, rne, after, 0xFE, 0},
      {"e8m0", 1.0, rne, after, 0x7F, 0},
      {"bf16", double(halfway::bits_f32(0x8683F7FF)), rne, after, 0x8684, fl::inexact},  // TestFloat
  };
  const Fmt f64(11, 52);
  for (const Spot& sp : spots) {
    const Fmt O(halfway::parse_format(sp.format));
    const auto got = oracle::deliver(O, oracle::value_of(oracle::decode(f64, halfway::f64_bits(sp.x))),
                                     sp.r, sp.t, 0);
    INFO(sp.format << " x=" << sp.x << " " << halfway::rounding_name(sp.r));
    CHECK(got.enc == sp.enc);
    CHECK(int(got.flags) == int(sp.flags));
  }
  // TestFloat example f16_add: 87FF + E850 = E850, inexact.
  const Fmt h(halfway::formats::fp16);
  const auto sum = oracle::deliver(h, oracle::add(oracle::decode(h, 0x87FF), oracle::decode(h, 0xE850)),
                                   Rounding::near_even, Tininess::after_rounding, 0);
  CHECK(sum.enc == 0xE850);
  CHECK(sum.flags == fl::inexact);
  // sqrt(2) in fp16 is 0x3DA8 (1.4140625; sqrt 2 = 1.41421356...), inexact.
  const auto r2 = oracle::deliver(h, oracle::sqrt(oracle::decode(h, 0x4000)), Rounding::near_even,
                                  Tininess::after_rounding, 0);
  CHECK(r2.enc == 0x3DA8);
  CHECK(r2.flags == fl::inexact);
  // 1/3 in fp16, toward +inf: 0x3556.
  const auto third = oracle::deliver(h, oracle::div(oracle::decode(h, 0x3C00), oracle::decode(h, 0x4200)),
                                     Rounding::max, Tininess::after_rounding, 0);
  CHECK(third.enc == 0x3556);
  // fma(0, inf, qNaN) is invalid (SoftFloat's choice where IEEE leaves it open): default NaN.
  const auto z = oracle::deliver(h, oracle::fma(oracle::decode(h, 0), oracle::decode(h, 0x7C00), oracle::decode(h, 0x7E01)),
                                 Rounding::near_even, Tininess::after_rounding, 0);
  CHECK(z.enc == 0xFE00);
  CHECK(z.flags == fl::invalid);
  // x − x = +0, but −0 when rounding toward −inf.
  const auto d0 = oracle::deliver(h, oracle::sub(oracle::decode(h, 0x3C00), oracle::decode(h, 0x3C00)),
                                  Rounding::min, Tininess::after_rounding, 0);
  CHECK(d0.enc == 0x8000);
  // Stochastic rule: t = floor(frac·2^32) added to the random word, a carry rounds up.
  // 1 + 2^-12 in fp16 is 1/4 of the way from 1 to 1 + 2^-10: t = 2^30.
  const auto x = oracle::value_of(oracle::decode(f64, halfway::f64_bits(1.0 + 0x1p-12)));
  CHECK(oracle::deliver(h, x, Rounding::stochastic, after, 0xC0000000u).enc == 0x3C01);
  CHECK(oracle::deliver(h, x, Rounding::stochastic, after, 0xBFFFFFFFu).enc == 0x3C00);
}

TEST_CASE("arithmetic matches the exact oracle", "[oracle]") {
  std::mt19937_64 g(0x5EED0001);
  Tally add_t("add"), sub_t("sub"), mul_t("mul"), div_t("div"), sqrt_t("sqrt"), near_t("add/sub, same binade");
  for (const Subject& s : subjects()) {
    const Format F = s.format;
    for (int i = 0; i < kPairs; ++i) {
      const uint64_t a = operand(s, g);
      uint64_t b = operand(s, g);
      const uint64_t seed = g(), ctr = g();
      const auto da = oracle::decode(s.o, a), db = oracle::decode(s.o, b);
      auto what = [&] { return s.name + " a=" + enc_str(s, a) + " b=" + enc_str(s, b); };
      oracle::check_rounded(add_t, s.o, oracle::add(da, db), seed, ctr,
                            [&](halfway::Env& e) { return halfway::add(F, a, b, e); }, what);
      oracle::check_rounded(sub_t, s.o, oracle::sub(da, db), seed, ctr,
                            [&](halfway::Env& e) { return halfway::sub(F, a, b, e); }, what);
      oracle::check_rounded(mul_t, s.o, oracle::mul(da, db), seed, ctr,
                            [&](halfway::Env& e) { return halfway::mul(F, a, b, e); }, what);
      oracle::check_rounded(div_t, s.o, oracle::div(da, db), seed, ctr,
                            [&](halfway::Env& e) { return halfway::div(F, a, b, e); }, what);
      oracle::check_rounded(sqrt_t, s.o, oracle::sqrt(da), seed, ctr,
                            [&](halfway::Env& e) { return halfway::sqrt(F, a, e); },
                            [&] { return s.name + " a=" + enc_str(s, a); });
      // Near-cancellation: b in a's binade (same exponent field, random fraction, either sign).
      const uint64_t frac_mask = (uint64_t(1) << s.o.frac_bits) - 1;
      b = (a & ~frac_mask) | (g() & frac_mask);
      if (g() & 1) b ^= s.o.sign_bit();
      const auto db2 = oracle::decode(s.o, b);
      auto what2 = [&] { return s.name + " a=" + enc_str(s, a) + " b=" + enc_str(s, b); };
      oracle::check_rounded(near_t, s.o, oracle::add(da, db2), seed, ctr,
                            [&](halfway::Env& e) { return halfway::add(F, a, b, e); }, what2);
      oracle::check_rounded(near_t, s.o, oracle::sub(da, db2), seed, ctr,
                            [&](halfway::Env& e) { return halfway::sub(F, a, b, e); }, what2);
    }
  }
  std::printf("arithmetic vs oracle (%zu formats x 7 roundings x 2 tininess):\n", subjects().size());
  for (const Tally* t : {&add_t, &sub_t, &mul_t, &div_t, &sqrt_t, &near_t}) report(*t);
}

TEST_CASE("fma matches the exact oracle, with its hard cases", "[oracle][fma]") {
  std::mt19937_64 g(0x5EED0002);
  Tally rnd_t("fma random"), canc_t("fma cancellation"), small_t("fma product below addend ulp"),
      sticky_t("fma half-ulp/sticky"), zero_t("fma exact zero"), sub_t("fma subnormal result");
  for (const Subject& s : subjects()) {
    const Format F = s.format;
    const Fmt& O = s.o;
    auto run = [&](Tally& t, uint64_t a, uint64_t b, uint64_t c) {
      const uint64_t seed = g(), ctr = g();
      oracle::check_rounded(
          t, O, oracle::fma(oracle::decode(O, a), oracle::decode(O, b), oracle::decode(O, c)), seed,
          ctr, [&](halfway::Env& e) { return halfway::fma(F, a, b, c, e); },
          [&] {
            return s.name + " a=" + enc_str(s, a) + " b=" + enc_str(s, b) + " c=" + enc_str(s, c);
          });
    };
    auto finite = [&](uint64_t e) { return oracle::decode(O, e).kind == oracle::Kind::finite; };
    auto rne = [&](const oracle::Exact& x) {
      return oracle::deliver(O, x, Rounding::near_even, Tininess::after_rounding, 0);
    };
    for (int i = 0; i < kPairs; ++i) {
      const uint64_t a = operand(s, g), b = operand(s, g), c = operand(s, g);
      run(rnd_t, a, b, c);
      if (!finite(a) || !finite(b)) continue;
      const auto da = oracle::decode(O, a), db = oracle::decode(O, b);
      // Cancellation: c within a few encodings of −round(a·b).
      const oracle::Result p = rne(oracle::mul(da, db));
      if (finite(p.enc) && !(p.flags & halfway::flag::overflow)) {
        const int64_t d = int64_t(g() % 5) - 2;
        const uint64_t mag = (p.enc & O.mag_mask()) + uint64_t(d);
        if (mag <= O.max_enc) run(canc_t, a, b, ((p.enc ^ O.sign_bit()) & ~O.mag_mask()) | mag);
        // Exact zero: when a·b is representable, c = −a·b (every direction's sign rule).
        if (p.flags == 0) {
          const uint64_t negp = p.enc ^ O.sign_bit();
          if (O.is_signed) run(zero_t, a, b, negp);
          if (O.is_signed) run(zero_t, b, a ^ O.sign_bit(), p.enc);
        }
      }
      if (!finite(c)) continue;
      const auto dc = oracle::decode(O, c);
      const int qc = dc.exp;  // exponent of c's last bit
      // Product a·2^j far below c's ulp (j chosen so that |a·2^j| ~ 2^(qc − s)).
      {
        const int ka = 63 - __builtin_clzll(da.sig) + da.exp;
        const int shift = 1 + int(g() % 6);
        uint64_t pw;
        if (oracle::power_of_two(O, qc - shift - ka, &pw)) run(small_t, a, pw ^ (g() & 1 ? O.sign_bit() : 0), c);
      }
      // a·b = half an ulp of c, or a hair either side: 2^(qc−1−j) · (1 − 2^−(m+1), 1, 1 + 2^−m)·2^j.
      for (int j = 0; j < 4; ++j) {
        uint64_t pw;
        if (!oracle::power_of_two(O, qc - 1 - j, &pw)) continue;
        uint64_t sc;
        if (!oracle::power_of_two(O, j, &sc)) continue;
        for (int d = -1; d <= 1; ++d) {
          const uint64_t bb = sc + uint64_t(int64_t(d));
          if (bb > O.max_enc) continue;
          const uint64_t sa = (g() & 1) ? O.sign_bit() : 0;
          run(sticky_t, pw | sa, bb, c);
        }
        break;
      }
      // Subnormal or near-min-normal products, with small addends.
      if (O.has_zero) {
        const int ka = 63 - __builtin_clzll(da.sig) + da.exp;
        const int target = O.emin() - int(g() % (O.frac_bits + 3));
        uint64_t pw;
        if (oracle::power_of_two(O, target - ka, &pw)) {
          const uint64_t small = g() % ((uint64_t(2) << O.frac_bits)) | (g() & 1 ? O.sign_bit() : 0);
          run(sub_t, a, pw, small & (O.enc_count() - 1));
          run(sub_t, a, pw, 0);
          if (O.is_signed) run(sub_t, a, pw, O.sign_bit());
        }
      }
    }
    // Zero operands with every sign combination.
    for (uint64_t za : {uint64_t(0), O.sign_bit()})
      for (uint64_t zc : {uint64_t(0), O.sign_bit()})
        for (int i = 0; i < 20; ++i) {
          const uint64_t b = operand(s, g);
          run(zero_t, za, b, zc);
          run(zero_t, b, za, zc);
        }
  }
  std::printf("fma vs oracle:\n");
  for (const Tally* t : {&rnd_t, &canc_t, &small_t, &sticky_t, &zero_t, &sub_t}) report(*t);
}

TEST_CASE("conversions match the exact oracle", "[oracle][convert]") {
  std::mt19937_64 g(0x5EED0003);
  Tally f32_t("from f32"), f64_t("from f64"), conv_t("format to format"), to32_t("to f32"),
      to64_t("to f64");
  for (const Subject& s : subjects()) {
    const Format F = s.format;
    // From binary32 and binary64: boundary values of the target and random bit patterns.
    std::vector<double> vals = oracle::boundary_values(s.o);
    for (int i = 0; i < kPairs; ++i) {
      // Random binary64 values with exponents around the target's range.
      const int e = s.o.emin() - s.o.frac_bits - 4 + int(g() % (s.o.bias + s.o.frac_bits + 140));
      double x = std::ldexp(1.0 + double(g() >> 11) * 0x1p-53, std::min(e, 1000));
      if (g() & 1) x = -x;
      vals.push_back(x);
    }
    for (double x : vals) {
      const uint64_t bits = halfway::f64_bits(x);
      const uint64_t seed = g(), ctr = g();
      oracle::check_rounded(f64_t, s.o, oracle::value_of(oracle::decode(binary64(), bits)), seed, ctr,
                            [&](halfway::Env& e) { return halfway::from_f64(F, x, e); },
                            [&] { return s.name + " from f64 " + oracle::show(binary64(), bits); });
      // The same point as binary32, and its binary32 neighbours.
      const float xf = float(x);
      for (float y : {xf, std::nextafter(xf, 0.0f), std::nextafter(xf, HUGE_VALF)}) {
        const uint32_t b32 = halfway::f32_bits(y);
        oracle::check_rounded(f32_t, s.o, oracle::value_of(oracle::decode(binary32(), b32)), seed,
                              ctr, [&](halfway::Env& e) { return halfway::from_f32_bits(F, b32, e); },
                              [&] { return s.name + " from f32 " + oracle::show(binary32(), b32); });
      }
    }
    for (int i = 0; i < kPairs; ++i) {
      const uint32_t b32 = uint32_t(g());
      const uint64_t b64 = g();
      const uint64_t seed = g(), ctr = g();
      oracle::check_rounded(f32_t, s.o, oracle::value_of(oracle::decode(binary32(), b32)), seed, ctr,
                            [&](halfway::Env& e) { return halfway::from_f32_bits(F, b32, e); },
                            [&] { return s.name + " from f32 " + oracle::show(binary32(), b32); });
      oracle::check_rounded(f64_t, s.o, oracle::value_of(oracle::decode(binary64(), b64)), seed, ctr,
                            [&](halfway::Env& e) { return halfway::from_f64(F, halfway::bits_f64(b64), e); },
                            [&] { return s.name + " from f64 " + oracle::show(binary64(), b64); });
    }
    // To binary32 / binary64: exact, NaNs quieted, invalid only for a signalling NaN.
    for (int i = 0; i < kPairs; ++i) {
      const uint64_t a = operand(s, g);
      const oracle::Exact x = oracle::value_of(oracle::decode(s.o, a));
      auto what = [&] { return s.name + " a=" + enc_str(s, a); };
      oracle::check_rounded(to32_t, binary32(), x, 1, 2,
                            [&](halfway::Env& e) { return halfway::to_f32_bits(F, uint32_t(a), e); }, what);
      oracle::check_rounded(to64_t, binary64(), x, 1, 2,
                            [&](halfway::Env& e) { return halfway::to_f64_bits(F, uint32_t(a), e); }, what);
    }
    // Into every other format: random source encodings and the source values nearest to the
    // target's boundaries.
    for (const Subject& t : subjects()) {
      if (&t == &s) continue;
      std::vector<uint64_t> src;
      for (int i = 0; i < 400; ++i) src.push_back(operand(s, g));
      for (double v : oracle::boundary_values(t.o)) {
        const auto r = oracle::deliver(s.o, oracle::value_of(oracle::decode(binary64(), halfway::f64_bits(v))),
                                       Rounding(g() % 6), Tininess::after_rounding, 0);
        src.push_back(r.enc);
      }
      for (uint64_t a : src) {
        const uint64_t seed = g(), ctr = g();
        oracle::check_rounded(conv_t, t.o, oracle::value_of(oracle::decode(s.o, a)), seed, ctr,
                              [&](halfway::Env& e) { return halfway::convert(F, uint32_t(a), t.format, e); },
                              [&] { return s.name + " -> " + t.name + " a=" + enc_str(s, a); });
      }
    }
  }
  std::printf("conversions vs oracle:\n");
  for (const Tally* t : {&f32_t, &f64_t, &conv_t, &to32_t, &to64_t}) report(*t);
}

TEST_CASE("roundToInt matches the exact oracle", "[oracle][roundToInt]") {
  std::mt19937_64 g(0x5EED0004);
  Tally t("roundToInt (7 directions x exact/notexact)");
  for (const Subject& s : subjects()) {
    std::vector<uint64_t> encs = s.bounds;
    // Every value with a fractional part matters: for small formats take them all.
    if (s.o.nbits() <= 8)
      for (uint64_t e = 0; e < s.o.enc_count(); ++e) encs.push_back(e);
    // Half-integers and their neighbours, where the directions differ.
    for (int k = 0; k < 40; ++k) {
      const uint64_t n = g() % 64;
      const oracle::Exact x = oracle::value_of(oracle::decode(binary64(), halfway::f64_bits(double(n) + 0.5)));
      const auto r = oracle::deliver(s.o, x, Rounding::near_even, Tininess::after_rounding, 0);
      for (int d = -1; d <= 1; ++d) encs.push_back(r.enc + uint64_t(int64_t(d)));
    }
    for (int i = 0; i < kPairs; ++i) encs.push_back(operand(s, g));
    for (uint64_t a : encs) {
      a &= s.o.enc_count() - 1;
      for (int r = 0; r < halfway::kRoundingCount; ++r) {
        for (bool exact : {false, true}) {
          const uint64_t seed = g(), ctr = g();
          // The environment's own direction must not matter: give it a different one.
          halfway::Env env{Rounding((r + 3) % halfway::kRoundingCount), seed};
          env.sr_counter = ctr;
          const uint32_t got = halfway::round_to_int(s.format, uint32_t(a), Rounding(r), exact, env);
          const oracle::Result want =
              oracle::round_to_int(s.o, a, Rounding(r), exact, halfway::sr_bits(seed, 0, ctr));
          ++t.checks;
          if (got != want.enc || env.flags != want.flags)
            t.fail(s.name + " a=" + enc_str(s, a) + " " + halfway::rounding_name(Rounding(r)) +
                   (exact ? " exact" : " notexact") + ": got " +
                   oracle::describe_result(s.o, got, env.flags) + " want " +
                   oracle::describe_result(s.o, want.enc, want.flags));
        }
      }
    }
  }
  std::printf("roundToInt vs oracle:\n");
  report(t);
}

TEST_CASE("comparisons and minimum/maximum match their definitions", "[oracle][compare]") {
  std::mt19937_64 g(0x5EED0005);
  Tally cmp_t("eq/le/lt (quiet and signaling)"), mm_t("minimum/maximum(Number)");
  for (const Subject& s : subjects()) {
    const Format F = s.format;
    for (int i = 0; i < 4 * kPairs; ++i) {
      const uint64_t a = operand(s, g);
      const uint64_t b = (i % 8 == 0) ? a : (i % 8 == 1) ? (a ^ s.o.sign_bit()) : operand(s, g);
      const oracle::Compare c = oracle::compare(s.o, a, b);
      const uint8_t inv = halfway::flag::invalid;
      struct Pred {
        const char* name;
        bool want;
        uint8_t want_flags;
        bool (*fn)(const Format&, uint32_t, uint32_t, halfway::Env&);
      };
      const bool o = !c.unordered;
      const Pred preds[] = {
          {"eq", o && c.order == 0, uint8_t(c.any_snan ? inv : 0),
           [](const Format& f, uint32_t x, uint32_t y, halfway::Env& e) { return halfway::eq(f, x, y, e); }},
          {"eq_signaling", o && c.order == 0, uint8_t(c.unordered ? inv : 0),
           [](const Format& f, uint32_t x, uint32_t y, halfway::Env& e) { return halfway::eq_signaling(f, x, y, e); }},
          {"le", o && c.order <= 0, uint8_t(c.unordered ? inv : 0),
           [](const Format& f, uint32_t x, uint32_t y, halfway::Env& e) { return halfway::le(f, x, y, e); }},
          {"le_quiet", o && c.order <= 0, uint8_t(c.any_snan ? inv : 0),
           [](const Format& f, uint32_t x, uint32_t y, halfway::Env& e) { return halfway::le(f, x, y, e, false); }},
          {"lt", o && c.order < 0, uint8_t(c.unordered ? inv : 0),
           [](const Format& f, uint32_t x, uint32_t y, halfway::Env& e) { return halfway::lt(f, x, y, e); }},
          {"lt_quiet", o && c.order < 0, uint8_t(c.any_snan ? inv : 0),
           [](const Format& f, uint32_t x, uint32_t y, halfway::Env& e) { return halfway::lt(f, x, y, e, false); }},
      };
      for (const Pred& p : preds) {
        halfway::Env env;
        const bool got = p.fn(F, uint32_t(a), uint32_t(b), env);
        ++cmp_t.checks;
        if (got != p.want || env.flags != p.want_flags)
          cmp_t.fail(s.name + " " + p.name + " a=" + enc_str(s, a) + " b=" + enc_str(s, b) +
                     ": got " + (got ? "true" : "false") + " [" + halfway::flags_name(env.flags) + "]");
      }
      for (int k = 0; k < 4; ++k) {
        const bool want_max = k & 1, number = k & 2;
        halfway::Env env;
        const uint32_t got = number ? (want_max ? halfway::maximum_number(F, a, b, env)
                                                : halfway::minimum_number(F, a, b, env))
                                    : (want_max ? halfway::maximum(F, a, b, env)
                                                : halfway::minimum(F, a, b, env));
        std::string why;
        ++mm_t.checks;
        if (!oracle::minmax_ok(s.o, a, b, want_max, number, got, env.flags, &why))
          mm_t.fail(s.name + (number ? " number" : "") + (want_max ? " max" : " min") + " a=" +
                    enc_str(s, a) + " b=" + enc_str(s, b) + ": got " +
                    oracle::describe_result(s.o, got, env.flags) + " (" + why + ")");
      }
    }
  }
  std::printf("comparisons vs definitions:\n");
  report(cmp_t);
  report(mm_t);
}

// Stochastic rounding, statistically: the mean of many roundings of x is x. Each check counts
// how often SR rounds up among N independent draws (the env's own counter-based stream) and
// compares the frequency with the exact fraction p = (x − lo)/spacing. The bound is 5 standard
// deviations of a binomial, sqrt(p(1−p)/N), plus the rule's documented truncation of p to 32 bits
// (at most 2^-32): a correct implementation fails with probability ~6e-7 per check (and the
// seeds are fixed, so the outcome is reproducible); a biased or stuck one fails at once.
TEST_CASE("stochastic rounding is unbiased", "[oracle][stochastic]") {
  constexpr int N = 200000;
  struct Case {
    const char* format;
    double x;
  };
  const Case cases[] = {
      {"fp16", 1.0 + 0.5 * 0x1p-10},  {"fp16", 1.0 + 0.1 * 0x1p-10},  {"fp16", -(1.0 + 0.9 * 0x1p-10)},
      {"fp16", 1.0 / 3.0},            {"fp16", 0.3 * 0x1p-24},         {"fp16", 3.75 * 0x1p-24},
      {"bf16", 1.0 + 0.25 * 0x1p-7},  {"bf16", -0.999 * 0x1p-133 * 2}, {"e4m3", 300.0},
      {"e4m3", 0.7 * 0x1p-9},         {"e5m2", -1.0 - 0.01 * 0.25},    {"e2m1", 2.6},
      {"e2m1", -0.2},                 {"e3m2", 0.03},                  {"e4m3fnuz", 0.013},
      {"e8m0", 3.0},                  {"tf32", 1.0 + 0.999 * 0x1p-10},
  };
  std::printf("stochastic rounding, %d draws per case:\n", N);
  for (const Case& c : cases) {
    const Format F = halfway::parse_format(c.format);
    const Fmt O(F);
    // The two neighbours from the oracle (directed roundings), and the exact fraction.
    const oracle::Exact x = oracle::value_of(oracle::decode(Fmt(11, 52), halfway::f64_bits(c.x)));
    const auto lo = oracle::deliver(O, x, Rounding::minMag, Tininess::after_rounding, 0);
    const auto hi = oracle::deliver(O, x, c.x < 0 ? Rounding::min : Rounding::max, Tininess::after_rounding, 0);
    const double vlo = std::fabs(oracle::to_double(O, lo.enc)), vhi = std::fabs(oracle::to_double(O, hi.enc));
    REQUIRE(vhi > vlo);
    const double p = (std::fabs(c.x) - vlo) / (vhi - vlo);
    for (uint64_t seed : {uint64_t(1), uint64_t(0xDEADBEEF12345678)}) {
      halfway::Env env{Rounding::stochastic, seed};
      long ups = 0, others = 0;
      double sum = 0;
      for (int i = 0; i < N; ++i) {
        const uint32_t r = halfway::from_f64(F, c.x, env);
        if (r == hi.enc) ++ups;
        else if (r != lo.enc) ++others;
        sum += std::fabs(oracle::to_double(O, r));
      }
      const double freq = double(ups) / N;
      const double bound = 5 * std::sqrt(p * (1 - p) / N) + 0x1p-32;
      const double mean_err = (sum / N - std::fabs(c.x)) / (vhi - vlo);
      std::printf("  %-9s x=%-14.8g p=%.6f up-frequency=%.6f (bound %.6f) mean error %.2e ulp\n",
                  c.format, c.x, p, freq, bound, mean_err);
      INFO(c.format << " x=" << c.x << " seed " << seed);
      CHECK(others == 0);
      CHECK(std::fabs(freq - p) <= bound);
      CHECK(std::fabs(mean_err) <= bound);
    }
  }
}
