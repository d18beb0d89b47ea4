#include <unistd.h>

#include <filesystem>

#include "fuzz.hpp"

namespace halfway::fuzz {

const std::string& scratch_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    std::string t = (fs::temp_directory_path() / "halfway-fuzz-XXXXXX").string();
    if (!mkdtemp(t.data())) fail("mkdtemp", t.c_str());
    static std::string keep;
    keep = t;
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(keep, ec);
    });
    return t;
  }();
  return dir;
}

std::string scratch_write(const std::string& name, const std::string& bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  if (!out) fail("cannot write", path.c_str());
  return path;
}

}  // namespace halfway::fuzz
