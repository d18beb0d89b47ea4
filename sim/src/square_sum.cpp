#include "halfway/sim/square_sum.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace halfway::sim {

void SquareSum::add(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  b &= 0x7FFFFFFFu;
  const uint32_t e = b >> 23;
  // A subnormal (e = 0) is m·2^-149, the same scale as e = 1.
  const uint64_t m = e ? (b & 0x7FFFFFu) | 0x800000u : b;
  bins_[e] += static_cast<unsigned __int128>(m * m);
}

SquareSum& SquareSum::operator+=(const SquareSum& o) {
  for (size_t e = 0; e < bins_.size(); ++e) bins_[e] += o.bins_[e];
  return *this;
}

SquareSum& SquareSum::operator-=(const SquareSum& o) {
  for (size_t e = 0; e < bins_.size(); ++e) bins_[e] -= o.bins_[e];
  return *this;
}

double SquareSum::value() const {
  // The exact sum as a 704-bit integer T = S·2^298 (bin e adds bins_[e]·2^(2·max(e,1) - 2):
  // shifts up to 506, bins below 2^128, 255 of them), then rounded once to nearest even.
  constexpr int kLimbs = 11;
  uint64_t t[kLimbs] = {};
  for (size_t e = 0; e < bins_.size(); ++e) {
    if (!bins_[e]) continue;
    const int sh = 2 * int(e ? e : 1) - 2;
    const int li = sh / 64, bi = sh % 64;
    // bins_[e] << bi spans three limbs.
    const unsigned __int128 v = bins_[e];
    uint64_t part[3] = {uint64_t(v) << bi,
                        bi ? uint64_t(v >> (64 - bi)) : uint64_t(v >> 64),
                        bi ? uint64_t(v >> (128 - bi)) : 0};
    unsigned carry = 0;
    for (int k = li; k < kLimbs; ++k) {
      const uint64_t add = k - li < 3 ? part[k - li] : 0;
      if (k - li >= 3 && !carry) break;
      const unsigned __int128 sum = static_cast<unsigned __int128>(t[k]) + add + carry;
      t[k] = uint64_t(sum);
      carry = unsigned(sum >> 64);
    }
  }
  int top = -1;  // highest set bit
  for (int k = kLimbs - 1; k >= 0 && top < 0; --k)
    if (t[k]) top = 64 * k + 63 - __builtin_clzll(t[k]);
  if (top < 0) return 0.0;
  const auto bit = [&](int i) { return i >= 0 && ((t[i / 64] >> (i % 64)) & 1u); };
  const int low = std::max(0, top - 52);  // the 53 bits kept: [low, top]
  uint64_t mant = 0;
  for (int i = top; i >= low; --i) mant = (mant << 1) | uint64_t(bit(i));
  if (low > 0) {
    bool sticky = false;
    for (int i = 0; i < low - 1 && !sticky; ++i) sticky = bit(i);
    if (bit(low - 1) && (sticky || (mant & 1u))) ++mant;  // RNE; 2^53 is still exact
  }
  return std::ldexp(static_cast<double>(mant), low - 298);
}

void add_rounding_error(const float* x, const float* q, size_t n, float fmax, SquareSum& noise,
                        SquareSum& flushed, SquareSum* beyond) {
  // Only what the rounding changed adds to the sums.
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i], r = q[i];
    if (v == r) continue;  // exact (NaN never compares equal, and goes on to the next test)
    if (!(std::fabs(v) <= fmax)) {  // beyond the range, inf or NaN: not in the sums
      if (beyond && std::isfinite(v)) beyond->add(v);
      continue;
    }
    noise.add(v - r);
    if (r == 0.0f) flushed.add(v);  // v != r, so v is not zero
  }
}

double snr_db(const SquareSum& signal, const SquareSum& noise) {
  const double s = signal.value(), n = noise.value();
  if (s == 0) return std::numeric_limits<double>::quiet_NaN();
  if (n == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(s / n);
}

double flushed_l2_fraction(const SquareSum& signal, const SquareSum& flushed) {
  const double s = signal.value();
  if (s == 0) return std::numeric_limits<double>::quiet_NaN();
  return std::sqrt(flushed.value() / s);
}

}  // namespace halfway::sim
