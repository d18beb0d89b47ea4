// The CPU dot-product instructions behind `halfway hw-report --backend avx512bf16-dot` (and
// amx-bf16, amx-fp16): the lane cases reach every class, each instruction present here agrees
// with its documented model (Intel's pseudo-code, accumulate.hpp) on every lane, the search
// recovers that model from the instruction's outputs alone, and vdpbf16ps neither reads nor
// writes MXCSR. Cases whose instruction is absent skip (exit 77); each instruction is its own
// CTest entry (test_hw_dot_<tag>); the 2^27-lane runs are tagged [exhaustive].
#include <catch2/catch.hpp>

#include <set>

#include "dot.hpp"
#include "halfway/hw/dot_cases.hpp"
#include "test_support.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace halfway;
using namespace halfway::hw;

namespace {

const DotInstruction* present(const char* name) {
  const DotInstruction* d = find_dot_instruction(name);
  REQUIRE(d != nullptr);
  const std::string why = d->absent_reason();
  if (!why.empty()) {
    halfway_test::skip(std::string(name) + " is absent here (" + why + ")");
    return nullptr;
  }
  return d;
}

std::string classes_text(const std::vector<ClassReport>& cs) {
  std::string s;
  for (const auto& c : cs) s += std::to_string(c.count) + " " + c.description + "; ";
  return s;
}

/// The documented model reproduces every lane, and the search finds it and nothing else.
void check_instruction(const DotInstruction& d, uint64_t lanes) {
  const DotReport r = compare_dot(d, lanes);
  INFO(d.name() << ": " << classes_text(r.classes));
  CHECK(r.total == lanes);
  CHECK(r.mismatches == 0);
  CHECK(r.hw_hash == r.ref_hash);
  const DotSearchResult s = search_dot(d, std::min<uint64_t>(lanes, uint64_t(1) << 17));
  REQUIRE(s.matched.size() == 1);
  CHECK(same_dot_model(s.matched[0], d.documented()));
  CHECK(s.others.front().second > 0);
}

// Class of a 16-bit element or an fp32 accumulator: 0 zero, 1 subnormal, 2 normal, 3 inf,
// 4 quiet NaN, 5 signalling NaN.
int class_of(const Format& f, uint32_t e) {
  const uint32_t mag = e & f.mag_mask(), quiet = uint32_t(1) << (f.frac_bits - 1);
  if (mag == 0) return 0;
  if ((mag >> f.frac_bits) == 0) return 1;
  if (mag < f.inf_mag()) return 2;
  if (mag == f.inf_mag()) return 3;
  return (mag & quiet) ? 4 : 5;
}

}  // namespace

TEST_CASE("dot lane cases reach every class of element and accumulator", "[hw][dot]") {
  for (const Format& f : {fmt_bf16(), fmt_fp16()}) {
    std::set<int> lo, hi, acc, fam;
    uint64_t ties = 0;
    for (uint64_t i = 0; i < (uint64_t(1) << 16); ++i) {
      uint32_t a, b, c;
      dot_operands(f, kDotSeed, i, a, b, c);
      lo.insert(class_of(f, a & 0xFFFF) * 10 + class_of(f, b & 0xFFFF));
      hi.insert(class_of(f, a >> 16));
      acc.insert(class_of(fmt_fp32(), c));
      fam.insert(int(i % kDotFamilies));
      // A tie: the exact lane value sits half-way between two fp32 numbers, so rounding it once
      // to nearest-even and to nearest-away differ.
      AccumulationModel exact{AccumulationModel::Kind::block_fma, fmt_fp32(),
                              Rounding::near_even, 2, 60};
      if (i % kDotFamilies == 4) {
        AccumulationModel maxmag = exact;
        maxmag.rounding = Rounding::near_maxMag;
        ties += dot_lane(exact, f, a, b, c) != dot_lane(maxmag, f, a, b, c);
      }
    }
    CHECK(hi.size() == 6);
    CHECK(acc.size() == 6);
    CHECK(lo.size() >= 30);
    CHECK(fam.size() == size_t(kDotFamilies));
    CHECK(ties > 100);  // ties to even and ties away differ only on exact ties
  }
}

TEST_CASE("the dot search space holds each documented model once", "[hw][dot]") {
  const auto cands = dot_candidates();
  for (const DotInstruction* d : all_dot_instructions()) {
    int n = 0;
    for (const auto& m : cands) n += same_dot_model(m, d->documented());
    CHECK(n == 1);
  }
}

TEST_CASE("vdpbf16ps matches its documented model; the search recovers it", "[hw][avx512bf16dot]") {
  const DotInstruction* d = present("avx512bf16-dot");
  if (!d) return;
  check_instruction(*d, uint64_t(1) << 19);
  // Against IEEE fp32 fmas in index order, the flushing shows up as such.
  const DotReport r = compare_dot(*d, uint64_t(1) << 16);
  std::set<Diff> seen;
  for (const auto& c : r.ieee_classes) seen.insert(c.diff);
  CHECK(seen.count(Diff::daz) == 1);
  CHECK(seen.count(Diff::ftz) == 1);
}

#if defined(__x86_64__)
TEST_CASE("vdpbf16ps neither reads nor writes MXCSR", "[hw][avx512bf16dot]") {
  const DotInstruction* d = present("avx512bf16-dot");
  if (!d) return;
  const size_t n = size_t(1) << 16;
  std::vector<uint32_t> a(n), b(n), c(n), ref(n), got(n);
  for (size_t i = 0; i < n; ++i) dot_operands(d->input(), kDotSeed, i, a[i], b[i], c[i]);
  const unsigned saved = _mm_getcsr();
  d->run(a.data(), b.data(), c.data(), ref.data(), n);
  // Round toward zero, no DAZ/FTZ, every exception masked, flags cleared.
  const unsigned rz = (saved & ~0xE03Fu) | 0x6000u;
  _mm_setcsr(rz);
  d->run(a.data(), b.data(), c.data(), got.data(), n);
  const unsigned after = _mm_getcsr();
  _mm_setcsr(saved);
  CHECK(got == ref);        // the rounding direction in MXCSR is not read
  CHECK(after == rz);       // no exception flag was raised, though many lanes are inexact
}
#endif

TEST_CASE("AMX tdpbf16ps matches its documented model; the search recovers it", "[hw][amxbf16]") {
  const DotInstruction* d = present("amx-bf16");
  if (!d) return;
  check_instruction(*d, uint64_t(1) << 20);
}

TEST_CASE("AMX tdpfp16ps matches its documented model; the search recovers it", "[hw][amxfp16]") {
  const DotInstruction* d = present("amx-fp16");
  if (!d) return;
  check_instruction(*d, uint64_t(1) << 20);
}

TEST_CASE("exhaustive: vdpbf16ps on 2^27 lanes", "[.][exhaustive][avx512bf16dot]") {
  const DotInstruction* d = present("avx512bf16-dot");
  if (!d) return;
  const DotReport r = compare_dot(*d, uint64_t(1) << 27);
  INFO(classes_text(r.classes));
  CHECK(r.mismatches == 0);
}

TEST_CASE("exhaustive: AMX tdpbf16ps on 2^27 lanes", "[.][exhaustive][amxbf16]") {
  const DotInstruction* d = present("amx-bf16");
  if (!d) return;
  CHECK(compare_dot(*d, uint64_t(1) << 27).mismatches == 0);
}

TEST_CASE("exhaustive: AMX tdpfp16ps on 2^27 lanes", "[.][exhaustive][amxfp16]") {
  const DotInstruction* d = present("amx-fp16");
  if (!d) return;
  CHECK(compare_dot(*d, uint64_t(1) << 27).mismatches == 0);
}
