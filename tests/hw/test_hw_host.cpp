// The CPU hardware backends behind `halfway hw-report` (hw/host): the difference classifier on
// hand-picked encodings, and each backend present on this machine against the library, with
// expected mismatch counts derived from the documented behaviour of the hardware and from the
// library's stated NaN semantics (docs/semantics.md), not from the code under test. Full 2^32
// sweeps are tagged [exhaustive] (CTest label `exhaustive`). A case whose backend is absent
// skips (test_support.hpp: exit 77, CTest "skipped"); each such case carries its backend's tag
// ([f16c], [avx512bf16], [avx512fp16], [nvidia]) and CTest runs each backend as its own entry
// (test_hw_host_<tag>, test_hw_host_exhaustive_<tag>), the rest as test_hw_host.
#include <catch2/catch.hpp>

#include <map>

#include "compare.hpp"
#include "halfway/hw/diff.hpp"
#include "halfway/hw/ops.hpp"
#include "test_support.hpp"

using namespace halfway;
using namespace halfway::hw;

namespace {

/// The backend, or nullptr after recording a skip (the caller returns).
const Backend* present(const char* name) {
  const Backend* b = find_backend(name);
  if (!b) {
    halfway_test::skip(std::string("backend ") + name + " is not built in");
    return nullptr;
  }
  const std::string why = b->absent_reason();
  if (!why.empty()) {
    halfway_test::skip(std::string("backend ") + name + " is absent here (" + why + ")");
    return nullptr;
  }
  return b;
}

std::map<Diff, uint64_t> class_counts(const OpReport& r) {
  std::map<Diff, uint64_t> m;
  for (const auto& c : r.classes) m[c.diff] = c.count;
  return m;
}

bool f32_is_nan(uint32_t x) { return (x & 0x7FFFFFFFu) > 0x7F800000u; }

// The library's NaN for an f32 NaN input, from docs/semantics.md: sign kept, quiet bit set,
// the top fraction bits of the payload kept.
uint32_t semantic_nan(const Format& out, uint32_t x) {
  const uint32_t sign = (x >> 31) ? out.sign_bit() : 0;
  if (out.specials == Specials::fn) return sign | out.mag_mask();
  const int m = out.frac_bits;
  const uint32_t payload = (x >> (23 - m)) & ((1u << m) - 1);
  return sign | out.inf_mag() | (1u << (m - 1)) | payload;
}

}  // namespace

TEST_CASE("differences are classified by what they are", "[hw][classify]") {
  const Format h = fmt_fp16();
  CHECK(classify(h, 0x7FFF, 0xFFFF, false, 0) == Diff::nan_sign);
  CHECK(classify(h, 0x7FFF, 0x7E00, false, 0) == Diff::nan_payload);
  CHECK(classify(h, 0x7FFF, 0xFE00, false, 0) == Diff::nan_payload);
  CHECK(classify(h, 0x7C01, 0x7E01, false, 0) == Diff::nan_unquieted);
  CHECK(classify(h, 0x7E00, 0x3C00, false, 0) == Diff::nan_for_value);
  CHECK(classify(h, 0x3C00, 0x7E00, false, 0) == Diff::value_for_nan);
  CHECK(classify(h, 0x0000, 0x0001, true, 0x0000) == Diff::daz);
  CHECK(classify(h, 0x0000, 0x0001, false, 0x0001) == Diff::ftz);
  CHECK(classify(h, 0x8000, 0x8400, false, 0x8400) == Diff::ftz);  // min normal: flushed too
  CHECK(classify(h, 0x0000, 0x0401, false, 0x0401) == Diff::several_ulp);
  CHECK(classify(h, 0x7BFF, 0x7C00, false, 0) == Diff::inf_to_max);
  CHECK(classify(h, 0xFBFF, 0xFC00, false, 0) == Diff::inf_to_max);
  CHECK(classify(h, 0x8000, 0x0000, false, 0) == Diff::zero_sign);
  CHECK(classify(h, 0x3C01, 0x3C00, false, 0) == Diff::one_ulp);
  CHECK(classify(h, 0x3BFF, 0x3C00, false, 0) == Diff::one_ulp);
  CHECK(classify(h, 0x3C02, 0x3C00, false, 0) == Diff::several_ulp);
  CHECK(classify(h, 0xBC00, 0x3C00, false, 0) == Diff::other);
  const Format e4 = fmt_e4m3(true);
  CHECK(classify(e4, 0x7F, 0xFF, false, 0) == Diff::nan_sign);
  CHECK(classify(e4, 0x7E, 0x7D, false, 0) == Diff::one_ulp);
}

TEST_CASE("the conversion sample visits every exponent and every rounding boundary", "[hw][sample]") {
  const Op op = Op::f32_to_f16_rn;
  const uint64_t n = sample_count(op);
  REQUIRE(n == (uint64_t(1) << 22));
  std::vector<bool> se(512, false);
  uint64_t fp16_ties = 0, bf16_ties = 0;
  for (uint64_t k = 0; k < n; ++k) {
    const uint32_t x = static_cast<uint32_t>(sample_index(op, k));
    se[x >> 23] = true;
    fp16_ties += (x & 0x1FFF) == 0x1000;
    bf16_ties += (x & 0xFFFF) == 0x8000;
  }
  for (int i = 0; i < 512; ++i) CHECK(se[i]);
  CHECK(fp16_ties > 10000);
  CHECK(bf16_ties > 10000);
  CHECK(sample_count(Op::f16_to_f32) == 65536);  // small domains are always covered in full
}

TEST_CASE("unknown and disabled backends", "[hw][backends]") {
  CHECK(find_backend("no-such-backend") == nullptr);
  CHECK(known_backend_names().size() == 7);
  for (const Backend* b : all_backends()) {
    CHECK(b->ops().size() > 0);
    CHECK(std::string(b->description()).size() > 10);
  }
}

/// Every operation of the backend, if present, agrees with the library on its whole sample.
void expect_all_ops_equal(const char* backend) {
  const Backend* b = present(backend);
  if (!b) return;
  for (Op op : b->ops()) {
    const OpReport r = compare_op(*b, op, Coverage::sample, 2);
    INFO(op_info(op).name);
    CHECK(r.total == sample_count(op));
    CHECK(r.mismatches == 0);
  }
}

TEST_CASE("F16C conversions and F16C+SSE fp16 arithmetic match the library", "[hw][f16c]") {
  expect_all_ops_equal("f16c");
}

TEST_CASE("AVX512-BF16 flushes fp32 subnormal inputs and nothing else differs", "[hw][avx512bf16]") {
  const Backend* b = present("avx512bf16");
  if (!b) return;
  const Op op = Op::f32_to_bf16_rn;
  const OpReport r = compare_op(*b, op, Coverage::sample, 2);
  // Expected: every subnormal input whose correctly rounded bf16 is not zero, i.e. fraction
  // above half of the smallest bf16 subnormal (2^-134 = fraction 0x8000; the tie goes to even 0).
  uint64_t expected = 0;
  for (uint64_t k = 0; k < r.total; ++k) {
    const uint32_t x = static_cast<uint32_t>(sample_index(op, k));
    expected += (x & 0x7F800000u) == 0 && (x & 0x7FFFFFu) > 0x8000u;
  }
  REQUIRE(expected > 1000);
  CHECK(r.mismatches == expected);
  const auto m = class_counts(r);
  CHECK(m.size() == 1);
  CHECK(m.count(Diff::daz) == 1);
  for (const auto& c : r.classes) CHECK(c.description == "fp32 subnormal inputs flushed to zero");
}

TEST_CASE("AVX512-FP16 native fp16 arithmetic and fma match the library", "[hw][avx512fp16]") {
  // Intel documents the FP16 instructions as IEEE 754 operations (correctly rounded, subnormals
  // supported) with the SSE NaN rules, which the library follows.
  expect_all_ops_equal("avx512fp16");
}

TEST_CASE("NVIDIA host conversions differ from the library only in NaN encodings", "[hw][nvidia]") {
  const Backend* b = present("nvidia-host");
  if (!b) return;
  const Op ops[] = {Op::f32_to_f16_rn,  Op::f32_to_f16_rz,  Op::f32_to_f16_rd,
                    Op::f32_to_f16_ru,  Op::f32_to_bf16_rn, Op::f32_to_bf16_rz,
                    Op::f32_to_bf16_rd, Op::f32_to_bf16_ru, Op::f32_to_e4m3_satfinite,
                    Op::f32_to_e4m3_nosat, Op::f32_to_e5m2_satfinite, Op::f32_to_e5m2_nosat};
  for (Op op : ops) {
    const OpInfo info = op_info(op);
    INFO(info.name);
    const OpReport r = compare_op(*b, op, Coverage::sample, 2);
    // NVIDIA returns one canonical NaN: 0x7FFF for 16-bit formats, 0x7F for fp8.
    const uint32_t canon = info.out.nbits() == 16 ? 0x7FFFu : 0x7Fu;
    uint64_t want_sign = 0, want_payload = 0;
    for (uint64_t k = 0; k < r.total; ++k) {
      const uint32_t x = static_cast<uint32_t>(sample_index(op, k));
      if (f32_is_nan(x)) {
        const uint32_t lib = semantic_nan(info.out, x);
        if (lib == canon) continue;
        ((lib ^ canon) == info.out.sign_bit() ? want_sign : want_payload)++;
      }
    }
    auto m = class_counts(r);
    CHECK(m[Diff::nan_sign] == want_sign);
    CHECK(m[Diff::nan_payload] == want_payload);
    // __NV_SATFINITE sends ±inf to ±57344 in e5m2, and so does the library's e5m2:sat.
    CHECK(m[Diff::inf_to_max] == 0);
    CHECK(r.mismatches == want_sign + want_payload);
    for (const auto& c : r.classes) CHECK((c.hw_and == canon && c.hw_or == canon));
  }
}

TEST_CASE("NVIDIA host widening conversions: canonical NaNs, unquieted bf16 signalling NaNs",
          "[hw][nvidia]") {
  const Backend* b = present("nvidia-host");
  if (!b) return;
  // fp16 -> f32: all 2046 NaN encodings become 0x7FFFFFFF.
  auto r = compare_op(*b, Op::f16_to_f32, Coverage::sample, 2);
  CHECK(r.total == 65536);
  CHECK(r.mismatches == 2046);
  auto m = class_counts(r);
  CHECK(m[Diff::nan_payload] == 2046);
  CHECK(r.classes[0].description == "NaN payload canonicalized to 0x7FFFFFFF");
  // bf16 -> f32 is a 16-bit shift on the host: the 126 signalling NaNs stay signalling.
  r = compare_op(*b, Op::bf16_to_f32, Coverage::sample, 2);
  CHECK(r.mismatches == 126);
  m = class_counts(r);
  CHECK(m[Diff::nan_unquieted] == 126);
  // fp8 -> fp16: e4m3 has 2 NaN encodings, e5m2 has 6; all become 0x7FFF.
  r = compare_op(*b, Op::e4m3_to_f16, Coverage::sample, 2);
  CHECK(r.total == 256);
  CHECK(r.mismatches == 2);
  r = compare_op(*b, Op::e5m2_to_f16, Coverage::sample, 2);
  CHECK(r.mismatches == 6);
  for (const auto& c : r.classes) CHECK((c.hw_and == 0x7FFF && c.hw_or == 0x7FFF));
}

TEST_CASE("NVIDIA host fp16/bf16 arithmetic differs only in NaN encodings", "[hw][nvidia]") {
  const Backend* b = present("nvidia-host");
  if (!b) return;
  for (Op op : {Op::f16_add, Op::f16_sub, Op::f16_mul, Op::f16_div, Op::bf16_add, Op::bf16_sub,
                Op::bf16_mul, Op::bf16_div}) {
    INFO(op_info(op).name);
    const OpReport r = compare_op(*b, op, Coverage::sample, 2);
    CHECK(r.mismatches > 0);  // the sample contains NaN operands
    for (const auto& c : r.classes) {
      INFO(diff_id(c.diff));
      CHECK((c.diff == Diff::nan_sign || c.diff == Diff::nan_payload));
      CHECK((c.hw_and == 0x7FFF && c.hw_or == 0x7FFF));
    }
  }
}

// ---- exhaustive (CTest label `exhaustive`) ----

TEST_CASE("exhaustive: AVX512-BF16 vcvtneps2bf16 over all 2^32 inputs",
          "[.][exhaustive][avx512bf16]") {
  const Backend* b = present("avx512bf16");
  if (!b) return;
  const OpReport r = compare_op(*b, Op::f32_to_bf16_rn, Coverage::exhaustive);
  CHECK(r.total == (uint64_t(1) << 32));
  // Two signs x fractions 0x8001..0x7FFFFF.
  CHECK(r.mismatches == 2 * (0x7FFFFFull - 0x8000ull));
  auto m = class_counts(r);
  CHECK(m[Diff::daz] == r.mismatches);
}

TEST_CASE("exhaustive: F16C vcvtps2ph in four directions, all 2^32 inputs",
          "[.][exhaustive][f16c]") {
  const Backend* b = present("f16c");
  if (!b) return;
  for (Op op : {Op::f32_to_f16_rn, Op::f32_to_f16_rz, Op::f32_to_f16_rd, Op::f32_to_f16_ru}) {
    const OpReport r = compare_op(*b, op, Coverage::exhaustive);
    INFO(op_info(op).name);
    CHECK(r.total == (uint64_t(1) << 32));
    CHECK(r.mismatches == 0);
  }
}

TEST_CASE("exhaustive: F16C+SSE fp16 addition, all 2^32 operand pairs",
          "[.][exhaustive][f16c]") {
  const Backend* b = present("f16c");
  if (!b) return;
  const OpReport r = compare_op(*b, Op::f16_add, Coverage::exhaustive);
  CHECK(r.total == (uint64_t(1) << 32));
  CHECK(r.mismatches == 0);
}

TEST_CASE("exhaustive: NVIDIA host __float2half_rn, all 2^32 inputs",
          "[.][exhaustive][nvidia]") {
  const Backend* b = present("nvidia-host");
  if (!b) return;
  const OpReport r = compare_op(*b, Op::f32_to_f16_rn, Coverage::exhaustive);
  // 2 x (2^23 - 1) NaN inputs; the library's NaN equals 0x7FFF (resp. 0xFFFF, sign only) for
  // the 2^14 positive (negative) NaNs whose fraction bits 21..13 are all ones.
  auto m = class_counts(r);
  CHECK(m[Diff::nan_sign] == 16384);
  CHECK(m[Diff::nan_payload] == 2 * ((1ull << 23) - 1) - 2 * 16384);
  CHECK(r.mismatches == 2 * ((1ull << 23) - 1) - 16384);
}

TEST_CASE("exhaustive: AVX512-FP16 fp16 multiplication (all 2^32 pairs) and 2^30 fma triples",
          "[.][exhaustive][avx512fp16]") {
  const Backend* b = present("avx512fp16");
  if (!b) return;
  OpReport r = compare_op(*b, Op::f16_mul, Coverage::exhaustive);
  CHECK(r.total == (uint64_t(1) << 32));
  CHECK(r.mismatches == 0);
  r = compare_op(*b, Op::f16_fma, Coverage::exhaustive);
  CHECK(r.total == (uint64_t(1) << 30));
  CHECK(r.mismatches == 0);
}
