#include "halfway/sim/square_sum.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "halfway/config.hpp"

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
/// Values per pass of the vectorised half; bin kSkip (255, no biased exponent of a finite
/// value) takes what a sum leaves out.
constexpr size_t kPass = 2048;
constexpr uint8_t kSkip = 255;

/// For each value: the bin (biased exponent) and squared 24-bit significand of v for the
/// signal, of v − r for the noise, and whether it is flushed or beyond the range: branch-free,
/// so that the compiler vectorises it (SquareSum::add's split of a value, in bulk).
HALFWAY_VECTOR_CLONES void squares(const float* __restrict x, const float* __restrict q,
                                   size_t n, float fmax, uint8_t* __restrict es,
                                   uint64_t* __restrict ms, uint8_t* __restrict ed,
                                   uint64_t* __restrict md, uint8_t* __restrict flushed,
                                   uint8_t* __restrict beyond) {
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i], r = q[i];
    const uint32_t b = SquareSum::abs_bits(v), c = SquareSum::abs_bits(v - r);
    const bool in = std::fabs(v) <= fmax;  // finite, within the range (NaN: false)
    const bool changed = in & (v != r);
    es[i] = in ? uint8_t(SquareSum::bin(b)) : kSkip;
    ms[i] = SquareSum::significand_square(b);
    ed[i] = changed ? uint8_t(SquareSum::bin(c)) : kSkip;
    md[i] = SquareSum::significand_square(c);
    flushed[i] = changed & (r == 0.0f);           // v != r, so v is not zero
    beyond[i] = !in & (SquareSum::bin(b) != 255u);  // finite (not inf or NaN) beyond the range
  }
}

/// Flags per test of any_set.
constexpr size_t kFlagRun = 64;

/// Whether any of a[0..n) or b[0..n) is non-zero (n <= kFlagRun; read 8 bytes at a time).
bool any_set(const uint8_t* a, const uint8_t* b, size_t n) {
  if (n < kFlagRun) {
    uint8_t o = 0;
    for (size_t i = 0; i < n; ++i) o |= a[i] | b[i];
    return o != 0;
  }
  uint64_t o = 0;
  for (size_t i = 0; i < kFlagRun; i += 8) {
    uint64_t u, v;
    std::memcpy(&u, a + i, 8);
    std::memcpy(&v, b + i, 8);
    o |= u | v;
  }
  return o != 0;
}

}  // namespace

void add_rounding_error(const float* x, const float* q, size_t n, float fmax, SquareSum& noise,
                        SquareSum& flushed, SquareSum* beyond, SquareSum* signal) {
  // Chunks of 2^16 values summed in 64-bit bins, then added to the exact sums: the same exact
  // result as SquareSum::add per value. Per pass of 2048 values, a vectorised loop splits the
  // values and a scalar one adds them into their bins (the tracer runs it on every value).
  thread_local std::vector<uint8_t> es, ed, fl, by;
  thread_local std::vector<uint64_t> ms, md;
  es.resize(kPass), ed.resize(kPass), fl.resize(kPass), by.resize(kPass);
  ms.resize(kPass), md.resize(kPass);
  for (size_t lo = 0; lo < n; lo += kChunk) {
    const size_t hi = std::min(n, lo + kChunk);
    // Four copies of the signal and noise bins (element i into copy i % 4), so that
    // consecutive values in one bin (values cluster in a few) do not wait on each other.
    uint64_t sig4[4][kBins + 1] = {}, noi4[4][kBins + 1] = {};
    uint64_t flb[kBins + 1] = {}, bey[kBins + 1] = {};
    for (size_t p = lo; p < hi; p += kPass) {
      const size_t m = std::min(kPass, hi - p);
      squares(x + p, q + p, m, fmax, es.data(), ms.data(), ed.data(), md.data(), fl.data(),
              by.data());
      size_t i = 0;
      for (; i + 4 <= m; i += 4)
        for (size_t c = 0; c < 4; ++c) {
          sig4[c][es[i + c]] += ms[i + c];
          noi4[c][ed[i + c]] += md[i + c];
        }
      for (; i < m; ++i) {
        sig4[0][es[i]] += ms[i];
        noi4[0][ed[i]] += md[i];
      }
      // Flushed and beyond-the-range values are rare: 64 flags at a time are skipped unread
      // where none is set.
      for (size_t b0 = 0; b0 < m; b0 += kFlagRun) {
        const size_t b1 = std::min(m, b0 + kFlagRun);
        if (!any_set(fl.data() + b0, by.data() + b0, b1 - b0)) continue;
        for (size_t i = b0; i < b1; ++i) {
          if (fl[i]) flb[es[i]] += ms[i];
          if (by[i]) bey[SquareSum::bin(SquareSum::abs_bits(x[p + i]))] += ms[i];
        }
      }
    }
    uint64_t sig[kBins + 1], noi[kBins + 1];  // each below 2^64: at most kChunk values
    for (size_t b = 0; b <= kBins; ++b) {
      sig[b] = sig4[0][b] + sig4[1][b] + sig4[2][b] + sig4[3][b];
      noi[b] = noi4[0][b] + noi4[1][b] + noi4[2][b] + noi4[3][b];
    }
    if (signal) signal->add_bins(sig);  // bin kSkip (index 255) is left out: add_bins reads 255
    if (beyond) beyond->add_bins(bey);
    noise.add_bins(noi);
    flushed.add_bins(flb);
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
