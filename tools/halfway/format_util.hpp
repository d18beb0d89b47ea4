// Helpers shared by the CLI commands: printing encodings with their fields separated, exact
// decimal expansions of format values, hex widths.
#pragma once

#include <cstdint>
#include <string>

#include "halfway/format.hpp"

namespace halfway::cli {

/// "0 01111 0000000000": sign, exponent and fraction fields of an encoding.
std::string fields(const Format& f, uint32_t enc);
/// Hex digits needed for one encoding of `f` (TestFloat writes full width).
int hex_width(const Format& f);
/// Uppercase hex at full width, e.g. "3C00".
std::string hex(const Format& f, uint32_t enc);
/// Exact decimal expansion of a finite format value ("0.0999755859375"), "inf", "-inf", "nan".
std::string exact_decimal(const Format& f, uint32_t enc);
/// `s` safe to print on a terminal in one line: control characters (newline, escape, ...),
/// DEL, C1 controls and bytes that are not UTF-8 become \xHH (a backslash itself stays).
std::string printable(const std::string& s);
/// Shortest C99 hex-float of a finite value ("0x1.998p-4").
std::string hexfloat(double v);

}  // namespace halfway::cli
