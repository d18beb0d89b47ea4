/// \file fma_cases.hpp
/// Deterministic hard cases for fused multiply-add in a 16-bit IEEE format (fp16, bf16), in
/// addition to the random triples of ops.hpp (fma_operands). Host only.
///  - ties: c + k·ulp(c)/2 for odd k, the exact sum lands on a midpoint (ties-to-even decides);
///  - cancellation: c = −round(a·b), the result is the rounding error of the product, exact;
///  - subnormal results: products below the smallest normal plus zero or a tiny c.
#pragma once

#include <array>
#include <cmath>
#include <vector>

#include "halfway/hw/ops.hpp"

namespace halfway::hw {

inline std::vector<std::array<uint32_t, 3>> fma_hard_cases(const Format& f) {
  std::vector<std::array<uint32_t, 3>> out;
  Env env;
  const uint32_t finite_max = f.max_mag();
  auto value = [&](uint32_t e) { return to_f64(f, e, env); };
  auto enc_exact = [&](double v, uint32_t& e) {
    Env x;
    e = from_f64(f, v, x);
    return x.flags == 0;
  };
  // Ties: every 4th positive normal c, k in {1, 3, 5, 7}, signs of a and c.
  for (uint32_t c = uint32_t(1) << f.frac_bits; c <= finite_max; c += 4) {
    const int ec = std::ilogb(value(c));
    const double half_ulp = std::ldexp(1.0, ec - f.frac_bits - 1);
    uint32_t b;
    if (!enc_exact(half_ulp, b)) continue;
    for (int k = 1; k <= 7; k += 2) {
      uint32_t a;
      if (!enc_exact(double(k), a)) continue;
      for (int s = 0; s < 4; ++s)
        out.push_back({(s & 1) ? (a | f.sign_bit()) : a, b, (s & 2) ? (c | f.sign_bit()) : c});
    }
  }
  // Cancellation: c = -(a*b rounded), for a over every 8th finite encoding and a few b.
  const uint32_t bs[] = {uint32_t(f.bias) << f.frac_bits | 1,                  // 1 + ulp
                         (uint32_t(f.bias + 1) << f.frac_bits) | f.frac_mask(),  // 4 - ulp
                         (uint32_t(f.bias - 3) << f.frac_bits) | (f.frac_mask() >> 1),
                         (uint32_t(f.bias + 2) << f.frac_bits) | 0x5 | (f.frac_mask() & 0x50)};
  for (uint32_t a = 1; a <= finite_max; a += 8)
    for (uint32_t b : bs)
      for (int s = 0; s < 2; ++s) {
        const uint32_t as = s ? (a | f.sign_bit()) : a;
        Env e;
        const uint32_t p = mul(f, as, b, e);
        if ((p & f.mag_mask()) > finite_max) continue;  // overflowed
        out.push_back({as, b, p ^ f.sign_bit()});
      }
  // Subnormal results: a near 2^(emin/2), b likewise, c in {0, ±1, ±3} (encodings).
  const int half = f.emin() / 2;
  for (int da = -3; da <= 3; ++da)
    for (uint32_t fa = 0; fa < 64; ++fa)
      for (uint32_t fb = 0; fb < 16; ++fb) {
        const int eb = f.emin() - (half + da) - int(fb % 4) - 1;
        const uint32_t a = detail::compose(f, fa & 1, uint32_t(half + da + f.bias), fa * 0x9E37u);
        if (eb + f.bias < 1) continue;
        const uint32_t b = detail::compose(f, (fb >> 2) & 1, uint32_t(eb + f.bias), fb * 0x7F4Au);
        const uint32_t cs[] = {0u, 1u, f.sign_bit() | 1u, 3u, f.sign_bit() | 3u};
        out.push_back({a, b, cs[(fa + fb) % 5]});
      }
  return out;
}

}  // namespace halfway::hw
