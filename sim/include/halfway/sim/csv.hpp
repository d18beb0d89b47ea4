/// \file csv.hpp
/// The text of the numbers in every CSV file a run writes (steps.csv, trace.csv,
/// scale_window.csv, blocks.csv, blocks_detail.csv, updates.csv, sweep.csv): std::to_chars,
/// locale-free and the shortest text that reads back to the same value of the value's own type
/// (a float column is written as a float).
#pragma once

#include <charconv>
#include <cmath>
#include <string>

namespace halfway::sim {

/// Append `v` (an integer, float or double) as std::to_chars writes it.
template <class T>
void append_value(std::string& line, T v) {
  char b[64];
  line.append(b, std::to_chars(b, b + sizeof b, v).ptr);
}

/// `v` as append_value writes it.
template <class T>
std::string number_text(T v) {
  std::string s;
  append_value(s, v);
  return s;
}

/// Append a binary64 that may be undefined: nothing for NaN (an empty cell), "inf" or "-inf",
/// else append_value.
inline void append_number(std::string& line, double v) {
  if (std::isnan(v)) return;
  if (std::isinf(v)) {
    line += v > 0 ? "inf" : "-inf";
    return;
  }
  append_value(line, v);
}

}  // namespace halfway::sim
