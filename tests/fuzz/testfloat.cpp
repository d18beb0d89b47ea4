// Fuzz harness: `halfway testfloat`, the TestFloat filter (tools/halfway/cmd_testfloat.cpp),
// through its command entry point. The input's first line is the command line (FUNCTION and
// OPTIONS, e.g. "f16_mulAdd -rmin"), the rest is what the filter reads on standard input.
// Its output goes to /dev/null.
#include <cstdio>
#include <sstream>
#include <vector>

#include "commands.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace halfway;
  static const bool init = std::freopen("/dev/null", "w", stdout) != nullptr;
  if (!init) fuzz::fail("freopen", "/dev/null");
  const std::string text = fuzz::bytes_of(data, size);
  const size_t eol = text.find('\n');
  std::istringstream args(text.substr(0, eol));
  std::vector<std::string> words{"testfloat"};
  for (std::string w; args >> w;) words.push_back(w);
  if (words.size() > 16) return 0;
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);

  const std::string cases = eol == std::string::npos ? std::string() : text.substr(eol + 1);
  if (!std::freopen(fuzz::scratch_write("stdin", cases).c_str(), "r", stdin))
    fuzz::fail("freopen", "stdin");
  fuzz::guarded([&] { (void)cli::cmd_testfloat(int(words.size()), argv.data()); });
  return 0;
}
