// Tensor-core validation logic that runs without a GPU: the mma.sync fragment layouts (against
// the PTX ISA's tables), the probe matrices, and the parameter search, which must recover a
// known model from outputs that model produced and tell it apart from its neighbours.
#include <catch2/catch.hpp>

#include <cfenv>
#include <cmath>
#include <cstring>
#include <set>

#include "halfway/hw/mma_search.hpp"

using namespace halfway;
using namespace halfway::hw;
using namespace halfway::hw::mma;

namespace {

template <class F>
bool bijection(F frag, int per_lane, int rows, int cols) {
  std::set<std::pair<int, int>> seen;
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < per_lane; ++i) {
      const RowCol rc = frag(lane, i);
      if (rc.row < 0 || rc.row >= rows || rc.col < 0 || rc.col >= cols) return false;
      seen.insert({rc.row, rc.col});
    }
  return int(seen.size()) == rows * cols && per_lane * 32 == rows * cols;
}

bool same(RowCol a, int r, int c) { return a.row == r && a.col == c; }

std::vector<uint32_t> outputs_of(const Candidate& cand, const CaseSet& cs) {
  std::vector<uint32_t> d(cs.cases() * kM * kN);
  for (size_t q = 0; q < cs.cases(); ++q)
    for (int r = 0; r < kM; ++r)
      for (int c = 0; c < kN; ++c) d[output_index(q, r, c)] = candidate_output(cand, cs, q, r, c);
  return d;
}

Candidate block_model(const Format& acc, int blk, int kept, Rounding r, bool floor) {
  Candidate c;
  c.model = AccumulationModel{AccumulationModel::Kind::block_fma, acc, r, blk, kept, floor};
  return c;
}

bool same_model(const Candidate& a, const Candidate& b) {
  return a.model.kind == b.model.kind && a.model.block == b.model.block &&
         a.model.kept_bits == b.model.kept_bits && a.model.rounding == b.model.rounding &&
         a.model.floor_alignment == b.model.floor_alignment && a.reverse == b.reverse &&
         a.two_step == b.two_step && a.model.acc == b.model.acc;
}

}  // namespace

TEST_CASE("mma.sync fragment layouts follow the PTX ISA tables", "[hw][mma]") {
  CHECK(bijection(frag_a_k16, 8, 16, 16));
  CHECK(bijection(frag_b_k16, 4, 16, 8));
  CHECK(bijection(frag_c, 4, 16, 8));
  CHECK(bijection(frag_a_k32, 16, 16, 32));
  CHECK(bijection(frag_b_k32, 8, 32, 8));
  // Entries read off the PTX ISA figures (groupID = lane >> 2, threadID_in_group = lane % 4).
  CHECK(same(frag_a_k16(0, 0), 0, 0));
  CHECK(same(frag_a_k16(0, 1), 0, 1));
  CHECK(same(frag_a_k16(0, 2), 8, 0));
  CHECK(same(frag_a_k16(0, 4), 0, 8));
  CHECK(same(frag_a_k16(0, 7), 8, 9));
  CHECK(same(frag_a_k16(5, 0), 1, 2));
  CHECK(same(frag_a_k16(31, 7), 15, 15));
  CHECK(same(frag_b_k16(5, 0), 2, 1));
  CHECK(same(frag_b_k16(5, 3), 11, 1));
  CHECK(same(frag_b_k16(31, 3), 15, 7));
  CHECK(same(frag_c(5, 0), 1, 2));
  CHECK(same(frag_c(5, 3), 9, 3));
  CHECK(same(frag_c(31, 3), 15, 7));
  CHECK(same(frag_a_k32(5, 0), 1, 4));
  CHECK(same(frag_a_k32(5, 4), 9, 4));
  CHECK(same(frag_a_k32(5, 8), 1, 20));
  CHECK(same(frag_a_k32(31, 15), 15, 31));
  CHECK(same(frag_b_k32(5, 0), 4, 1));
  CHECK(same(frag_b_k32(5, 4), 20, 1));
  CHECK(same(frag_b_k32(31, 7), 31, 7));
}

TEST_CASE("two's-complement alignment truncates negative terms toward -inf", "[hw][mma]") {
  // 1 + (-2^-15)(2^-15) in bf16 inputs, fp32 accumulator, 25 bits kept, rounded toward zero:
  // toward zero the term -2^-30 truncates to 0 and the result is 1 (0x3F800000); toward -inf it
  // becomes -2^-25, the block sum 1 - 2^-25 rounds toward zero to 1 - 2^-24 (0x3F7FFFFF).
  const uint32_t a[1] = {0xB800}, b[1] = {0x3800}, c = 0x3F800000;  // -2^-15, 2^-15, 1.0
  AccumulationModel m{AccumulationModel::Kind::block_fma, formats::fp32, Rounding::minMag, 16, 25};
  Env env;
  CHECK(dot(m, formats::bf16, a, b, 1, c, env) == 0x3F800000u);
  m.floor_alignment = true;
  CHECK(dot(m, formats::bf16, a, b, 1, c, env) == 0x3F7FFFFFu);
  // A positive term is truncated the same way by both.
  const uint32_t ap[1] = {0x3800};
  CHECK(dot(m, formats::bf16, ap, b, 1, c, env) == 0x3F800000u);
}

TEST_CASE("block FMA with either truncation equals an independent fixed-point evaluation",
          "[hw][mma]") {
  // Oracle: every term as a signed integer multiple of 2^lsb, aligned by an arithmetic shift
  // (floor) or by shifting the magnitude (toward zero); the exact sum converted to binary64
  // (exact: it has fewer than 53 bits) and narrowed to binary32 by the host under round-toward-
  // zero. bf16 inputs: products have at most 16 significant bits.
  std::fesetround(FE_TONEAREST);
  uint64_t n = 0, bad = 0;
  for (int t = 0; t < 4000; ++t) {
    const uint64_t w = random64(2024, uint64_t(t));
    const int kept = 23 + int(w % 6);
    const bool floor = (w >> 8) & 1;
    uint32_t a[16], b[16];
    for (int k = 0; k < 16; ++k) {
      const uint64_t r = random64(t, uint64_t(k));
      a[k] = ((r & 1) ? 0x8000u : 0u) | uint32_t((127 + int((r >> 1) % 24) - 12) << 7) | uint32_t((r >> 8) & 0x7F);
      b[k] = ((r >> 16) & 1 ? 0x8000u : 0u) | uint32_t((127 + int((r >> 17) % 24) - 12) << 7) | uint32_t((r >> 24) & 0x7F);
    }
    const uint64_t rc = random64(t, 99);
    const uint32_t c = ((rc & 1) ? 0x80000000u : 0u) | uint32_t((127 + int((rc >> 1) % 30) - 15) << 23) |
                       uint32_t((rc >> 8) & 0x7FFFFF);
    AccumulationModel m{AccumulationModel::Kind::block_fma, formats::fp32, Rounding::minMag, 16, kept, floor};
    Env env;
    const uint32_t got = dot(m, formats::bf16, a, b, 16, c, env);
    // Terms (sign, integer significand, exponent of its last bit).
    struct T { bool neg; int64_t sig; int exp; };
    std::vector<T> terms;
    terms.push_back({bool(c >> 31), int64_t((c & 0x7FFFFF) | 0x800000), int((c >> 23) & 0xFF) - 127 - 23});
    for (int k = 0; k < 16; ++k) {
      const int64_t sa = (a[k] & 0x7F) | 0x80, sb = (b[k] & 0x7F) | 0x80;
      terms.push_back({bool((a[k] ^ b[k]) >> 15), sa * sb, int((a[k] >> 7) & 0xFF) - 127 - 7 + int((b[k] >> 7) & 0xFF) - 127 - 7});
    }
    int emax = INT32_MIN;
    for (const T& x : terms) emax = std::max(emax, x.exp + 63 - __builtin_clzll(uint64_t(x.sig)));
    const int lsb = emax - kept;
    __int128 sum = 0;
    for (const T& x : terms) {
      const int s = lsb - x.exp;  // right shift
      __int128 v;
      if (floor) {
        v = x.neg ? -__int128(x.sig) : __int128(x.sig);
        v = s > 0 ? (s >= 100 ? (v < 0 ? -1 : 0) : (v >> s)) : (v << -s);
      } else {
        v = s > 0 ? (s >= 100 ? 0 : (__int128(x.sig) >> s)) : (__int128(x.sig) << -s);
        if (x.neg) v = -v;
      }
      sum += v;
    }
    const double exact = std::ldexp(double(int64_t(sum)), lsb);
    std::fesetround(FE_TOWARDZERO);
    volatile double vexact = exact;
    volatile float narrowed = float(vexact);
    std::fesetround(FE_TONEAREST);
    uint32_t want;
    const float nf = narrowed;
    std::memcpy(&want, &nf, 4);
    if (sum == 0) want = 0;
    ++n;
    if (got != want && ++bad < 5)
      FAIL_CHECK("kept " << kept << (floor ? " floor" : " zero") << std::hex << ": got " << got << " want " << want);
  }
  CHECK(n == 4000);
  CHECK(bad == 0);
}

TEST_CASE("probe matrices: exact where they must be, normal where required", "[hw][mma]") {
  for (int v = 0; v < kVariantCount; ++v) {
    const CaseSet cs = make_cases(static_cast<Variant>(v), 1234);
    INFO(cs.info.name);
    CHECK(cs.a.size() == cs.cases() * kM * cs.info.k);
    uint64_t subnormals = 0;
    for (size_t q = 0; q < cs.cases(); ++q) {
      if (!required_family(cs.family[q])) continue;
      for (int i = 0; i < kM * cs.info.k; ++i) subnormals += is_subnormal(cs.info.in, cs.A(q)[i]);
      for (int i = 0; i < cs.info.k * kN; ++i) subnormals += is_subnormal(cs.info.in, cs.B(q)[i]);
      for (int i = 0; i < kM * kN; ++i) subnormals += is_subnormal(cs.info.acc, cs.C(q)[i]);
    }
    CHECK(subnormals == 0);
    // Every model gives the exact integer result on exact_int (the layout probe).
    const auto pres = presets(static_cast<Variant>(v));
    for (size_t q = 0; q < cs.cases(); ++q) {
      if (cs.family[q] != Family::exact_int) continue;
      for (int r = 0; r < kM; ++r)
        for (int c = 0; c < kN; ++c) {
          Env e;
          const uint32_t want = from_f64(cs.info.acc, exact_int_output(cs, q, r, c), e);
          REQUIRE(e.flags == 0);
          for (const auto& p : pres) CHECK(candidate_output(p.cand, cs, q, r, c) == want);
        }
    }
  }
}

TEST_CASE("the search recovers a known fp16->fp32 model and rejects its neighbours", "[hw][mma]") {
  const CaseSet cs = make_cases(Variant::f16_f32, 99);
  const auto cands = candidates(Variant::f16_f32);
  for (const bool floor : {false, true}) {
    const Candidate truth = block_model(formats::fp32, 16, 25, Rounding::minMag, floor);
    const auto hw = outputs_of(truth, cs);
    const SearchResult r = search(cs, hw, cands, 2);
    CHECK(r.complete);
    CHECK(r.candidates == cands.size());
    bool found = false;
    for (const auto& s : r.matched) {
      found = found || same_model(s.cand, truth);
      // Everything the probes cannot tell from the truth must agree with it on the
      // parameters the probes are designed to pin down.
      CHECK(s.cand.model.block == 16);
      CHECK(s.cand.model.kept_bits == 25);
      CHECK(s.cand.model.rounding == Rounding::minMag);
      CHECK(s.cand.model.floor_alignment == floor);
    }
    CHECK(found);
    // The published V100 and A100 parameters are refuted on these outputs.
    for (const auto& p : presets(Variant::f16_f32)) {
      const Score s = score_full(cs, hw, p.cand);
      INFO(p.name);
      if (std::string(p.name) == "h100_fp32" && !floor) CHECK(s.mismatches == 0);
      else CHECK(s.mismatches > 0);
    }
  }
}

TEST_CASE("the search tells block sizes and block order apart", "[hw][mma]") {
  const CaseSet cs = make_cases(Variant::bf16_f32, 5);
  const auto cands = candidates(Variant::bf16_f32);
  Candidate truth = block_model(formats::fp32, 8, 24, Rounding::minMag, false);
  truth.reverse = true;
  const SearchResult r = search(cs, outputs_of(truth, cs), cands, 2);
  REQUIRE(!r.matched.empty());
  for (const auto& s : r.matched) {
    CHECK(s.cand.model.block == 8);
    CHECK(s.cand.reverse);
    CHECK(s.cand.model.kept_bits == 24);
  }
}

TEST_CASE("fp16 accumulators: one rounding to fp16 vs fp32 then fp16", "[hw][mma]") {
  const CaseSet cs = make_cases(Variant::f16_f16, 7);
  Candidate truth = block_model(formats::fp32, 16, 25, Rounding::minMag, false);
  truth.two_step = true;
  truth.out_rounding = Rounding::near_even;
  // Block sizes 8 and 16 only, to keep the test short; the full list is what the GPU run uses.
  std::vector<Candidate> cands;
  for (const auto& c : candidates(Variant::f16_f16))
    if (c.model.block >= 8) cands.push_back(c);
  const SearchResult r = search(cs, outputs_of(truth, cs), cands, 2);
  REQUIRE(!r.matched.empty());
  for (const auto& s : r.matched) {
    CHECK(s.cand.two_step);
    CHECK(s.cand.out_rounding == Rounding::near_even);
  }
}

TEST_CASE("the search tells interleaved k-blocks from contiguous ones", "[hw][mma]") {
  // fp8 k32 run as two k16 blocks over k in {0,1,4,5,...} and {2,3,6,7,...}: what an fp8
  // mma.sync emulated by two fp16 HMMAs would do if each HMMA were one block FMA.
  const CaseSet cs = make_cases(Variant::e4m3_f32, 3);
  Candidate truth = block_model(formats::fp32, 16, 24, Rounding::minMag, false);
  interleave_k(truth.model, 32, 16, 2);
  CHECK(interleave_chunk(truth.model) == 2);
  CHECK(truth.model.order[2] == 4);   // block 0: 0, 1, 4, 5, ...
  CHECK(truth.model.order[16] == 2);  // block 1: 2, 3, 6, 7, ...
  std::vector<Candidate> cands;
  for (const auto& c : candidates(Variant::e4m3_f32))
    if (c.model.block == 16 && c.model.kept_bits >= 20 && c.model.kept_bits <= 28) cands.push_back(c);
  const SearchResult r = search(cs, outputs_of(truth, cs), cands, 2);
  REQUIRE(!r.matched.empty());
  for (const auto& s : r.matched) {
    CHECK(interleave_chunk(s.cand.model) == 2);
    CHECK(s.cand.model.kept_bits == 24);
    CHECK(!s.cand.reverse);
  }
}
