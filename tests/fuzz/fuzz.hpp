// Shared by the fuzz harnesses (tests/fuzz/*.cpp): what counts as a clean answer, and a scratch
// folder for parsers that read files.
//
// A harness passes an input when the parser returns, or when it throws an exception that the
// `halfway` command turns into one line and exit 2 (tools/halfway/main.cpp: std::runtime_error,
// InputError among them). Running out of memory is a finding, not an answer: std::bad_alloc
// aborts, as does a std::logic_error (std::invalid_argument from std::stoi, std::out_of_range,
// ...: exit 70, an internal error) and every other exception. With HALFWAY_FUZZ_STRICT=1 in the environment, only
// halfway::InputError (a message written for the user) passes: that finds the inputs that get
// a library's terse message ("stoi", "basic_string::substr") instead of one of ours. With
// HALFWAY_FUZZ_VERBOSE=1, each rejection is printed (to check that seeds are valid inputs).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <new>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include "halfway/names.hpp"

namespace halfway::fuzz {

[[noreturn]] inline void fail(const char* what, const char* detail) {
  std::fprintf(stderr, "fuzz harness: %s: %s\n", what, detail);
  std::fflush(stderr);
  std::abort();
}

/// Run `f`; return normally for a clean answer, abort for anything else.
template <class F>
void guarded(F&& f) {
  static const auto flag = [](const char* name) {
    const char* s = std::getenv(name);
    return s && *s && *s != '0';
  };
  static const bool strict = flag("HALFWAY_FUZZ_STRICT"), verbose = flag("HALFWAY_FUZZ_VERBOSE");
  try {
    f();
  } catch (const InputError& e) {
    if (verbose) std::fprintf(stderr, "  rejected: %s\n", e.what());
  } catch (const std::bad_alloc& e) {
    fail("out of memory (std::bad_alloc)", e.what());
  } catch (const std::runtime_error& e) {
    if (strict) fail(typeid(e).name(), e.what());
    if (verbose) std::fprintf(stderr, "  rejected (%s): %s\n", typeid(e).name(), e.what());
  } catch (const std::exception& e) {
    fail(typeid(e).name(), e.what());  // halfway would call it an internal error (exit 70)
  } catch (...) {
    fail("exception", "not derived from std::exception");
  }
}

/// A folder of this process's own, removed at exit.
const std::string& scratch_dir();

/// Write `bytes` to scratch_dir()/name and return the path.
std::string scratch_write(const std::string& name, const std::string& bytes);

inline std::string bytes_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace halfway::fuzz
