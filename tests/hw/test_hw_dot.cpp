// The CPU dot-product instructions behind `halfway hw-report --backend avx512bf16-dot` (and
// amx-bf16, amx-fp16): the lane cases reach every class, each instruction present here agrees
// with its documented model (Intel's pseudo-code, accumulate.hpp) on every lane, the search
// recovers that model from the instruction's outputs alone, and vdpbf16ps neither reads nor
// writes MXCSR. Cases whose instruction is absent skip (exit 77); each instruction is its own
// CTest entry (test_hw_dot_<tag>); the 2^27-lane runs are tagged [exhaustive].
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <set>

#include "amx_tiles.hpp"
#include "dot.hpp"
#include "halfway/hw/dot_cases.hpp"
#include "scratch.hpp"
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

TEST_CASE("AMX tdpbf16ps matches its documented model on full tiles; the search recovers it",
          "[hw][amxbf16]") {
  const DotInstruction* d = present("amx-bf16");
  if (!d) return;
  check_instruction(*d, uint64_t(1) << 20);
}

namespace {

/// The tiles recorded on an AMX-BF16 machine (tests/data/amx/README.md).
const std::vector<AmxTile>& recorded_tiles() {
  static const std::vector<AmxTile> t = read_amx_tiles(HALFWAY_AMX_TILES);
  return t;
}

/// The tiles of the given families, in file order.
std::vector<AmxTile> tiles_of(const std::vector<AmxTile>& all, std::set<uint32_t> families,
                              size_t max) {
  std::vector<AmxTile> out;
  for (const AmxTile& t : all)
    if (families.count(t.family) && out.size() < max) out.push_back(t);
  return out;
}

}  // namespace

TEST_CASE("recorded tdpbf16ps tiles: the amx-bf16 model reproduces all 512,000 outputs",
          "[hw][amx_replay]") {
  const auto& tiles = recorded_tiles();
  REQUIRE(tiles.size() == 2000);
  const DotReport r = compare_tiles("amx-bf16", accumulation::amx_bf16, fmt_bf16(), tiles);
  INFO(classes_text(r.classes));
  CHECK(r.total == 512000);
  CHECK(r.mismatches == 0);  // NaN payloads and signs included
  CHECK(r.hw_hash == r.ref_hash);
  // Every family, specials and subnormals included, is in the file.
  std::set<uint32_t> fams;
  uint64_t nan_outputs = 0;
  for (const AmxTile& t : tiles) {
    fams.insert(t.family);
    for (auto& row : t.d)
      for (uint32_t v : row) nan_outputs += (v & 0x7FFFFFFFu) > 0x7F800000u;
  }
  CHECK(fams.size() == size_t(kAmxFamilies));
  CHECK(nan_outputs > 10000);
  // Documented by the backend too.
  CHECK(same_dot_model(find_dot_instruction("amx-bf16")->documented(), accumulation::amx_bf16));
}

TEST_CASE("recorded tdpbf16ps tiles: planted faults in the model are caught", "[hw][amx_replay]") {
  const auto& tiles = recorded_tiles();
  const auto misses = [&](const AccumulationModel& m) {
    return compare_tiles("amx-bf16", m, fmt_bf16(), tiles).mismatches;
  };
  // Intel's pseudo-code: one chain of fmas from C, even element first (the old documented model).
  AccumulationModel intel = accumulation::avx512_dpbf16;
  intel.period = 0;
  const uint64_t pseudo = misses(intel);
  CHECK(pseudo > 150000);  // about 37% of the outputs
  AccumulationModel one_chain = accumulation::amx_bf16;
  one_chain.chains = 1;
  CHECK(misses(one_chain) > 50000);
  AccumulationModel no_daz = accumulation::amx_bf16;
  no_daz.daz = false;
  CHECK(misses(no_daz) > 0);
  AccumulationModel nan_rule = accumulation::amx_bf16;
  nan_rule.nan_accumulator_first = false;
  CHECK(misses(nan_rule) > 0);
  // A fault in the recorded data itself: one output changed by one ulp.
  std::vector<AmxTile> bad(tiles.begin(), tiles.begin() + 10);
  bad[3].d[5][7] += 1;
  const DotReport r = compare_tiles("amx-bf16", accumulation::amx_bf16, fmt_bf16(), bad);
  CHECK(r.mismatches == 1);
  CHECK(r.family_mismatches[3] == 1);
}

TEST_CASE("recorded tdpbf16ps tiles: the search finds the amx-bf16 model and only it",
          "[hw][amx_replay]") {
  // The specials and subnormal tiles tell every candidate apart; only 3 of the 512,000 outputs
  // (all in family 7) tell FTZ from no FTZ, so every tile of those families is searched.
  const auto tiles = tiles_of(recorded_tiles(), {6, 7}, 400);
  REQUIRE(tiles.size() == 400);
  const DotSearchResult s = search_tiles(fmt_bf16(), tiles, tiles.size());
  REQUIRE(s.matched.size() == 1);
  CHECK(same_dot_model(s.matched[0], accumulation::amx_bf16));
  CHECK(s.others.front().second > 0);
}

TEST_CASE("generated AMX tiles tell the documented model apart from every other candidate",
          "[hw][amx_replay]") {
  // What the live test on an AMX machine searches (2^17 outputs: 512 tiles), with the outputs
  // the documented model gives: only it may match, or that test could not pass anywhere.
  auto tiles = amx_tile_cases(fmt_bf16(), 512);
  for (AmxTile& t : tiles)
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n)
        t.d[m][n] = amx_tile_output(accumulation::amx_bf16, fmt_bf16(), t, m, n);
  const DotSearchResult s = search_tiles(fmt_bf16(), tiles, tiles.size());
  REQUIRE(s.matched.size() == 1);
  CHECK(same_dot_model(s.matched[0], accumulation::amx_bf16));
}

TEST_CASE("AMX tile records: a file is read whole or refused with its reason", "[hw][amx_replay]") {
  const std::string dir = halfway_test::scratch_dir("hw_dot", "amx_tiles").string();
  std::vector<AmxTile> some(recorded_tiles().begin(), recorded_tiles().begin() + 3);
  write_amx_tiles(dir + "/three.bin", some);
  const auto back = read_amx_tiles(dir + "/three.bin");
  REQUIRE(back.size() == 3);
  CHECK(std::memcmp(back.data(), some.data(), 3 * sizeof(AmxTile)) == 0);
  // A truncated file, an empty one, a bad family and a missing one are refused.
  {
    std::FILE* f = std::fopen((dir + "/cut.bin").c_str(), "wb");
    std::fwrite(some.data(), 1, kAmxRecordBytes + 100, f);
    std::fclose(f);
    f = std::fopen((dir + "/empty.bin").c_str(), "wb");
    std::fclose(f);
  }
  CHECK_THROWS_WITH(read_amx_tiles(dir + "/cut.bin"), Catch::Contains("whole number"));
  CHECK_THROWS_WITH(read_amx_tiles(dir + "/empty.bin"), Catch::Contains("no record"));
  CHECK_THROWS_WITH(read_amx_tiles(dir + "/none.bin"), Catch::Contains("cannot open"));
  some[1].family = 10;
  write_amx_tiles(dir + "/family.bin", some);
  CHECK_THROWS_WITH(read_amx_tiles(dir + "/family.bin"), Catch::Contains("record 1"));
}

TEST_CASE("generated AMX tiles cover every family and class the recorded ones do", "[hw][dot]") {
  for (const Format& f : {fmt_bf16(), fmt_fp16()}) {
    const auto tiles = amx_tile_cases(f, 40);
    std::set<int> elem, acc;
    for (const AmxTile& t : tiles)
      for (int m = 0; m < 16; ++m) {
        for (int e = 0; e < 32; ++e) elem.insert(class_of(f, t.a[m][e])), elem.insert(class_of(f, t.b[m][e]));
        for (int n = 0; n < 16; ++n) acc.insert(class_of(fmt_fp32(), t.c[m][n]));
      }
    CHECK(elem.size() == 6);
    CHECK(acc.size() == 6);
    CHECK(tiles[13].family == 3);
    // Deterministic: the same cases every time.
    const auto again = amx_tile_cases(f, 40);
    CHECK(std::memcmp(again.data(), tiles.data(), tiles.size() * sizeof(AmxTile)) == 0);
  }
}

// tdpfp16ps's documented model is amx-bf16's structure, a hypothesis: no AMX-FP16 tiles have
// been recorded yet, so this test has never run against the hardware.
TEST_CASE("AMX tdpfp16ps matches its documented model on full tiles; the search recovers it",
          "[hw][amxfp16]") {
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
