// halfway against NVIDIA's own conversion and fp16 arithmetic code: the host (CPU) code paths
// of cuda_fp16.h, cuda_bf16.h and cuda_fp8.h, compiled here with the host C++ compiler.
//
//  - f32 -> fp16 under rn/rz/rd/ru (__float2half_rn/_rz/_rd/_ru)
//  - f32 -> bf16 under rn/rz/rd/ru (__float2bfloat16_rn/_rz/_rd/_ru)
//  - f32 -> e4m3 / e5m2 under __NV_SATFINITE and __NV_NOSAT (__nv_cvt_float_to_fp8, RNE)
//  - fp16 add/sub/mul/div (__hadd/__hsub/__hmul/__hdiv, RNE)
//
// Results are compared bit for bit. One difference is documented rather than copied
// (docs/conformance.md): NVIDIA's host code returns a canonical NaN (0x7FFF for fp16/bf16, 0x7F
// for fp8: sign and payload dropped) where halfway keeps sign and payload, so a NaN result is
// accepted when NVIDIA's is the canonical NaN and halfway's is a NaN, and these are counted.
// __NV_SATFINITE sends ±inf inputs to ±max in e5m2, and so does halfway's `e5m2:sat`. Every other
// difference fails the test.
//
// Default run: every f32 with its high 16 bits anything and its low 16 bits one of 16 patterns
// (every exponent, sign and the rounding/tie/sticky positions of every target), and every fp16
// a against 2048 b values spread over all exponents. The label `exhaustive` runs all 2^32
// f32 inputs and all 2^32 fp16 pairs.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "halfway/names.hpp"
#include "parallel.hpp"
#include "halfway/softfloat.hpp"

using halfway::Format;
using halfway::Rounding;

namespace {

uint16_t bits(__half h) {
  const __half_raw r = h;
  return r.x;
}
uint16_t bits(__nv_bfloat16 h) {
  const __nv_bfloat16_raw r = h;
  return r.x;
}
__half half_of(uint16_t x) {
  __half_raw r;
  r.x = x;
  return __half(r);
}
float f32_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

bool is_nan(const Format& f, uint32_t e) {
  halfway::Unpacked u = halfway::unpack(f, e);
  return u.cls == halfway::Class::qnan || u.cls == halfway::Class::snan;
}

/// Differences of one comparison, by class.
struct Diffs {
  std::string what;
  std::atomic<uint64_t> checked{0}, nan_payload{0}, other{0};
  std::mutex mu;
  std::vector<std::string> first;
  explicit Diffs(std::string w) : what(std::move(w)) {}

  void other_diff(const std::string& msg) {
    ++other;
    std::lock_guard<std::mutex> lock(mu);
    if (first.size() < 8) first.push_back(msg);
  }
  void report(bool expect_nan_diffs) {
    std::printf("  %-34s %12llu checked, %10llu NaN sign/payload (documented), %llu other\n",
                what.c_str(), (unsigned long long)checked.load(), (unsigned long long)nan_payload.load(),
                (unsigned long long)other.load());
    for (const auto& m : first) UNSCOPED_INFO(what << ": " << m);
    CHECK(other == 0);
    // The documented NaN difference must actually be seen where NaNs were converted, or this
    // comparison is not exercising what it claims to.
    if (expect_nan_diffs) CHECK(nan_payload > 0);
  }
};

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%X", v);
  return b;
}

/// Compare one result pair of format f. NVIDIA's NaN results are canonical: 0x7FFF for fp16
/// and bf16, 0x7F for e4m3 and e5m2 (cuda_fp8.hpp first replaces a NaN input by 0x7FFFFFFF).
inline void compare(Diffs& d, const Format& f, uint32_t input, uint32_t nv, uint32_t ours) {
  ++d.checked;
  if (nv == ours) return;
  const uint32_t canonical = f.nbits() == 16 ? 0x7FFFu : 0x7Fu;
  if (nv == canonical && is_nan(f, ours)) {
    ++d.nan_payload;
    return;
  }
  d.other_diff("input " + hex(input) + ": NVIDIA " + hex(nv) + " halfway " + hex(ours) + " (" +
               halfway::format_name(f) + ")");
}

/// Run body(lo, hi) over [0, n) split among the hardware threads.
template <class Body>
void parallel(uint64_t n, Body&& body) {
  halfway_test::parallel_chunks(n, 1ull << 20, body);
}

struct F32Conversions {
  Diffs to_fp16[4] = {Diffs("f32->fp16 rn"), Diffs("f32->fp16 rz"), Diffs("f32->fp16 rd"),
                   Diffs("f32->fp16 ru")};
  Diffs to_bf16[4] = {Diffs("f32->bf16 rn"), Diffs("f32->bf16 rz"), Diffs("f32->bf16 rd"),
                   Diffs("f32->bf16 ru")};
  Diffs fp8[4] = {Diffs("f32->e4m3 satfinite"), Diffs("f32->e4m3 nosat"),
                  Diffs("f32->e5m2 satfinite"), Diffs("f32->e5m2 nosat")};
  const Format e4m3_sat = halfway::parse_format("e4m3:satfinite");
  const Format e4m3_nosat = halfway::parse_format("e4m3:nosat");
  const Format e5m2_sat = halfway::parse_format("e5m2:satfinite");
  const Format e5m2_nosat = halfway::parse_format("e5m2:nosat");

  void run(uint32_t b) {
    const Format& fp16 = halfway::formats::fp16;
    const Format& bf16 = halfway::formats::bf16;
    const float x = f32_of(b);
    const Rounding modes[4] = {Rounding::near_even, Rounding::minMag, Rounding::min, Rounding::max};
    uint32_t ours[4], ours_b[4];
    for (int i = 0; i < 4; ++i) {
      halfway::Env e{modes[i]};
      ours[i] = halfway::from_f32_bits(fp16, b, e);
      halfway::Env eb{modes[i]};
      ours_b[i] = halfway::from_f32_bits(bf16, b, eb);
    }
    compare(to_fp16[0], fp16, b, bits(__float2half_rn(x)), ours[0]);
    compare(to_fp16[1], fp16, b, bits(__float2half_rz(x)), ours[1]);
    compare(to_fp16[2], fp16, b, bits(__float2half_rd(x)), ours[2]);
    compare(to_fp16[3], fp16, b, bits(__float2half_ru(x)), ours[3]);
    compare(to_bf16[0], bf16, b, bits(__float2bfloat16_rn(x)), ours_b[0]);
    compare(to_bf16[1], bf16, b, bits(__float2bfloat16_rz(x)), ours_b[1]);
    compare(to_bf16[2], bf16, b, bits(__float2bfloat16_rd(x)), ours_b[2]);
    compare(to_bf16[3], bf16, b, bits(__float2bfloat16_ru(x)), ours_b[3]);
    halfway::Env e1, e2, e3, e4;
    compare(fp8[0], e4m3_sat, b, __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3),
            halfway::from_f32_bits(e4m3_sat, b, e1));
    compare(fp8[1], e4m3_nosat, b, __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3),
            halfway::from_f32_bits(e4m3_nosat, b, e2));
    compare(fp8[2], e5m2_sat, b, __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2),
            halfway::from_f32_bits(e5m2_sat, b, e3));
    compare(fp8[3], e5m2_nosat, b, __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2),
            halfway::from_f32_bits(e5m2_nosat, b, e4));
  }
  void report() {
    for (auto& d : to_fp16) d.report(true);
    for (auto& d : to_bf16) d.report(true);
    for (auto& d : fp8) d.report(true);
  }
};

// The 16 low-half patterns: zero and all ones (exact/sticky extremes), the tie and the half-ulp
// neighbourhoods of fp16 normals (bit 12), fp8 e5m2 (bit 20 in the high half, so any high half
// combines with them), the fp16 last bit (bit 13), and a few irregular ones.
constexpr uint16_t kLow[16] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x3000, 0x5000,
                               0x7000, 0x7FFF, 0x8000, 0x8001, 0x9000, 0xEFFF, 0xF000, 0xFFFF};

struct HalfArithmetic {
  Diffs ops[4] = {Diffs("fp16 __hadd"), Diffs("fp16 __hsub"), Diffs("fp16 __hmul"),
                  Diffs("fp16 __hdiv")};
  void run(uint32_t a, uint32_t b) {
    const Format& fp16 = halfway::formats::fp16;
    const __half ha = half_of(uint16_t(a)), hb = half_of(uint16_t(b));
    halfway::Env e0, e1, e2, e3;
    compare(ops[0], fp16, a << 16 | b, bits(__hadd(ha, hb)), halfway::add(fp16, a, b, e0));
    compare(ops[1], fp16, a << 16 | b, bits(__hsub(ha, hb)), halfway::sub(fp16, a, b, e1));
    compare(ops[2], fp16, a << 16 | b, bits(__hmul(ha, hb)), halfway::mul(fp16, a, b, e2));
    compare(ops[3], fp16, a << 16 | b, bits(__hdiv(ha, hb)), halfway::div(fp16, a, b, e3));
  }
  void report() {
    for (auto& d : ops) d.report(true);
  }
};

}  // namespace

TEST_CASE("NVIDIA host conversions from f32: every high half x 16 low patterns", "[nvidia]") {
  F32Conversions c;
  parallel(uint64_t(1) << 20, [&](uint64_t lo, uint64_t hi) {
    for (uint64_t i = lo; i < hi; ++i) c.run(uint32_t((i >> 4) << 16 | kLow[i & 15]));
  });
  std::printf("NVIDIA cuda_fp16/bf16/fp8 host conversions, 2^20 f32 inputs:\n");
  c.report();
}

TEST_CASE("NVIDIA host fp16 arithmetic: every a x 2048 b", "[nvidia]") {
  HalfArithmetic h;
  // b: every 32nd encoding, offset so that the low fraction bits vary too (all signs, all
  // exponent fields including zeros/subnormals and inf/NaN).
  parallel(uint64_t(1) << 27, [&](uint64_t lo, uint64_t hi) {
    for (uint64_t i = lo; i < hi; ++i) {
      const uint32_t a = uint32_t(i >> 11), j = uint32_t(i & 2047);
      h.run(a, j * 32 + (j * 7 + (a >> 5)) % 32);
    }
  });
  std::printf("NVIDIA fp16 host arithmetic, 2^16 x 2^11 pairs:\n");
  h.report();
}

TEST_CASE("NVIDIA host conversions from f32: all 2^32 inputs", "[.][exhaustive]") {
  F32Conversions c;
  parallel(uint64_t(1) << 32, [&](uint64_t lo, uint64_t hi) {
    for (uint64_t i = lo; i < hi; ++i) c.run(uint32_t(i));
  });
  std::printf("NVIDIA cuda_fp16/bf16/fp8 host conversions, all 2^32 f32 inputs:\n");
  c.report();
}

TEST_CASE("NVIDIA host fp16 arithmetic: all 2^32 pairs", "[.][exhaustive]") {
  HalfArithmetic h;
  parallel(uint64_t(1) << 32, [&](uint64_t lo, uint64_t hi) {
    for (uint64_t i = lo; i < hi; ++i) h.run(uint32_t(i >> 16), uint32_t(i & 0xFFFF));
  });
  std::printf("NVIDIA fp16 host arithmetic, all 2^32 pairs:\n");
  h.report();
}
