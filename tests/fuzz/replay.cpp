// Replays fuzz inputs without libFuzzer: feeds every file named on the command line, or found
// under a folder named there (recursively, in name order), to the harness's
// LLVMFuzzerTestOneInput, as the fuzzer would. The harness aborts on a finding; this adds a
// time limit per input and bounds memory, so that an input that once hung or exhausted memory
// fails here too. Exit 0 when every input passed, 1 when there was nothing to replay.
//
//     fuzz_replay_npz tests/fuzz/npz            # the seed corpus and crashes/
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

#if defined(__SANITIZE_ADDRESS__)
#define HALFWAY_REPLAY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HALFWAY_REPLAY_ASAN 1
#endif
#endif

// Under AddressSanitizer an address-space limit is impossible (its shadow memory is reserved
// up front): one allocation over 1 GiB or 2 GiB resident ends the run instead.
extern "C" const char* __asan_default_options() {
  return "max_allocation_size_mb=1024:hard_rss_limit_mb=2048";
}

namespace {

constexpr unsigned kSecondsPerInput = 60;
constexpr rlim_t kAddressSpace = rlim_t(4) << 30;  // without AddressSanitizer

char current[4096] = "";

void on_alarm(int) {
  static const char msg[] = "fuzz replay: time limit exceeded (a hang?) on ";
  (void)!write(2, msg, sizeof msg - 1);
  (void)!write(2, current, std::strlen(current));
  (void)!write(2, "\n", 1);
  _exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "fuzz replay: no such file or folder: %s\n", argv[i]);
      return 1;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "fuzz replay: no inputs (usage: fuzz_replay_HARNESS FILE_OR_DIR...)\n");
    return 1;
  }
#ifndef HALFWAY_REPLAY_ASAN
  const rlimit as{kAddressSpace, kAddressSpace};
  setrlimit(RLIMIT_AS, &as);
#endif
  signal(SIGALRM, on_alarm);
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "fuzz replay: cannot read %s\n", f.c_str());
      return 1;
    }
    std::snprintf(current, sizeof current, "%s", f.c_str());
    std::fprintf(stderr, "fuzz replay: %s (%zu bytes)\n", f.c_str(), bytes.size());
    alarm(kSecondsPerInput);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    alarm(0);
  }
  std::fprintf(stderr, "fuzz replay: %zu inputs passed\n", files.size());
  return 0;
}
