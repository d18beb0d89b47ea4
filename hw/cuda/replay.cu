// Training-step replay on the GPU: the default MLP's forward and backward, loss scaling and
// Adam, computed with the CUDA intrinsics in the simulator's order (replay_mlp.cuh, shared with
// the CPU test), for every case of the input file. The report records, per case, step and
// tensor, the simulator's trace name, the dtype, the element count, a 64-bit FNV-1a hash of the
// encodings and the first encodings; `test_hw_replay_mlp --report` compares every hash with
// `halfway train` on the CPU.
//
//   halfway_gpu_replay --input FILE --out FILE [--budget SECONDS] [--steps N]
//
// Needs nvcc --extended-lambda (the element functions are __host__ __device__ lambdas).
// Memory is managed (cudaMallocManaged): the host reads each result after its kernel finished.
// Exit status: 0 every case ran, 1 the time budget cut it short, 2 bad arguments or input,
// 3 a CUDA error, 77 without a GPU.
#include <algorithm>
#include <fstream>
#include <iterator>

#include "gpu_common.cuh"
#include "replay_mlp.cuh"

using namespace halfway;
using namespace halfway::gpu;

namespace {

template <class F>
__global__ void for_each_kernel(int64_t n, F f) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) f(i);
}

/// The executor of the device build: one thread per element, synchronised after each launch.
struct DeviceExec {
  std::vector<void*> ptrs;
  int64_t launches = 0;
  ~DeviceExec() {
    for (void* p : ptrs) cudaFree(p);  // unchecked: a destructor cannot report (docs/hardware.md)
  }
  template <class T>
  T* alloc(size_t n) {
    void* p = nullptr;
    HW_CUDA_CHECK(cudaMallocManaged(&p, (n + 1) * sizeof(T)));
    ptrs.push_back(p);
    return static_cast<T*>(p);
  }
  template <class F>
  void for_each(int64_t n, F f) {
    if (n <= 0) return;
    const int threads = 128;
    const int64_t blocks = (n + threads - 1) / threads;
    for_each_kernel<<<unsigned(blocks), threads>>>(n, f);
    HW_CUDA_CHECK_LAUNCH(for_each_kernel);
    ++launches;
  }
};

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a != "--out" && a != "--budget" && a != "--input" && a != "--steps") || i + 1 >= argc) {
      std::fprintf(stderr,
                   "usage: halfway_gpu_replay --input FILE --out FILE [--budget SECONDS] [--steps N]\n");
      return 2;
    }
    ++i;
  }
  const std::string out = arg(argc, argv, "--out", "");
  const std::string input = arg(argc, argv, "--input", "");
  const double budget = std::atof(arg(argc, argv, "--budget", "1e9").c_str());
  const long long steps_arg = std::atoll(arg(argc, argv, "--steps", "0").c_str());
  if (input.empty()) {
    std::fprintf(stderr, "halfway_gpu_replay: --input FILE is required\n");
    return 2;
  }
  require_device_or_skip();
  const Clock clock(budget);
  report().open(out, "replay");
  const DeviceInfo dev = device_info();
  report().set("device", device_json(dev));

  std::ifstream f(input, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  replay::ReplayInput in;
  const std::string err = f ? replay::parse(bytes, in) : "cannot read the file";
  if (!err.empty()) {
    const std::string msg = "input " + input + ": " + err;
    std::fprintf(stderr, "halfway_gpu_replay: %s\n", msg.c_str());
    report().set("status", Report::quote("error"));
    report().set("error", Report::quote(msg));
    report().save();
    return 2;
  }
  const int64_t steps = steps_arg > 0 ? std::min<int64_t>(steps_arg, in.steps) : int64_t(in.steps);
  report().set("input", replay::input_json(bytes, in, steps));
  report().set("tensor_columns", replay::kTensorColumns);
  report().save();
  std::printf("training-step replay on %s: %zu cases x %lld steps\n", dev.prop.name, in.cases.size(),
              (long long)steps);
  bool complete = true;
  for (const replay::ReplayCase& cs : in.cases) {
    if (clock.expired()) {
      report().append("cases", strf("{\"case\": %s, \"skipped\": \"time budget\"}",
                                    Report::quote(cs.name).c_str()));
      report().save();
      complete = false;
      continue;
    }
    const Clock t(1e9);
    DeviceExec ex;
    const std::vector<replay::StepRecord> recs = replay::run_case(in, cs, ex, steps);
    size_t tensors = 0;
    for (const replay::StepRecord& r : recs) tensors += r.tensors.size();
    const std::string entry = replay::case_json(cs, recs, ex.launches, t.elapsed());
    report().append("cases", entry);
    report().save();
    std::printf("  %-14s %zu steps, %zu tensors, %lld launches (%.2f s)\n", cs.name.c_str(),
                recs.size(), tensors, (long long)ex.launches, t.elapsed());
  }
  report().set("status", Report::quote(complete ? "complete" : "partial"));
  report().set("seconds", strf("%.2f", clock.elapsed()));
  report().save();
  return complete ? 0 : 1;
}
