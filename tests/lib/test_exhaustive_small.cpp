// Exhaustive checks of the small formats against the exact oracle (oracle.hpp), under every
// rounding direction (stochastic with the same random bits as the library) and both tininess
// modes, results and all five flags bit for bit:
//  - every fp16 and bf16 encoding through sqrt, roundToInt (7 directions x exact/notexact), to
//    f32/f64, and conversion to every other preset format;
//  - every pair of e4m3, e5m2, e4m3fnuz, e5m2fnuz and e8m0 encodings through add/sub/mul/div,
//    the comparisons and minimum/maximum; fma on a sample of triples (the full 2^24 triples of
//    each fp8 format run under the `exhaustive` label);
//  - every fp6 (e2m3, e3m2) and fp4 (e2m1) value, pair and triple through every operation.
#include <catch2/catch.hpp>

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

struct Subject {
  std::string name;
  Format format;
  Fmt o;
  explicit Subject(const std::string& n) : name(n), format(halfway::parse_format(n)), o(format) {}
};

const std::vector<Subject>& presets() {
  static const std::vector<Subject> v = [] {
    std::vector<Subject> s;
    for (const std::string& n : halfway::preset_names()) s.emplace_back(n);
    return s;
  }();
  return v;
}

const Subject& preset(const std::string& name) {
  for (const Subject& s : presets())
    if (s.name == name) return s;
  throw std::logic_error("no preset " + name);
}

void report(const Tally& t) {
  std::printf("  %-46s %11llu checks %6llu mismatches\n", t.what.c_str(),
              (unsigned long long)t.checks, (unsigned long long)t.mismatches);
  if (t.mismatches) std::printf("    by format:%s\n", t.breakdown().c_str());
  for (const auto& m : t.first) UNSCOPED_INFO(t.what << ": " << m);
  CHECK(t.mismatches == 0);
}

std::string enc(const Subject& s, uint64_t e) { return oracle::show(s.o, e); }

/// Every unary operation on encoding `a` of `s`: sqrt, roundToInt, to f32/f64, and conversion
/// to every other preset.
struct Unary {
  Tally sqrt_t{"sqrt"}, rti_t{"roundToInt (7 directions x exact/notexact)"}, to_t{"to f32/f64"},
      conv_t{"conversion to every other preset"};
  std::mt19937_64 g{0xE4A051};
  const Fmt b32{8, 23}, b64{11, 52};

  void run(const Subject& s, uint64_t a) {
    const Format F = s.format;
    const oracle::Decoded d = oracle::decode(s.o, a);
    const oracle::Exact x = oracle::value_of(d);
    auto what = [&] { return s.name + " a=" + enc(s, a); };
    const uint64_t seed = g(), ctr = g();
    oracle::check_rounded(sqrt_t, s.o, oracle::sqrt(d), seed, ctr,
                          [&](halfway::Env& e) { return halfway::sqrt(F, uint32_t(a), e); }, what);
    oracle::check_rounded(to_t, b32, x, seed, ctr,
                          [&](halfway::Env& e) { return halfway::to_f32_bits(F, uint32_t(a), e); }, what);
    oracle::check_rounded(to_t, b64, x, seed, ctr,
                          [&](halfway::Env& e) { return halfway::to_f64_bits(F, uint32_t(a), e); }, what);
    for (const Subject& t : presets()) {
      if (t.format == F) continue;
      oracle::check_rounded(conv_t, t.o, x, seed, ctr,
                            [&](halfway::Env& e) { return halfway::convert(F, uint32_t(a), t.format, e); },
                            [&] { return s.name + " -> " + t.name + " a=" + enc(s, a); });
    }
    for (int r = 0; r < halfway::kRoundingCount; ++r) {
      for (bool exact : {false, true}) {
        halfway::Env env{Rounding((r + 1) % halfway::kRoundingCount), seed};
        env.sr_counter = ctr;
        const uint32_t got = halfway::round_to_int(F, uint32_t(a), Rounding(r), exact, env);
        const oracle::Result want =
            oracle::round_to_int(s.o, a, Rounding(r), exact, halfway::sr_bits(seed, 0, ctr));
        ++rti_t.checks;
        if (got != want.enc || env.flags != want.flags)
          rti_t.fail(what() + " " + halfway::rounding_name(Rounding(r)) +
                     (exact ? " exact" : " notexact") + ": got " +
                     oracle::describe_result(s.o, got, env.flags) + " want " +
                     oracle::describe_result(s.o, want.enc, want.flags));
      }
    }
  }
  void print() {
    for (const Tally* t : {&sqrt_t, &rti_t, &to_t, &conv_t}) report(*t);
  }
};

/// Every binary operation, the comparisons and minimum/maximum on one pair.
struct Binary {
  Tally add_t{"add"}, sub_t{"sub"}, mul_t{"mul"}, div_t{"div"}, cmp_t{"eq/le/lt quiet+signaling"},
      mm_t{"minimum/maximum(Number)"};
  std::mt19937_64 g{0xB1A4};

  void run(const Subject& s, uint64_t a, uint64_t b) {
    const Format F = s.format;
    const oracle::Decoded da = oracle::decode(s.o, a), db = oracle::decode(s.o, b);
    auto what = [&] { return s.name + " a=" + enc(s, a) + " b=" + enc(s, b); };
    const uint64_t seed = g(), ctr = g();
    const uint32_t A = uint32_t(a), B = uint32_t(b);
    oracle::check_rounded(add_t, s.o, oracle::add(da, db), seed, ctr,
                          [&](halfway::Env& e) { return halfway::add(F, A, B, e); }, what);
    oracle::check_rounded(sub_t, s.o, oracle::sub(da, db), seed, ctr,
                          [&](halfway::Env& e) { return halfway::sub(F, A, B, e); }, what);
    oracle::check_rounded(mul_t, s.o, oracle::mul(da, db), seed, ctr,
                          [&](halfway::Env& e) { return halfway::mul(F, A, B, e); }, what);
    oracle::check_rounded(div_t, s.o, oracle::div(da, db), seed, ctr,
                          [&](halfway::Env& e) { return halfway::div(F, A, B, e); }, what);
    const oracle::Compare c = oracle::compare(s.o, a, b);
    const bool ord = !c.unordered;
    const uint8_t quiet = c.any_snan ? halfway::flag::invalid : 0;
    const uint8_t sig = c.unordered ? halfway::flag::invalid : 0;
    auto pred = [&](const char* name, bool got, bool want, uint8_t got_flags, uint8_t want_flags) {
      ++cmp_t.checks;
      if (got != want || got_flags != want_flags)
        cmp_t.fail(what() + " " + name + ": got " + (got ? "true" : "false") + " [" +
                   halfway::flags_name(got_flags) + "]");
    };
    // (The call runs before its flags are read: one statement each.)
    struct Pred {
      const char* name;
      bool want;
      uint8_t want_flags;
      int kind;
    };
    const Pred preds[] = {{"eq", ord && c.order == 0, quiet, 0},  {"eq_signaling", ord && c.order == 0, sig, 1},
                          {"le", ord && c.order <= 0, sig, 2},    {"le_quiet", ord && c.order <= 0, quiet, 3},
                          {"lt", ord && c.order < 0, sig, 4},     {"lt_quiet", ord && c.order < 0, quiet, 5}};
    for (const Pred& p : preds) {
      halfway::Env e;
      bool got = false;
      switch (p.kind) {
        case 0: got = halfway::eq(F, A, B, e); break;
        case 1: got = halfway::eq_signaling(F, A, B, e); break;
        case 2: got = halfway::le(F, A, B, e); break;
        case 3: got = halfway::le(F, A, B, e, false); break;
        case 4: got = halfway::lt(F, A, B, e); break;
        default: got = halfway::lt(F, A, B, e, false); break;
      }
      pred(p.name, got, p.want, e.flags, p.want_flags);
    }
    for (int k = 0; k < 4; ++k) {
      const bool want_max = k & 1, number = k & 2;
      halfway::Env e;
      const uint32_t got = number ? (want_max ? halfway::maximum_number(F, A, B, e)
                                              : halfway::minimum_number(F, A, B, e))
                                  : (want_max ? halfway::maximum(F, A, B, e)
                                              : halfway::minimum(F, A, B, e));
      std::string why;
      ++mm_t.checks;
      if (!oracle::minmax_ok(s.o, a, b, want_max, number, got, e.flags, &why))
        mm_t.fail(what() + (want_max ? " max" : " min") + (number ? "Number" : "") + ": got " +
                  enc(s, got) + " (" + why + ")");
    }
  }
  void print() {
    for (const Tally* t : {&add_t, &sub_t, &mul_t, &div_t, &cmp_t, &mm_t}) report(*t);
  }
};

struct Ternary {
  Tally fma_t{"fma"};
  std::mt19937_64 g{0xF3A};
  void run(const Subject& s, uint64_t a, uint64_t b, uint64_t c) {
    const uint64_t seed = g(), ctr = g();
    oracle::check_rounded(
        fma_t, s.o,
        oracle::fma(oracle::decode(s.o, a), oracle::decode(s.o, b), oracle::decode(s.o, c)), seed,
        ctr, [&](halfway::Env& e) {
          return halfway::fma(s.format, uint32_t(a), uint32_t(b), uint32_t(c), e);
        },
        [&] { return s.name + " a=" + enc(s, a) + " b=" + enc(s, b) + " c=" + enc(s, c); });
  }
};

}  // namespace

TEST_CASE("fp16 and bf16: every encoding through every unary operation", "[exhaustive-small]") {
  Unary u;
  for (const char* name : {"fp16", "bf16"}) {
    const Subject& s = preset(name);
    for (uint64_t a = 0; a < s.o.enc_count(); ++a) u.run(s, a);
  }
  std::printf("fp16, bf16: all 65536 encodings each, 7 roundings x 2 tininess:\n");
  u.print();
}

TEST_CASE("fp8 and e8m0: every pair through + - x / and the comparisons", "[exhaustive-small]") {
  Binary b;
  for (const char* name : {"e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e8m0"}) {
    const Subject& s = preset(name);
    for (uint64_t x = 0; x < 256; ++x)
      for (uint64_t y = 0; y < 256; ++y) b.run(s, x, y);
  }
  std::printf("e4m3 e5m2 e4m3fnuz e5m2fnuz e8m0: all 65536 pairs each, 7 roundings x 2 tininess:\n");
  b.print();
}

TEST_CASE("fp8 and e8m0: every encoding through every unary operation", "[exhaustive-small]") {
  Unary u;
  for (const char* name : {"e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e8m0"}) {
    const Subject& s = preset(name);
    for (uint64_t a = 0; a < 256; ++a) u.run(s, a);
  }
  std::printf("e4m3 e5m2 e4m3fnuz e5m2fnuz e8m0: all 256 encodings each:\n");
  u.print();
}

TEST_CASE("fp8 fma on a sample of triples", "[exhaustive-small]") {
  Ternary t;
  std::mt19937_64 g(0xF8);
  constexpr int kSample = 60000;
  for (const char* name : {"e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e8m0"}) {
    const Subject& s = preset(name);
    // Every (a, b) pair once, each with a random addend, then uniformly random triples.
    for (uint64_t x = 0; x < 256; ++x)
      for (uint64_t y = 0; y < 256; ++y) t.run(s, x, y, g() & 0xFF);
    for (int i = 0; i < kSample; ++i) t.run(s, g() & 0xFF, g() & 0xFF, g() & 0xFF);
  }
  std::printf("fp8/e8m0 fma: every (a,b) with a random c plus %d random triples per format:\n",
              kSample);
  report(t.fma_t);
}

TEST_CASE("fp6 and fp4: every value, pair and triple", "[exhaustive-small]") {
  Unary u;
  Binary b;
  Ternary t;
  for (const char* name : {"e2m3", "e3m2", "e2m1"}) {
    const Subject& s = preset(name);
    const uint64_t n = s.o.enc_count();
    for (uint64_t x = 0; x < n; ++x) {
      u.run(s, x);
      for (uint64_t y = 0; y < n; ++y) {
        b.run(s, x, y);
        for (uint64_t z = 0; z < n; ++z) t.run(s, x, y, z);
      }
    }
  }
  std::printf("e2m3 e3m2 e2m1: every value, pair and triple, 7 roundings x 2 tininess:\n");
  u.print();
  b.print();
  report(t.fma_t);
}

// The full 2^24 triples of each fp8 format: label `exhaustive` (ctest -L exhaustive).
TEST_CASE("fp8 fma: every triple", "[.][exhaustive]") {
  Ternary t;
  for (const char* name : {"e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz"}) {
    const Subject& s = preset(name);
    for (uint64_t x = 0; x < 256; ++x)
      for (uint64_t y = 0; y < 256; ++y)
        for (uint64_t z = 0; z < 256; ++z) t.run(s, x, y, z);
    std::printf("  %s done\n", name);
    std::fflush(stdout);
  }
  std::printf("fp8 fma: all 2^24 triples per format, 7 roundings x 2 tininess:\n");
  report(t.fma_t);
}
