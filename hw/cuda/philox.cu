// cuRAND's Philox4x32-10 on the device against the library's stochastic-rounding bits: each
// thread runs curand_init(seed, subsequence, offset) and draws with curand(); every draw must
// equal halfway::sr_bits(seed, subsequence, offset + k), computed both in the same kernel and
// on the host by the library. Exit 0 when all agree, 1 otherwise, 77 without a GPU.
// `--out FILE`: also a JSON report (the GPU campaign's part "philox"); `--budget` is ignored
// (the run takes well under a second).
#include <curand_kernel.h>

#include <cstdio>
#include <vector>

#include "gpu_common.cuh"
#include "halfway/env.hpp"
#include "halfway/hw/json_out.hpp"

namespace {

constexpr int kThreads = 4096;  // subsequences per case
constexpr int kDraws = 64;      // draws per thread

__global__ void draw(uint64_t seed, uint64_t subsequence, uint64_t offset, uint32_t* out,
                     unsigned long long* mismatches) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= kThreads) return;
  curandStatePhilox4_32_10_t st;
  curand_init(seed, subsequence + uint64_t(t), offset, &st);
  for (int k = 0; k < kDraws; ++k) {
    const uint32_t v = curand(&st);
    out[size_t(t) * kDraws + size_t(k)] = v;
    if (v != halfway::sr_bits(seed, subsequence + uint64_t(t), offset + uint64_t(k)))
      atomicAdd(mismatches, 1ull);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using halfway::hw::Report;
  using halfway::hw::report;
  using halfway::hw::strf;
  halfway::gpu::require_device_or_skip();
  report().open(halfway::gpu::arg(argc, argv, "--out", ""), "philox");
  report().set("device", halfway::gpu::device_json(halfway::gpu::device_info()));
  report().set("build", halfway::gpu::build_json());
  struct Case {
    uint64_t seed, subsequence, offset;
  };
  // Offsets not a multiple of 4, counters past 2^32 and 2^64 words, large subsequences.
  const Case cases[] = {{0, 0, 0},
                        {20240601, 1, 3},
                        {0xFEDCBA9876543210ull, uint64_t(1) << 40, (uint64_t(1) << 34) - 6},
                        {~0ull, ~0ull - kThreads, (uint64_t(1) << 62) + 1}};
  halfway::gpu::DeviceBuffer<uint32_t> out(size_t(kThreads) * kDraws);
  halfway::gpu::DeviceBuffer<unsigned long long> bad(1);
  std::vector<uint32_t> host(size_t(kThreads) * kDraws);
  unsigned long long total_device = 0, total_host = 0;
  for (const Case& c : cases) {
    HW_CUDA_CHECK(cudaMemset(bad.get(), 0, sizeof(unsigned long long)));
    draw<<<kThreads / 256, 256>>>(c.seed, c.subsequence, c.offset, out.get(), bad.get());
    HW_CUDA_CHECK_LAUNCH("draw");
    unsigned long long device_bad = 0, host_bad = 0;
    bad.download(&device_bad, 1);
    out.download(host.data(), host.size());
    for (int t = 0; t < kThreads; ++t)
      for (int k = 0; k < kDraws; ++k)
        host_bad += host[size_t(t) * kDraws + size_t(k)] !=
                    halfway::sr_bits(c.seed, c.subsequence + uint64_t(t), c.offset + uint64_t(k));
    std::printf("seed %llu subsequence %llu.. offset %llu: %d draws, %llu differ from sr_bits on "
                "the device, %llu on the host\n",
                (unsigned long long)c.seed, (unsigned long long)c.subsequence,
                (unsigned long long)c.offset, kThreads * kDraws, device_bad, host_bad);
    total_device += device_bad;
    total_host += host_bad;
    report().append("cases", strf("{\"seed\": \"%llu\", \"subsequence\": \"%llu\", \"offset\": "
                                  "\"%llu\", \"draws\": %d, \"device_mismatches\": %llu, "
                                  "\"host_mismatches\": %llu}",
                                  (unsigned long long)c.seed, (unsigned long long)c.subsequence,
                                  (unsigned long long)c.offset, kThreads * kDraws, device_bad,
                                  host_bad));
  }
  report().set("status", Report::quote("complete"));
  report().save();
  return total_device == 0 && total_host == 0 ? 0 : 1;
}
