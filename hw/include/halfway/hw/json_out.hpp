/// \file json_out.hpp
/// Writing the GPU campaign's JSON without a JSON library (the campaign builds with nvcc alone):
/// printf into strings, quoted strings, 64-bit hashes as hex strings, and a report document that
/// is rewritten after every finished check, through a temporary file and a rename, so that a run
/// killed by a timeout still leaves a complete, valid file with everything it finished. Host only.
#pragma once

#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace halfway::hw {

/// The report of one program: an ordered list of top-level keys with raw JSON values. `save()`
/// writes the whole document to `path` through a temporary file and a rename; when the write,
/// flush, close or rename fails it says so on stderr (one line) and exits with status 1, the
/// previous complete report left as it was.
class Report {
 public:
  void open(std::string path, std::string part) {
    path_ = std::move(path);
    set("part", quote(part));
    set("status", quote("running"));
    save();
  }
  void set(const std::string& key, const std::string& raw) {
    for (auto& kv : items_)
      if (kv.first == key) {
        kv.second = raw;
        return;
      }
    items_.emplace_back(key, raw);
  }
  /// Append a raw JSON object to the array `key` (created on first use).
  void append(const std::string& key, const std::string& raw) {
    for (auto& kv : arrays_)
      if (kv.first == key) {
        kv.second.push_back(raw);
        return;
      }
    arrays_.push_back({key, {raw}});
  }
  /// Remove the last element of the array `key` (to replace a provisional entry).
  void pop(const std::string& key) {
    for (auto& kv : arrays_)
      if (kv.first == key && !kv.second.empty()) kv.second.pop_back();
  }
  void save() const {
    if (path_.empty()) return;
    std::string doc = "{\n";
    bool first = true;
    for (const auto& kv : items_) {
      doc += (first ? "  \"" : ",\n  \"") + kv.first + "\": " + kv.second;
      first = false;
    }
    for (const auto& kv : arrays_) {
      doc += (first ? "  \"" : ",\n  \"") + kv.first + "\": [";
      for (size_t i = 0; i < kv.second.size(); ++i) doc += (i ? ",\n    " : "\n    ") + kv.second[i];
      doc += "\n  ]";
      first = false;
    }
    doc += "\n}\n";
    const std::string tmp = path_ + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    bool ok = f != nullptr;
    if (f) {
      ok = std::fwrite(doc.data(), 1, doc.size(), f) == doc.size();
      ok = std::fflush(f) == 0 && ok;
      ok = std::fclose(f) == 0 && ok;
    }
    const int err = errno;
    if (ok && std::rename(tmp.c_str(), path_.c_str()) == 0) return;
    // The last complete report stays in place; a program that cannot record its results stops.
    std::fprintf(stderr, "report: writing '%s' failed: %s\n", path_.c_str(),
                 std::strerror(ok ? errno : err));
    std::remove(tmp.c_str());
    std::exit(1);
  }
  static std::string quote(const std::string& s) {
    std::string o = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') o += '\\';
      if (c == '\n') {
        o += "\\n";
        continue;
      }
      o += c;
    }
    return o + "\"";
  }

 private:
  std::string path_;
  std::vector<std::pair<std::string, std::string>> items_;
  std::vector<std::pair<std::string, std::vector<std::string>>> arrays_;
};

inline Report& report() {
  static Report r;
  return r;
}

/// printf into a std::string.
inline std::string strf(const char* fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(&s[0], size_t(n) + 1, fmt, ap2);
  va_end(ap2);
  return s;
}
inline std::string hex64(uint64_t v) { return strf("\"0x%016" PRIX64 "\"", v); }

}  // namespace halfway::hw
