/// \file scratch.hpp
/// Files for the simulator's C++ tests: a fresh folder per test, process and name, and a whole
/// file read back as bytes.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace halfway_test {

/// An empty folder TMP/halfway_test_<suite>_<pid>_<name> (what was there before is removed).
inline std::filesystem::path scratch_dir(const std::string& suite, const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() /
      ("halfway_test_" + suite + "_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

/// The bytes of a file ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace halfway_test
