/// \file diff.hpp
/// Classification of a difference between a hardware result and the library's reference, and
/// the per-check statistics built from it. The same code runs in the CUDA kernels (one result
/// per thread) and on the CPU (`halfway hw-report`), so both speak of the same classes.
///
///     Diff d = classify(out_format, hw, ref, any_subnormal_operand, ref_with_operands_flushed);
///     // d == Diff::nan_payload: both NaN, different bits
#pragma once

#include "halfway/config.hpp"
#include "halfway/format.hpp"

namespace halfway::hw {

/// Kinds of difference, tested in this order (the first that applies is the class).
enum class Diff : uint8_t {
  nan_sign,       ///< both NaN, only the sign bit differs
  nan_unquieted,  ///< both NaN, the hardware's lacks the quiet bit the reference has set
  nan_payload,    ///< both NaN, payload (and maybe sign) differs otherwise
  nan_for_value,  ///< hardware NaN, reference a number
  value_for_nan,  ///< hardware a number, reference NaN
  daz,            ///< an operand is subnormal and hardware equals the reference on flushed operands
  ftz,            ///< hardware ±0 where the reference is a non-zero value of magnitude <= min normal
  inf_to_max,     ///< reference ±inf, hardware ±max finite
  zero_sign,      ///< both zero, signs differ
  one_ulp,        ///< same sign, adjacent encodings
  several_ulp,    ///< same sign, further apart
  other,          ///< anything else (sign of a non-zero result differs)
  count
};
inline constexpr int kDiffCount = static_cast<int>(Diff::count);

/// Stable identifiers used in reports and JSON.
HALFWAY_INLINE const char* diff_id(Diff d) {
  switch (d) {
    case Diff::nan_sign: return "nan_sign";
    case Diff::nan_unquieted: return "nan_unquieted";
    case Diff::nan_payload: return "nan_payload";
    case Diff::nan_for_value: return "nan_for_value";
    case Diff::value_for_nan: return "value_for_nan";
    case Diff::daz: return "daz";
    case Diff::ftz: return "ftz";
    case Diff::inf_to_max: return "inf_to_max";
    case Diff::zero_sign: return "zero_sign";
    case Diff::one_ulp: return "one_ulp";
    case Diff::several_ulp: return "several_ulp";
    default: return "other";
  }
}

HALFWAY_INLINE bool is_nan_enc(const Format& f, uint32_t e) {
  const uint32_t mag = e & f.mag_mask();
  switch (f.specials) {
    case Specials::ieee: return mag > f.inf_mag();
    case Specials::fn: return mag == f.mag_mask();
    case Specials::fnuz: return (e & f.enc_mask()) == f.sign_bit();
    default: return false;
  }
}
HALFWAY_INLINE bool is_inf_enc(const Format& f, uint32_t e) {
  return f.has_inf() && (e & f.mag_mask()) == f.inf_mag();
}

/// Position of an encoding in the order of values, as a signed integer (±0 -> 0).
HALFWAY_INLINE int64_t ordinal(const Format& f, uint32_t e) {
  const int64_t mag = e & f.mag_mask();
  return (e & f.sign_bit()) ? -mag : mag;
}

/// Class of the difference between `hw` and `ref` (which must differ) for a result in `out`.
/// `subnormal_operand`: some operand was subnormal in its format; `ref_daz`: the reference
/// computed with subnormal operands read as zero.
HALFWAY_INLINE Diff classify(const Format& out, uint32_t hw, uint32_t ref, bool subnormal_operand,
                        uint32_t ref_daz) {
  const bool hn = is_nan_enc(out, hw), rn = is_nan_enc(out, ref);
  if (hn && rn) {
    if (((hw ^ ref) & out.enc_mask()) == out.sign_bit()) return Diff::nan_sign;
    const uint32_t quiet = out.specials == Specials::ieee ? uint32_t(1) << (out.frac_bits - 1) : 0;
    if (quiet && (hw & quiet) == 0 && (hw | quiet) == ref) return Diff::nan_unquieted;
    return Diff::nan_payload;
  }
  if (hn) return Diff::nan_for_value;
  if (rn) return Diff::value_for_nan;
  if (subnormal_operand && hw == ref_daz) return Diff::daz;
  const uint32_t hmag = hw & out.mag_mask(), rmag = ref & out.mag_mask();
  const bool hsign = (hw & out.sign_bit()) != 0, rsign = (ref & out.sign_bit()) != 0;
  if (hmag == 0 && rmag == 0) return Diff::zero_sign;
  if (hmag == 0 && hsign == rsign && rmag <= (uint32_t(1) << out.frac_bits)) return Diff::ftz;
  if (is_inf_enc(out, ref) && hmag == out.max_mag() && hsign == rsign) return Diff::inf_to_max;
  if (hsign != rsign) return Diff::other;
  const int64_t d = ordinal(out, hw) - ordinal(out, ref);
  return (d == 1 || d == -1) ? Diff::one_ulp : Diff::several_ulp;
}

/// Statistics of one class: how many, the smallest input index (the deterministic example),
/// and the AND / OR of the hardware results (equal when the hardware always returns the same
/// encoding, e.g. a canonical NaN).
struct DiffStats {
  uint64_t count = 0;
  uint64_t first_index = ~uint64_t(0);
  uint32_t hw_and = 0xFFFFFFFFu;
  uint32_t hw_or = 0;

  HALFWAY_HD void add(uint64_t index, uint32_t hw) {
    ++count;
    if (index < first_index) first_index = index;
    hw_and &= hw;
    hw_or |= hw;
  }
  HALFWAY_HD void merge(const DiffStats& o) {
    count += o.count;
    if (o.first_index < first_index) first_index = o.first_index;
    hw_and &= o.hw_and;
    hw_or |= o.hw_or;
  }
};

/// Statistics of a whole check: inputs covered, mismatches by class, fingerprints of the
/// hardware and the reference results (see hash.hpp).
struct CheckStats {
  uint64_t total = 0;
  uint64_t mismatches = 0;
  uint64_t hw_hash = 0;
  uint64_t ref_hash = 0;
  DiffStats cls[kDiffCount];

  HALFWAY_HD void merge(const CheckStats& o) {
    total += o.total;
    mismatches += o.mismatches;
    hw_hash += o.hw_hash;
    ref_hash += o.ref_hash;
    for (int i = 0; i < kDiffCount; ++i) cls[i].merge(o.cls[i]);
  }
};

}  // namespace halfway::hw
