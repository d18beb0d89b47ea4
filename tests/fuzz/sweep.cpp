// Fuzz harness: the sweep loader, load_sweep (tools/halfway/sweep.hpp), which expands a sweep
// file into runs and checks every run's config. The input is the sweep file; it sits in a
// folder that also holds a valid config, base.toml, for `base = "base.toml"`.
#include "fuzz.hpp"
#include "sweep.hpp"

namespace {

const char* kBase = R"(# a valid config for sweep files that name base = "base.toml"
[model]
kind = "mlp"
layers = [2, 4, 1]
activation = "tanh"
[data]
synthetic = "regression"
n = 64
batch_size = 16
[loss]
kind = "mse"
[optimizer]
kind = "sgd"
lr = 0.05
[precision]
policy = "torch-cuda-fp16"
[scaler]
kind = "static"
scale = 1024.0
[run]
steps = 5
seed = 0
)";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace halfway;
  static const bool base_written = (fuzz::scratch_write("base.toml", kBase), true);
  (void)base_written;
  const std::string path = fuzz::scratch_write("sweep.toml", fuzz::bytes_of(data, size));
  fuzz::guarded([&] { (void)cli::load_sweep(path); });
  return 0;
}
