// Parsing decimal and hex-float numbers for the CLI without double rounding.
#pragma once

#include <string>

namespace halfway::cli {

/// Parse a decimal or C99 hex-float string ("0.1", "-1e-8", "0x1.8p-3", "inf", "nan") into the
/// binary64 value rounded *to odd*: the truncation toward zero, with its last bit set when the
/// string was not exactly representable. Rounding that double into any format of precision
/// <= 51 bits then gives the correctly rounded result of the decimal string in every rounding
/// direction (Boldo & Melquiond), so "halfway round 0.1" never double-rounds. Throws InputError
/// on anything that is not a complete number.
double parse_value_round_to_odd(const std::string& text);

}  // namespace halfway::cli
