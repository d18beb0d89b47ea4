// Shared by the GPU validation programs: checked CUDA calls (the failing call, file and line are
// reported, and the partial report is written before exiting), "skipped: no CUDA device" with
// exit code 77, a small JSON report that is rewritten after every finished check (so a run
// killed by a timeout still leaves everything it finished), and a wall-clock deadline.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "halfway/hw/json_out.hpp"

namespace halfway::gpu {

using hw::hex64;
using hw::Report;
using hw::report;
using hw::strf;

[[noreturn]] inline void cuda_fail(const char* call, cudaError_t e, const char* file, int line) {
  const std::string msg = strf("CUDA error: %s returned %s (%s) at %s:%d", call,
                               cudaGetErrorName(e), cudaGetErrorString(e), file, line);
  std::fprintf(stderr, "%s\n", msg.c_str());
  report().set("status", Report::quote("error"));
  report().set("error", Report::quote(msg));
  report().save();
  std::exit(3);
}

#define HW_CUDA_CHECK(call)                                                       \
  do {                                                                            \
    const cudaError_t hw_err_ = (call);                                           \
    if (hw_err_ != cudaSuccess) ::halfway::gpu::cuda_fail(#call, hw_err_, __FILE__, __LINE__); \
  } while (0)

/// Checks a kernel launch (configuration errors) and, with `sync`, its execution.
#define HW_CUDA_CHECK_LAUNCH(what)                                                 \
  do {                                                                             \
    HW_CUDA_CHECK(cudaGetLastError());                                             \
    HW_CUDA_CHECK(cudaDeviceSynchronize());                                        \
  } while (0)

/// Exit 77 with "skipped: no CUDA device" when there is no GPU (CTest SKIP_RETURN_CODE): only
/// cudaErrorNoDevice (or a count of 0), or no CUDA driver installed at all (the runtime then
/// reports cudaErrorInsufficientDriver and cudaDriverGetVersion gives 0), means that. Any other
/// error (an installed driver older than this runtime needs, a broken installation) is a
/// failure: its name on stderr and exit 3, so a campaign never turns into "skipped" on a machine
/// that has a GPU.
inline void require_device_or_skip() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  int driver = -1;
  const bool no_driver = e == cudaErrorInsufficientDriver &&
                         cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0;
  if (e == cudaErrorNoDevice || no_driver || (e == cudaSuccess && n == 0)) {
    std::printf("skipped: no CUDA device (%s)\n",
                e == cudaSuccess ? "0 devices" : no_driver ? "no CUDA driver installed" : cudaGetErrorName(e));
    std::exit(77);
  }
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error: cudaGetDeviceCount returned %s (%s); driver version %d\n",
                 cudaGetErrorName(e), cudaGetErrorString(e), driver);
    std::exit(3);
  }
}

/// How this program was compiled: nvcc's version and the -fmad setting (scripts/gpu-validate
/// and hw/cuda/CMakeLists.txt define HALFWAY_FMAD to match the flag they pass).
#ifndef HALFWAY_FMAD
#define HALFWAY_FMAD "default (true)"
#endif
inline std::string build_json() {
#if defined(__CUDACC_VER_MAJOR__)
  const std::string nvcc = strf("%d.%d.%d", __CUDACC_VER_MAJOR__, __CUDACC_VER_MINOR__, __CUDACC_VER_BUILD__);
#else
  const std::string nvcc = "unknown";
#endif
  return strf("{\"nvcc\": \"%s\", \"fmad\": \"%s\"}", nvcc.c_str(), HALFWAY_FMAD);
}

struct DeviceInfo {
  cudaDeviceProp prop{};
  int driver = 0, runtime = 0;
  int sms = 0;
  int clock_khz = 0, memory_clock_khz = 0;  ///< maximum SM and memory clocks
};

inline DeviceInfo device_info() {
  DeviceInfo d;
  HW_CUDA_CHECK(cudaGetDeviceProperties(&d.prop, 0));
  HW_CUDA_CHECK(cudaDriverGetVersion(&d.driver));
  HW_CUDA_CHECK(cudaRuntimeGetVersion(&d.runtime));
  d.sms = d.prop.multiProcessorCount;
  HW_CUDA_CHECK(cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, 0));
  HW_CUDA_CHECK(cudaDeviceGetAttribute(&d.memory_clock_khz, cudaDevAttrMemoryClockRate, 0));
  return d;
}

inline std::string device_json(const DeviceInfo& d) {
  return strf("{\"name\": %s, \"compute_capability\": \"%d.%d\", \"sms\": %d, "
              "\"memory_gib\": %.1f, \"driver\": %d, \"runtime\": %d, \"clock_mhz\": %d, "
              "\"memory_clock_mhz\": %d, \"build\": %s}",
              Report::quote(d.prop.name).c_str(), d.prop.major, d.prop.minor, d.sms,
              double(d.prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), d.driver, d.runtime,
              d.clock_khz / 1000, d.memory_clock_khz / 1000, build_json().c_str());
}

/// Seconds since `start`, and a deadline that checks can consult between kernel launches.
class Clock {
 public:
  explicit Clock(double budget_s) : t0_(std::chrono::steady_clock::now()), budget_(budget_s) {}
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  bool expired() const { return elapsed() > budget_; }
  double left() const { return budget_ - elapsed(); }

 private:
  std::chrono::steady_clock::time_point t0_;
  double budget_;
};

/// `--name value` from argv, or `def`.
inline std::string arg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == name) return argv[i + 1];
  return def;
}

/// The options of the programs that run one kernel per variant (halfway_gpu_mma,
/// halfway_gpu_wgmma): --out FILE [--budget SECONDS] [--seed S] [--threads N].
struct VariantOptions {
  std::string out;
  double budget = 0;
  uint64_t seed = 0;
  unsigned threads = 0;  ///< host threads of the search (0 on the command line: all cores)
};

/// Parses the options; false, after the usage line on stderr, on an unknown one.
inline bool parse_variant_options(int argc, char** argv, const char* program, VariantOptions& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a != "--out" && a != "--budget" && a != "--seed" && a != "--threads") {
      std::fprintf(stderr, "usage: %s --out FILE [--budget SECONDS] [--seed S] [--threads N]\n", program);
      return false;
    }
    ++i;
  }
  o.out = arg(argc, argv, "--out", "");
  o.budget = std::atof(arg(argc, argv, "--budget", "1e9").c_str());
  o.seed = std::strtoull(arg(argc, argv, "--seed", "20240601").c_str(), nullptr, 10);
  o.threads = unsigned(std::atoi(arg(argc, argv, "--threads", "0").c_str()));
  if (o.threads == 0) o.threads = std::max(1u, std::thread::hardware_concurrency());
  return true;
}

/// Skips without a device, opens the report `name` at `out`, records the device in it and
/// prints "`title` on DEVICE".
inline DeviceInfo open_device_report(const std::string& out, const char* name, const char* title) {
  require_device_or_skip();
  report().open(out, name);
  const DeviceInfo dev = device_info();
  report().set("device", device_json(dev));
  report().save();
  std::printf("%s on %s\n", title, dev.prop.name);
  return dev;
}

/// Runs the variants one after another within the time budget: each needs the previous one's
/// time, so later ones are recorded as skipped once the budget is gone.
class VariantRuns {
 public:
  explicit VariantRuns(double budget_s) : clock_(budget_s) {}
  const Clock& clock() const { return clock_; }
  /// `fn()` (false: it ran out of time) unless the budget is gone.
  template <class F>
  void run(const char* name, F fn) {
    if (clock_.expired()) {
      report().append("variants", strf("{\"variant\": \"%s\", \"skipped\": \"time budget\"}", name));
      report().save();
      complete_ = false;
      return;
    }
    complete_ = fn() && complete_;
  }
  /// Records the status and the time; the exit code (0 complete, 1 partial).
  int finish() {
    report().set("status", Report::quote(complete_ ? "complete" : "partial"));
    report().set("seconds", strf("%.2f", clock_.elapsed()));
    report().save();
    return complete_ ? 0 : 1;
  }

 private:
  Clock clock_;
  bool complete_ = true;
};

/// Device buffer with checked allocation, freed on scope exit.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) { HW_CUDA_CHECK(cudaMalloc(&p_, n * sizeof(T) + 1)); }
  ~DeviceBuffer() { cudaFree(p_); }  // unchecked: a destructor cannot report (docs/hardware.md)
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  void upload(const T* h, size_t n) { HW_CUDA_CHECK(cudaMemcpy(p_, h, n * sizeof(T), cudaMemcpyHostToDevice)); }
  void download(T* h, size_t n) const { HW_CUDA_CHECK(cudaMemcpy(h, p_, n * sizeof(T), cudaMemcpyDeviceToHost)); }

 private:
  T* p_ = nullptr;
  size_t n_;
};

}  // namespace halfway::gpu
