/// \file square_sum.hpp
/// Exact sums of squares of binary32 values (SquareSum), and the rounding error of a tensor
/// measured with them: the signal Σx², the error Σ(x − q)² of its rounding q and Σx² of the
/// values flushed to zero, from which the SNR and the flushed part of the L2 norm follow. The
/// sums are exact, so they depend only on the multiset of values, never on how a tensor is
/// split into chunks or threads. Shared by the tracer (trace.csv of `halfway train` and
/// `halfway.torch.emulate`) and the analyzer (`halfway analyze`, `halfway.torch.trace`).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace halfway::sim {

/// The exact sum of the squares of binary32 values. v = m·2^(e-150) with an integer m < 2^24,
/// so v² = m²·2^(2e-300) with m² < 2^48: each biased exponent e has an integer bin, which can
/// take 2^80 values before it could wrap. value() is the exact sum rounded once to the nearest
/// double (ties to even), so it depends only on the multiset of values added.
class SquareSum {
 public:
  void add(float v) {  ///< v finite
    const uint32_t b = abs_bits(v);
    bins_[bin(b)] += static_cast<unsigned __int128>(significand_square(b));
  }
  /// How a value is split into its bin and its square there (also add_rounding_error's
  /// vectorised split): |v|'s bits, their biased exponent, and m² for the 24-bit significand
  /// m (a subnormal, e = 0, is m·2^-149, the same scale as e = 1).
  static uint32_t abs_bits(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b & 0x7FFFFFFFu;
  }
  static uint32_t bin(uint32_t abs_bits) { return abs_bits >> 23; }
  static uint64_t significand_square(uint32_t abs_bits) {
    const uint64_t m = bin(abs_bits) ? (abs_bits & 0x7FFFFFu) | 0x800000u : abs_bits;
    return m * m;
  }
  /// Add partial sums kept in 64 bits: bins[e] is Σm² of values of biased exponent e (at most
  /// 2^16 of them, so that it cannot wrap). add_rounding_error's inner loop.
  void add_bins(const uint64_t* bins);
  SquareSum& operator+=(const SquareSum& o);
  /// Take out the squares of `o`'s values, which must all have been added here too.
  SquareSum& operator-=(const SquareSum& o);
  double value() const;
  bool operator==(const SquareSum&) const = default;

 private:
  std::array<unsigned __int128, 255> bins_{};
};

/// Add the rounding error of x[0..n) rounded to q[0..n) to `noise` (Σ(x − q)²) and `flushed`
/// (Σx² of the non-zero values rounded to zero), and Σx² to `signal` when it is given, over
/// the finite values within the format's range (|x| <= fmax); the finite values beyond it are
/// added to `beyond` when it is given (events.overflow counts them). x − q is exact in
/// binary32: q is x rounded to at most 24 bits, so both are multiples of x's binary32 ulp and
/// |x − q| <= |x|.
void add_rounding_error(const float* x, const float* q, size_t n, float fmax, SquareSum& noise,
                        SquareSum& flushed, SquareSum* beyond = nullptr,
                        SquareSum* signal = nullptr);

/// 10·log10(signal / noise): +inf when the rounding was exact (noise 0, signal > 0), NaN when
/// there is no signal.
double snr_db(const SquareSum& signal, const SquareSum& noise);
/// sqrt(flushed / signal): the part of the L2 norm lost to flushing (NaN without signal).
double flushed_l2_fraction(const SquareSum& signal, const SquareSum& flushed);

}  // namespace halfway::sim
