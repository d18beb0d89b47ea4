// Fuzz harness: the .npz reader (sim/include/halfway/sim/npz.hpp). The input is an .npz file;
// the same bytes also go to the .npy parser directly. The values may take 256 MiB at most
// (the readers' own limit, 80% of the memory by default, is far above a fuzzer's).
#include "fuzz.hpp"
#include "halfway/sim/npz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace halfway;
  constexpr uint64_t kMaxBytes = uint64_t(256) << 20;
  const std::string bytes = fuzz::bytes_of(data, size);
  fuzz::guarded([&] { (void)sim::parse_npy(bytes, "input.npy", kMaxBytes); });
  const std::string path = fuzz::scratch_write("input.npz", bytes);
  fuzz::guarded([&] { (void)sim::read_npz(path, kMaxBytes); });
  return 0;
}
