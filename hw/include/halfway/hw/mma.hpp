/// \file mma.hpp
/// Warp-level tensor-core MMA (PTX `mma.sync`) on the GPU, and the block-FMA models it is
/// compared with. This header holds what the device kernels and the CPU both need (`__host__
/// __device__`): the fragment layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with
/// floating point type", "... mma.m16n8k32"), the MMA variants, and the evaluation of a model on
/// one output. The test cases and the parameter search are in mma_cases.hpp (host only).
///
/// Conventions: A is M×K row-major, B is K×N stored row-major (b[k*N + n]), C and D are M×N
/// row-major; M = 16, N = 8, K = 16 (fp16/bf16) or 32 (fp8). Encodings are held in uint32_t.
#pragma once

#include "halfway/accumulate.hpp"
#include "halfway/hw/ops.hpp"

namespace halfway::hw::mma {

inline constexpr int kM = 16, kN = 8;

struct RowCol {
  int row, col;
};

// groupID = lane >> 2, threadID_in_group = lane % 4 (PTX ISA notation).

/// A fragment, .f16/.bf16, m16n8k16: element i (0..7) of lane; register r holds i = 2r, 2r+1
/// (lower index in the lower 16 bits).
HALFWAY_INLINE RowCol frag_a_k16(int lane, int i) {
  const int g = lane >> 2, t = lane & 3;
  return {g + ((i & 2) ? 8 : 0), t * 2 + (i & 1) + (i >= 4 ? 8 : 0)};
}
/// B fragment, .f16/.bf16, m16n8k16: element i (0..3) -> (k, n).
HALFWAY_INLINE RowCol frag_b_k16(int lane, int i) {
  const int g = lane >> 2, t = lane & 3;
  return {t * 2 + (i & 1) + (i >= 2 ? 8 : 0), g};
}
/// C/D fragment, m16n8 (f32: one element per register; f16: c0,c1 in register 0, c2,c3 in 1).
HALFWAY_INLINE RowCol frag_c(int lane, int i) {
  const int g = lane >> 2, t = lane & 3;
  return {g + (i >= 2 ? 8 : 0), t * 2 + (i & 1)};
}
/// A fragment, .e4m3/.e5m2, m16n8k32: element i (0..15); register r holds i = 4r..4r+3
/// (lowest index in the lowest byte).
HALFWAY_INLINE RowCol frag_a_k32(int lane, int i) {
  const int g = lane >> 2, t = lane & 3;
  return {g + ((i & 4) ? 8 : 0), t * 4 + (i & 3) + (i >= 8 ? 16 : 0)};
}
/// B fragment, .e4m3/.e5m2, m16n8k32: element i (0..7) -> (k, n).
HALFWAY_INLINE RowCol frag_b_k32(int lane, int i) {
  const int g = lane >> 2, t = lane & 3;
  return {t * 4 + (i & 3) + (i >= 4 ? 16 : 0), g};
}

/// The MMA instructions checked.
enum class Variant : uint8_t {
  f16_f32,   ///< mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
  f16_f16,   ///< mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16
  bf16_f32,  ///< mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
  e4m3_f32,  ///< mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 (sm_89+)
  e5m2_f32,  ///< mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 (sm_89+)
  count
};
inline constexpr int kVariantCount = static_cast<int>(Variant::count);

struct VariantInfo {
  const char* name;
  Format in;
  Format acc;  ///< C and D
  int k;
};

HALFWAY_INLINE VariantInfo variant_info(Variant v) {
  switch (v) {
    case Variant::f16_f32: return {"m16n8k16.f32.f16.f16.f32", fmt_fp16(), fmt_fp32(), 16};
    case Variant::f16_f16: return {"m16n8k16.f16.f16.f16.f16", fmt_fp16(), fmt_fp16(), 16};
    case Variant::bf16_f32: return {"m16n8k16.f32.bf16.bf16.f32", fmt_bf16(), fmt_fp32(), 16};
    case Variant::e4m3_f32: return {"m16n8k32.f32.e4m3.e4m3.f32", fmt_e4m3(false), fmt_fp32(), 32};
    default: return {"m16n8k32.f32.e5m2.e5m2.f32", fmt_e5m2(false), fmt_fp32(), 32};
  }
}

/// A candidate description of the hardware: the library's accumulation model plus what the
/// search varies around it. `reverse`: blocks taken from the highest k down (only matters when
/// block < K). `two_step`: the sum is formed in `model.acc` (fp32) and then rounded into the
/// output format with `out_rounding` (for fp16 accumulators).
struct Candidate {
  AccumulationModel model;
  bool reverse = false;
  bool two_step = false;
  Rounding out_rounding = Rounding::near_even;
};

/// D[row][col] for one output under candidate `cand`: a = row of A (K entries), b = column of
/// B (K entries, contiguous), c = C[row][col] in the variant's accumulator format.
HALFWAY_INLINE uint32_t model_output(const Candidate& cand, const VariantInfo& vi, const uint32_t* a,
                                const uint32_t* b, uint32_t c) {
  uint32_t ar[64], br[64];
  const uint32_t* pa = a;
  const uint32_t* pb = b;
  if (cand.reverse) {
    for (int k = 0; k < vi.k; ++k) {
      ar[k] = a[vi.k - 1 - k];
      br[k] = b[vi.k - 1 - k];
    }
    pa = ar;
    pb = br;
  }
  Env env;
  if (!cand.two_step) return dot(cand.model, vi.in, pa, pb, vi.k, c, env);
  // Accumulate in model.acc, then one more rounding into the variant's accumulator format.
  Env e1;
  const uint32_t cw = convert(vi.acc, c, cand.model.acc, e1);
  const uint32_t wide = dot(cand.model, vi.in, pa, pb, vi.k, cw, env);
  Env e2{cand.out_rounding};
  return convert(cand.model.acc, wide, vi.acc, e2);
}

}  // namespace halfway::hw::mma
