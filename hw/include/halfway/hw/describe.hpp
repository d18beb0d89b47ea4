/// \file describe.hpp
/// Words for what diff.hpp counts: one-line descriptions of difference classes, encodings in
/// hex at their format's width. Host only; shared by `halfway hw-report` and the GPU campaign.
///
///     describe(Diff::nan_payload, op_info(Op::f16_add), stats)  // "NaN payload canonicalized to 0x7FFF"
#pragma once

#include <cstdio>
#include <string>

#include "halfway/hw/diff.hpp"
#include "halfway/hw/ops.hpp"

namespace halfway::hw {

/// Hex of an encoding at its format's full width ("7FFF").
inline std::string hex_enc(const Format& f, uint32_t enc) {
  char buf[16];
  const int digits = (f.nbits() + 3) / 4;
  std::snprintf(buf, sizeof buf, "%0*X", digits, enc & f.enc_mask());
  return buf;
}

/// One-line description of a class of differences, from what was observed.
inline std::string describe(Diff d, const OpInfo& info, const DiffStats& s) {
  const Format& out = info.out;
  switch (d) {
    case Diff::nan_sign:
      return (s.hw_or & out.sign_bit()) == 0 ? "NaN sign dropped" : "NaN sign differs";
    case Diff::nan_unquieted: return "signalling NaN not quieted";
    case Diff::nan_payload:
      if (s.hw_and == s.hw_or) return "NaN payload canonicalized to 0x" + hex_enc(out, s.hw_and);
      return "NaN payload differs";
    case Diff::nan_for_value: return "NaN where the reference gives a number";
    case Diff::value_for_nan: return "a number where the reference gives NaN";
    case Diff::daz: return std::string(info.in_name) + " subnormal inputs flushed to zero";
    case Diff::ftz: return std::string("tiny ") + info.out_name + " results flushed to zero";
    case Diff::inf_to_max: return "infinity given as the largest finite value";
    case Diff::zero_sign: return "sign of zero differs";
    case Diff::one_ulp: return "off by one ulp (rounding differs)";
    case Diff::several_ulp: return "off by more than one ulp";
    default: return "sign of a non-zero result differs";
  }
}

}  // namespace halfway::hw
