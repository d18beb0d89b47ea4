// Block-scaled quantization (blocks.hpp). Each call makes two passes over a tensor and a
// short one over its blocks: the block amax (integer max of |x|'s bits), one scale per block
// (branch-free loops), and the elements: each is scaled, rounded into the element format and
// its events counted in one fused step (encode_one; AVX-512 for blocks along a row, portable
// loops cloned for x86-64-v4/v3 otherwise). Stochastic rounding (NVFP4) scales into a buffer
// and rounds it with the bulk kernels (bulk.hpp).
// docs/blocks.md defines every step; the tests compare with an oracle written separately
// (tests/block_oracle.cpp) and, in Python, with a numpy transcription of the definitions.
// Compiled with -ffp-contract=off: every fp32 step is its own rounding, as the definitions say.
#include "halfway/blocks.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "halfway/bulk.hpp"
#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"

namespace halfway {

namespace detail {
const float kRhtSigns[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};

void rht16(float* v, size_t stride) {
  float in[16];
  for (int k = 0; k < 16; ++k) in[k] = v[size_t(k) * stride];
  for (int j = 0; j < 16; ++j) {
    float acc = 0;
    for (int k = 0; k < 16; ++k) {
      // Sylvester's Hadamard entry H_kj = (−1)^popcount(k & j), with TE's row sign s_k and
      // the normalisation 1/sqrt(16): the matrix entry is ±0.25 exactly.
      const float h = (__builtin_popcount(unsigned(k & j)) & 1) ? -0.25f : 0.25f;
      const float p = in[k] * (kRhtSigns[k] * h);
      acc = k == 0 ? p : acc + p;
    }
    v[size_t(j) * stride] = acc;
  }
}
}  // namespace detail

namespace {

Format saturating(Format f) {
  f.overflow = Overflow::saturate;
  return f;
}

struct SchemeEntry {
  const char* name;
  BlockFamily family;
  Format element;
  int block;
  bool two_d;
};

const SchemeEntry kSchemes[] = {
    {"mxfp8_e4m3", BlockFamily::mx, saturating(formats::e4m3), 32, false},
    {"mxfp8_e5m2", BlockFamily::mx, saturating(formats::e5m2), 32, false},
    {"mxfp6_e2m3", BlockFamily::mx, formats::e2m3, 32, false},
    {"mxfp6_e3m2", BlockFamily::mx, formats::e3m2, 32, false},
    {"mxfp4", BlockFamily::mx, formats::e2m1, 32, false},
    {"nvfp4", BlockFamily::nvfp4, formats::e2m1, 16, false},
    {"nvfp4_2d", BlockFamily::nvfp4, formats::e2m1, 16, true},
    {"fp8_block", BlockFamily::fp8_block, saturating(formats::e4m3), 128, false},
    {"fp8_block_2d", BlockFamily::fp8_block, saturating(formats::e4m3), 128, true},
};

std::string scheme_list() {
  std::string s;
  for (const auto& e : kSchemes) s += (s.empty() ? "" : " ") + std::string(e.name);
  return s;
}

constexpr uint32_t kAbs = 0x7FFFFFFFu;

// The element-pass loops are plain C++ that the compiler vectorises; compile them for AVX-512
// and AVX2 too and pick at run time (the library itself targets the baseline x86-64).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define HALFWAY_BLOCKS_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HALFWAY_BLOCKS_CLONES
#endif
constexpr uint32_t kInfBits = 0x7F800000u;

/// 2^k as an fp32 value, k in [−149, 127].
float pow2f(int k) {
  if (k >= -126) return bits_f32(uint32_t(k + 127) << 23);
  return bits_f32(uint32_t(1) << (k + 149));
}

/// floor(log2 a) and the 23 fraction bits of a's normalised significand, for finite a > 0
/// given by its bits.
void log2_parts(uint32_t a, int& e, uint32_t& frac) {
  const uint32_t field = a >> 23, mant = a & 0x7FFFFFu;
  if (field) {
    e = int(field) - 127;
    frac = mant;
    return;
  }
  const int p = 31 - __builtin_clz(mant);  // leading bit of a subnormal
  e = p - 149;
  frac = (mant << (23 - p)) & 0x7FFFFFu;
}

/// Blocks whose scale makes the element pass take a second look (special_blocks).
enum : uint8_t { kPlainScale = 0, kZeroScale = 1, kNanScale = 2 };

/// The per-call state of an encoding.
struct Job {
  const BlockScheme& s;
  const BlockOptions& o;
  const float* x;
  size_t rows, cols, tr, tc, sr, sc;
  bool divide = false;  ///< fp8_block without pow2 divides by the scale
  float* mult = nullptr;       ///< per block: elements are x · mult (or x / mult when `divide`)
  uint8_t* special = nullptr;  ///< per block: kPlainScale, kZeroScale (NVFP4), kNanScale (MX)
  size_t specials = 0;         ///< how many blocks are not kPlainScale
};

void apply_rht(std::vector<float>& v, size_t rows, size_t cols, BlockAxis axis) {
  if (axis == BlockAxis::last) {
    for (size_t r = 0; r < rows; ++r)
      for (size_t j = 0; j < cols; j += 16) detail::rht16(v.data() + r * cols + j, 1);
  } else {
    for (size_t r = 0; r < rows; r += 16)
      for (size_t c = 0; c < cols; ++c) detail::rht16(v.data() + r * cols + c, cols);
  }
}

/// NVFP4 and blockwise fp8 refuse NaN and infinity; the block amax tells whether there is one.
void require_finite(const BlockScheme& s, const float* x, size_t rows, size_t cols,
                    const std::vector<uint32_t>& amax) {
  uint32_t a = 0;
  for (uint32_t v : amax) a = std::max(a, v);
  if (a < kInfBits) return;
  for (size_t i = 0; i < rows * cols; ++i) {
    if ((f32_bits(x[i]) & kInfBits) == kInfBits)
      throw InputError(s.name + ": non-finite value " + std::to_string(x[i]) + " at [" +
                       std::to_string(i / cols) + ", " + std::to_string(i % cols) +
                       "] (only the MX schemes accept NaN and infinity)");
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define HALFWAY_BLOCKS_AVX512 1
/// The AVX-512 kernels serve blocks along a row (a multiple of 16 long) when the calling
/// thread's bulk path is avx512 (set_bulk_path: tests run both).
bool use_avx512(const Job& j) {
  return j.tc > 1 && detail::bulk_path() == detail::BulkPath::avx512;
}

/// block_amax's rows of blocks along the row (tc a multiple of 16), in AVX-512.
__attribute__((target("avx512f"))) void block_amax_avx512(const Job& j, uint32_t* amax) {
  const __m512i abs = _mm512_set1_epi32(int32_t(kAbs));
  for (size_t r = 0; r < j.rows; ++r) {
    const float* row = j.x + r * j.cols;
    uint32_t* a = amax + (r / j.tr) * j.sc;
    for (size_t b = 0; b < j.sc; ++b) {
      __m512i m = _mm512_setzero_si512();
      for (size_t c = b * j.tc; c < (b + 1) * j.tc; c += 16)
        m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(row + c)), abs));
      a[b] = std::max(a[b], uint32_t(_mm512_reduce_max_epu32(m)));
    }
  }
}
#endif

/// The bits of max |x| of each block (a NaN's bits exceed infinity's).
HALFWAY_BLOCKS_CLONES const std::vector<uint32_t>& block_amax(const Job& j) {
  thread_local std::vector<uint32_t> amax;  // scratch kept between calls: no page faults
  amax.assign(j.sr * j.sc, 0);
#ifdef HALFWAY_BLOCKS_AVX512
  if (use_avx512(j)) {
    block_amax_avx512(j, amax.data());
    return amax;
  }
#endif
  for (size_t r = 0; r < j.rows; ++r) {
    const uint32_t* row = reinterpret_cast<const uint32_t*>(j.x + r * j.cols);
    uint32_t* a = amax.data() + (r / j.tr) * j.sc;
    if (j.tc == 1) {
      for (size_t c = 0; c < j.cols; ++c) a[c] = std::max(a[c], row[c] & kAbs);
      continue;
    }
    for (size_t b = 0; b < j.sc; ++b) {
      uint32_t m = 0;
      for (size_t c = b * j.tc; c < (b + 1) * j.tc; ++c) m = std::max(m, row[c] & kAbs);
      a[b] = std::max(a[b], m);
    }
  }
  return amax;
}

/// The MX scale of every block, branch-free so that it vectorises: k from amax's exponent
/// (a subnormal amax through its exact conversion to float), the ceil rule from its fraction.
HALFWAY_BLOCKS_CLONES void mx_scale_loop(const uint32_t* __restrict amax, size_t nb, int emax,
                                         bool ceil, uint32_t max_frac, uint8_t* __restrict codes,
                                         float* __restrict scales, float* __restrict mult,
                                         uint8_t* __restrict special,
                                         uint8_t* __restrict clamped) {
  for (size_t b = 0; b < nb; ++b) {
    const uint32_t a = amax[b];
    const uint32_t field = a >> 23;
    const uint32_t sub = f32_bits(float(int32_t(a & 0x7FFFFFu)));  // mant = 1.f · 2^p exactly
    const bool is_sub = field == 0;
    const int ea = is_sub ? int(sub >> 23) - 127 - 149 : int(field) - 127;
    const uint32_t frac = (is_sub ? sub : a) & 0x7FFFFFu;
    // floor: 2^(floor(log2 amax) − emax_elem). ceil: the smallest 2^k with
    // amax ≤ 2^k · elem_max; elem_max = M · 2^emax with M in [1, 2), so k = ea − emax when
    // amax's significand is ≤ M, else one more.
    const int k = ea - emax + int(ceil && frac > max_frac);
    const bool zero = a == 0, nan = a >= kInfBits;
    clamped[b] = !zero && !nan && (k < -127 || k > 127);
    // An all-zero block gets the smallest scale by definition (not a clamp).
    const int kc = zero ? -127 : (k < -127 ? -127 : (k > 127 ? 127 : k));
    codes[b] = nan ? uint8_t(0xFF) : uint8_t(kc + 127);
    scales[b] = bits_f32(nan ? 0x7FC00000u : kc >= -126 ? uint32_t(kc + 127) << 23 : 0x00400000u);
    // x · 2^−k is exact whenever it matters (docs/blocks.md).
    mult[b] = bits_f32(kc <= 126 ? uint32_t(127 - kc) << 23 : 0x00400000u);
    special[b] = nan ? kNanScale : kPlainScale;
  }
}

void mx_scales(Job& j, const std::vector<uint32_t>& amax, BlockEncoding& e) {
  const size_t nb = amax.size();
  thread_local std::vector<uint8_t> clamped;
  clamped.resize(nb);
  mx_scale_loop(amax.data(), nb, j.s.element_emax, j.s.ceil,
                f32_bits(j.s.element_max) & 0x7FFFFFu, e.scale_codes.data(), e.scales.data(),
                j.mult, j.special, clamped.data());
  uint64_t nan = 0, n_clamped = 0;  // locals: no store to e per block
  for (size_t b = 0; b < nb; ++b) {
    nan += j.special[b] == kNanScale;  // OCP MX: NaN or ±inf in the block
    n_clamped += clamped[b];
  }
  j.specials = nan;
  e.events.nan_scales += nan;
  e.events.scales_clamped += n_clamped;
  for (size_t b = 0; b < nb && n_clamped && !e.block_events.empty(); ++b)
    e.block_events[b].scales_clamped = clamped[b];
}

/// TE's NVFP4 global encode scale and the factor of every block decode scale.
struct Nvfp4Global {
  float encode, decode, multiplier;
};

Nvfp4Global nvfp4_global(const std::vector<uint32_t>& amax) {
  uint32_t a = 0;
  for (uint32_t v : amax) a = std::max(a, v);
  const float fp32_max = FLT_MAX;
  float g = (448.0f * 6.0f) / bits_f32(a);  // amax 0 gives inf, capped below
  g = std::min(g, fp32_max);
  if (g == 0.0f) g = 1.0f;
  const float inv6 = 1.0f / 6.0f;  // torch.reciprocal(6.0) in fp32
  return {g, 1.0f / g, g * inv6};
}

/// The fp32 values of the 256 e4m3 encodings.
const float* e4m3_values() {
  static const std::vector<float> table = [] {
    std::vector<float> t(256);
    for (uint32_t c = 0; c < 256; ++c) {
      Env env;
      t[c] = to_f32(formats::e4m3, c, env);
    }
    return t;
  }();
  return table.data();
}

/// Each NVFP4 block's scale value, encode multiplier 1 / (scale × global decode) (capped at
/// fp32 max) and whether its scale underflowed to zero: branch-free, so that it vectorises.
HALFWAY_BLOCKS_CLONES void nvfp4_multipliers(const uint8_t* __restrict codes,
                                             const uint32_t* __restrict amax, size_t nb,
                                             const float* __restrict value, float decode,
                                             float* __restrict scales, float* __restrict mult,
                                             uint8_t* __restrict special,
                                             uint8_t* __restrict clamped) {
  const float fp32_max = FLT_MAX;
  for (size_t b = 0; b < nb; ++b) {
    const float s = value[codes[b]];
    const float enc = 1.0f / (s * decode);
    clamped[b] |= uint8_t(s == 0.0f) & uint8_t(amax[b] != 0);  // the scale underflowed to zero
    scales[b] = s;
    mult[b] = fp32_max < enc ? fp32_max : enc;  // std::min(enc, fp32 max)
    special[b] = s == 0.0f ? kZeroScale : kPlainScale;
  }
}

void nvfp4_scales(Job& j, const std::vector<uint32_t>& amax, BlockEncoding& e) {
  const Nvfp4Global g = nvfp4_global(amax);
  e.global_scale = g.encode;
  const float fp32_max = FLT_MAX;
  const size_t nb = amax.size();
  thread_local std::vector<float> ds;
  thread_local std::vector<uint8_t> clamped;
  ds.resize(nb);
  clamped.resize(nb);
  float* __restrict dsp = ds.data();  // not the thread_local vectors in the loop: it vectorises
  uint8_t* __restrict cl = clamped.data();
  const uint32_t* __restrict am = amax.data();
  for (size_t b = 0; b < nb; ++b) {
    float d = bits_f32(am[b]) * g.multiplier;
    d = d < fp32_max ? d : fp32_max;
    cl[b] = d > 448.0f;
    dsp[b] = d < 448.0f ? d : 448.0f;
  }
  round_f32(formats::e4m3, ds.data(), e.scale_codes.data(), nb);  // RNE, subnormals kept
  nvfp4_multipliers(e.scale_codes.data(), amax.data(), nb, e4m3_values(), g.decode,
                    e.scales.data(), j.mult, j.special, clamped.data());
  uint64_t zero = 0, n_clamped = 0;  // locals: no store to e per block
  for (size_t b = 0; b < nb; ++b) {
    zero += j.special[b] == kZeroScale;
    n_clamped += clamped[b];
  }
  j.specials = zero;
  e.events.scales_clamped += n_clamped;
  for (size_t b = 0; b < nb && n_clamped && !e.block_events.empty(); ++b)
    e.block_events[b].scales_clamped = clamped[b];
}

void fp8_block_scales(Job& j, const std::vector<uint32_t>& amax, BlockEncoding& e) {
  const float fp32_max = FLT_MAX;
  j.divide = !j.o.pow2_scales;
  for (size_t b = 0; b < amax.size(); ++b) {
    const float a = bits_f32(amax[b]);
    bool clamped = false;
    float s = 1.0f, mult = 1.0f;
    if (a != 0.0f && j.o.pow2_scales) {
      // TE: scale = 448 / amax in fp32 (inf → fp32 max), rounded down to a power of two;
      // the decode scale is its reciprocal, exact.
      float q = 448.0f / a;
      if (q > fp32_max) {
        q = fp32_max;
        clamped = true;
      }
      int eq;
      uint32_t frac;
      log2_parts(f32_bits(q), eq, frac);
      mult = pow2f(eq);
      s = pow2f(-eq);
    } else if (a != 0.0f) {
      s = a / 448.0f;
      if (s == 0.0f) {  // amax below 448 · 2^−150: the smallest positive fp32 instead of 0
        s = std::numeric_limits<float>::denorm_min();
        clamped = true;
      }
      mult = s;
    }
    e.scales[b] = s;
    j.mult[b] = mult;
    if (clamped) {
      e.events.scales_clamped++;
      if (!e.block_events.empty()) e.block_events[b].scales_clamped = 1;
    }
  }
}

/// The constants of the fused element step: round |y| ≤ max to nearest even on the element
/// grid by one fp32 addition and subtraction of 2^(E − m + 23), E = max(exponent of |y|, emin)
/// (the sum's ulp is the grid's quantum 2^(E − m), exactly), then read the code off the bits.
struct ElementGrid {
  uint32_t lim_bits = 0;       ///< the largest finite element value, as fp32 bits
  uint32_t half_min_bits = 0;  ///< at most this rounds to ±0, as fp32 bits
  uint32_t min_field = 0;   ///< bits of 2^emin
  uint32_t magic_add = 0;   ///< (23 − m) << 23: from 2^E to 2^(E − m + 23)
  uint32_t shift = 0;       ///< 23 − m
  uint32_t normal_bias = 0; ///< (127 + emin − 1) << m: fp32 bits >> shift to the element code
  float sub_scale = 0;      ///< 2^(m − emin): a subnormal value to its code
  uint32_t sign_shift = 0;  ///< the element's sign bit position

  explicit ElementGrid(const BlockScheme& s) {
    const Format& f = s.element;
    const int m = f.frac_bits, emin = f.emin();
    lim_bits = f32_bits(s.element_max);
    half_min_bits = f32_bits(s.half_min_subnormal);
    min_field = uint32_t(127 + emin) << 23;
    magic_add = uint32_t(23 - m) << 23;
    shift = uint32_t(23 - m);
    normal_bias = uint32_t(127 + emin - 1) << m;
    sub_scale = pow2f(m - emin);
    sign_shift = uint32_t(f.exp_bits + f.frac_bits);
  }
};

/// One element: y = x · mult (or x / mult), its events, and its code rounded to nearest even
/// with saturation: exactly what round_f32 gives for y (NVFP4: for y clamped to ±6 plus +0).
/// |y| is clamped to max first (saturation; rounding is monotone), the rounding is the exact
/// fp32 sum described at ElementGrid, and the sign is y's.
template <bool Divide, bool Clamp>
inline uint8_t encode_one(const ElementGrid& g, float v, float m, uint32_t& sat, uint32_t& fl) {
  // Comparisons on magnitude bits rather than floats: they cannot trap, so the loop has no
  // branches and vectorises (a NaN's bits exceed every finite value's).
  const uint32_t y = f32_bits(Divide ? v / m : v * m);
  const uint32_t a = y & kAbs;
  fl += uint32_t((f32_bits(v) & kAbs) != 0) & uint32_t(a <= g.half_min_bits);
  sat += uint32_t(a > g.lim_bits);
  const uint32_t t_bits = a < g.lim_bits ? a : g.lim_bits;  // saturate; NaN blocks come later
  // NVFP4: TE clamps to ±6 before the e2m1 cast, and its table gives −0.0 the code of +0
  // (TE's clamp then + 0 in fp32): the sign of a zero is dropped; a negative value that
  // rounds to zero keeps its sign.
  const uint32_t neg = Clamp ? (y >> 31) & uint32_t(t_bits != 0) : y >> 31;
  const uint32_t sign = neg << g.sign_shift;
  const float t = bits_f32(t_bits);
  const uint32_t field = t_bits & kInfBits;
  const float c = bits_f32((field > g.min_field ? field : g.min_field) + g.magic_add);
  const float r = (t + c) - c;
  const uint32_t rb = f32_bits(r);
  // Both readings, then a select: the loop stays free of branches and vectorises.
  const uint32_t normal = (rb >> g.shift) - g.normal_bias;
  // The subnormal reading of min(r, 2^emin): below 2^m, so the conversion is always defined.
  const float rs = bits_f32(rb < g.min_field ? rb : g.min_field);
  const uint32_t sub = uint32_t(int32_t(rs * g.sub_scale));
  const uint32_t mag = rb >= g.min_field ? normal : sub;
  return uint8_t(sign | mag);
}

/// 16 elements of one block (restrict parameters: the code stores alias nothing, so the loop
/// is vectorised without a run-time overlap check).
template <bool Divide, bool Clamp>
__attribute__((always_inline)) inline void encode16(const ElementGrid g, const float* __restrict x,
                                                     uint8_t* __restrict codes, float m,
                                                     uint32_t& sat, uint32_t& fl) {
  uint32_t n = 0, f = 0;
  for (size_t c = 0; c < 16; ++c) codes[c] = encode_one<Divide, Clamp>(g, x[c], m, n, f);
  sat += n;
  fl += f;
}

/// Row r of the tensor into element codes, counting per block the elements beyond the element
/// format's largest value and the non-zero inputs that round to ±0: scaling, rounding and
/// counting in one pass, in plain loops over one multiplier per block that the compiler
/// vectorises.
template <bool Divide, bool Clamp>
HALFWAY_BLOCKS_CLONES void encode_row(const Job& j, const ElementGrid& g_, size_t r,
                                      uint8_t* codes_, uint32_t* sat, uint32_t* flushed) {
  // Locals and restrict pointers: without them every store could change j's fields, and the
  // loops would not vectorise.
  const ElementGrid g = g_;
  const float* __restrict x = j.x + r * j.cols;
  uint8_t* __restrict codes = codes_ + r * j.cols;
  const size_t base = (r / j.tr) * j.sc, cols = j.cols, tc = j.tc, sc = j.sc;
  const float* __restrict mult = j.mult + base;
  if (tc == 1) {
    uint32_t* __restrict st = sat + base;
    uint32_t* __restrict ft = flushed + base;
    for (size_t c = 0; c < cols; ++c) {
      uint32_t n = 0, f = 0;
      codes[c] = encode_one<Divide, Clamp>(g, x[c], mult[c], n, f);
      st[c] += n;
      ft[c] += f;
    }
    return;
  }
  // Every block length is a multiple of 16: a loop of 16 elements, with its trip count known,
  // is vectorised 16 floats (and codes) wide, where one over the block length would be
  // vectorised 64 codes wide and never run for blocks of 16 or 32.
  for (size_t b = 0; b < sc; ++b) {
    const float m = mult[b];
    uint32_t n = 0, f = 0;
    for (size_t c0 = b * tc; c0 < (b + 1) * tc; c0 += 16)
      encode16<Divide, Clamp>(g, x + c0, codes + c0, m, n, f);
    sat[base + b] += n;
    flushed[base + b] += f;
  }
}

#ifdef HALFWAY_BLOCKS_AVX512
/// encode_row for blocks along a row, 16 elements a step in AVX-512: the same fp32 operations
/// and integer readings as encode_one, lane by lane.
template <bool Divide, bool Clamp>
__attribute__((target("avx512f"))) void encode_row_avx512(const Job& j, const ElementGrid& g,
                                                          size_t r, uint8_t* codes_,
                                                          uint32_t* sat, uint32_t* flushed) {
  const float* x = j.x + r * j.cols;
  uint8_t* codes = codes_ + r * j.cols;
  const size_t base = (r / j.tr) * j.sc, tc = j.tc, sc = j.sc;
  const __m512i abs = _mm512_set1_epi32(int32_t(kAbs)), inf = _mm512_set1_epi32(int32_t(kInfBits));
  const __m512i lim = _mm512_set1_epi32(int32_t(g.lim_bits));
  const __m512i half_min = _mm512_set1_epi32(int32_t(g.half_min_bits));
  const __m512i min_field = _mm512_set1_epi32(int32_t(g.min_field));
  const __m512i magic_add = _mm512_set1_epi32(int32_t(g.magic_add));
  const __m512i normal_bias = _mm512_set1_epi32(int32_t(g.normal_bias));
  const __m128i shift = _mm_cvtsi32_si128(int(g.shift)), sign_shift = _mm_cvtsi32_si128(int(g.sign_shift));
  const __m512 sub_scale = _mm512_set1_ps(g.sub_scale);
  for (size_t b = 0; b < sc; ++b) {
    const __m512 m = _mm512_set1_ps(j.mult[base + b]);
    uint32_t n = 0, f = 0;
    for (size_t c0 = b * tc; c0 < (b + 1) * tc; c0 += 16) {
      const __m512 v = _mm512_loadu_ps(x + c0);
      const __m512i y = _mm512_castps_si512(Divide ? _mm512_div_ps(v, m) : _mm512_mul_ps(v, m));
      const __m512i a = _mm512_and_si512(y, abs);
      const __mmask16 nonzero = _mm512_test_epi32_mask(_mm512_castps_si512(v), abs);
      f += uint32_t(__builtin_popcount(nonzero & _mm512_cmple_epu32_mask(a, half_min)));
      n += uint32_t(__builtin_popcount(_mm512_cmpgt_epu32_mask(a, lim)));
      const __m512i t = _mm512_min_epu32(a, lim);
      __m512i neg = _mm512_srli_epi32(y, 31);
      if (Clamp) neg = _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(t, t), neg);
      const __m512i field = _mm512_and_si512(t, inf);
      const __m512 c = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_max_epu32(field, min_field), magic_add));
      const __m512 rv = _mm512_sub_ps(_mm512_add_ps(_mm512_castsi512_ps(t), c), c);
      const __m512i rb = _mm512_castps_si512(rv);
      const __m512i normal = _mm512_sub_epi32(_mm512_srl_epi32(rb, shift), normal_bias);
      // Normal lanes may exceed int32 here (vcvttps2dq gives 0x80000000); the select drops them.
      const __m512i sub = _mm512_cvttps_epi32(_mm512_mul_ps(rv, sub_scale));
      const __m512i mag = _mm512_mask_mov_epi32(sub, _mm512_cmpge_epu32_mask(rb, min_field), normal);
      const __m512i code = _mm512_or_si512(_mm512_sll_epi32(neg, sign_shift), mag);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + c0), _mm512_cvtepi32_epi8(code));
    }
    sat[base + b] += n;
    flushed[base + b] += f;
  }
}
#endif

/// Stochastic rounding (NVFP4) goes through the bulk kernels: row r scaled and clamped into
/// `buf`, counting per block the elements beyond ±6 (the flushed ones come from the codes).
HALFWAY_BLOCKS_CLONES void scale_row_sr(const Job& j, size_t r, float* buf_, uint32_t* sat) {
  const float* __restrict x = j.x + r * j.cols;
  float* __restrict buf = buf_;
  const size_t base = (r / j.tr) * j.sc, cols = j.cols, tc = j.tc;
  const float* __restrict mult = j.mult + base;
  const float lim = j.s.element_max;
  for (size_t c = 0; c < cols; ++c) {
    const float y = x[c] * mult[tc == 1 ? c : c / tc];
    sat[base + (tc == 1 ? c : c / tc)] += uint32_t(std::fabs(y) > lim);
    buf[c] = (y > lim ? lim : (y < -lim ? -lim : y)) + 0.0f;
  }
}

/// After stochastic rounding of row r (NVFP4): the non-zero inputs whose code is ±0, per block.
void count_flushed_codes(const Job& j, size_t r, const uint8_t* codes, uint32_t* flushed) {
  const float* x = j.x + r * j.cols;
  const size_t base = (r / j.tr) * j.sc;
  const uint8_t mag = uint8_t(j.s.element.mag_mask());
  for (size_t c = 0; c < j.cols; ++c)
    flushed[base + c / j.tc] += x[c] != 0.0f && (codes[c] & mag) == 0;
}

using EncodeRowFn = void (*)(const Job&, const ElementGrid&, size_t, uint8_t*, uint32_t*,
                            uint32_t*);

/// Blocks whose scale is NaN (MX) or zero (NVFP4): codes 0 for NaN blocks, nothing saturated,
/// every non-zero input flushed for zero scales. Rare, so a second look at those blocks only.
void special_blocks(const Job& j, BlockEncoding& e, std::vector<uint32_t>& sat,
                    std::vector<uint32_t>& flushed) {
  for (size_t b = 0; b < j.sr * j.sc; ++b) {
    if (j.special[b] == kPlainScale) continue;
    const bool nan = j.special[b] == kNanScale;
    sat[b] = 0;
    flushed[b] = 0;
    const size_t r0 = (b / j.sc) * j.tr, c0 = (b % j.sc) * j.tc;
    for (size_t r = r0; r < r0 + j.tr; ++r)
      for (size_t c = c0; c < c0 + j.tc; ++c) {
        if (nan) e.codes[r * j.cols + c] = 0;
        else flushed[b] += (f32_bits(j.x[r * j.cols + c]) & kAbs) != 0;
      }
  }
}

/// Stochastic rounding of the elements (NVFP4): whole rows at a time, about 16Ki elements, so
/// that the bulk kernel is called few times on a buffer in cache.
void encode_elements_sr(const Job& j, BlockEncoding& e, std::vector<uint32_t>& sat,
                        std::vector<uint32_t>& flushed) {
  const size_t chunk_rows = std::max<size_t>(1, (size_t(1) << 14) / std::max<size_t>(1, j.cols));
  thread_local std::vector<float> buf;
  buf.resize(std::min(chunk_rows, std::max<size_t>(j.rows, 1)) * j.cols);
  BulkOptions bo;
  bo.rounding = j.o.rounding;
  bo.seed = j.o.seed;
  bo.subsequence = j.o.subsequence;
  for (size_t r0 = 0; r0 < j.rows; r0 += chunk_rows) {
    const size_t r1 = std::min(j.rows, r0 + chunk_rows);
    for (size_t r = r0; r < r1; ++r) scale_row_sr(j, r, buf.data() + (r - r0) * j.cols, sat.data());
    bo.offset = j.o.offset + r0 * j.cols;  // element (r, c) at stream position offset + r·cols + c
    uint8_t* codes = e.codes.data() + r0 * j.cols;
    round_f32(j.s.element, buf.data(), codes, (r1 - r0) * j.cols, bo);
    for (size_t r = r0; r < r1; ++r)
      count_flushed_codes(j, r, codes + (r - r0) * j.cols, flushed.data());
  }
}

void encode_elements(const Job& j, BlockEncoding& e) {
  const size_t nb = j.sr * j.sc;
  thread_local std::vector<uint32_t> sat, flushed;
  sat.assign(nb, 0);
  flushed.assign(nb, 0);
  if (j.o.rounding == Rounding::stochastic) {
    encode_elements_sr(j, e, sat, flushed);
  } else {
    EncodeRowFn fn = j.s.family == BlockFamily::nvfp4 ? encode_row<false, true>
                     : j.divide                       ? encode_row<true, false>
                                                      : encode_row<false, false>;
#ifdef HALFWAY_BLOCKS_AVX512
    if (use_avx512(j))
      fn = j.s.family == BlockFamily::nvfp4 ? encode_row_avx512<false, true>
           : j.divide                       ? encode_row_avx512<true, false>
                                            : encode_row_avx512<false, false>;
#endif
    const ElementGrid g(j.s);
    for (size_t r = 0; r < j.rows; ++r) fn(j, g, r, e.codes.data(), sat.data(), flushed.data());
  }
  if (j.specials) special_blocks(j, e, sat, flushed);
  uint64_t saturated = 0, flushed_total = 0;  // locals: no store to e per block
  for (size_t b = 0; b < nb; ++b) {
    saturated += sat[b];
    flushed_total += flushed[b];
  }
  e.events.saturated += saturated;
  e.events.flushed += flushed_total;
  for (size_t b = 0; b < nb && !e.block_events.empty(); ++b) {
    BlockEvents& be = e.block_events[b];
    be.elements = j.tr * j.tc;
    be.blocks = 1;
    be.saturated = sat[b];
    be.flushed = flushed[b];
    be.nan_scales = j.special[b] == kNanScale;
  }
}

}  // namespace

BlockScheme parse_block_scheme(std::string_view name) {
  const size_t colon = name.find(':');
  const std::string_view base = name.substr(0, colon);
  for (const auto& entry : kSchemes) {
    if (base != entry.name) continue;
    BlockScheme s;
    s.name = std::string(name);
    s.family = entry.family;
    s.element = entry.element;
    s.block = entry.block;
    s.two_d = entry.two_d;
    Env env;
    s.element_max = to_f32(s.element, s.element.max_mag(), env);
    s.element_emax = s.element.emax();
    s.half_min_subnormal = to_f32(s.element, 1, env) / 2;  // exact: a power of two
    if (colon != std::string_view::npos) {
      const std::string_view opt = name.substr(colon + 1);
      if (opt != "ceil" || s.family != BlockFamily::mx)
        throw InputError("unknown option '" + std::string(opt) + "' of block scheme '" +
                         std::string(base) + "' (only the MX schemes take ':ceil')");
      s.ceil = true;
    }
    return s;
  }
  throw InputError("unknown block scheme '" + std::string(name) + "' (" + scheme_list() +
                   ", the MX ones optionally with ':ceil')");
}

const std::vector<std::string>& block_scheme_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& e : kSchemes) v.emplace_back(e.name);
    return v;
  }();
  return names;
}

std::pair<size_t, size_t> block_tile(const BlockScheme& s, BlockAxis axis) {
  const size_t k = size_t(s.block);
  if (s.two_d) return {k, k};
  return axis == BlockAxis::last ? std::pair<size_t, size_t>{1, k} : std::pair<size_t, size_t>{k, 1};
}

void check_blocks(const BlockScheme& s, size_t rows, size_t cols, const BlockOptions& o) {
  const auto [tr, tc] = block_tile(s, o.axis);
  if (rows % tr != 0 || cols % tc != 0)
    throw InputError(s.name + ": shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                     "] does not divide into " + std::to_string(tr) + "x" + std::to_string(tc) +
                     " blocks");
  if (cols != 0 && rows > (size_t(1) << 40) / cols)
    throw InputError(s.name + ": shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                     "] has more than 2^40 elements");
  if (o.rounding != Rounding::near_even &&
      !(o.rounding == Rounding::stochastic && s.family == BlockFamily::nvfp4))
    throw InputError(s.name + ": element rounding must be near_even" +
                     std::string(s.family == BlockFamily::nvfp4 ? " or stochastic" : "") +
                     ", not " + rounding_name(o.rounding));
  if (o.rht && (s.family != BlockFamily::nvfp4 || s.two_d))
    throw InputError(s.name + ": the random Hadamard transform is an option of nvfp4 (1x16) only");
  if (o.pow2_scales && s.family != BlockFamily::fp8_block)
    throw InputError(s.name + ": power-of-two scales are an option of fp8_block and fp8_block_2d");
}

BlockEncoding encode_blocks(const BlockScheme& s, const float* x, size_t rows, size_t cols,
                            const BlockOptions& o) {
  check_blocks(s, rows, cols, o);
  const auto [tr, tc] = block_tile(s, o.axis);
  BlockEncoding e;
  e.rows = rows;
  e.cols = cols;
  e.tile_rows = tr;
  e.tile_cols = tc;
  e.axis = o.axis;
  const size_t n = rows * cols;
  std::vector<float> transformed;
  if (o.rht) {
    transformed.assign(x, x + n);
    apply_rht(transformed, rows, cols, o.axis);
    x = transformed.data();
  }
  Job j{s, o, x, rows, cols, tr, tc, rows / tr, cols / tc, false, nullptr, nullptr};
  const size_t nb = j.sr * j.sc;
  thread_local std::vector<float> mult;  // scratch kept between calls
  thread_local std::vector<uint8_t> special;
  mult.assign(nb, 1.0f);
  special.assign(nb, kPlainScale);
  j.mult = mult.data();
  j.special = special.data();
  e.codes.assign(n, 0);
  e.scales.assign(nb, 0.0f);
  if (s.family != BlockFamily::fp8_block) e.scale_codes.assign(nb, 0);
  if (o.per_block_events) e.block_events.assign(nb, BlockEvents{});
  e.events.elements = n;
  e.events.blocks = nb;
  const std::vector<uint32_t>& amax = block_amax(j);
  if (s.family != BlockFamily::mx) require_finite(s, x, rows, cols, amax);
  switch (s.family) {
    case BlockFamily::mx: mx_scales(j, amax, e); break;
    case BlockFamily::nvfp4: nvfp4_scales(j, amax, e); break;
    default: fp8_block_scales(j, amax, e); break;
  }
  encode_elements(j, e);
  return e;
}

void decode_blocks(const BlockScheme& s, const BlockEncoding& e, float* out) {
  const auto [tr, tc] = block_tile(s, e.axis);
  if (e.tile_rows != tr || e.tile_cols != tc || e.rows % tr || e.cols % tc)
    throw InputError(s.name + ": the encoding's block shape does not match the scheme");
  const size_t n = e.rows * e.cols, nb = e.scale_rows() * e.scale_cols();
  if (e.codes.size() != n)
    throw InputError(s.name + ": " + std::to_string(e.codes.size()) + " codes for a [" +
                     std::to_string(e.rows) + ", " + std::to_string(e.cols) + "] tensor");
  const bool coded = s.family != BlockFamily::fp8_block;
  if ((coded ? e.scale_codes.size() : e.scales.size()) != nb)
    throw InputError(s.name + ": expected " + std::to_string(nb) + " scales");
  if (s.family == BlockFamily::nvfp4 &&
      (!e.global_scale || !(*e.global_scale > 0.0f) || std::isinf(*e.global_scale)))
    throw InputError(s.name + ": needs a finite positive fp32 global scale");
  if (s.family != BlockFamily::nvfp4 && e.global_scale)
    throw InputError(s.name + ": has no global scale");
  const uint32_t limit = s.element.enc_mask();
  float value[256];
  for (uint32_t c = 0; c < 256; ++c) {
    Env env;
    value[c] = c <= limit ? to_f32(s.element, c, env) : 0.0f;
  }
  std::vector<float> scale(nb);
  const float gd = s.family == BlockFamily::nvfp4 ? 1.0f / *e.global_scale : 1.0f;
  for (size_t b = 0; b < nb; ++b) {
    Env env;
    if (s.family == BlockFamily::mx)
      scale[b] = e.scale_codes[b] == 0xFF ? std::numeric_limits<float>::quiet_NaN()
                                          : pow2f(int(e.scale_codes[b]) - 127);
    else if (s.family == BlockFamily::nvfp4)
      scale[b] = to_f32(formats::e4m3, e.scale_codes[b], env) * gd;
    else
      scale[b] = e.scales[b];
  }
  for (size_t r = 0; r < e.rows; ++r) {
    const size_t base = (r / tr) * e.scale_cols();
    for (size_t c = 0; c < e.cols; ++c) {
      const uint8_t code = e.codes[r * e.cols + c];
      if (code > limit)
        throw InputError(s.name + ": code " + std::to_string(code) + " at [" +
                         std::to_string(r) + ", " + std::to_string(c) + "] is not an encoding of " +
                         format_name(s.element));
      out[r * e.cols + c] = value[code] * scale[base + c / tc];
    }
  }
}

BlockEvents quantize_blocks(const BlockScheme& s, const float* x, size_t rows, size_t cols,
                            float* out, const BlockOptions& o) {
  const BlockEncoding e = encode_blocks(s, x, rows, cols, o);
  decode_blocks(s, e, out);
  return e.events;
}

}  // namespace halfway
