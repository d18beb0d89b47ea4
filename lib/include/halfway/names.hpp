/// \file names.hpp
/// Names of formats and rounding directions, as users type them on the command line and in
/// configs. Host only.
///
///     Format f = halfway::parse_format("e4m3:sat");       // OCP e4m3fn, saturating
///     Format g = halfway::parse_format("e5m10:bias=14:ftz");
///     Rounding r = halfway::parse_rounding("rtz");         // == Rounding::minMag
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "halfway/env.hpp"
#include "halfway/format.hpp"

namespace halfway {

/// Thrown for any user-facing input error: the message is one line, ready to print.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parse a format: a preset (fp16 bf16 tf32 fp32 e4m3 e5m2 e4m3fnuz e5m2fnuz e2m3 e3m2 e2m1
/// e8m0, plus the aliases e4m3fn, half, bfloat16, float32, fp8_e4m3, ...) or a custom `eXmY`,
/// followed by `:`-separated options: `bias=N`, `ieee|fn|fnuz|nospecials`,
/// `inf|sat|satfinite|nosat|overflow_nan`, `ftz`, `daz`, `gradual`, `unsigned`.
/// Throws InputError with a one-line message for anything unknown or impossible.
Format parse_format(std::string_view text);

/// Check that a format descriptor is supported; throws InputError explaining why not.
void validate(const Format& f);

/// Canonical name of a format: the preset name when it is one, else `eXmY` with the options
/// that differ from the IEEE-like default. `parse_format(format_name(f)) == f`.
std::string format_name(const Format& f);

/// Names of the presets, in the order `halfway info` lists them.
const std::vector<std::string>& preset_names();

/// TestFloat names (near_even, near_maxMag, minMag, min, max, odd, stochastic) and the short
/// aliases rne rna rtz rd ru rto sr.
Rounding parse_rounding(std::string_view text);
const char* rounding_name(Rounding r);

/// "inexact|underflow" style list of the set flags, "-" when none.
std::string flags_name(uint8_t flags);

const char* specials_name(Specials s);
const char* overflow_name(Overflow o);

}  // namespace halfway
