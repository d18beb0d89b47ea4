/// \file format.hpp
/// A floating-point format is data, not a type: exponent and fraction widths, the bias, and how
/// the format treats subnormals, infinities/NaNs and overflow. Every routine in the library takes
/// a `Format` by value and works on raw encodings held in the low bits of a `uint32_t`.
///
///     halfway::Format f = halfway::formats::e4m3;   // OCP e4m3fn
///     f.overflow = halfway::Overflow::saturate;     // __NV_SATFINITE behaviour
#pragma once

#include "halfway/config.hpp"

namespace halfway {

/// How the all-ones exponent and the NaN/infinity encodings are used.
enum class Specials : uint8_t {
  ieee,  ///< exponent all ones: infinity (fraction 0) or NaN; quiet bit is the top fraction bit
  fn,    ///< OCP "fn": no infinity; only S.1…1.1…1 is NaN (e4m3fn, e8m0)
  fnuz,  ///< no infinity, no negative zero; the single NaN is 1.0…0.0…0 (0x80 for 8 bits)
  none,  ///< every encoding is finite (OCP MX fp6/fp4)
};

/// What a result beyond the largest finite value becomes when rounding says "infinity".
enum class Overflow : uint8_t {
  infinity,  ///< IEEE: ±inf (only for Specials::ieee)
  saturate,  ///< ±max finite (NVIDIA __NV_SATFINITE)
  nan,       ///< NaN (e4m3fn under __NV_NOSAT, the fnuz formats)
};

struct Format {
  uint8_t exp_bits = 5;    ///< 1..8
  uint8_t frac_bits = 10;  ///< 0..23 (stored fraction bits, without the hidden bit)
  int16_t bias = 15;
  Specials specials = Specials::ieee;
  Overflow overflow = Overflow::infinity;
  bool ftz = false;        ///< flush tiny results to zero (sign kept), raising underflow|inexact
  bool daz = false;        ///< treat subnormal inputs as zero
  bool is_signed = true;   ///< false only for unsigned scale formats (e8m0)
  bool has_zero = true;    ///< false for e8m0: exponent field 0 is a normal power of two

  HALFWAY_HD constexpr int nbits() const { return int(is_signed) + exp_bits + frac_bits; }
  HALFWAY_HD constexpr int precision() const { return frac_bits + 1; }
  HALFWAY_HD constexpr uint32_t mag_mask() const { return (uint32_t(1) << (exp_bits + frac_bits)) - 1; }
  HALFWAY_HD constexpr uint32_t sign_bit() const {
    return is_signed ? uint32_t(1) << (exp_bits + frac_bits) : 0;
  }
  HALFWAY_HD constexpr uint32_t enc_mask() const {
    return nbits() == 32 ? 0xFFFFFFFFu : (uint32_t(1) << nbits()) - 1;
  }
  HALFWAY_HD constexpr uint32_t frac_mask() const { return (uint32_t(1) << frac_bits) - 1; }
  HALFWAY_HD constexpr uint32_t exp_field_max() const { return (uint32_t(1) << exp_bits) - 1; }
  /// Unbiased exponent of the smallest normal number.
  HALFWAY_HD constexpr int emin() const { return has_zero ? 1 - bias : -bias; }
  /// Magnitude encoding of the largest finite number: below infinity's (the top binade) for
  /// IEEE, below the NaN for fn, the top encoding otherwise. (A select rather than a switch:
  /// the scalar routines' fast paths read it on every call.)
  HALFWAY_HD constexpr uint32_t max_mag() const {
    return mag_mask() - (specials == Specials::ieee ? uint32_t(1) << frac_bits
                                                    : uint32_t(specials == Specials::fn));
  }
  /// Unbiased exponent of the largest finite number.
  HALFWAY_HD constexpr int emax() const {
    return int(max_mag() >> frac_bits) - bias;
  }
  HALFWAY_HD constexpr bool has_inf() const { return specials == Specials::ieee; }
  HALFWAY_HD constexpr bool has_nan() const { return specials != Specials::none; }
  HALFWAY_HD constexpr bool has_neg_zero() const { return is_signed && specials != Specials::fnuz; }
  HALFWAY_HD constexpr uint32_t inf_mag() const { return exp_field_max() << frac_bits; }
  /// Encoding of the quiet NaN this library produces for invalid operations. For IEEE formats
  /// this is x86's "real indefinite" (sign set, quiet bit set, zero payload: fp16 0xFE00,
  /// fp32 0xFFC00000) so results match x86 F16C/SSE and numpy; OCP formats use their only NaN
  /// with positive sign (e4m3 0x7F, as NVIDIA's conversions return).
  HALFWAY_HD constexpr uint32_t default_nan() const {
    switch (specials) {
      case Specials::ieee: return sign_bit() | inf_mag() | (uint32_t(1) << (frac_bits - 1));
      case Specials::fn: return mag_mask();
      case Specials::fnuz: return uint32_t(1) << (nbits() - 1);
      default: return max_mag();  // formats without NaN: +max (see docs/semantics.md)
    }
  }
  HALFWAY_HD constexpr bool operator==(const Format& o) const {
    return exp_bits == o.exp_bits && frac_bits == o.frac_bits && bias == o.bias &&
           specials == o.specials && overflow == o.overflow && ftz == o.ftz && daz == o.daz &&
           is_signed == o.is_signed && has_zero == o.has_zero;
  }
  HALFWAY_HD constexpr bool operator!=(const Format& o) const { return !(*this == o); }
};

namespace formats {
// clang-format off
inline constexpr Format fp16     {5, 10, 15, Specials::ieee, Overflow::infinity};
inline constexpr Format bf16     {8, 7, 127, Specials::ieee, Overflow::infinity};
inline constexpr Format tf32     {8, 10, 127, Specials::ieee, Overflow::infinity};
inline constexpr Format fp32     {8, 23, 127, Specials::ieee, Overflow::infinity};
inline constexpr Format e4m3     {4, 3, 7, Specials::fn, Overflow::nan};     ///< OCP e4m3fn, NOSAT
inline constexpr Format e5m2     {5, 2, 15, Specials::ieee, Overflow::infinity};
inline constexpr Format e4m3fnuz {4, 3, 8, Specials::fnuz, Overflow::nan};
inline constexpr Format e5m2fnuz {5, 2, 16, Specials::fnuz, Overflow::nan};
inline constexpr Format e2m3     {2, 3, 1, Specials::none, Overflow::saturate};
inline constexpr Format e3m2     {3, 2, 3, Specials::none, Overflow::saturate};
inline constexpr Format e2m1     {2, 1, 1, Specials::none, Overflow::saturate};
inline constexpr Format e8m0     {8, 0, 127, Specials::fn, Overflow::nan, false, false, false, false};
// clang-format on
}  // namespace formats

}  // namespace halfway
