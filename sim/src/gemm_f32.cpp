// The fp32 sequential-FMA GEMM: c = +0, then c = fl32(c + A[i][kk]·B[kk][j]) for kk = 0..k-1
// with one rounding per step (a fused multiply-add), then + bias[j] in fp32. That per-element
// order is the semantics; the speed comes from running many elements' chains side by side:
// a register-blocked micro-kernel keeps an MR × NR tile of C in vector registers for the whole
// k loop, each lane its own FMA chain, broadcasting A[i][kk] and loading one row slice of B
// per step. Every path (AVX-512, AVX2+FMA, scalar) computes the same correctly rounded fused
// multiply-adds in the same order, so the results are identical bit for bit. For more than a
// few rows, B's columns are first copied panel by panel (NV vectors wide, k rows) into
// contiguous memory, and the rows run in chunks over each panel: the panel stays in L1/L2 and
// its rows are no longer n floats apart (a power-of-two n put every row of a tile's B slice in
// the same L1 set). Copying changes where the values are read from, not which values or in
// which order they are added.
#include "gemm_f32.hpp"

#include "halfway/cpu.hpp"
#include "halfway/thread_pool.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's headers initialise their "undefined" vectors from themselves (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define HALFWAY_X86_KERNELS 1
#endif

namespace halfway::sim::detail {

namespace {

/// One element's chain (tails and the portable path).
inline float chain(int64_t k, const float* a, const float* b, int64_t ldb) {
  float c = 0.0f;
  for (int64_t kk = 0; kk < k; ++kk) c = std::fma(a[kk], b[kk * ldb], c);
  return c;
}

void rows_scalar(const GemmF32& g, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) {
    float* c = g.C + i * g.n;
    for (int64_t j = 0; j < g.n; ++j) c[j] = 0.0f;
    for (int64_t kk = 0; kk < g.k; ++kk) {
      const float x = g.A[i * g.k + kk];
      const float* b = g.B + kk * g.n;
      for (int64_t j = 0; j < g.n; ++j) c[j] = std::fma(x, b[j], c[j]);
    }
    if (g.bias)
      for (int64_t j = 0; j < g.n; ++j) c[j] = c[j] + g.bias[j];
  }
}

#ifdef HALFWAY_X86_KERNELS

/// The tile [i, i+MR) × [j, j+V·NV) with V-wide vectors (VEC is __m512 or __m256); b points at
/// B[0][j] in a layout whose rows are ldb floats apart (B itself, or a packed panel).
#define HALFWAY_TILE(NAME, TARGET, VEC, W, SET0, LOAD, STORE, BCAST, FMA, ADD)                  \
  template <int MR, int NV>                                                                      \
  __attribute__((target(TARGET))) inline void NAME(const GemmF32& g, int64_t i, int64_t j,      \
                                                   const float* b, int64_t ldb) {               \
    VEC acc[MR][NV];                                                                             \
    for (int r = 0; r < MR; ++r)                                                                 \
      for (int v = 0; v < NV; ++v) acc[r][v] = SET0();                                           \
    const float* a = g.A + i * g.k;                                                              \
    for (int64_t kk = 0; kk < g.k; ++kk) {                                                       \
      VEC bv[NV];                                                                                \
      for (int v = 0; v < NV; ++v) bv[v] = LOAD(b + kk * ldb + v * W);                           \
      for (int r = 0; r < MR; ++r) {                                                             \
        const VEC x = BCAST(a[r * g.k + kk]);                                                    \
        for (int v = 0; v < NV; ++v) acc[r][v] = FMA(x, bv[v], acc[r][v]);                       \
      }                                                                                          \
    }                                                                                            \
    for (int r = 0; r < MR; ++r)                                                                 \
      for (int v = 0; v < NV; ++v) {                                                             \
        VEC c = acc[r][v];                                                                       \
        if (g.bias) c = ADD(c, LOAD(g.bias + j + v * W));                                        \
        STORE(g.C + (i + r) * g.n + j + v * W, c);                                               \
      }                                                                                          \
  }

HALFWAY_TILE(tile512, "avx512f", __m512, 16, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_storeu_ps,
             _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps)
HALFWAY_TILE(tile256, "avx2,fma", __m256, 8, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_storeu_ps,
             _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps)
#undef HALFWAY_TILE

/// Columns past the last whole tile, row by row, with the scalar chain (same FMAs, same order).
void tail_columns(const GemmF32& g, int64_t i0, int64_t i1, int64_t j0) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < g.n; ++j) {
      float c = chain(g.k, g.A + i * g.k, g.B + j, g.n);
      if (g.bias) c = c + g.bias[j];
      g.C[i * g.n + j] = c;
    }
}

/// B[:, 0 .. panels · wide) as `panels` contiguous k × wide panels (panel p holds columns
/// [p · wide, (p + 1) · wide) row after row), in a buffer the thread keeps between calls.
const float* pack_panels(const GemmF32& g, int64_t panels, int64_t wide) {
  thread_local std::vector<float> buf;
  const size_t size = size_t(panels * wide * g.k);
  if (buf.size() < size) buf.resize(size);
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t kk = 0; kk < g.k; ++kk) {
      const float* src = g.B + kk * g.n + p * wide;
      std::copy(src, src + wide, buf.data() + (p * g.k + kk) * wide);
    }
  return buf.data();
}

/// Rows in blocks of MR (then 1), columns in tiles of NV vectors of W lanes (then one vector).
/// Where B is larger than an L1 cache and there are two MR blocks of rows or more, the whole
/// tiles read packed panels, kChunk blocks of rows at a time.
template <int W, int MR, int NV, class Tile>
void rows_blocked(const GemmF32& g, int64_t i0, int64_t i1, Tile tile) {
  constexpr int64_t kChunk = 8;              // MR-row blocks per pass over a panel
  constexpr int64_t kSmallB = 16 * 1024;     // floats: B fits L1 as it is, no packing
  const int64_t wide = NV * W;
  const int64_t jw = g.n / wide * wide, jv = g.n / W * W;
  const int64_t full = i0 + (i1 - i0) / MR * MR;  // rows in whole MR blocks: [i0, full)
  if (full - i0 >= 2 * MR && jw > 0 && g.k * g.n > kSmallB) {
    const float* packed = pack_panels(g, jw / wide, wide);
    for (int64_t c0 = i0; c0 < full; c0 += kChunk * MR) {
      const int64_t c1 = std::min(full, c0 + kChunk * MR);
      for (int64_t j = 0; j < jw; j += wide)
        for (int64_t i = c0; i < c1; i += MR)
          tile.template operator()<MR, NV>(g, i, j, packed + j * g.k, wide);
    }
  } else {
    for (int64_t i = i0; i < full; i += MR)
      for (int64_t j = 0; j < jw; j += wide) tile.template operator()<MR, NV>(g, i, j, g.B + j, g.n);
  }
  for (int64_t i = i0; i < full; i += MR)
    for (int64_t j = jw; j < jv; j += W) tile.template operator()<MR, 1>(g, i, j, g.B + j, g.n);
  for (int64_t i = full; i < i1; ++i) {
    for (int64_t j = 0; j < jw; j += wide) tile.template operator()<1, NV>(g, i, j, g.B + j, g.n);
    for (int64_t j = jw; j < jv; j += W) tile.template operator()<1, 1>(g, i, j, g.B + j, g.n);
  }
  tail_columns(g, i0, i1, jv);
}

struct Tile512 {
  template <int MR, int NV>
  void operator()(const GemmF32& g, int64_t i, int64_t j, const float* b, int64_t ldb) const {
    tile512<MR, NV>(g, i, j, b, ldb);
  }
};
struct Tile256 {
  template <int MR, int NV>
  void operator()(const GemmF32& g, int64_t i, int64_t j, const float* b, int64_t ldb) const {
    tile256<MR, NV>(g, i, j, b, ldb);
  }
};

/// dst[c][r] = src[r][c] for a 16 × 16 block (rows of src ls floats apart, of dst ld apart).
/// Unpacking 32-bit pairs, then 64-bit pairs, leaves register 4G + q holding, in 128-bit lane L,
/// column 4L + kCol[q] of rows 4G .. 4G + 3; two rounds of lane shuffles then put groups
/// G = 0..3 of one column side by side.
__attribute__((target("avx512f"))) void transpose16(const float* src, int64_t ls, float* dst,
                                                    int64_t ld) {
  static constexpr int kCol[4] = {0, 2, 1, 3};
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ls);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4)
    for (int h = 0; h < 2; ++h) {
      const __m512d a = _mm512_castps_pd(t[i + h]), b = _mm512_castps_pd(t[i + 2 + h]);
      r[i + h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + 2 + h] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  // Groups 0 and 1 (then 2 and 3): lanes 0, 2 of each (0x88) and lanes 1, 3 (0xDD).
  for (int g = 0; g < 16; g += 8)
    for (int q = 0; q < 4; ++q) {
      t[g + q] = _mm512_shuffle_f32x4(r[g + q], r[g + 4 + q], 0x88);
      t[g + 4 + q] = _mm512_shuffle_f32x4(r[g + q], r[g + 4 + q], 0xDD);
    }
  for (int q = 0; q < 4; ++q) {
    const int c = kCol[q];
    _mm512_storeu_ps(dst + c * ld, _mm512_shuffle_f32x4(t[q], t[8 + q], 0x88));
    _mm512_storeu_ps(dst + (8 + c) * ld, _mm512_shuffle_f32x4(t[q], t[8 + q], 0xDD));
    _mm512_storeu_ps(dst + (4 + c) * ld, _mm512_shuffle_f32x4(t[4 + q], t[12 + q], 0x88));
    _mm512_storeu_ps(dst + (12 + c) * ld, _mm512_shuffle_f32x4(t[4 + q], t[12 + q], 0xDD));
  }
}

#endif  // HALFWAY_X86_KERNELS

}  // namespace

void transpose_f32(const float* src, int64_t rows, int64_t cols, float* dst, int threads) {
  int64_t r16 = 0, c16 = 0;
#ifdef HALFWAY_X86_KERNELS
  if (cpu::target() == cpu::Target::avx512) {
    r16 = rows / 16 * 16, c16 = cols / 16 * 16;
    // Strips of 16 columns of dst in parts on the pool (each writes its own strip); a part
    // moves at least 16 Ki values.
    const size_t strips = size_t(c16 / 16);
    const size_t least = size_t(std::max<int64_t>(1, 1024 / std::max<int64_t>(r16, 1)));
    parallel_for(threads, strips, least, [&](size_t s0, size_t s1) {
      for (int64_t j = int64_t(s0) * 16; j < int64_t(s1) * 16; j += 16)
        for (int64_t i = 0; i < r16; i += 16)
          transpose16(src + j * rows + i, rows, dst + i * cols + j, cols);
    });
  }
#else
  (void)threads;
#endif
  // What the blocks leave (all of it without AVX-512): 32 × 32 tiles keep both sides' cache
  // lines in use.
  constexpr int64_t kTile = 32;
  const auto part = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    for (int64_t ib = i0; ib < i1; ib += kTile)
      for (int64_t jb = j0; jb < j1; jb += kTile)
        for (int64_t j = jb; j < std::min(j1, jb + kTile); ++j)
          for (int64_t i = ib; i < std::min(i1, ib + kTile); ++i) dst[i * cols + j] = src[j * rows + i];
  };
  part(0, r16, c16, cols);
  part(r16, rows, 0, cols);
}

GemmF32Path gemm_f32_best_path() {
#ifdef HALFWAY_X86_KERNELS
  switch (cpu::target()) {
    case cpu::Target::avx512: return GemmF32Path::avx512;
    case cpu::Target::avx2: return GemmF32Path::avx2;
    default: return GemmF32Path::scalar;
  }
#else
  return GemmF32Path::scalar;
#endif
}

const char* gemm_f32_path_name(GemmF32Path p) {
  switch (p) {
    case GemmF32Path::avx512: return "avx512";
    case GemmF32Path::avx2: return "avx2";
    default: return "scalar";
  }
}

void gemm_f32_rows(const GemmF32& g, int64_t i0, int64_t i1, GemmF32Path path) {
#ifdef HALFWAY_X86_KERNELS
  // 6 rows × 2 vectors: 12 accumulators, 2 row slices of B and a broadcast in registers.
  if (path == GemmF32Path::avx512) return rows_blocked<16, 6, 2>(g, i0, i1, Tile512{});
  if (path == GemmF32Path::avx2) return rows_blocked<8, 6, 2>(g, i0, i1, Tile256{});
#endif
  (void)path;
  rows_scalar(g, i0, i1);
}

}  // namespace halfway::sim::detail
