// Fuzz harness: the sweep loader, load_sweep (tools/halfway/sweep.hpp), which expands a sweep
// file into runs and checks every run's config. The input is the sweep file; it sits in a
// folder that also holds a valid config, base.toml, for `base = "base.toml"`.
#include "configs.hpp"
#include "fuzz.hpp"
#include "sweep.hpp"

namespace {

// A valid config for sweep files that name base = "base.toml".
std::string base_config() {
  return halfway_test::config(
      "mlp", {{"model.layers", "[2, 4, 1]"}, {"model.activation", "\"tanh\""}, {"data.n", "64"},
              {"data.batch_size", "16"}, {"optimizer.kind", "\"sgd\""}, {"optimizer.lr", "0.05"},
              {"scaler.kind", "\"static\""}, {"scaler.scale", "1024.0"}, {"run.steps", "5"}});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace halfway;
  static const bool base_written = (fuzz::scratch_write("base.toml", base_config()), true);
  (void)base_written;
  const std::string path = fuzz::scratch_write("sweep.toml", fuzz::bytes_of(data, size));
  fuzz::guarded([&] { (void)cli::load_sweep(path); });
  return 0;
}
