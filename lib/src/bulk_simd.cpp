// Fast bulk kernels. Each element is computed by branch-free code on uint32 lanes (masks and
// selects, per-lane variable shifts for the subnormal range, the event counts accumulated in
// vector registers in the same pass), written with GCC vector extensions in bulk_kernels.inc and
// compiled once for AVX2 (8 lanes) and once for AVX-512 (16 lanes); the instruction set is
// chosen at run time. A vector whose lanes are all ordinary (normal results that cannot
// overflow) takes a short sequence of a dozen instructions; any other vector the full one.
// Results and counts are bit-identical to the scalar reference in bulk.cpp: tests/lib/test_bulk.cpp
// compares them on every boundary class, and its `exhaustive` cases on all 2^32 f32 inputs.
//
// What is covered:
//  - round_f32 / quantize_f32: every signed format with a zero and at most 22 fraction bits
//    (all presets but fp32 and e8m0), every rounding mode, tininess mode, overflow mode, ftz.
//    fp16 near_even goes through F16C `vcvtps2ph` (identical to the reference on all 2^32
//    inputs: the exhaustive test); with counts, chunk by chunk, counting inexact results by the
//    dropped bits while every lane is ordinary and recounting other chunks with the full
//    kernel. fp16 quantize_f32 is `vcvtps2ph` + `vcvtph2ps`. bf16 near_even (round_f32 and
//    quantize_f32, the latter widened back by a shift) uses AVX512-BF16 `vcvtneps2bf16`: without
//    counts on every vector without an f32 subnormal lane (the instruction reads those as zero),
//    with counts on vectors of ordinary lanes; the full sequence takes the rest. Calls whose
//    data mostly leave the ordinary range (sampled on the first vectors: fp4/fp6, wide-range
//    data) run the full sequence inlined, in floating point for near_even and the directed
//    modes without flags (getexp/scalef/roundscale, see fp_round_core).
//  - decode_f32: the same formats and fp32 (fp16 through F16C `vcvtph2ps`, exact; every
//    encoding is compared with the reference by the tests).
//  - binary / fma: near_even in formats of at most 10 fraction bits (fp16, bf16, tf32, fp8,
//    MX fp6/fp4, custom). + − × ÷ are computed in fp32 and rounded once: correctly rounded since
//    fp32's 24 bits >= 2p + 2 (Figueroa 1995) as long as the fp32 intermediate is exact or
//    normal. fma computes the exact product in fp32 (2p <= 24 bits), adds with an exact error
//    term (TwoSum) and turns the sum into round-to-odd, which composes with the final
//    round-to-nearest. Without counts the rounding of fp16 results is F16C `vcvtps2ph` and that
//    of bf16 results AVX512-BF16 `vcvtneps2bf16` (on vectors whose fp32 results are all normal
//    or zero). Lanes where an fp32 intermediate is subnormal, or overflows or underflows fp32
//    (bf16 and tf32 only: every fp16/fp8 intermediate is normal), are flagged "hard" and
//    recomputed by the scalar reference. The fp32 arithmetic and the F16C paths need
//    the default MXCSR (nearest, no FTZ/DAZ) and restore the fp status flags afterwards, so a
//    bulk call never changes the caller's fp environment.
// Everything else returns false and the caller runs the reference.
#include <cstring>
#include <type_traits>

#include "bulk_internal.hpp"
#include "halfway/cpu.hpp"
#include "halfway/softfloat.hpp"

// GCC on x86-64: `#pragma GCC target` regions, vector extensions with ?: blends. Elsewhere (other
// architectures, other compilers) every call runs the reference.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define HALFWAY_BULK_X86 1
#endif

namespace halfway::detail {

namespace {

thread_local BulkPath tl_path = bulk_path_supported();
thread_local bool tl_hw = true;

}  // namespace

BulkPath bulk_path_supported() {
#if HALFWAY_BULK_X86
  // The vector paths are compiled for halfway/cpu.hpp's targets (AVX2: FMA, BMI2, F16C too).
  switch (cpu::target()) {
    case cpu::Target::avx512: return BulkPath::avx512;
    case cpu::Target::avx2: return BulkPath::avx2;
    default: return BulkPath::reference;
  }
#else
  return BulkPath::reference;
#endif
}

BulkPath bulk_path() {
  // The thread's choice, within what is supported now (HALFWAY_DISABLE_ISA, a test's mask).
  const BulkPath best = bulk_path_supported();
  return static_cast<uint8_t>(tl_path) < static_cast<uint8_t>(best) ? tl_path : best;
}

BulkPath set_bulk_path(BulkPath p) {
  const BulkPath old = tl_path;
  const BulkPath best = bulk_path_supported();
  tl_path = static_cast<uint8_t>(p) < static_cast<uint8_t>(best) ? p : best;
  return old;
}

bool set_bulk_hardware_conversions(bool allow) {
  const bool old = tl_hw;
  tl_hw = allow;
  return old;
}

const char* bulk_path_name(BulkPath p) {
  switch (p) {
    case BulkPath::avx2: return "avx2";
    case BulkPath::avx512: return "avx512";
    default: return "reference";
  }
}

#if !HALFWAY_BULK_X86

// No vector kernels on this architecture: everything runs the reference.
bool fast_round_f32(const Format&, const float*, uint8_t*, size_t, const BulkOptions&,
                    EventCounts*) {
  return false;
}
bool fast_round_f32(const Format&, const float*, uint16_t*, size_t, const BulkOptions&,
                    EventCounts*) {
  return false;
}
bool fast_round_f32(const Format&, const float*, uint32_t*, size_t, const BulkOptions&,
                    EventCounts*) {
  return false;
}
bool fast_quantize_f32(const Format&, const float*, float*, size_t, const BulkOptions&,
                       EventCounts*) {
  return false;
}
bool fast_sr_bits(const BulkOptions&, uint32_t*, size_t) { return false; }
bool fast_decode_f32(const Format&, const uint8_t*, float*, size_t) { return false; }
bool fast_decode_f32(const Format&, const uint16_t*, float*, size_t) { return false; }
bool fast_decode_f32(const Format&, const uint32_t*, float*, size_t) { return false; }
bool fast_binary(BinaryOp, const Format&, const uint8_t*, const uint8_t*, uint8_t*, size_t,
                 const BulkOptions&, EventCounts*) {
  return false;
}
bool fast_binary(BinaryOp, const Format&, const uint16_t*, const uint16_t*, uint16_t*, size_t,
                 const BulkOptions&, EventCounts*) {
  return false;
}
bool fast_binary(BinaryOp, const Format&, const uint32_t*, const uint32_t*, uint32_t*, size_t,
                 const BulkOptions&, EventCounts*) {
  return false;
}
bool fast_fma(const Format&, const uint8_t*, const uint8_t*, const uint8_t*, uint8_t*, size_t,
              const BulkOptions&, EventCounts*) {
  return false;
}
bool fast_fma(const Format&, const uint16_t*, const uint16_t*, const uint16_t*, uint16_t*, size_t,
              const BulkOptions&, EventCounts*) {
  return false;
}
bool fast_fma(const Format&, const uint32_t*, const uint32_t*, const uint32_t*, uint32_t*, size_t,
              const BulkOptions&, EventCounts*) {
  return false;
}

#else

namespace {

#define HW_AI inline __attribute__((always_inline))

constexpr uint32_t kInx = flag::inexact, kUnf = flag::underflow, kOvf = flag::overflow,
                   kInf = flag::infinite, kInv = flag::invalid;

// ---------------------------------------------------------------------------------------------
// Per-call constants, computed once from the Format and the options.

/// Rounding f32 bits into a format. The rounding works on the f32 encoding itself: for results
/// that are normal in the target, rounding the bit pattern at bit k = 23 − m and subtracting the
/// exponent-bias difference gives the target encoding (a carry out of the fraction bumps the
/// exponent, as it should). Results below the target's smallest normal are rounded from the
/// significand with its hidden bit at a per-lane position k = 150 + emin − m − E (E the f32
/// exponent field, 1 for f32 subnormals).
struct RoundParams {
  uint32_t knorm;      // 23 − m
  uint32_t adj;        // (127 − bias) << m, subtracted from normal results (mod 2^32)
  uint32_t tsub_bits;  // |x| bits below this: the exact value is below 2^emin
  uint32_t kbase;      // 150 + emin − m
  uint32_t max_mag;
  uint32_t sb_shift;  // 31 − position of the format's sign bit
  uint32_t sign_bit;
  uint32_t zmask;             // sign bit of −0 (0 for fnuz: no negative zero)
  uint32_t ovf_pos, ovf_neg;  // overflow results for this rounding direction
  uint32_t inf_pos, inf_neg, inf_flags;
  uint32_t nan_pmask, nan_base, nan_sign, nan_flags;
  uint32_t tiny_ku;  // 2^p − 1: the significand that rounds up to 2^emin
  uint32_t after;    // all ones: tininess after rounding
  uint32_t ftz;      // all ones: flush tiny results to zero
  // classification of results, for the counts
  uint32_t mag_mask, nan_thresh, fnuz_nan, sub_lim;
  // The short path for vectors of ordinary lanes: 2^emin <= |x| <= the largest finite value,
  // i.e. |x| bits − plain_lo <= plain_span. Their results are normal, finite and cannot
  // overflow in any rounding direction, so rounding is one constant shift of the re-biased
  // f32 bits (|x| bits − adjk).
  uint32_t plain_lo, plain_span, adjk, lowmask;
  bool wide;  // IEEE format with f32's exponent (8 bits, bias 127): bf16, tf32
  // The floating-point full sequence (AVX-512 only; see fp_round_core): emin, m and 2^m as
  // floats, and whether it may run (the default MXCSR, at least one fraction bit).
  float fp_emin, fp_m, fp_scale;
  uint32_t fp_ok;
  bool ovf_sym;  // ovf_neg == ovf_pos with the sign bit set (or both the same unsigned NaN)
};

/// Decoding encodings to f32 bits: normal values by re-biasing the exponent; subnormals that are
/// normal in f32 by an exact int→float conversion of the fraction and an exponent offset,
/// those that are f32 subnormals by a shift (no fp32 arithmetic on subnormals, which some CPUs
/// run through slow microcode).
struct DecodeParams {
  uint32_t enc_mask, mag_mask, sign_bit, sb_shift, knorm, dadj, sub_lim, sub_keep;
  uint32_t inf_mag, nan_thresh, dnan_pmask, fnuz_nan;
  uint32_t sub_thresh;  // fractions below this give f32 subnormals: fraction << sub_shift
  uint32_t sub_shift;
  uint32_t sub_eadj;  // (emin − m) << 23, added to the f32 bits of the fraction (mod 2^32)
  // for arithmetic on encodings
  uint32_t quiet_or, qmask, qval, default_nan, divz_pos, divz_neg;
};

/// How the vector loops decode operands: the general sequence; a shift for IEEE formats with
/// f32's exponent (8 bits, bias 127: bf16, tf32), whose encodings are the top bits of the f32
/// ones; F16C `vcvtph2ps` for the fp16 layout; F16C in and out (fp16 near_even arithmetic
/// without counts: the rounding is `vcvtps2ph`, identical to the reference on all 2^32 inputs).
enum DecodeKind { kGeneric, kWide, kHalf, kHalfRound };

int decode_kind(const Format& f, size_t elem_size, bool hw, bool rounds_f16c) {
  const bool half = f.exp_bits == 5 && f.frac_bits == 10 && f.bias == 15 &&
                    f.specials == Specials::ieee && !f.daz;
  if (half && hw && elem_size == 2) return rounds_f16c && f == formats::fp16 ? kHalfRound : kHalf;
  if (f.exp_bits == 8 && f.bias == 127 && f.specials == Specials::ieee && !f.daz && elem_size > 1)
    return kWide;
  return kGeneric;
}

/// The 32-bit sums of a block: two 16-bit counters per word.
struct BlockCounts {
  uint32_t c1 = 0, c2 = 0, c3 = 0, flags = 0, any_hard = 0;
};

void add_block(EventCounts& e, const BlockCounts& b) {
  e.inexact += b.c1 & 0xFFFF;
  e.zero += b.c1 >> 16;
  e.flushed += b.c2 & 0xFFFF;
  e.subnormal += b.c2 >> 16;
  e.overflow += b.c3 & 0xFFFF;
  e.nan += b.c3 >> 16;
  e.flags |= static_cast<uint8_t>(b.flags);
}

constexpr size_t kBlock = 32768;  // < 65536: the 16-bit counter fields cannot overflow
constexpr size_t kHardBlock = 2048;

/// Formats the vector kernels handle (validate() accepts more: fp32, e8m0, unsigned formats).
bool vector_format(const Format& f, int max_frac) {
  if (!f.is_signed || !f.has_zero) return false;
  if (f.exp_bits < 1 || f.exp_bits > 8 || f.frac_bits > max_frac) return false;
  if (f.specials == Specials::ieee && (f.frac_bits == 0 || f.exp_bits < 2)) return false;
  if (f.specials == Specials::fnuz && f.nbits() > 31) return false;
  if (f.overflow == Overflow::infinity && !f.has_inf()) return false;
  if (f.overflow == Overflow::nan && !f.has_nan()) return false;
  if (f.max_mag() == 0) return false;
  const int emin = f.emin();
  if (f.emax() > 127 || emin - f.frac_bits < -149) return false;
  // The exponent of 2^emin must be a normal f32 exponent field.
  return 127 + emin >= 1 && 127 + emin <= 254;
}

RoundParams make_round_params(const Format& f, Rounding r, Tininess t) {
  RoundParams P{};
  const uint32_t m = f.frac_bits;
  const int emin = f.emin();
  P.knorm = 23 - m;
  P.adj = uint32_t(127 - f.bias) << m;
  P.tsub_bits = uint32_t(127 + emin) << 23;
  P.kbase = uint32_t(150 + emin - int(m));
  P.max_mag = f.max_mag();
  P.sb_shift = 31 - uint32_t(f.exp_bits + m);
  P.sign_bit = f.sign_bit();
  P.zmask = f.has_neg_zero() ? f.sign_bit() : 0;
  // The overflow results, from the scalar reference's own helpers.
  Env e;
  const uint32_t inf_pos = pack_overflow_inf(f, false), inf_neg = pack_overflow_inf(f, true);
  const uint32_t max_pos = pack_max(f, false), max_neg = pack_max(f, true);
  const bool to_inf_pos = r == Rounding::near_even || r == Rounding::near_maxMag ||
                          r == Rounding::stochastic || r == Rounding::max;
  const bool to_inf_neg = r == Rounding::near_even || r == Rounding::near_maxMag ||
                          r == Rounding::stochastic || r == Rounding::min;
  P.ovf_pos = to_inf_pos ? inf_pos : max_pos;
  P.ovf_neg = to_inf_neg ? inf_neg : max_neg;
  e.flags = 0;
  P.inf_pos = pack_inf(f, false, e);
  P.inf_neg = pack_inf(f, true, e);
  P.inf_flags = e.flags;
  switch (f.specials) {
    case Specials::ieee:
      P.nan_pmask = f.frac_mask();
      P.nan_base = f.inf_mag() | (uint32_t(1) << (m - 1));
      P.nan_sign = f.sign_bit();
      break;
    case Specials::fn:
      P.nan_base = f.mag_mask();
      P.nan_sign = f.sign_bit();
      break;
    case Specials::fnuz: P.nan_base = f.default_nan(); break;
    default: P.nan_base = f.default_nan(); P.nan_flags = kInv;  // no NaN to return: invalid, +max
  }
  P.tiny_ku = (uint32_t(2) << m) - 1;
  P.after = t == Tininess::after_rounding ? ~0u : 0u;
  P.ftz = f.ftz ? ~0u : 0u;
  P.mag_mask = f.mag_mask();
  P.nan_thresh = f.specials == Specials::ieee ? f.inf_mag()
                 : f.specials == Specials::fn ? f.mag_mask() - 1
                                              : f.mag_mask();
  P.fnuz_nan = f.specials == Specials::fnuz ? f.default_nan() : 0xFFFFFFFFu;
  P.sub_lim = uint32_t(1) << m;
  P.adjk = uint32_t(127 - f.bias) << 23;
  P.wide = f.exp_bits == 8 && f.bias == 127 && f.specials == Specials::ieee;
  P.fp_emin = float(emin);
  P.fp_m = float(m);
  P.fp_scale = float(uint32_t(1) << m);
  P.fp_ok = 0;
  P.ovf_sym = P.ovf_neg == (P.ovf_pos | P.sign_bit) ||
              (P.ovf_neg == P.ovf_pos && (P.ovf_pos & P.sign_bit) != 0);
  P.lowmask = (uint32_t(1) << P.knorm) - 1;
  Env d;
  const uint32_t maxbits = to_f32_bits(f, f.max_mag(), d);
  if (maxbits >= P.tsub_bits) {
    P.plain_lo = P.tsub_bits;
    P.plain_span = maxbits - P.tsub_bits;
  } else {
    P.plain_lo = 0xFFFFFFFFu;  // no lane is ever plain
    P.plain_span = 0;
  }
  return P;
}

DecodeParams make_decode_params(const Format& f) {
  DecodeParams D{};
  const uint32_t m = f.frac_bits;
  D.enc_mask = f.enc_mask();
  D.mag_mask = f.mag_mask();
  D.sign_bit = f.sign_bit();
  D.sb_shift = 31 - uint32_t(f.exp_bits + m);
  D.knorm = 23 - m;
  D.dadj = uint32_t(127 - f.bias) << m;
  D.sub_lim = uint32_t(1) << m;
  D.sub_keep = f.daz ? 0u : ~0u;
  D.inf_mag = f.has_inf() ? f.inf_mag() : 0xFFFFFFFFu;
  D.nan_thresh = f.specials == Specials::ieee ? f.inf_mag()
                 : f.specials == Specials::fn ? f.mag_mask() - 1
                                              : f.mag_mask();
  D.dnan_pmask = f.specials == Specials::ieee ? f.frac_mask() : 0;
  D.fnuz_nan = f.specials == Specials::fnuz ? f.default_nan() : 0xFFFFFFFFu;
  // Subnormal values fraction · 2^e0, e0 = emin − m >= −149 (vector_format). Below 2^−126 they
  // are f32 subnormals with f32 fraction fraction · 2^(e0 + 149).
  const int e0 = f.emin() - int(m);
  if (e0 >= -126) {
    D.sub_thresh = 1;  // only zero takes the shift
    D.sub_shift = 0;
  } else {
    const int lim = -126 - e0;  // fractions below 2^lim; lim <= m since emin >= −126
    D.sub_thresh = uint32_t(1) << lim;
    D.sub_shift = uint32_t(e0 + 149);
  }
  D.sub_eadj = uint32_t(e0) << 23;
  D.quiet_or = f.specials == Specials::ieee ? uint32_t(1) << (m - 1) : 0;
  D.qmask = D.quiet_or;
  D.qval = f.specials == Specials::ieee ? 0 : 1;  // 1: never equal, no signalling NaNs
  D.default_nan = f.default_nan();
  const bool divz_inf = f.has_inf() && f.overflow != Overflow::saturate;
  D.divz_pos = divz_inf ? f.inf_mag() : pack_overflow_inf(f, false);
  D.divz_neg = divz_inf ? with_sign(f, true, f.inf_mag()) : pack_overflow_inf(f, true);
  return D;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The vector loops, once per instruction set.

#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,f16c,popcnt")
namespace isa_avx2 {
namespace {
constexpr int kLanes = 8;
typedef uint32_t U __attribute__((vector_size(32)));
typedef int32_t M __attribute__((vector_size(32)));  // masks: 0 or −1 per lane
typedef float F __attribute__((vector_size(32)));
typedef uint16_t U16 __attribute__((vector_size(16)));
typedef uint8_t U8 __attribute__((vector_size(8)));
/// The 64-bit products of the even 32-bit lanes of a and b (vpmuludq).
HW_AI U mul_even(U a, U b) {
  return reinterpret_cast<U>(
      _mm256_mul_epu32(reinterpret_cast<__m256i>(a), reinterpret_cast<__m256i>(b)));
}
HW_AI bool all_lanes(M m) { return _mm256_movemask_ps(reinterpret_cast<__m256>(m)) == 0xFF; }
/// Every lane of v − lo is at most span (unsigned).
HW_AI bool all_within(U v, uint32_t lo, uint32_t span) {
  const __m256i d = _mm256_sub_epi32(reinterpret_cast<__m256i>(v), _mm256_set1_epi32(int(lo)));
  const __m256i sp = _mm256_set1_epi32(int(span));
  return _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_min_epu32(d, sp), d))) ==
         0xFF;
}
HW_AI U widen_u16(const uint16_t* p) {
  return reinterpret_cast<U>(
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
HW_AI U widen_u8(const uint8_t* p) {
  return reinterpret_cast<U>(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
HW_AI void narrow_u16(uint16_t* p, U v) {
  const U16 w = __builtin_convertvector(v, U16);
  std::memcpy(p, &w, sizeof w);
}
HW_AI void narrow_u8(uint8_t* p, U v) {
  const U8 w = __builtin_convertvector(v, U8);
  std::memcpy(p, &w, sizeof w);
}
/// The lanes where x or y is a NaN, one bit each: one compare for two vectors.
HW_AI unsigned nan_bits(F x, F y) {
  return unsigned(_mm256_movemask_ps(
      _mm256_cmp_ps(reinterpret_cast<__m256>(x), reinterpret_cast<__m256>(y), _CMP_UNORD_Q)));
}
/// F16C: fp16 encodings → f32 (exact) and f32 → fp16 near_even (identical to the reference on
/// all 2^32 inputs: the exhaustive test).
HW_AI F f16_to_f32(U16 h) {
  return reinterpret_cast<F>(_mm256_cvtph_ps(reinterpret_cast<__m128i>(h)));
}
HW_AI U16 f32_to_f16(F x) {
  return reinterpret_cast<U16>(
      _mm256_cvtps_ph(reinterpret_cast<__m256>(x), _MM_FROUND_TO_NEAREST_INT));
}
#include "bulk_kernels.inc"

void f16c_round(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = static_cast<uint16_t>(_cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT));
}

void f16c_quantize(const float* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = _cvtsh_ss(_cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT));
}

/// F16C near_even over `len` elements (a multiple of 8) with the event counts of the common
/// case: when every input magnitude lies in [2^-14, 65520) every result is a normal fp16 (no
/// zero, subnormal, overflow or NaN) and it is inexact exactly when the 13 dropped fraction
/// bits are non-zero. Returns false when some lane is outside that range; the results are
/// written either way and the caller recounts such a chunk with the full kernel.
template <class Out>
bool f16c_round_counted(const float* in, Out* out, size_t len, uint32_t& inexact) {
  const __m256i lo2 = _mm256_set1_epi32(0x71000000), last2 = _mm256_set1_epi32(0x1DFFDFFF);
  const __m256i low13 = _mm256_set1_epi32(0x1FFF), zero = _mm256_setzero_si256();
  __m256i exact = zero, ok = _mm256_set1_epi32(-1);
  for (size_t i = 0; i < len; i += 8) {
    const __m256 x = _mm256_loadu_ps(in + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    if constexpr (std::is_same_v<Out, float>) {
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    }
    const __m256i xi = _mm256_castps_si256(x);
    const __m256i d = _mm256_sub_epi32(_mm256_add_epi32(xi, xi), lo2);  // 2|x| - 2^-13
    ok = _mm256_and_si256(ok, _mm256_cmpeq_epi32(_mm256_min_epu32(d, last2), d));
    exact = _mm256_sub_epi32(exact, _mm256_cmpeq_epi32(_mm256_and_si256(xi, low13), zero));
  }
  if (_mm256_movemask_ps(_mm256_castsi256_ps(ok)) != 0xFF) return false;
  alignas(32) uint32_t e[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(e), exact);
  inexact = uint32_t(len) - (e[0] + e[1] + e[2] + e[3] + e[4] + e[5] + e[6] + e[7]);
  return true;
}
}  // namespace
}  // namespace isa_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target(                                                     \
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,bmi,bmi2,f16c,popcnt," \
    "prefer-vector-width=512")
namespace isa_avx512 {
namespace {
constexpr int kLanes = 16;
typedef uint32_t U __attribute__((vector_size(64)));
typedef int32_t M __attribute__((vector_size(64)));  // masks: 0 or −1 per lane
typedef float F __attribute__((vector_size(64)));
typedef uint16_t U16 __attribute__((vector_size(32)));
typedef uint8_t U8 __attribute__((vector_size(16)));
HW_AI U mul_even(U a, U b) {
  return reinterpret_cast<U>(
      _mm512_mul_epu32(reinterpret_cast<__m512i>(a), reinterpret_cast<__m512i>(b)));
}
HW_AI bool all_lanes(M m) { return _mm512_movepi32_mask(reinterpret_cast<__m512i>(m)) == 0xFFFF; }
HW_AI bool all_within(U v, uint32_t lo, uint32_t span) {
  const __m512i d = _mm512_sub_epi32(reinterpret_cast<__m512i>(v), _mm512_set1_epi32(int(lo)));
  return _mm512_cmple_epu32_mask(d, _mm512_set1_epi32(int(span))) == 0xFFFF;
}
HW_AI U widen_u16(const uint16_t* p) {
  return reinterpret_cast<U>(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
}
HW_AI U widen_u8(const uint8_t* p) {
  return reinterpret_cast<U>(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
HW_AI void narrow_u16(uint16_t* p, U v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtepi32_epi16(reinterpret_cast<__m512i>(v)));
}
HW_AI void narrow_u8(uint8_t* p, U v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(reinterpret_cast<__m512i>(v)));
}
HW_AI unsigned nan_bits(F x, F y) {
  return _mm512_cmp_ps_mask(reinterpret_cast<__m512>(x), reinterpret_cast<__m512>(y), _CMP_UNORD_Q);
}
HW_AI F f16_to_f32(U16 h) {
  return reinterpret_cast<F>(_mm512_maskz_cvtph_ps(0xFFFF, reinterpret_cast<__m256i>(h)));
}
HW_AI U16 f32_to_f16(F x) {
  return reinterpret_cast<U16>(
      _mm512_maskz_cvtps_ph(0xFFFF, reinterpret_cast<__m512>(x), _MM_FROUND_TO_NEAREST_INT));
}
#define HALFWAY_FP_ROUND 1
#include "bulk_kernels.inc"
#undef HALFWAY_FP_ROUND

void f16c_round(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h =
        _mm512_maskz_cvtps_ph(0xFFFF, _mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256i h =
        _mm512_maskz_cvtps_ph(k, _mm512_maskz_loadu_ps(k, in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_mask_storeu_epi16(out + i, k, h);
  }
}

void f16c_quantize(const float* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h =
        _mm512_maskz_cvtps_ph(0xFFFF, _mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm512_storeu_ps(out + i, _mm512_maskz_cvtph_ps(0xFFFF, h));
  }
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256i h =
        _mm512_maskz_cvtps_ph(k, _mm512_maskz_loadu_ps(k, in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm512_mask_storeu_ps(out + i, k, _mm512_maskz_cvtph_ps(k, h));
  }
}

/// As isa_avx2::f16c_round_counted, 16 lanes (`len` a multiple of 16).
template <class Out>
bool f16c_round_counted(const float* in, Out* out, size_t len, uint32_t& inexact) {
  const __m512i lo2 = _mm512_set1_epi32(0x71000000), span2 = _mm512_set1_epi32(0x1DFFE000);
  const __m512i low13 = _mm512_set1_epi32(0x1FFF), one = _mm512_set1_epi32(1);
  __m512i inx = _mm512_setzero_si512();
  __mmask16 bad = 0;
  for (size_t i = 0; i < len; i += 16) {
    const __m512 x = _mm512_loadu_ps(in + i);
    const __m256i h = _mm512_maskz_cvtps_ph(0xFFFF, x, _MM_FROUND_TO_NEAREST_INT);
    if constexpr (std::is_same_v<Out, float>) {
      _mm512_storeu_ps(out + i, _mm512_maskz_cvtph_ps(0xFFFF, h));
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
    }
    const __m512i xi = _mm512_castps_si512(x);
    const __m512i d = _mm512_sub_epi32(_mm512_add_epi32(xi, xi), lo2);  // 2|x| - 2^-13
    bad |= _mm512_cmpge_epu32_mask(d, span2);
    inx = _mm512_mask_add_epi32(inx, _mm512_test_epi32_mask(xi, low13), inx, one);
  }
  if (bad) return false;
  inexact = uint32_t(_mm512_reduce_add_epi32(inx));
  return true;
}
}  // namespace
}  // namespace isa_avx512
#pragma GCC pop_options

// AVX512-BF16 `vcvtneps2bf16` for bf16 near_even: round to nearest even, NaNs quieted with the
// top of their payload (as the reference), but f32 subnormal inputs read as zero. Without
// counts it takes every vector without an f32 subnormal lane (one vfpclassps); with counts only
// vectors whose lanes are all ordinary (normal bf16 results), whose only event is inexact. The
// full sequence takes every other vector. The exhaustive test compares all 2^32 inputs.
#pragma GCC push_options
#pragma GCC target(                                                     \
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,bmi,bmi2,f16c,popcnt," \
    "avx512bf16,prefer-vector-width=512")
namespace isa_avx512 {
namespace {
constexpr int kClassSubnormal = 0x20;  // vfpclassps categories
constexpr int kClassNanInfSubnormal = 0x01 | 0x08 | 0x10 | 0x20 | 0x80;

/// At most kBlock elements (the counters are 16-bit per lane). With `Flags`, an ordinary lane's
/// only event is inexact: a non-zero dropped half. `Lenient` (no counts, the default MXCSR, whose
/// DAZ would change what vfpclassps sees): only vectors with an f32 subnormal lane take the full
/// sequence. Out = float: quantize_f32, the result widened back by a shift.
template <bool Flags, bool Lenient, class Out>
void bf16_round_hw(const RoundParams& P, const DecodeParams& D, const float* in, Out* out,
                   size_t n, BlockCounts& bc) {
  static_assert(!(Flags && Lenient));
  U acc[4] = {};
  U c1 = {}, fl = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const U x = load(in + i);
    const bool hw =
        Lenient ? _mm512_fpclass_ps_mask(reinterpret_cast<__m512>(x), kClassSubnormal) == 0
                : all_plain(P, x);
    if (__builtin_expect(hw, 1)) {
      const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(reinterpret_cast<__m512>(x)));
      if constexpr (std::is_same_v<Out, float>) {
        _mm512_storeu_si512(out + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
      }
      if constexpr (Flags) {  // inexact: a non-zero dropped half (fl is set from c1 below)
        const __mmask16 inx = _mm512_test_epi32_mask(reinterpret_cast<__m512i>(x),
                                                     _mm512_set1_epi32(0xFFFF));
        c1 = reinterpret_cast<U>(_mm512_mask_sub_epi32(reinterpret_cast<__m512i>(c1), inx,
                                                       reinterpret_cast<__m512i>(c1),
                                                       _mm512_set1_epi32(-1)));
      }
    } else {
      round_full<Rounding::near_even, Flags, Out>(P, D, x, U{}, out + i, ~M{}, acc);
    }
  }
  // A lane that counted an inexact result raised the flag (c1 cannot wrap: n < 65536).
  if constexpr (Flags) fl = bits(c1 != 0u) & kInx;
  acc[0] += c1;
  acc[3] |= fl;
  bc = BlockCounts{};
  add_lanes(bc, acc);
  if (i < n) {
    BlockCounts tail;
    round_loop<Rounding::near_even, Flags, Out>(P, D, in + i, out + i, n - i, nullptr, tail);
    bc.c1 += tail.c1;
    bc.c2 += tail.c2;
    bc.c3 += tail.c3;
    bc.flags |= tail.flags;
  }
}

/// bf16 + − × ÷ near_even without counts: operands widened by a shift, the fp32 operation, and
/// vcvtneps2bf16, which is the correctly rounded result wherever the fp32 result is normal or
/// zero (fp32's 24 bits >= 2·8 + 2, see binary_core). A vector with a subnormal, infinite or NaN
/// fp32 result goes through the full sequence, its hard lanes left to the caller as in
/// binary_loop.
template <BinaryOp Op>
void bf16_binary_hw(const RoundParams& P, const DecodeParams& D, const uint16_t* a,
                    const uint16_t* b, uint16_t* out, size_t n, uint8_t* hard, BlockCounts& bc) {
  U any = {};
  // bf16 encodings are the top halves of the f32 ones (NaNs unquieted: the full path).
  auto compute = [&](size_t k) __attribute__((always_inline)) {
    return apply<Op>((F)(load(a + k) << 16), (F)(load(b + k) << 16));
  };
  auto bad = [](F z) __attribute__((always_inline)) {
    return unsigned(_mm512_fpclass_ps_mask(reinterpret_cast<__m512>(z), kClassNanInfSubnormal));
  };
  auto round = [&](size_t k, F z) __attribute__((always_inline)) {
    const __m256bh h = _mm512_cvtneps_pbh(reinterpret_cast<__m512>(z));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), reinterpret_cast<__m256i>(h));
  };
  auto one = [&](size_t k) __attribute__((always_inline)) {
    const F z = compute(k);
    if (__builtin_expect(bad(z) == 0, 1)) return round(k, z);
    U r, f;
    M hd;
    binary_full<Op, false>(P, D, load(a + k), load(b + k), r, f, hd);
    store(out + k, r);
    store(hard + k, bits(hd) & 1u);
    any |= bits(hd);
  };
  // As hw_groups (bulk_kernels.inc), written out here: its instantiation lacks this region's
  // target, so these lambdas could not be inlined into it.
  constexpr size_t G = 4;
  size_t i = 0;
  for (; i + G * kLanes <= n; i += G * kLanes) {
    F z[G];
    unsigned m = 0;
    for (size_t j = 0; j < G; ++j) {
      z[j] = compute(i + j * kLanes);
      m |= bad(z[j]);  // vfpclassps takes one vector
    }
    if (__builtin_expect(m == 0, 1)) {
      for (size_t j = 0; j < G; ++j) round(i + j * kLanes, z[j]);
    } else {
      for (size_t j = 0; j < G; ++j) one(i + j * kLanes);
    }
  }
  for (; i + kLanes <= n; i += kLanes) one(i);
  bc = BlockCounts{};
  if (i < n)
    binary_loop<Op, false, uint16_t, kWide>(P, D, a + i, b + i, out + i, n - i, hard + i, bc);
  for (int j = 0; j < kLanes; ++j) bc.any_hard |= any[j];
}
}  // namespace
}  // namespace isa_avx512
#pragma GCC pop_options

// ---------------------------------------------------------------------------------------------
// Dispatch.

namespace {

/// Saves MXCSR on entry and restores it (status flags included) on exit; `ok()`: the mode is
/// the default one (round to nearest, exceptions masked, no FTZ/DAZ) that the fp32 shortcuts
/// and F16C assume.
class FpState {
 public:
  FpState() : csr_(_mm_getcsr()) {}
  ~FpState() { _mm_setcsr(csr_); }
  bool ok() const { return (csr_ & 0xFFC0u) == 0x1F80u; }

 private:
  unsigned csr_;
};

bool overlaps(const void* a, size_t abytes, const void* b, size_t bbytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bbytes && pb < pa + abytes;
}

/// Only exact aliasing (out == in) or none: partial overlaps go to the reference.
bool aliasing_ok(const void* in, size_t inbytes, const void* out, size_t outbytes) {
  if (in == out) return true;
  return !overlaps(in, inbytes, out, outbytes);
}

/// AVX512-BF16 (vcvtneps2bf16) may run: the AVX-512 path on a CPU that has it.
bool bf16_hardware(BulkPath path) { return path == BulkPath::avx512 && cpu::has(cpu::avx512bf16); }

template <class Out>
using RoundFn = void (*)(const RoundParams&, const DecodeParams&, const float*, Out*, size_t,
                         const uint32_t*, BlockCounts&);

template <Rounding R, bool Flags, class Out>
RoundFn<Out> round_fn(BulkPath p) {
  return p == BulkPath::avx512 ? &isa_avx512::round_loop<R, Flags, Out>
                               : &isa_avx2::round_loop<R, Flags, Out>;
}

template <bool Flags, class Out>
RoundFn<Out> round_fn(BulkPath p, Rounding r) {
  switch (r) {
    case Rounding::near_even: return round_fn<Rounding::near_even, Flags, Out>(p);
    case Rounding::near_maxMag: return round_fn<Rounding::near_maxMag, Flags, Out>(p);
    case Rounding::minMag: return round_fn<Rounding::minMag, Flags, Out>(p);
    case Rounding::min: return round_fn<Rounding::min, Flags, Out>(p);
    case Rounding::max: return round_fn<Rounding::max, Flags, Out>(p);
    case Rounding::odd: return round_fn<Rounding::odd, Flags, Out>(p);
    default: return round_fn<Rounding::stochastic, Flags, Out>(p);
  }
}

constexpr size_t kSrBlock = 2048;  // stochastic rounding: random bits drawn per block

void sr_fill(BulkPath path, const BulkOptions& o, uint32_t* out, size_t n);

/// out[j·k + t] = field t of draws[j], moved to the top (sr_random), for nd whole draws.
/// Four fields (7 or 8 random bits, the hardware's e2m1 case) in the vector kernels.
void expand_fields(BulkPath path, const uint32_t* __restrict draws, size_t nd, uint32_t k,
                   uint32_t bits, uint32_t mask, uint32_t* __restrict out) {
  if (k == 4)
    return path == BulkPath::avx512 ? isa_avx512::expand_fields4(draws, nd, bits, mask, out)
                                    : isa_avx2::expand_fields4(draws, nd, bits, mask, out);
  for (size_t j = 0; j < nd; ++j)
    for (uint32_t t = 0; t < k; ++t) out[j * k + t] = (draws[j] << (bits * t)) & mask;
}

/// sr_fill with packed draws (k = sr_fields > 1 elements per draw): the draws the elements
/// read, then each draw's fields: a partial first draw (an offset inside a draw), whole draws,
/// and a partial last one.
void sr_fill_packed(BulkPath path, const BulkOptions& o, uint32_t k, uint32_t* out, size_t n) {
  constexpr size_t kDraws = 512;
  uint32_t draws[kDraws];
  const uint32_t bits = uint32_t(o.random_bits), mask = sr_mask(o.random_bits);
  BulkOptions od = o;  // the draws: 32 bits each, unpacked
  od.offset = o.offset / k;
  od.random_bits = 32;
  od.pack_random_bits = false;
  uint32_t t = uint32_t(o.offset % k);  // the field of out[i]
  for (size_t i = 0; i < n;) {
    const size_t m = std::min<size_t>(kDraws, (n - i + t + k - 1) / k);
    sr_fill(path, od, draws, m);
    od.offset += m;
    size_t j = 0;
    if (t != 0) {
      for (; t < k && i < n; ++t) out[i++] = (draws[0] << (bits * t)) & mask;
      t = 0;
      j = 1;
    }
    const size_t whole = std::min(m - j, (n - i) / k);
    expand_fields(path, draws + j, whole, k, bits, mask, out + i);
    i += whole * k;
    j += whole;
    for (; j < m && i < n; ++t) out[i++] = (draws[j] << (bits * t)) & mask;  // the last ends here
  }
}

/// out[i] = element i's random bits, as bulk.hpp's sr_bits(o, out, n).
void sr_fill(BulkPath path, const BulkOptions& o, uint32_t* out, size_t n) {
  if (const uint32_t k = sr_fields(o.random_bits, o.pack_random_bits); k > 1)
    return sr_fill_packed(path, o, k, out, n);
  const uint32_t mask = sr_mask(o.random_bits);
  // The draws before the first whole counter (offset mod 4 ≠ 0) one by one.
  size_t head = static_cast<size_t>((4 - (o.offset & 3)) & 3);
  if (head > n) head = n;
  for (size_t i = 0; i < head; ++i) out[i] = sr_bits(o.seed, o.subsequence, o.offset + i) & mask;
  const uint64_t c = (o.offset + head) >> 2;
  path == BulkPath::avx512
      ? isa_avx512::philox_fill(o.seed, c, o.subsequence, mask, out + head, n - head)
      : isa_avx2::philox_fill(o.seed, c, o.subsequence, mask, out + head, n - head);
}

template <class Out>
bool round_dispatch(const Format& f, const float* in, Out* out, size_t n, const BulkOptions& o,
                    EventCounts* counts) {
  const BulkPath path = tl_path;
  if (path == BulkPath::reference || !vector_format(f, 22)) return false;
  if (static_cast<uint8_t>(o.rounding) >= kRoundingCount) return false;
  if (!aliasing_ok(in, n * sizeof(float), out, n * sizeof(Out))) return false;
  constexpr bool is_quantize = std::is_same_v<Out, float>;
  // The vector code is integer arithmetic and exact int→float conversions: it neither depends
  // on MXCSR nor raises fp flags. Only the F16C path needs (and restores) the default mode.
  if constexpr (std::is_same_v<Out, uint16_t> || is_quantize) {
    if (tl_hw && f == formats::fp16 && o.rounding == Rounding::near_even) {
      FpState fp;
      if (fp.ok() && !counts) {
        if constexpr (is_quantize) {
          path == BulkPath::avx512 ? isa_avx512::f16c_quantize(in, out, n)
                                   : isa_avx2::f16c_quantize(in, out, n);
        } else {
          path == BulkPath::avx512 ? isa_avx512::f16c_round(in, out, n)
                                   : isa_avx2::f16c_round(in, out, n);
        }
        return true;
      }
      // With counts: F16C chunk by chunk, counting inexact results while every lane is an
      // ordinary one; a chunk with any other lane (or the tail) is redone by the full kernel.
      // Not in place: a redone chunk must still see its inputs.
      if (fp.ok() && static_cast<const void*>(in) != static_cast<const void*>(out)) {
        const RoundParams P = make_round_params(f, o.rounding, o.tininess);
        const DecodeParams D = make_decode_params(f);
        const RoundFn<Out> full = round_fn<true, Out>(path, o.rounding);
        constexpr size_t kChunk = 512;
        const size_t lanes = path == BulkPath::avx512 ? 16 : 8;
        EventCounts ev;
        for (size_t i = 0; i < n;) {
          const size_t len = n - i < kChunk ? n - i : kChunk;
          uint32_t inexact = 0;
          const bool plain =
              len % lanes == 0 &&
              (path == BulkPath::avx512
                   ? isa_avx512::f16c_round_counted(in + i, out + i, len, inexact)
                   : isa_avx2::f16c_round_counted(in + i, out + i, len, inexact));
          if (plain) {
            ev.inexact += inexact;
            if (inexact) ev.flags |= flag::inexact;
          } else {
            BlockCounts bc;
            full(P, D, in + i, out + i, len, nullptr, bc);
            add_block(ev, bc);
          }
          i += len;
        }
        ev.total = n;
        *counts += ev;
        return true;
      }
    }
  }
  RoundParams P = make_round_params(f, o.rounding, o.tininess);
  const DecodeParams D = make_decode_params(f);
  if constexpr (std::is_same_v<Out, uint16_t> || is_quantize) {
    if (tl_hw && bf16_hardware(path) && f == formats::bf16 && o.rounding == Rounding::near_even) {
      const bool lenient = !counts && FpState().ok();
      EventCounts ev;
      for (size_t i = 0; i < n; i += kBlock) {
        const size_t len = n - i < kBlock ? n - i : kBlock;
        BlockCounts bc;
        if (counts)
          isa_avx512::bf16_round_hw<true, false>(P, D, in + i, out + i, len, bc);
        else if (lenient)
          isa_avx512::bf16_round_hw<false, true>(P, D, in + i, out + i, len, bc);
        else
          isa_avx512::bf16_round_hw<false, false>(P, D, in + i, out + i, len, bc);
        add_block(ev, bc);
      }
      if (counts) {
        ev.total = n;
        *counts += ev;
      }
      return true;
    }
  }
  // The floating-point full sequence needs the default MXCSR; `fp` restores the status flags.
  FpState fp;
  P.fp_ok = fp.ok() && f.frac_bits >= 1 ? ~0u : 0u;
  // ftz needs the tininess, computed with the flags.
  const bool flags = counts != nullptr || f.ftz;
  const RoundFn<Out> fn =
      flags ? round_fn<true, Out>(path, o.rounding) : round_fn<false, Out>(path, o.rounding);
  EventCounts ev;
  // Stochastic rounding: the random bits of a block are drawn first, vectorised, then read
  // by the rounding loop (padded to whole vectors).
  const bool sr = o.rounding == Rounding::stochastic;
  alignas(64) uint32_t rbits[kSrBlock + 16];
  const size_t block = sr ? kSrBlock : kBlock;
  for (size_t i = 0; i < n;) {
    const size_t len = n - i < block ? n - i : block;
    if (sr) {
      BulkOptions oi = o;
      oi.offset = o.offset + i;
      sr_fill(path, oi, rbits, len);
      std::memset(rbits + len, 0, 16 * sizeof(uint32_t));
    }
    BlockCounts bc;
    fn(P, D, in + i, out + i, len, sr ? rbits : nullptr, bc);
    add_block(ev, bc);
    i += len;
  }
  if (counts) {
    ev.total = n;
    *counts += ev;
  }
  return true;
}

template <class In>
bool decode_dispatch(const Format& f, const In* in, float* out, size_t n) {
  const BulkPath path = tl_path;
  if (path == BulkPath::reference || !vector_format(f, 23)) return false;
  if (!aliasing_ok(in, n * sizeof(In), out, n * sizeof(float))) return false;
  const DecodeParams D = make_decode_params(f);
  using Fn = void (*)(const DecodeParams&, const In*, float*, size_t);
  Fn fn = path == BulkPath::avx512 ? &isa_avx512::decode_loop<kGeneric, In>
                                   : &isa_avx2::decode_loop<kGeneric, In>;
  const int kind = decode_kind(f, sizeof(In), tl_hw, false);
  if constexpr (std::is_same_v<In, uint16_t>) {
    if (kind == kHalf) {
      FpState fp;  // vcvtph2ps: the default mode (no DAZ) only
      if (fp.ok()) {
        fn = path == BulkPath::avx512 ? &isa_avx512::decode_loop<kHalf, In>
                                      : &isa_avx2::decode_loop<kHalf, In>;
        fn(D, in, out, n);
        return true;
      }
    }
  }
  if constexpr (!std::is_same_v<In, uint8_t>) {
    if (kind == kWide)
      fn = path == BulkPath::avx512 ? &isa_avx512::decode_loop<kWide, In>
                                    : &isa_avx2::decode_loop<kWide, In>;
  }
  fn(D, in, out, n);
  return true;
}

/// Shared checks of the arithmetic fast paths.
bool arith_ok(const Format& f, const BulkOptions& o) {
  return tl_path != BulkPath::reference && o.rounding == Rounding::near_even &&
         vector_format(f, 10);
}

template <class T>
using BinaryFn = void (*)(const RoundParams&, const DecodeParams&, const T*, const T*, T*, size_t,
                          uint8_t*, BlockCounts&);

template <BinaryOp Op, bool Flags, class T, int Kind>
BinaryFn<T> binary_fn(BulkPath p) {
  return p == BulkPath::avx512 ? &isa_avx512::binary_loop<Op, Flags, T, Kind>
                               : &isa_avx2::binary_loop<Op, Flags, T, Kind>;
}

template <BinaryOp Op, bool Flags, class T>
BinaryFn<T> binary_fn(BulkPath p, int kind) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    if constexpr (!Flags) {
      if (kind == kHalfRound) return binary_fn<Op, Flags, T, kHalfRound>(p);
    }
    if (kind == kHalf || kind == kHalfRound) return binary_fn<Op, Flags, T, kHalf>(p);
  }
  if constexpr (!std::is_same_v<T, uint8_t>) {
    if (kind == kWide) return binary_fn<Op, Flags, T, kWide>(p);
  }
  return binary_fn<Op, Flags, T, kGeneric>(p);
}

template <bool Flags, class T>
BinaryFn<T> binary_fn(BulkPath p, BinaryOp op, int kind) {
  switch (op) {
    case BinaryOp::add: return binary_fn<BinaryOp::add, Flags, T>(p, kind);
    case BinaryOp::sub: return binary_fn<BinaryOp::sub, Flags, T>(p, kind);
    case BinaryOp::mul: return binary_fn<BinaryOp::mul, Flags, T>(p, kind);
    default: return binary_fn<BinaryOp::div, Flags, T>(p, kind);
  }
}

BinaryFn<uint16_t> bf16_binary_fn(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return &isa_avx512::bf16_binary_hw<BinaryOp::add>;
    case BinaryOp::sub: return &isa_avx512::bf16_binary_hw<BinaryOp::sub>;
    case BinaryOp::mul: return &isa_avx512::bf16_binary_hw<BinaryOp::mul>;
    default: return &isa_avx512::bf16_binary_hw<BinaryOp::div>;
  }
}

template <class T>
using FmaFn = void (*)(const RoundParams&, const DecodeParams&, const T*, const T*, const T*, T*,
                       size_t, uint8_t*, BlockCounts&);

template <bool Flags, class T, int Kind>
FmaFn<T> fma_fn(BulkPath p) {
  return p == BulkPath::avx512 ? &isa_avx512::fma_loop<Flags, T, Kind>
                               : &isa_avx2::fma_loop<Flags, T, Kind>;
}

template <bool Flags, class T>
FmaFn<T> fma_fn(BulkPath p, int kind) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    if constexpr (!Flags) {
      if (kind == kHalfRound) return fma_fn<Flags, T, kHalfRound>(p);
    }
    if (kind == kHalf || kind == kHalfRound) return fma_fn<Flags, T, kHalf>(p);
  }
  if constexpr (!std::is_same_v<T, uint8_t>) {
    if (kind == kWide) return fma_fn<Flags, T, kWide>(p);
  }
  return fma_fn<Flags, T, kGeneric>(p);
}

/// Recompute the hard lanes of a block with the scalar routines.
template <class T, class Op>
void fix_hard(const Format& f, uint8_t* hard, size_t base, size_t len, T* out,
              const BulkOptions& o, EventCounts* ev, Op op) {
  // hard[] is indexed from the block start `base`; out and op take element indices.
  for (size_t j = 0; j < len; ++j) {
    if (!hard[j]) continue;
    hard[j] = 0;  // the loops write only the entries of the vectors that take the full path
    const size_t i = base + j;
    Env e = element_env(o, i);
    const uint32_t r = op(i, e);
    out[i] = static_cast<T>(r);
    if (ev) {
      count_event(f, r, (e.flags & flag::inexact) != 0, e.flags, *ev);
      ev->total--;  // the caller counts every element once
    }
  }
}

template <class T>
bool binary_dispatch(BinaryOp op, const Format& f, const T* a, const T* b, T* out, size_t n,
                     const BulkOptions& o, EventCounts* counts) {
  if (!arith_ok(f, o)) return false;
  if (!aliasing_ok(a, n * sizeof(T), out, n * sizeof(T)) ||
      !aliasing_ok(b, n * sizeof(T), out, n * sizeof(T)))
    return false;
  FpState fp;
  if (!fp.ok()) return false;
  const RoundParams P = make_round_params(f, o.rounding, o.tininess);
  const DecodeParams D = make_decode_params(f);
  const bool flags = counts != nullptr || f.ftz;
  const int kind = decode_kind(f, sizeof(T), tl_hw, !flags);
  BinaryFn<T> fn =
      flags ? binary_fn<true, T>(tl_path, op, kind) : binary_fn<false, T>(tl_path, op, kind);
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (!flags && tl_hw && kind == kWide && f == formats::bf16 && bf16_hardware(tl_path))
      fn = bf16_binary_fn(op);
  }
  EventCounts ev;
  EventCounts* evp = counts ? &ev : nullptr;
  uint8_t hard[kHardBlock] = {};  // all zero between blocks: fix_hard clears what it reads
  for (size_t i = 0; i < n; i += kHardBlock) {
    const size_t len = n - i < kHardBlock ? n - i : kHardBlock;
    BlockCounts bc;
    fn(P, D, a + i, b + i, out + i, len, hard, bc);
    add_block(ev, bc);
    if (bc.any_hard) {
      // Scalar reference for those lanes; `hard` is indexed from the block start.
      fix_hard(f, hard, i, len, out, o, evp, [&](size_t k, Env& e) -> uint32_t {
        switch (op) {
          case BinaryOp::add: return add(f, a[k], b[k], e);
          case BinaryOp::sub: return sub(f, a[k], b[k], e);
          case BinaryOp::mul: return mul(f, a[k], b[k], e);
          default: return div(f, a[k], b[k], e);
        }
      });
    }
  }
  if (counts) {
    ev.total += n;
    *counts += ev;
  }
  return true;
}

template <class T>
bool fma_dispatch(const Format& f, const T* a, const T* b, const T* c, T* out, size_t n,
                  const BulkOptions& o, EventCounts* counts) {
  if (!arith_ok(f, o)) return false;
  const size_t bytes = n * sizeof(T);
  if (!aliasing_ok(a, bytes, out, bytes) || !aliasing_ok(b, bytes, out, bytes) ||
      !aliasing_ok(c, bytes, out, bytes))
    return false;
  FpState fp;
  if (!fp.ok()) return false;
  const RoundParams P = make_round_params(f, o.rounding, o.tininess);
  const DecodeParams D = make_decode_params(f);
  const bool flags = counts != nullptr || f.ftz;
  const int kind = decode_kind(f, sizeof(T), tl_hw, !flags);
  const FmaFn<T> fn = flags ? fma_fn<true, T>(tl_path, kind) : fma_fn<false, T>(tl_path, kind);
  EventCounts ev;
  EventCounts* evp = counts ? &ev : nullptr;
  uint8_t hard[kHardBlock] = {};  // all zero between blocks: fix_hard clears what it reads
  for (size_t i = 0; i < n; i += kHardBlock) {
    const size_t len = n - i < kHardBlock ? n - i : kHardBlock;
    BlockCounts bc;
    fn(P, D, a + i, b + i, c + i, out + i, len, hard, bc);
    add_block(ev, bc);
    if (bc.any_hard) {
      fix_hard(f, hard, i, len, out, o, evp, [&](size_t k, Env& e) -> uint32_t {
        return halfway::fma(f, a[k], b[k], c[k], e);
      });
    }
  }
  if (counts) {
    ev.total += n;
    *counts += ev;
  }
  return true;
}

}  // namespace

bool fast_round_f32(const Format& f, const float* in, uint8_t* out, size_t n, const BulkOptions& o,
                    EventCounts* counts) {
  return round_dispatch(f, in, out, n, o, counts);
}
bool fast_round_f32(const Format& f, const float* in, uint16_t* out, size_t n, const BulkOptions& o,
                    EventCounts* counts) {
  return round_dispatch(f, in, out, n, o, counts);
}
bool fast_round_f32(const Format& f, const float* in, uint32_t* out, size_t n, const BulkOptions& o,
                    EventCounts* counts) {
  return round_dispatch(f, in, out, n, o, counts);
}
bool fast_quantize_f32(const Format& f, const float* in, float* out, size_t n, const BulkOptions& o,
                       EventCounts* counts) {
  return round_dispatch(f, in, out, n, o, counts);
}
bool fast_sr_bits(const BulkOptions& o, uint32_t* out, size_t n) {
  if (tl_path == BulkPath::reference) return false;
  sr_fill(tl_path, o, out, n);
  return true;
}
bool fast_decode_f32(const Format& f, const uint8_t* in, float* out, size_t n) {
  return decode_dispatch(f, in, out, n);
}
bool fast_decode_f32(const Format& f, const uint16_t* in, float* out, size_t n) {
  return decode_dispatch(f, in, out, n);
}
bool fast_decode_f32(const Format& f, const uint32_t* in, float* out, size_t n) {
  return decode_dispatch(f, in, out, n);
}
bool fast_binary(BinaryOp op, const Format& f, const uint8_t* a, const uint8_t* b, uint8_t* out,
                 size_t n, const BulkOptions& o, EventCounts* counts) {
  return binary_dispatch(op, f, a, b, out, n, o, counts);
}
bool fast_binary(BinaryOp op, const Format& f, const uint16_t* a, const uint16_t* b, uint16_t* out,
                 size_t n, const BulkOptions& o, EventCounts* counts) {
  return binary_dispatch(op, f, a, b, out, n, o, counts);
}
bool fast_binary(BinaryOp op, const Format& f, const uint32_t* a, const uint32_t* b, uint32_t* out,
                 size_t n, const BulkOptions& o, EventCounts* counts) {
  return binary_dispatch(op, f, a, b, out, n, o, counts);
}
bool fast_fma(const Format& f, const uint8_t* a, const uint8_t* b, const uint8_t* c, uint8_t* out,
              size_t n, const BulkOptions& o, EventCounts* counts) {
  return fma_dispatch(f, a, b, c, out, n, o, counts);
}
bool fast_fma(const Format& f, const uint16_t* a, const uint16_t* b, const uint16_t* c,
              uint16_t* out, size_t n, const BulkOptions& o, EventCounts* counts) {
  return fma_dispatch(f, a, b, c, out, n, o, counts);
}
bool fast_fma(const Format& f, const uint32_t* a, const uint32_t* b, const uint32_t* c,
              uint32_t* out, size_t n, const BulkOptions& o, EventCounts* counts) {
  return fma_dispatch(f, a, b, c, out, n, o, counts);
}

#endif  // HALFWAY_BULK_X86

}  // namespace halfway::detail
