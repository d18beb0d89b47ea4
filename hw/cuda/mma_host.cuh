// The host side of one tensor-core variant, shared by halfway_gpu_mma (mma.sync) and
// halfway_gpu_wgmma (wgmma.mma_async): upload the probe cases, run the kernel twice
// (repeatability), analyse the outputs (layout probe, fingerprints, presets, search) and append
// the variant's entry, labelled with the path that executed it, to the report.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "gpu_common.cuh"
#include "halfway/hw/mma_report.hpp"

namespace halfway::gpu {

/// `launch(a, b, c, d, cases)` runs the kernel on device buffers and checks the launch.
/// Returns false when the search ran out of time.
template <class Launch>
bool run_mma_variant(hw::mma::Variant v, const char* path, const Clock& clock, uint64_t seed,
                     unsigned threads, Launch&& launch) {
  using namespace hw::mma;
  const CaseSet cs = make_cases(v, seed);
  const Clock t(1e9);
  const size_t n = cs.cases(), outs = n * kM * kN;
  DeviceBuffer<uint32_t> da(cs.a.size()), db(cs.b.size()), dc(cs.c.size()), dd(outs);
  da.upload(cs.a.data(), cs.a.size());
  db.upload(cs.b.data(), cs.b.size());
  dc.upload(cs.c.data(), cs.c.size());
  std::vector<uint32_t> hw(outs), hw2(outs);
  for (int rep = 0; rep < 2; ++rep) {
    HW_CUDA_CHECK(cudaMemset(dd.get(), 0xFF, outs * sizeof(uint32_t)));
    launch(da.get(), db.get(), dc.get(), dd.get(), n);
    dd.download((rep ? hw2 : hw).data(), outs);
  }
  const bool repeatable = hw == hw2;
  const VariantRun run = analyze_variant(cs, hw, repeatable, threads, std::max(1.0, clock.left()),
                                         [&](const std::string& provisional) {
                                           report().append("variants", provisional);
                                           report().save();
                                         });
  if (run.layout_ok) report().pop("variants");  // replace the provisional entry
  std::string entry = run.json;
  entry.insert(entry.size() - 1, strf(", \"path\": \"%s\", \"seed\": %llu, \"seconds\": %.2f", path,
                                      (unsigned long long)seed, t.elapsed()));
  report().append("variants", entry);
  report().save();
  std::printf("  %-28s [%s] layout %s, repeatable %s, %zu candidates match%s (%.1f s)\n",
              cs.info.name, path, run.layout_ok ? "ok" : "WRONG (search skipped)",
              repeatable ? "yes" : "NO", run.matched, run.complete ? "" : " (search cut short)",
              t.elapsed());
  return run.complete;
}

}  // namespace halfway::gpu
