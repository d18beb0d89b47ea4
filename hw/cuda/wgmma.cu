// Hopper's native tensor-core path, wgmma.mma_async (sm_90a: built for "90a", runs on compute
// capability 9.0 only), against the library's block-FMA models: the same probe cases, layout
// check, fingerprints and parameter search as halfway_gpu_mma (mma_cases.hpp, mma_search.hpp).
//
//   halfway_gpu_wgmma --out FILE [--budget SECONDS] [--seed S] [--threads N]
//
// One warpgroup (128 threads) per 16×8×K case: wgmma m64n8k16 (f16, bf16) or m64n8k32 (e4m3,
// e5m2) with A in registers (warp 0 holds the case's 16 rows, the other warps' rows are zero)
// and B in shared memory, K-major, without swizzling: two 8×16-byte core matrices along K,
// described by a matrix descriptor (leading byte offset 128 between them). D starts as C
// (scale-d = 1). Variants: f16 -> f32, bf16 -> f32, f16 -> f16, e4m3 -> f32, e5m2 -> f32.
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

/// Shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"): start address,
/// leading and stride byte offsets, all in units of 16 bytes; no swizzling.
__device__ inline uint64_t smem_descriptor(const void* p, uint32_t lbo, uint32_t sbo) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return uint64_t((addr >> 4) & 0x3FFF) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32);
}

template <int V>
__global__ void wgmma_kernel(const uint32_t* A, const uint32_t* B, const uint32_t* C, uint32_t* D,
                             int ncases) {
  constexpr Variant v = static_cast<Variant>(V);
  constexpr bool fp8 = v == Variant::e4m3_f32 || v == Variant::e5m2_f32;
  constexpr int K = fp8 ? 32 : 16, bytes = fp8 ? 1 : 2;
  const int q = blockIdx.x;
  if (q >= ncases) return;  // whole blocks only
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const uint32_t* a = A + size_t(q) * kM * K;
  const uint32_t* b = B + size_t(q) * K * kN;
  const uint32_t* c = C + size_t(q) * kM * kN;
  uint32_t* d = D + size_t(q) * kM * kN;
  // B, K-major: core matrix j holds k in [16j/bytes, 16(j+1)/bytes), row n at byte 16n.
  __shared__ alignas(128) uint8_t sb[256];
  for (int i = tid; i < K * kN; i += blockDim.x) {
    const int n = i / K, k = i % K, off = 128 * ((k * bytes) / 16) + 16 * n + (k * bytes) % 16;
    const uint32_t e = b[k * kN + n];
    sb[off] = uint8_t(e);
    if (bytes == 2) sb[off + 1] = uint8_t(e >> 8);
  }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
  __syncthreads();
  const uint64_t desc = smem_descriptor(sb, 128, 256);
  // A fragment: the mma.sync m16n8k16 / m16n8k32 layout within each warp's 16 rows.
  auto at_a = [&](RowCol p) { return warp == 0 ? a[p.row * K + p.col] : 0u; };
  auto at_c = [&](RowCol p) { return warp == 0 ? c[p.row * kN + p.col] : 0u; };
  uint32_t ra[4];
  for (int r = 0; r < 4; ++r) {
    if constexpr (fp8) {
      ra[r] = 0;
      for (int j = 0; j < 4; ++j) ra[r] |= (at_a(frag_a_k32(lane, 4 * r + j)) & 0xFFu) << (8 * j);
    } else {
      ra[r] = (at_a(frag_a_k16(lane, 2 * r)) & 0xFFFFu) | (at_a(frag_a_k16(lane, 2 * r + 1)) << 16);
    }
  }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (v == Variant::f16_f16) {
    uint32_t rd[2];
    rd[0] = (at_c(frag_c(lane, 0)) & 0xFFFFu) | (at_c(frag_c(lane, 1)) << 16);
    rd[1] = (at_c(frag_c(lane, 2)) & 0xFFFFu) | (at_c(frag_c(lane, 3)) << 16);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, %6, p, 1, 1, 0;\n}\n"
        : "+r"(rd[0]), "+r"(rd[1])
        : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "l"(desc));
    asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    if (warp == 0)
      for (int i = 0; i < 4; ++i) {
        const RowCol p = frag_c(lane, i);
        d[p.row * kN + p.col] = (rd[i >> 1] >> (16 * (i & 1))) & 0xFFFFu;
      }
  } else {
    float rd[4];
    for (int i = 0; i < 4; ++i) rd[i] = __uint_as_float(at_c(frag_c(lane, i)));
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    if constexpr (v == Variant::f16_f32) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
          : "+f"(rd[0]), "+f"(rd[1]), "+f"(rd[2]), "+f"(rd[3])
          : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "l"(desc));
    } else if constexpr (v == Variant::bf16_f32) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
          : "+f"(rd[0]), "+f"(rd[1]), "+f"(rd[2]), "+f"(rd[3])
          : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "l"(desc));
    } else if constexpr (v == Variant::e4m3_f32) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1;\n}\n"
          : "+f"(rd[0]), "+f"(rd[1]), "+f"(rd[2]), "+f"(rd[3])
          : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "l"(desc));
    } else {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e5m2 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1;\n}\n"
          : "+f"(rd[0]), "+f"(rd[1]), "+f"(rd[2]), "+f"(rd[3])
          : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "l"(desc));
    }
    asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    if (warp == 0)
      for (int i = 0; i < 4; ++i) {
        const RowCol p = frag_c(lane, i);
        d[p.row * kN + p.col] = __float_as_uint(rd[i]);
      }
  }
#else
  // Not sm_90a: no wgmma. The host runs this program on compute capability 9.0 only.
  (void)desc, (void)ra, (void)at_c, (void)d;
  __trap();
#endif
}

template <int V>
bool run_variant(const Clock& clock, uint64_t seed, unsigned threads) {
  return run_mma_variant(static_cast<Variant>(V), "wgmma.mma_async (sm_90a)", clock, seed, threads,
                         [](const uint32_t* a, const uint32_t* b, const uint32_t* c, uint32_t* d,
                            size_t n) {
                           wgmma_kernel<V><<<int(n), 128>>>(a, b, c, d, int(n));
                           HW_CUDA_CHECK_LAUNCH(wgmma_kernel);
                         });
}

}  // namespace

int main(int argc, char** argv) {
  VariantOptions o;
  if (!parse_variant_options(argc, argv, "halfway_gpu_wgmma", o)) return 2;
  const DeviceInfo dev = open_device_report(o.out, "wgmma", "wgmma.mma_async");
  if (dev.prop.major != 9 || dev.prop.minor != 0) {
    report().append("variants", "{\"variant\": \"all\", \"skipped\": \"sm_90a code needs compute capability 9.0\"}");
    report().set("status", Report::quote("complete"));
    report().save();
    return 0;
  }
  VariantRuns runs(o.budget);
  const Clock& clock = runs.clock();
  auto run = [&](Variant v, auto fn) { runs.run(variant_info(v).name, fn); };
  run(Variant::f16_f32, [&] { return run_variant<int(Variant::f16_f32)>(clock, o.seed, o.threads); });
  run(Variant::bf16_f32, [&] { return run_variant<int(Variant::bf16_f32)>(clock, o.seed, o.threads); });
  run(Variant::e4m3_f32, [&] { return run_variant<int(Variant::e4m3_f32)>(clock, o.seed, o.threads); });
  run(Variant::e5m2_f32, [&] { return run_variant<int(Variant::e5m2_f32)>(clock, o.seed, o.threads); });
  run(Variant::f16_f16, [&] { return run_variant<int(Variant::f16_f16)>(clock, o.seed, o.threads); });
  return runs.finish();
}
