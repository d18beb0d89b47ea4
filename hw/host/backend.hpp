/// \file backend.hpp
/// Hardware backends available without a GPU: NVIDIA's host implementations from the CUDA
/// headers (compiled with the host compiler) and x86 instructions (F16C, AVX512-BF16,
/// AVX512-FP16) chosen at
/// run time by CPU features. Each backend evaluates some of the operations of ops.hpp on arrays.
///
///     const halfway::hw::Backend* b = halfway::hw::find_backend("f16c");
///     if (b && b->absent_reason().empty()) b->run(Op::f32_to_f16_rn, in, nullptr, out, n);
///
/// Setting the environment variable HALFWAY_HW_DISABLE to a comma-separated list of backend
/// names makes them report themselves absent (to exercise the fallbacks on a machine that has
/// every feature).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "halfway/hw/ops.hpp"

namespace halfway::hw {

class Backend {
 public:
  virtual ~Backend() = default;
  /// Name used on the command line ("nvidia-host", "f16c", "avx512bf16", "avx512fp16").
  virtual const char* name() const = 0;
  /// One line: what implementation this is.
  virtual const char* description() const = 0;
  /// Empty when the backend can run here; otherwise why not (one line).
  std::string absent_reason() const;
  /// Operations this backend implements.
  virtual std::vector<Op> ops() const = 0;
  /// out[i] = op(a[i], b[i], c[i]); operands and results are encodings in the low bits (b, c
  /// may be null for operations that do not use them). Only call when present.
  virtual void run(Op op, const uint32_t* a, const uint32_t* b, const uint32_t* c, uint32_t* out,
                   size_t n) const = 0;

 protected:
  /// Why the hardware or the implementation is missing, ignoring HALFWAY_HW_DISABLE.
  virtual std::string missing() const = 0;
};

/// Every backend known to this build, present here or not, in a fixed order.
const std::vector<const Backend*>& all_backends();
/// The backend called `name`, or null when no such backend exists in this build.
const Backend* find_backend(std::string_view name);
/// Does HALFWAY_HW_DISABLE name this backend?
bool disabled_by_env(std::string_view name);
/// Names of all backends known to any build (so "not compiled in" can be told from "unknown").
const std::vector<std::string>& known_backend_names();

// Constructors of the individual backends (each returns null when not compiled in).
const Backend* nvidia_host_backend();
const Backend* f16c_backend();
const Backend* avx512bf16_backend();
const Backend* avx512fp16_backend();

}  // namespace halfway::hw
