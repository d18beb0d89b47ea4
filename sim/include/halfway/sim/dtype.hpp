/// \file dtype.hpp
/// The logical dtype of a tensor: binary64, binary32, or any halfway low-precision `Format`.
/// A tensor of dtype D only ever holds values that are exactly representable in D: every op
/// result passes through one rounding into its dtype. They are stored as binary32 for every
/// dtype but fp64 (`Values`: every format halfway simulates fits binary32) and read as `double`.
///
///     DType h = parse_dtype("fp16");            // low-precision, Format fp16
///     DType w = widest(h, DType::f32());        // fp32 (PyTorch type promotion)
#pragma once

#include <string>
#include <string_view>

#include "halfway/format.hpp"

namespace halfway::sim {

struct DType {
  enum class Kind : uint8_t { f64, f32, low };
  Kind kind = Kind::f32;
  Format fmt = formats::fp32;  ///< the format of a `low` dtype (fp32 otherwise)

  static DType f64() { return {Kind::f64, formats::fp32}; }
  static DType f32() { return {Kind::f32, formats::fp32}; }
  /// A low-precision dtype; `formats::fp32` itself gives `f32()`.
  static DType low(const Format& f) {
    if (f == formats::fp32) return f32();
    return {Kind::low, f};
  }
  bool is_low() const { return kind == Kind::low; }
  bool is_f64() const { return kind == Kind::f64; }
  /// Storage width in bits (64, 32, or the format's width).
  int bits() const { return kind == Kind::f64 ? 64 : kind == Kind::f32 ? 32 : fmt.nbits(); }
  /// Significand precision in bits, hidden bit included.
  int precision() const { return kind == Kind::f64 ? 53 : kind == Kind::f32 ? 24 : fmt.precision(); }
  std::string name() const;
  bool operator==(const DType& o) const {
    return kind == o.kind && (kind != Kind::low || fmt == o.fmt);
  }
  bool operator!=(const DType& o) const { return !(*this == o); }
};

/// Throw InputError unless `d` can hold signed values and zero, as weights, activations and
/// optimizer states need: e8m0 (MX's scale format: no zero, no sign) cannot. `key` names the
/// config key in the message.
void check_value_dtype(const DType& d, const std::string& key);

/// "fp64"/"float64"/"double", "fp32"/"float32", or any format `parse_format` accepts.
/// Throws InputError for anything else.
DType parse_dtype(std::string_view text);

/// PyTorch's type promotion for floating types: fp64 > fp32 > low; two different low formats
/// promote to fp32 (as fp16 with bf16 does).
DType widest(const DType& a, const DType& b);

}  // namespace halfway::sim
