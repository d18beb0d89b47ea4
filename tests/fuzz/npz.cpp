// Fuzz harness: the .npz reader (sim/include/halfway/sim/npz.hpp). The input is an .npz file;
// the same bytes also go to the .npy parser directly, and to the streaming reader (with a sink
// that sums the raw bytes, so that every chunk is read). The values may take 256 MiB at most
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
  uint64_t sum = 0;
  fuzz::guarded([&] {
    sim::stream_npz(path, [&](const std::string&, const sim::NpyHeader& h, const std::string&) {
      return sim::NpyChunkFn([&sum, size = h.item_size](const unsigned char* raw, size_t n) {
        for (size_t i = 0; i < n * size_t(size); ++i) sum += raw[i];
      });
    });
  });
  return 0;
}
