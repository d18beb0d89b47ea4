/// \file configs.hpp
/// The training configs of the tests: a base per model kind as a file (tests/data/mlp.toml,
/// tests/data/transformer.toml) and the keys a test changes, so that each test states only
/// what differs. The same rules as tests/support/configs.py: a key of the base is replaced in
/// place (or removed, with std::nullopt), a new key goes at the end of its table, a new table
/// at the end of the text; "[table]" with std::nullopt removes a table with its keys. Values
/// are TOML text ("4", "\"relu\"", "[6, 16, 1]").
#pragma once

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "scratch.hpp"

#ifndef HALFWAY_TEST_DATA
#error "HALFWAY_TEST_DATA (the tests/data folder) is set by tests/CMakeLists.txt"
#endif

namespace halfway_test {

/// One change: "table.key" (the table may be dotted: "precision.ops.linear" is key linear of
/// [precision.ops]) and its TOML value, or std::nullopt to remove the key; "[table]" and
/// std::nullopt remove the table with its keys.
struct Key {
  std::string name;
  std::optional<std::string> value;
};

/// The text of tests/data/<name> (e.g. "amx/README.md").
inline std::string data_file(const std::string& name) {
  const std::string text = slurp(std::string(HALFWAY_TEST_DATA) + "/" + name);
  if (text.empty()) throw std::runtime_error("test data file missing or empty: " + name);
  return text;
}

/// tests/data/<kind>.toml with `keys` changed.
inline std::string config(const std::string& kind, const std::vector<Key>& keys = {}) {
  std::vector<std::string> lines;
  {
    const std::string text = data_file(kind + ".toml");
    std::string::size_type start = 0;
    while (start < text.size()) {
      const auto end = text.find('\n', start);
      lines.push_back(text.substr(start, end - start));
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  for (const Key& k : keys) {
    if (!k.name.empty() && k.name.front() == '[') {
      if (k.value) throw std::invalid_argument("a table is only removed: " + k.name);
      auto it = std::find(lines.begin(), lines.end(), k.name);
      if (it == lines.end()) throw std::invalid_argument("config table not in the base: " + k.name);
      auto end = it + 1;
      while (end != lines.end() && (end->empty() || end->front() != '[')) ++end;
      lines.erase(it, end);
      continue;
    }
    const auto dot = k.name.rfind('.');
    if (dot == std::string::npos) throw std::invalid_argument("config key without a table: " + k.name);
    const std::string header = "[" + k.name.substr(0, dot) + "]", key = k.name.substr(dot + 1);
    // The table's lines: after its header, up to the next header.
    bool found = false;
    std::size_t begin = lines.size(), end = lines.size();
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (lines[i] == header) {
        found = true;
        begin = i + 1;
        end = begin;
        while (end < lines.size() && (lines[end].empty() || lines[end][0] != '[')) ++end;
        break;
      }
    }
    std::size_t at = end;
    for (std::size_t i = begin; i < end; ++i)
      if (lines[i].rfind(key + " = ", 0) == 0) at = i;
    if (at < end) {
      if (k.value) lines[at] = key + " = " + *k.value;
      else lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(at));
    } else if (k.value) {
      if (!found) {
        lines.push_back(header);
        lines.push_back(key + " = " + *k.value);
      } else {
        lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(end), key + " = " + *k.value);
      }
    } else {
      throw std::invalid_argument("config key to remove is not in the base: " + k.name);
    }
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace halfway_test
