// Fuzz harness: the training config loader, sim::parse_config (sim/src/config.cpp), and the
// memory estimate made from a config before a run allocates anything (estimate_memory,
// check_memory against 1 GiB). The input is the TOML text of a config.
#include "fuzz.hpp"
#include "halfway/sim/config.hpp"
#include "halfway/sim/memory.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace halfway;
  const std::string text = fuzz::bytes_of(data, size);
  fuzz::guarded([&] {
    const sim::TrainConfig c = sim::parse_config(text, fuzz::scratch_dir(), "config.toml");
    sim::check_memory(sim::estimate_memory(c), uint64_t(1) << 30);
  });
  return 0;
}
