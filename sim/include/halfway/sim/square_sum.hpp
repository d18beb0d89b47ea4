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

namespace halfway::sim {

/// The exact sum of the squares of binary32 values. v = m·2^(e-150) with an integer m < 2^24,
/// so v² = m²·2^(2e-300) with m² < 2^48: each biased exponent e has an integer bin, which can
/// take 2^80 values before it could wrap. value() is the exact sum rounded once to the nearest
/// double (ties to even), so it depends only on the multiset of values added.
class SquareSum {
 public:
  void add(float v);  ///< v finite
  SquareSum& operator+=(const SquareSum& o);
  /// Take out the squares of `o`'s values, which must all have been added here too.
  SquareSum& operator-=(const SquareSum& o);
  double value() const;
  bool operator==(const SquareSum&) const = default;

 private:
  std::array<unsigned __int128, 255> bins_{};
};

/// Add the rounding error of x[0..n) rounded to q[0..n) to `noise` (Σ(x − q)²) and `flushed`
/// (Σx² of the non-zero values rounded to zero), over the finite values within the format's
/// range (|x| <= fmax); the finite values beyond it are added to `beyond` when it is given
/// (events.overflow counts them). x − q is exact in binary32: q is x rounded to at most 24
/// bits, so both are multiples of x's binary32 ulp and |x − q| <= |x|.
void add_rounding_error(const float* x, const float* q, size_t n, float fmax, SquareSum& noise,
                        SquareSum& flushed, SquareSum* beyond = nullptr);

/// 10·log10(signal / noise): +inf when the rounding was exact (noise 0, signal > 0), NaN when
/// there is no signal.
double snr_db(const SquareSum& signal, const SquareSum& noise);
/// sqrt(flushed / signal): the part of the L2 norm lost to flushing (NaN without signal).
double flushed_l2_fraction(const SquareSum& signal, const SquareSum& flushed);

}  // namespace halfway::sim
