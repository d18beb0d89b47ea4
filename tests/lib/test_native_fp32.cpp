// fp32 is itself a halfway format, so the hardware's binary32 arithmetic (x86 SSE, tininess
// after rounding) is an independent oracle for the whole round_pack path: results and all
// five flags, under the four IEEE directed/nearest modes, on random bit patterns that include
// NaNs, infinities, subnormals and near-cancellations.
#include <catch2/catch.hpp>

#include <cfenv>
#include <cmath>
#include <random>

#include "halfway/softfloat.hpp"

using namespace halfway;

namespace {

uint8_t host_flags(int fe) {
  return uint8_t((fe & FE_INEXACT ? flag::inexact : 0) | (fe & FE_UNDERFLOW ? flag::underflow : 0) |
                 (fe & FE_OVERFLOW ? flag::overflow : 0) | (fe & FE_DIVBYZERO ? flag::infinite : 0) |
                 (fe & FE_INVALID ? flag::invalid : 0));
}

bool same(uint32_t a, uint32_t b) {
  const bool na = (a & 0x7FFFFFFF) > 0x7F800000, nb = (b & 0x7FFFFFFF) > 0x7F800000;
  return na || nb ? na == nb : a == b;
}

}  // namespace

TEST_CASE("fp32 format matches native binary32 arithmetic and flags", "[native][fp32]") {
  const int modes[] = {FE_TONEAREST, FE_TOWARDZERO, FE_DOWNWARD, FE_UPWARD};
  const Rounding ours[] = {Rounding::near_even, Rounding::minMag, Rounding::min, Rounding::max};
  std::mt19937 gen(20261130);
  uint64_t mismatches = 0;
  for (int mi = 0; mi < 4; ++mi) {
    for (int i = 0; i < 200000; ++i) {
      uint32_t a = gen(), b = gen(), c = gen();
      if (i % 3 == 0) b = (a & 0xFF800000) | (b & 0x7FFFFF);  // near-cancellation, same binade
      if (i % 5 == 0) a &= 0x807FFFFF;                        // subnormal operand
      for (int op = 0; op < 5; ++op) {
        Env env{ours[mi]};
        uint32_t got;
        std::fesetround(modes[mi]);
        std::feclearexcept(FE_ALL_EXCEPT);
        volatile float x = bits_f32(a), y = bits_f32(b), z = bits_f32(c);
        float want;
        switch (op) {
          case 0: got = add(formats::fp32, a, b, env); want = x + y; break;
          case 1: got = mul(formats::fp32, a, b, env); want = x * y; break;
          case 2: got = div(formats::fp32, a, b, env); want = x / y; break;
          case 3: got = halfway::sqrt(formats::fp32, a, env); want = std::sqrt(float(x)); break;
          default: got = halfway::fma(formats::fp32, a, b, c, env); want = std::fmaf(x, y, z); break;
        }
        const uint8_t hf = host_flags(std::fetestexcept(FE_ALL_EXCEPT));
        std::fesetround(FE_TONEAREST);
        if (!same(got, f32_bits(want)) || hf != env.flags) {
          if (++mismatches < 5)
            FAIL_CHECK("mode " << mi << " op " << op << std::hex << " a=" << a << " b=" << b
                               << " c=" << c << " got " << got << " flags " << int(env.flags)
                               << " want " << f32_bits(want) << " flags " << int(hf));
        }
      }
    }
  }
  CHECK(mismatches == 0);
}
