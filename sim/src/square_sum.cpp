#include "halfway/sim/square_sum.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace halfway::sim {

void SquareSum::add_bins(const uint64_t* bins) {
  for (size_t e = 0; e < bins_.size(); ++e) bins_[e] += bins[e];
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

namespace {

constexpr size_t kBins = 255;
/// Values per chunk: a 64-bit bin holds 2^16 squares of 24-bit significands (each < 2^48).
constexpr size_t kChunk = size_t(1) << 16;

/// v² into its bin, as SquareSum::add does, in 64 bits.
inline void put(uint64_t* bins, float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  b &= 0x7FFFFFFFu;
  const uint32_t e = b >> 23;
  const uint64_t m = e ? (b & 0x7FFFFFu) | 0x800000u : b;
  bins[e] += m * m;
}

}  // namespace

void add_rounding_error(const float* x, const float* q, size_t n, float fmax, SquareSum& noise,
                        SquareSum& flushed, SquareSum* beyond, SquareSum* signal) {
  // Chunks of 2^16 values summed in 64-bit bins, then added to the exact sums: the same exact
  // result as SquareSum::add per value, with a cheaper inner loop (the tracer runs it on every
  // traced value).
  for (size_t lo = 0; lo < n; lo += kChunk) {
    const size_t hi = std::min(n, lo + kChunk);
    uint64_t sig[kBins] = {}, noi[kBins] = {}, fl[kBins] = {}, bey[kBins] = {};
    for (size_t i = lo; i < hi; ++i) {
      const float v = x[i], r = q[i];
      if (!(std::fabs(v) <= fmax)) {  // beyond the range, inf or NaN: not in the sums
        if (std::isfinite(v)) put(bey, v);
        continue;
      }
      put(sig, v);
      if (v == r) continue;  // exact: only what the rounding changed adds to the error sums
      put(noi, v - r);
      if (r == 0.0f) put(fl, v);  // v != r, so v is not zero
    }
    if (signal) signal->add_bins(sig);
    if (beyond) beyond->add_bins(bey);
    noise.add_bins(noi);
    flushed.add_bins(fl);
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
