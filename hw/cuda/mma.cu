// Tensor-core MMA on the GPU (PTX mma.sync through inline assembly) against the library's
// block-FMA accumulation models, and the search for the model parameters that reproduce the
// hardware bit for bit (mma_cases.hpp, mma_search.hpp).
//
//   halfway_gpu_mma --out FILE [--budget SECONDS] [--seed S] [--threads N]
//
// For each variant (fp16 -> fp32, fp16 -> fp16, bf16 -> fp32, e4m3 -> fp32, e5m2 -> fp32):
//  1. multiply every probe case on the tensor cores (one warp per m16n8kK case), twice;
//  2. check the layout probe (small integers: every model is exact) before trusting anything;
//  3. fingerprint the outputs of each family (the CPU replay recomputes them from a model);
//  4. search the candidate models; report every exact match, else the closest, and how the
//     published V100/A100/H100 parameter sets fare.
// Exit status: 0 when every variant ran, 1 when the budget cut the run short, 2 on bad
// arguments, 3 on a CUDA error, 77 without a GPU.
#include <cstring>
#include <thread>

#include "gpu_common.cuh"
#include "mma_host.cuh"

using namespace halfway;
using namespace halfway::hw;
using namespace halfway::hw::mma;
using namespace halfway::gpu;

namespace {

template <int V>
__global__ void mma_kernel(const uint32_t* A, const uint32_t* B, const uint32_t* C, uint32_t* D,
                           int ncases) {
  constexpr Variant v = static_cast<Variant>(V);
  constexpr int K = (v == Variant::e4m3_f32 || v == Variant::e5m2_f32) ? 32 : 16;
  const int warp = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31);
  if (warp >= ncases) return;  // whole warps only: blockDim.x is a multiple of 32
  const uint32_t* a = A + size_t(warp) * kM * K;
  const uint32_t* b = B + size_t(warp) * K * kN;
  const uint32_t* c = C + size_t(warp) * kM * kN;
  uint32_t* d = D + size_t(warp) * kM * kN;
  auto at_a = [&](RowCol p) { return a[p.row * K + p.col]; };
  auto at_b = [&](RowCol p) { return b[p.row * kN + p.col]; };
  auto at_c = [&](RowCol p) { return c[p.row * kN + p.col]; };
  uint32_t ra[4], rb[2];
  if constexpr (K == 16) {
    for (int r = 0; r < 4; ++r)
      ra[r] = (at_a(frag_a_k16(lane, 2 * r)) & 0xFFFFu) | (at_a(frag_a_k16(lane, 2 * r + 1)) << 16);
    for (int r = 0; r < 2; ++r)
      rb[r] = (at_b(frag_b_k16(lane, 2 * r)) & 0xFFFFu) | (at_b(frag_b_k16(lane, 2 * r + 1)) << 16);
  } else {
    for (int r = 0; r < 4; ++r) {
      ra[r] = 0;
      for (int j = 0; j < 4; ++j) ra[r] |= (at_a(frag_a_k32(lane, 4 * r + j)) & 0xFFu) << (8 * j);
    }
    for (int r = 0; r < 2; ++r) {
      rb[r] = 0;
      for (int j = 0; j < 4; ++j) rb[r] |= (at_b(frag_b_k32(lane, 4 * r + j)) & 0xFFu) << (8 * j);
    }
  }
  if constexpr (v == Variant::f16_f16) {
    uint32_t rc[2], rd[2];
    rc[0] = (at_c(frag_c(lane, 0)) & 0xFFFFu) | (at_c(frag_c(lane, 1)) << 16);
    rc[1] = (at_c(frag_c(lane, 2)) & 0xFFFFu) | (at_c(frag_c(lane, 3)) << 16);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, "
        "{%8,%9};\n"
        : "=r"(rd[0]), "=r"(rd[1])
        : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "r"(rc[0]),
          "r"(rc[1]));
    for (int i = 0; i < 4; ++i) {
      const RowCol p = frag_c(lane, i);
      d[p.row * kN + p.col] = (rd[i >> 1] >> (16 * (i & 1))) & 0xFFFFu;
    }
  } else {
    float rc[4], rd[4];
    for (int i = 0; i < 4; ++i) rc[i] = __uint_as_float(at_c(frag_c(lane, i)));
    if constexpr (v == Variant::f16_f32) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%10,%11,%12,%13};\n"
          : "=f"(rd[0]), "=f"(rd[1]), "=f"(rd[2]), "=f"(rd[3])
          : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(rc[0]),
            "f"(rc[1]), "f"(rc[2]), "f"(rc[3]));
    } else if constexpr (v == Variant::bf16_f32) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%10,%11,%12,%13};\n"
          : "=f"(rd[0]), "=f"(rd[1]), "=f"(rd[2]), "=f"(rd[3])
          : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(rc[0]),
            "f"(rc[1]), "f"(rc[2]), "f"(rc[3]));
    } else if constexpr (v == Variant::e4m3_f32) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
      // No fp8 MMA before sm_89 (the host skips these variants there); keeps other targets building.
      for (int i = 0; i < 4; ++i) rd[i] = __uint_as_float(0x7FFFFFFFu);
#else
      asm volatile(
          "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%10,%11,%12,%13};\n"
          : "=f"(rd[0]), "=f"(rd[1]), "=f"(rd[2]), "=f"(rd[3])
          : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(rc[0]),
            "f"(rc[1]), "f"(rc[2]), "f"(rc[3]));
#endif
    } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
      for (int i = 0; i < 4; ++i) rd[i] = __uint_as_float(0x7FFFFFFFu);
#else
      asm volatile(
          "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%10,%11,%12,%13};\n"
          : "=f"(rd[0]), "=f"(rd[1]), "=f"(rd[2]), "=f"(rd[3])
          : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(rc[0]),
            "f"(rc[1]), "f"(rc[2]), "f"(rc[3]));
#endif
    }
    for (int i = 0; i < 4; ++i) {
      const RowCol p = frag_c(lane, i);
      d[p.row * kN + p.col] = __float_as_uint(rd[i]);
    }
  }
}

/// What executes a variant's mma.sync on this GPU. Hopper (sm_90) has no fp8 mma.sync: ptxas
/// converts the e4m3/e5m2 fragments to fp16 and issues two fp16 HMMAs (the sm_90 kernel is
/// larger than the sm_89 one, where f16/bf16 kernels are the same size; NVIDIA/cutlass#1986),
/// so those results describe fp16 tensor-core arithmetic, not fp8. wgmma (halfway_gpu_wgmma)
/// is Hopper's native fp8 path.
const char* mma_path(Variant v, const DeviceInfo& dev) {
  const bool fp8 = v == Variant::e4m3_f32 || v == Variant::e5m2_f32;
  if (fp8 && dev.prop.major == 9) return "emulated (fp8→fp16 + HMMA)";
  return "native";
}

template <int V>
bool run_variant(const Clock& clock, uint64_t seed, unsigned threads, const DeviceInfo& dev) {
  const Variant v = static_cast<Variant>(V);
  return run_mma_variant(v, mma_path(v, dev), clock, seed, threads,
                         [](const uint32_t* a, const uint32_t* b, const uint32_t* c, uint32_t* d,
                            size_t n) {
                           const int threads_per_block = 128;
                           const int blocks = int((n * 32 + threads_per_block - 1) / threads_per_block);
                           mma_kernel<V><<<blocks, threads_per_block>>>(a, b, c, d, int(n));
                           HW_CUDA_CHECK_LAUNCH(mma_kernel);
                         });
}

}  // namespace

int main(int argc, char** argv) {
  VariantOptions o;
  if (!parse_variant_options(argc, argv, "halfway_gpu_mma", o)) return 2;
  const DeviceInfo dev = open_device_report(o.out, "mma", "mma.sync");
  VariantRuns runs(o.budget);
  const Clock& clock = runs.clock();
  auto run = [&](Variant v, auto fn) { runs.run(variant_info(v).name, fn); };
  run(Variant::f16_f32, [&] { return run_variant<int(Variant::f16_f32)>(clock, o.seed, o.threads, dev); });
  run(Variant::bf16_f32, [&] { return run_variant<int(Variant::bf16_f32)>(clock, o.seed, o.threads, dev); });
  run(Variant::f16_f16, [&] { return run_variant<int(Variant::f16_f16)>(clock, o.seed, o.threads, dev); });
  if (dev.prop.major > 8 || (dev.prop.major == 8 && dev.prop.minor >= 9)) {
    run(Variant::e4m3_f32, [&] { return run_variant<int(Variant::e4m3_f32)>(clock, o.seed, o.threads, dev); });
    run(Variant::e5m2_f32, [&] { return run_variant<int(Variant::e5m2_f32)>(clock, o.seed, o.threads, dev); });
  } else {
    report().append("variants", "{\"variant\": \"fp8\", \"skipped\": \"needs compute capability 8.9 or higher\"}");
  }
  return runs.finish();
}
