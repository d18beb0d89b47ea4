// x86 backends, chosen at run time by CPU features: F16C (vcvtps2ph / vcvtph2ps, all four
// rounding directions through the immediate), AVX512-BF16 (vcvtneps2bf16) and AVX512-FP16
// (native fp16 arithmetic and fma, Sapphire Rapids and later). The functions that
// use the instructions are compiled for those targets only (target attributes), so the binary
// runs on any x86-64 CPU and on other architectures the backends report themselves absent.
#include <cstring>

#include "backend.hpp"
#include "halfway/cpu.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HALFWAY_HW_X86 1
#endif

namespace halfway::hw {
namespace {

/// The features a backend's instructions need (halfway/cpu.hpp); empty reason when present.
std::string missing_for(const char* what) {
  uint32_t f = ~0u;
  if (!std::strcmp(what, "f16c")) f = cpu::f16c;
  if (!std::strcmp(what, "avx512bf16")) f = cpu::avx512f | cpu::avx512bf16;
  if (!std::strcmp(what, "avx512fp16"))
    f = cpu::avx512f | cpu::avx512bw | cpu::avx512vl | cpu::avx512fp16;
  return cpu::missing(f);
}

#if defined(HALFWAY_HW_X86)

// vcvtps2ph with the rounding direction in the immediate (bit 2 clear: MXCSR is not consulted).
template <int kImm>
__attribute__((target("avx,f16c,sse4.1"))) void f32_to_f16(const uint32_t* a, uint32_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)));
    const __m128i h = _mm256_cvtps_ph(v, kImm);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_cvtepu16_epi32(h));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 4), _mm_cvtepu16_epi32(_mm_srli_si128(h, 8)));
  }
  for (; i < n; ++i) {
    const __m128 v = _mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(a[i])));
    out[i] = static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(v, kImm), 0));
  }
}

__attribute__((target("avx,f16c,sse4.1"))) void f16_to_f32(const uint32_t* a, uint32_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const __m128i h = _mm_cvtsi32_si128(static_cast<int>(a[i] & 0xFFFF));
    const __m128 f = _mm_cvtph_ps(h);
    out[i] = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_castps_si128(f)));
  }
}

// fp16 arithmetic the way x86 CPU libraries do it: widen with vcvtph2ps, one binary32 operation
// (SSE/AVX, MXCSR default: round to nearest, no flush), narrow with vcvtps2ph (RNE).
template <int kOp>
__attribute__((target("avx,f16c,sse4.1"))) void f16_arith(const uint32_t* a, const uint32_t* b, uint32_t* out,
                                                    size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const __m128 x = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(a[i] & 0xFFFF)));
    const __m128 y = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(b[i] & 0xFFFF)));
    __m128 r;
    if constexpr (kOp == 0) r = _mm_add_ss(x, y);
    else if constexpr (kOp == 1) r = _mm_sub_ss(x, y);
    else if constexpr (kOp == 2) r = _mm_mul_ss(x, y);
    else r = _mm_div_ss(x, y);
    out[i] = static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT), 0));
  }
}

__attribute__((target("avx512f,avx512bf16"))) void f32_to_bf16(const uint32_t* a, uint32_t* out,
                                                                size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_castsi512_ps(_mm512_loadu_si512(a + i));
    const __m256bh h = _mm512_cvtneps_pbh(v);
    __m256i hi;
    std::memcpy(&hi, &h, sizeof(hi));
    _mm512_storeu_si512(out + i, _mm512_maskz_cvtepu16_epi32(0xFFFF, hi));
  }
  if (i < n) {
    alignas(64) uint32_t in[16] = {};
    alignas(64) uint32_t res[16];
    std::memcpy(in, a + i, (n - i) * 4);
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_castsi512_ps(_mm512_load_si512(in)));
    __m256i hi;
    std::memcpy(&hi, &h, sizeof(hi));
    _mm512_store_si512(res, _mm512_maskz_cvtepu16_epi32(0xFFFF, hi));
    std::memcpy(out + i, res, (n - i) * 4);
  }
}

// AVX512-FP16 scalar instructions: native fp16 arithmetic and fma (round to nearest even from
// MXCSR, which is at its default), conversions with the rounding direction embedded.
#define HALFWAY_FP16_TARGET __attribute__((target("avx512fp16,avx512vl,avx512bw,avx512f")))

HALFWAY_FP16_TARGET inline __m128h h_of(uint32_t e) {
  return _mm_castsi128_ph(_mm_cvtsi32_si128(static_cast<int>(e & 0xFFFF)));
}
HALFWAY_FP16_TARGET inline uint32_t bits_of(__m128h h) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_castph_si128(h), 0));
}

template <int kImm>
HALFWAY_FP16_TARGET void fp16_from_f32(const uint32_t* a, uint32_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const __m128 f = _mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(a[i])));
    out[i] = bits_of(_mm_cvt_roundss_sh(_mm_setzero_ph(), f, kImm | _MM_FROUND_NO_EXC));
  }
}

HALFWAY_FP16_TARGET void fp16_to_f32(const uint32_t* a, uint32_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_castps_si128(_mm_cvtsh_ss(_mm_setzero_ps(), h_of(a[i])))));
}

template <int kOp>
HALFWAY_FP16_TARGET void fp16_arith(const uint32_t* a, const uint32_t* b, const uint32_t* c,
                                    uint32_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const __m128h x = h_of(a[i]), y = h_of(b[i]);
    __m128h r;
    if constexpr (kOp == 0) r = _mm_add_sh(x, y);
    else if constexpr (kOp == 1) r = _mm_sub_sh(x, y);
    else if constexpr (kOp == 2) r = _mm_mul_sh(x, y);
    else if constexpr (kOp == 3) r = _mm_div_sh(x, y);
    else r = _mm_fmadd_sh(x, y, h_of(c[i]));
    out[i] = bits_of(r);
  }
}

#endif

class F16C final : public Backend {
 public:
  const char* name() const override { return "f16c"; }
  const char* description() const override {
    return "x86 F16C vcvtps2ph/vcvtph2ps (rounding from the immediate); fp16 arithmetic as "
           "vcvtph2ps, one SSE binary32 operation, vcvtps2ph";
  }
  std::vector<Op> ops() const override {
    return {Op::f32_to_f16_rn, Op::f32_to_f16_rz, Op::f32_to_f16_rd, Op::f32_to_f16_ru,
            Op::f16_to_f32,    Op::f16_add,       Op::f16_sub,       Op::f16_mul,
            Op::f16_div};
  }
  void run(Op op, const uint32_t* a, const uint32_t* b, const uint32_t*, uint32_t* out,
           size_t n) const override {
#if defined(HALFWAY_HW_X86)
    switch (op) {
      case Op::f32_to_f16_rn: return f32_to_f16<_MM_FROUND_TO_NEAREST_INT>(a, out, n);
      case Op::f32_to_f16_rz: return f32_to_f16<_MM_FROUND_TO_ZERO>(a, out, n);
      case Op::f32_to_f16_rd: return f32_to_f16<_MM_FROUND_TO_NEG_INF>(a, out, n);
      case Op::f32_to_f16_ru: return f32_to_f16<_MM_FROUND_TO_POS_INF>(a, out, n);
      case Op::f16_to_f32: return f16_to_f32(a, out, n);
      case Op::f16_add: return f16_arith<0>(a, b, out, n);
      case Op::f16_sub: return f16_arith<1>(a, b, out, n);
      case Op::f16_mul: return f16_arith<2>(a, b, out, n);
      case Op::f16_div: return f16_arith<3>(a, b, out, n);
      default: break;
    }
#else
    (void)op, (void)a, (void)b, (void)out, (void)n;
#endif
  }

 protected:
  std::string missing() const override {
#if defined(HALFWAY_HW_X86)
    return missing_for("f16c");
#else
    return "not an x86 CPU";
#endif
  }
};

class Avx512Bf16 final : public Backend {
 public:
  const char* name() const override { return "avx512bf16"; }
  const char* description() const override {
    return "x86 AVX512-BF16 vcvtneps2bf16 (always round to nearest even, MXCSR not consulted)";
  }
  std::vector<Op> ops() const override { return {Op::f32_to_bf16_rn}; }
  void run(Op op, const uint32_t* a, const uint32_t*, const uint32_t*, uint32_t* out,
           size_t n) const override {
#if defined(HALFWAY_HW_X86)
    if (op == Op::f32_to_bf16_rn) f32_to_bf16(a, out, n);
#else
    (void)op, (void)a, (void)out, (void)n;
#endif
  }

 protected:
  std::string missing() const override {
#if defined(HALFWAY_HW_X86)
    return missing_for("avx512bf16");
#else
    return "not an x86 CPU";
#endif
  }
};

class Avx512Fp16 final : public Backend {
 public:
  const char* name() const override { return "avx512fp16"; }
  const char* description() const override {
    return "x86 AVX512-FP16 scalar instructions: vaddsh/vsubsh/vmulsh/vdivsh/vfmadd*sh (MXCSR "
           "default: nearest even), vcvtss2sh with embedded rounding, vcvtsh2ss";
  }
  std::vector<Op> ops() const override {
    return {Op::f32_to_f16_rn, Op::f32_to_f16_rz, Op::f32_to_f16_rd, Op::f32_to_f16_ru,
            Op::f16_to_f32,    Op::f16_add,       Op::f16_sub,       Op::f16_mul,
            Op::f16_div,       Op::f16_fma};
  }
  void run(Op op, const uint32_t* a, const uint32_t* b, const uint32_t* c, uint32_t* out,
           size_t n) const override {
#if defined(HALFWAY_HW_X86)
    switch (op) {
      case Op::f32_to_f16_rn: return fp16_from_f32<_MM_FROUND_TO_NEAREST_INT>(a, out, n);
      case Op::f32_to_f16_rz: return fp16_from_f32<_MM_FROUND_TO_ZERO>(a, out, n);
      case Op::f32_to_f16_rd: return fp16_from_f32<_MM_FROUND_TO_NEG_INF>(a, out, n);
      case Op::f32_to_f16_ru: return fp16_from_f32<_MM_FROUND_TO_POS_INF>(a, out, n);
      case Op::f16_to_f32: return fp16_to_f32(a, out, n);
      case Op::f16_add: return fp16_arith<0>(a, b, c, out, n);
      case Op::f16_sub: return fp16_arith<1>(a, b, c, out, n);
      case Op::f16_mul: return fp16_arith<2>(a, b, c, out, n);
      case Op::f16_div: return fp16_arith<3>(a, b, c, out, n);
      case Op::f16_fma: return fp16_arith<4>(a, b, c, out, n);
      default: break;
    }
#else
    (void)op, (void)a, (void)b, (void)c, (void)out, (void)n;
#endif
  }

 protected:
  std::string missing() const override {
#if defined(HALFWAY_HW_X86)
    return missing_for("avx512fp16");
#else
    return "not an x86 CPU";
#endif
  }
};

}  // namespace

const Backend* avx512fp16_backend() {
  static const Avx512Fp16 b;
  return &b;
}
const Backend* f16c_backend() {
  static const F16C b;
  return &b;
}
const Backend* avx512bf16_backend() {
  static const Avx512Bf16 b;
  return &b;
}

}  // namespace halfway::hw
