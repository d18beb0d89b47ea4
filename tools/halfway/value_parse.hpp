// Parsing decimal and hex-float numbers for the CLI without double rounding.
#pragma once

#include <cstdint>
#include <string>

namespace halfway::cli {

/// Parse a decimal or C99 hex-float string ("0.1", "-1e-8", "0x1.8p-3", "inf", "nan") into the
/// binary64 value rounded *to odd*: the truncation toward zero, with its last bit set when the
/// string was not exactly representable. Rounding that double into any format of precision
/// <= 51 bits then gives the correctly rounded result of the decimal string in every rounding
/// direction (Boldo & Melquiond), so "halfway round 0.1" never double-rounds. Throws InputError
/// on anything that is not a complete number.
double parse_value_round_to_odd(const std::string& text);

/// Parse an unsigned 64-bit integer, decimal or 0x-hex ("42", "0xff"), as a whole: no sign,
/// no spaces, nothing after it, at most 2^64 - 1. Throws InputError "bad `what` '...'" naming
/// the reason otherwise (strtoull alone would saturate a larger one to 2^64 - 1).
uint64_t parse_u64(const std::string& text, const std::string& what);

}  // namespace halfway::cli
