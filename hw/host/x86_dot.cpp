// CPU dot-product instructions, chosen at run time by CPU features: AVX512-BF16 vdpbf16ps
// (AMD Zen 4 and later, Intel Cooper Lake, Sapphire Rapids and later) and the AMX tile
// instructions tdpbf16ps (AMX-BF16, Sapphire Rapids and later) and tdpfp16ps (AMX-FP16, Granite
// Rapids). Functions that use an instruction are compiled for its target only, so the binary
// runs on any x86-64 CPU; elsewhere every instruction reports itself absent.
#include <cstring>
#include <stdexcept>

#include "amx_tiles.hpp"
#include "dot.hpp"
#include "halfway/cpu.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#define HALFWAY_HW_X86_64 1
#endif

namespace halfway::hw {
namespace {

#if defined(HALFWAY_HW_X86_64)

// vdpbf16ps on 16 lanes at a time; a partial last vector is padded with zeros.
__attribute__((target("avx512f,avx512bf16"))) void dpbf16(const uint32_t* a, const uint32_t* b,
                                                          const uint32_t* c, uint32_t* out,
                                                          size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    alignas(64) uint32_t va[16] = {}, vb[16] = {}, vc[16] = {}, vr[16];
    const size_t m = n - i < 16 ? n - i : 16;
    std::memcpy(va, a + i, m * 4);
    std::memcpy(vb, b + i, m * 4);
    std::memcpy(vc, c + i, m * 4);
    __m512bh x, y;
    const __m512i xi = _mm512_load_si512(va), yi = _mm512_load_si512(vb);
    std::memcpy(&x, &xi, sizeof x);
    std::memcpy(&y, &yi, sizeof y);
    const __m512 r = _mm512_dpbf16_ps(_mm512_castsi512_ps(_mm512_load_si512(vc)), x, y);
    _mm512_store_si512(vr, _mm512_castps_si512(r));
    std::memcpy(out + i, vr, m * 4);
  }
}

// Full tiles: every tile 16 rows × 64 bytes, so each output sums C and 16 element pairs.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

template <bool kFp16>
__attribute__((target("amx-tile,amx-bf16"))) void amx_tiles(AmxTile* tiles, size_t n) {
  TileConfig cfg;
  for (int t = 0; t < 3; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;  // tmm0 C, tmm1 A, tmm2 B
  _tile_loadconfig(&cfg);
  for (size_t i = 0; i < n; ++i) {
    AmxTile& t = tiles[i];
    _tile_loadd(0, t.c, 64);
    _tile_loadd(1, t.a, 64);
    _tile_loadd(2, t.b, 64);
    if constexpr (kFp16) __asm__ volatile("tdpfp16ps %%tmm2, %%tmm1, %%tmm0" ::: "memory");
    else __asm__ volatile("tdpbf16ps %%tmm2, %%tmm1, %%tmm0" ::: "memory");
    _tile_stored(0, t.d, 64);
  }
  _tile_release();
}

#endif

class Avx512Bf16Dot final : public DotInstruction {
 public:
  const char* name() const override { return "avx512bf16-dot"; }
  const char* description() const override {
    return "x86 AVX512-BF16 vdpbf16ps (_mm512_dpbf16_ps): per fp32 lane, acc + two bf16 products";
  }
  Format input() const override { return fmt_bf16(); }
  AccumulationModel documented() const override { return accumulation::avx512_dpbf16; }
  void run(const uint32_t* a, const uint32_t* b, const uint32_t* c, uint32_t* out,
           size_t n) const override {
#if defined(HALFWAY_HW_X86_64)
    dpbf16(a, b, c, out, n);
#else
    (void)a, (void)b, (void)c, (void)out, (void)n;
#endif
  }

 protected:
  std::string missing() const override {
#if defined(HALFWAY_HW_X86_64)
    return cpu::missing(cpu::avx512f | cpu::avx512bf16);
#else
    return "not an x86-64 CPU";
#endif
  }
};

// Intel documents the AMX dot products as one chain of round-to-nearest-even FMAs, even element
// first, with DAZ and FTZ, MXCSR ignored; recorded tiles show two chains instead (even and odd
// elements, each from +0, then summed and added to C: accumulation::amx_bf16), which is the
// documented model here. tdpfp16ps is taken to work the same way: a hypothesis until tiles
// recorded on an AMX-FP16 machine confirm it.
template <bool kFp16>
class AmxDot final : public DotInstruction {
 public:
  const char* name() const override { return kFp16 ? "amx-fp16" : "amx-bf16"; }
  const char* description() const override {
    return kFp16 ? "x86 AMX-FP16 tdpfp16ps on full 16x16 tiles (C + 32 fp16 products per output)"
                 : "x86 AMX-BF16 tdpbf16ps on full 16x16 tiles (C + 32 bf16 products per output)";
  }
  Format input() const override { return kFp16 ? fmt_fp16() : fmt_bf16(); }
  AccumulationModel documented() const override { return accumulation::amx_bf16; }
  bool full_tiles() const override { return true; }
  void run(const uint32_t*, const uint32_t*, const uint32_t*, uint32_t*, size_t) const override {
    throw std::logic_error(std::string(name()) + " runs full tiles (run_tiles), not lanes");
  }
  void run_tiles(AmxTile* tiles, size_t n) const override {
#if defined(HALFWAY_HW_X86_64)
    amx_tiles<kFp16>(tiles, n);
#else
    (void)tiles, (void)n;
#endif
  }

 protected:
  std::string missing() const override {
#if defined(HALFWAY_HW_X86_64)
    // Detection includes the tile state in XCR0 and, on Linux, the permission to use it.
    return cpu::missing(cpu::amx_tile | (kFp16 ? cpu::amx_fp16 : cpu::amx_bf16));
#else
    return "not an x86-64 CPU";
#endif
  }
};

}  // namespace

const DotInstruction* avx512bf16_dot_instruction() {
  static const Avx512Bf16Dot d;
  return &d;
}
const DotInstruction* amx_bf16_instruction() {
  static const AmxDot<false> d;
  return &d;
}
const DotInstruction* amx_fp16_instruction() {
  static const AmxDot<true> d;
  return &d;
}

}  // namespace halfway::hw
