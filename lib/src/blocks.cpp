// Block-scaled quantization (blocks.hpp). Each call makes two passes over a tensor and a
// short one over its blocks: the block amax (integer max of |x|'s bits; 16 blocks per
// reduction, max16), one scale per block, and the elements: each is scaled, rounded into the
// element format by one fp32 addition and integer steps, and its events counted, in one fused
// step (encode_one). With the avx512 bulk path every step has an AVX-512 kernel (the element
// kernel specialised by block length; blocks down the columns take per-lane multipliers);
// otherwise portable loops cloned for x86-64-v4/v3. Every other element rounding (directed, to
// odd, stochastic) scales into a buffer and rounds it with the bulk kernels (bulk.hpp).
// docs/blocks.md defines every step; the tests compare with an oracle written separately
// (tests/support/block_oracle.cpp) and, in Python, with a numpy transcription of the definitions.
// Compiled with -ffp-contract=off: every fp32 step is its own rounding, as the definitions say.
#include "halfway/blocks.hpp"

#include <algorithm>
#include <array>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "halfway/bulk.hpp"
#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"
#include "halfway/thread_pool.hpp"

namespace halfway {

// The element-pass loops and the Hadamard transform are plain C++ that the compiler
// vectorises (halfway/config.hpp).
#define HALFWAY_BLOCKS_CLONES HALFWAY_VECTOR_CLONES

namespace {
/// The least number of values a part of a call's passes takes on the pool (smaller calls run
/// on the calling thread alone).
constexpr size_t kBandValues = size_t(1) << 15;
}  // namespace

namespace detail {
const float kRhtSigns[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};

namespace {
/// T = diag(s) · H16 / 4: T[k][j] = s_k · (−1)^popcount(k & j) · 0.25, exact in fp32.
struct RhtMatrix {
  float t[16][16];
  RhtMatrix() {
    for (int k = 0; k < 16; ++k)
      for (int j = 0; j < 16; ++j)
        t[k][j] = kRhtSigns[k] * ((__builtin_popcount(unsigned(k & j)) & 1) ? -0.25f : 0.25f);
  }
};
const RhtMatrix kRht;

// Both loops keep the definition's order for every output, y_j = ((v_0·T_0j + v_1·T_1j) + ...)
// + v_15·T_15j, each product and sum its own fp32 rounding (this file is compiled with
// -ffp-contract=off); only independent outputs share a vector.

/// Blocks of 16 consecutive values, `n` of them: the 16 outputs of a block in one vector pass
/// per k.
HALFWAY_BLOCKS_CLONES void rht_rows(float* __restrict v, size_t n) {
  for (size_t b = 0; b < n; ++b, v += 16) {
    float in[16], acc[16];
    for (int k = 0; k < 16; ++k) in[k] = v[k];
    for (int j = 0; j < 16; ++j) acc[j] = in[0] * kRht.t[0][j];
    for (int k = 1; k < 16; ++k)
      for (int j = 0; j < 16; ++j) acc[j] = acc[j] + in[k] * kRht.t[k][j];
    for (int j = 0; j < 16; ++j) v[j] = acc[j];
  }
}

/// Columns [c0, c0 + W) of one group (see rht_columns): each output row's W sums kept in
/// registers over k = 0..15 and stored once.
template <size_t W>
__attribute__((always_inline)) inline void rht_column_tile(float* __restrict v,
                                                           const float* __restrict in,
                                                           size_t cols, size_t c0) {
  for (int j = 0; j < 16; ++j) {
    float acc[W];
    const float t0 = kRht.t[0][j];
    for (size_t c = 0; c < W; ++c) acc[c] = in[c0 + c] * t0;
    for (int k = 1; k < 16; ++k) {
      const float* __restrict row = in + size_t(k) * cols + c0;
      const float t = kRht.t[k][j];
      for (size_t c = 0; c < W; ++c) acc[c] = acc[c] + row[c] * t;
    }
    for (size_t c = 0; c < W; ++c) v[size_t(j) * cols + c0 + c] = acc[c];
  }
}

/// One group of 16 rows of `cols` values (rows `cols` apart), transformed down each column;
/// `in` holds a copy of the group. Vectorised along the row, 16 columns at a time (the last
/// columns one at a time).
HALFWAY_BLOCKS_CLONES void rht_columns(float* __restrict v, const float* __restrict in,
                                       size_t cols) {
  size_t c0 = 0;
  for (; c0 + 16 <= cols; c0 += 16) rht_column_tile<16>(v, in, cols, c0);
  for (; c0 < cols; ++c0) rht_column_tile<1>(v, in, cols, c0);
}
}  // namespace

void rht16(float* v, size_t stride) {
  float in[16];
  for (int k = 0; k < 16; ++k) in[k] = v[size_t(k) * stride];
  rht_rows(in, 1);
  for (int j = 0; j < 16; ++j) v[size_t(j) * stride] = in[j];
}

namespace {
/// Groups [g0, g1) of 16 rows, each transformed down its columns.
void rht_groups(float* v, size_t g0, size_t g1, size_t cols) {
  thread_local std::vector<float> group;  // scratch kept between calls, one per thread
  group.resize(16 * cols);
  for (size_t g = g0; g < g1; ++g) {
    float* rows = v + g * 16 * cols;
    std::copy(rows, rows + 16 * cols, group.begin());
    rht_columns(rows, group.data(), cols);
  }
}
}  // namespace

void apply_rht(float* v, size_t rows, size_t cols, BlockAxis axis, int threads) {
  // Each 16-value block (a row's, or a group of 16 rows' down a column) is its own transform:
  // bands of them on the pool give the same values.
  const size_t least = std::max<size_t>(1, kBandValues / 16);
  if (axis == BlockAxis::last) {
    parallel_for(threads, rows * cols / 16, least, [&](size_t b0, size_t b1) {
      rht_rows(v + b0 * 16, b1 - b0);
    });
    return;
  }
  parallel_for(threads, rows / 16, std::max<size_t>(1, least / std::max<size_t>(cols, 1)),
               [&](size_t g0, size_t g1) { rht_groups(v, g0, g1, cols); });
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

/// MXINT8's element (OCP MX v1.0: int8 with an implicit scale 2^−6): e1m6 with bias 1,
/// no special values, whose subnormals k/64 (k < 64) and normals (64 + f)/64 are exactly the
/// grid k/64, |k| ≤ 127, with emax_elem 0.
constexpr Format kInt8Element{1, 6, 1, Specials::none, Overflow::saturate};

const SchemeEntry kSchemes[] = {
    {"mxfp8_e4m3", BlockFamily::mx, saturating(formats::e4m3), 32, false},
    {"mxfp8_e5m2", BlockFamily::mx, saturating(formats::e5m2), 32, false},
    {"mxfp6_e2m3", BlockFamily::mx, formats::e2m3, 32, false},
    {"mxfp6_e3m2", BlockFamily::mx, formats::e3m2, 32, false},
    {"mxfp4", BlockFamily::mx, formats::e2m1, 32, false},
    {"mxint8", BlockFamily::mx, kInt8Element, 32, false},
    {"nvfp4", BlockFamily::nvfp4, formats::e2m1, 16, false},
    {"nvfp4_2d", BlockFamily::nvfp4, formats::e2m1, 16, true},
    {"nvfp4_4over6", BlockFamily::nvfp4_4over6, formats::e2m1, 16, false},
    {"nvfp4_4over6_2d", BlockFamily::nvfp4_4over6, formats::e2m1, 16, true},
    {"fp8_block", BlockFamily::fp8_block, saturating(formats::e4m3), 128, false},
    {"fp8_block_2d", BlockFamily::fp8_block, saturating(formats::e4m3), 128, true},
    {"fp8_rowwise", BlockFamily::fp8_rowwise, saturating(formats::e4m3), 0, false},
    {"fp8_rowwise_e5m2", BlockFamily::fp8_rowwise, saturating(formats::e5m2), 0, false},
};

/// The largest block or tile side a name may ask for (a block's counts stay 32-bit).
constexpr long kMaxBlock = long(1) << 24;

const std::pair<const char*, MxScaleRule> kMxRules[] = {
    {"floor", MxScaleRule::floor},
    {"ceil", MxScaleRule::ceil},
    {"rceil", MxScaleRule::rceil},
    {"even", MxScaleRule::even},
};

std::optional<MxScaleRule> parse_mx_scale_rule(std::string_view name) {
  for (const auto& [n, rule] : kMxRules)
    if (name == n) return rule;
  return std::nullopt;
}

std::string mx_rule_list() {
  std::string s;
  for (const auto& [n, rule] : kMxRules) s += (s.empty() ? ":" : " :") + std::string(n);
  return s;
}

std::string scheme_list() {
  std::string s;
  for (const auto& e : kSchemes) s += (s.empty() ? "" : " ") + std::string(e.name);
  return s;
}

constexpr uint32_t kAbs = 0x7FFFFFFFu;

constexpr uint32_t kInfBits = 0x7F800000u;

// Reductions over the blocks, compiled for AVX-512 and AVX2 too: a tensor has many blocks.

/// The largest of v[0..n) (0 for none).
HALFWAY_BLOCKS_CLONES uint32_t max_of(const uint32_t* __restrict v, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

/// How many of v[0..n) equal `value` (32-bit partial counts, so that the loop vectorises).
HALFWAY_BLOCKS_CLONES uint64_t count_of(const uint8_t* __restrict v, size_t n, uint8_t value) {
  uint64_t total = 0;
  for (size_t i0 = 0; i0 < n; i0 += (size_t(1) << 24)) {
    const size_t i1 = std::min(n, i0 + (size_t(1) << 24));
    uint32_t k = 0;
    for (size_t i = i0; i < i1; ++i) k += uint32_t(v[i] == value);
    total += k;
  }
  return total;
}

/// The sum of per-block counts v[0..n), each at most `most` (≤ 2^24): 32-bit partial sums
/// of as many as cannot overflow.
HALFWAY_BLOCKS_CLONES uint64_t sum_of(const uint32_t* __restrict v, size_t n, size_t most) {
  uint64_t total = 0;
  const size_t step = (size_t(1) << 31) / std::max<size_t>(most, 1);
  for (size_t i0 = 0; i0 < n; i0 += step) {
    const size_t i1 = std::min(n, i0 + step);
    uint32_t k = 0;
    for (size_t i = i0; i < i1; ++i) k += v[i];
    total += k;
  }
  return total;
}

/// 2^k as an fp32 value, k in [−149, 127].
float pow2f(int k) {
  if (k >= -126) return bits_f32(uint32_t(k + 127) << 23);
  return bits_f32(uint32_t(1) << (k + 149));
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

/// Block rows [br0, br1) of j as a Job of their own, with options `o` (j's, with the stream
/// offset moved to the band's first element).
Job band_of(const Job& j, const BlockOptions& o, size_t br0, size_t br1) {
  Job b{j.s, o, j.x + br0 * j.tr * j.cols, (br1 - br0) * j.tr, j.cols, j.tr, j.tc,
        br1 - br0, j.sc, j.divide, j.mult + br0 * j.sc, j.special + br0 * j.sc};
  b.specials = j.specials;
  return b;
}

/// The calling thread's bulk path, set on a thread of the pool for one part (and restored).
class PathScope {
 public:
  explicit PathScope(detail::BulkPath p) : old_(detail::set_bulk_path(p)) {}
  ~PathScope() { detail::set_bulk_path(old_); }
  PathScope(const PathScope&) = delete;
  PathScope& operator=(const PathScope&) = delete;

 private:
  detail::BulkPath old_;
};

/// body(part, band, br0) on parts of j's block rows on up to `threads` threads of the pool
/// (none smaller than kBandValues values), part p always the same band of whole block rows
/// starting at block row br0, each run with the calling thread's bulk path. Returns the number
/// of parts.
template <class Body>
int in_bands(const Job& j, int threads, Body&& body) {
  const size_t least = std::max<size_t>(1, kBandValues / std::max<size_t>(1, j.tr * j.cols));
  const detail::BulkPath path = detail::bulk_path();
  const int parts = even_parts(j.sr, least, threads);
  parallel_slices(parts, j.sr, [&](int p, uint64_t br0, uint64_t br1) {
    const PathScope scope(path);
    BlockOptions o = j.o;
    o.offset += br0 * j.tr * j.cols;
    body(p, band_of(j, o, size_t(br0), size_t(br1)), size_t(br0));
  });
  return parts;
}

/// NVFP4 and blockwise fp8 refuse NaN and infinity; the block amax tells whether there is one.
void require_finite(const BlockScheme& s, const float* x, size_t rows, size_t cols,
                    uint32_t amax) {
  if (amax < kInfBits) return;
  for (size_t i = 0; i < rows * cols; ++i) {
    if ((f32_bits(x[i]) & kInfBits) == kInfBits)
      throw InputError(s.name + ": non-finite value " + std::to_string(x[i]) + " at [" +
                       std::to_string(i / cols) + ", " + std::to_string(i % cols) +
                       "] (only the MX schemes accept NaN and infinity)");
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define HALFWAY_BLOCKS_AVX512 1
#define HALFWAY_BLOCKS_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
/// The AVX-512 kernels serve the block lengths they are specialised for (blocks down the
/// columns, and 16, 32 or 128 along the rows) when the calling thread's bulk path is avx512
/// (set_bulk_path: tests run both); other lengths take the portable loops.
bool use_avx512() { return detail::bulk_path() == detail::BulkPath::avx512; }
bool avx512_length(size_t tc) { return tc == 1 || tc == 16 || tc == 32 || tc == 128; }

/// A round of max16: the lane-wise maximum of the two halves a shuffle picks from a and b:
/// kPairs the even and odd 32-bit lanes (within 128-bit lanes), kHalves the low and high
/// 256-bit halves, kLanes the even and odd 128-bit lanes.
enum MaxRound { kPairs, kHalves, kLanes };
template <MaxRound R>
HALFWAY_BLOCKS_AVX512_TARGET __attribute__((always_inline)) inline __m512i max_pair(__m512i a,
                                                                                  __m512i b) {
  __m512i lo, hi;
  if constexpr (R == kPairs) {
    const __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
    lo = _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0x88));
    hi = _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0xDD));
  } else if constexpr (R == kHalves) {
    lo = _mm512_shuffle_i32x4(a, b, 0x44);
    hi = _mm512_shuffle_i32x4(a, b, 0xEE);
  } else {
    lo = _mm512_shuffle_i32x4(a, b, 0x88);
    hi = _mm512_shuffle_i32x4(a, b, 0xDD);
  }
  return _mm512_max_epu32(lo, hi);
}

/// The maxima of 16 vectors at once: lane p of the result is the largest lane of the vector
/// in slot kSlot[p] of v. Four rounds each halve the vectors and the lanes each one covers
/// (45 instructions where 16 separate reductions take about 140), the first two within
/// 128-bit lanes (cheaper shuffles): after them, 32-bit lane q of each 128-bit lane of v[i]
/// covers that 128-bit lane of slot i + {0, 8, 4, 12}[q]; kHalves then pairs v[i] with
/// v[i + 2], kLanes v[0] with v[1].
constexpr int kSlot[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
HALFWAY_BLOCKS_AVX512_TARGET __attribute__((always_inline)) inline __m512i max16(__m512i* v) {
  for (int i = 0; i < 8; ++i) v[i] = max_pair<kPairs>(v[i], v[i + 8]);
  for (int i = 0; i < 4; ++i) v[i] = max_pair<kPairs>(v[i], v[i + 4]);
  for (int i = 0; i < 2; ++i) v[i] = max_pair<kHalves>(v[i], v[i + 2]);
  return max_pair<kLanes>(v[0], v[1]);
}

/// The largest |x| bits of the block of V vectors at p, lane by lane.
template <int V>
HALFWAY_BLOCKS_AVX512_TARGET __attribute__((always_inline)) inline __m512i block_max(
    const float* p, __m512i abs) {
  __m512i m = _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(p)), abs);
#pragma GCC unroll 8
  for (int i = 1; i < V; ++i)
    m = _mm512_max_epu32(
        m, _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(p + 16 * i)), abs));
  return m;
}

/// block_amax for blocks of V vectors along the row, in AVX-512: 16 blocks at a time with one
/// max16, the rest one reduction each. The first row of a row of blocks stores its maxima,
/// the others (2-D tiles) take the larger: amax needs no zeroing.
template <int V>
HALFWAY_BLOCKS_AVX512_TARGET void block_amax_avx512(const Job& j, uint32_t* amax) {
  const __m512i abs = _mm512_set1_epi32(int32_t(kAbs));
  constexpr size_t tc = 16 * V;
  for (size_t r = 0; r < j.rows; ++r) {
    const float* row = j.x + r * j.cols;
    uint32_t* a = amax + (r / j.tr) * j.sc;
    const bool first = r % j.tr == 0;
    size_t b = 0;
    for (; b + 16 <= j.sc; b += 16) {
      __m512i v[16];
#pragma GCC unroll 16
      for (int p = 0; p < 16; ++p) v[kSlot[p]] = block_max<V>(row + (b + size_t(p)) * tc, abs);
      const __m512i m = max16(v);
      _mm512_storeu_si512(a + b, first ? m : _mm512_max_epu32(_mm512_loadu_si512(a + b), m));
    }
    for (; b < j.sc; ++b) {
      const uint32_t m = uint32_t(_mm512_reduce_max_epu32(block_max<V>(row + b * tc, abs)));
      a[b] = first ? m : std::max(a[b], m);
    }
  }
}

/// block_amax for blocks along the row, by block length (16, 32 or 128).
void block_amax_avx512(const Job& j, uint32_t* amax) {
  switch (j.tc) {
    case 16: return block_amax_avx512<1>(j, amax);
    case 32: return block_amax_avx512<2>(j, amax);
    default: return block_amax_avx512<8>(j, amax);
  }
}
#endif

/// The bits of max |x| of each block of j into amax (a NaN's bits exceed infinity's).
HALFWAY_BLOCKS_CLONES void block_amax_into(const Job& j, uint32_t* amax) {
#ifdef HALFWAY_BLOCKS_AVX512
  if (j.tc > 1 && avx512_length(j.tc) && use_avx512()) {
    block_amax_avx512(j, amax);
    return;
  }
#endif
  std::fill(amax, amax + j.sr * j.sc, 0u);
  for (size_t r = 0; r < j.rows; ++r) {
    const uint32_t* row = reinterpret_cast<const uint32_t*>(j.x + r * j.cols);
    uint32_t* a = amax + (r / j.tr) * j.sc;
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
}

/// Every block's amax bits (block_amax_into), in bands on the pool.
const std::vector<uint32_t>& block_amax(const Job& j, int threads) {
  thread_local std::vector<uint32_t> amax;  // scratch kept between calls: no page faults
  amax.resize(j.sr * j.sc);
  uint32_t* a = amax.data();  // the pool's threads write this thread's scratch
  in_bands(j, threads, [&](int, const Job& b, size_t br0) { block_amax_into(b, a + br0 * j.sc); });
  return amax;
}

/// Every MX scale rule (MxScaleRule) as one formula: with v = fp32(amax · mult), whose exact
/// exponent is ev and significand 1.f (a subnormal v through its exact conversion to float),
/// k = ev − emax + (f > threshold), where the threshold is on the 23-bit fraction field:
///   floor  mult 1, emax emax_elem, threshold 2^23 − 1 (never): floor(log2 amax) − emax_elem;
///   ceil   mult 1, emax emax_elem, threshold 0: ceil(log2 amax) − emax_elem;
///   even   mult 1, emax emax_elem, threshold 2^23 − 2^(22−m) − 1: amax's significand rounded
///          to m fraction bits, ties away, carries into the next binade exactly when
///          f ≥ 2^23 − 2^(22−m);
///   rceil  mult fp32(1 / elem_max), emax 0, threshold 0: ceil(log2 fp32(amax / elem_max)).
/// (amax · 1 is amax exactly.) k is then clamped to [−127, 127].
struct MxRule {
  float mult = 1.0f;
  int emax = 0;
  uint32_t threshold = 0;
};

MxRule mx_rule(const BlockScheme& s) {
  MxRule r;
  r.emax = s.element_emax;
  switch (s.scale_rule) {
    case MxScaleRule::floor: r.threshold = 0x7FFFFFu; break;
    case MxScaleRule::ceil: r.threshold = 0; break;
    case MxScaleRule::even:
      r.threshold = 0x800000u - (uint32_t(1) << (22 - s.element.frac_bits)) - 1;
      break;
    case MxScaleRule::rceil:
      // torchao: max_abs * (1.0 / max_pos), the Python double rounded to the fp32 operand;
      // Transformer Engine: the fp32 constant 1 / max_norm. The same fp32 value for every
      // element format (1/elem_max is never an fp32 midpoint).
      r.mult = float(1.0 / double(s.element_max));
      r.emax = 0;
      r.threshold = 0;
      break;
  }
  return r;
}

/// The MX scale of every block, branch-free so that it vectorises (MxRule's formula).
HALFWAY_BLOCKS_CLONES void mx_scale_loop(const uint32_t* __restrict amax, size_t nb,
                                         MxRule rule, uint8_t* __restrict codes,
                                         float* __restrict scales, float* __restrict mult,
                                         uint8_t* __restrict special,
                                         uint8_t* __restrict clamped) {
  for (size_t b = 0; b < nb; ++b) {
    const uint32_t a = amax[b];
    // NaN and ±inf (a ≥ inf's bits) are decided from amax below, whatever v is.
    const uint32_t v = f32_bits(bits_f32(a) * rule.mult);
    const uint32_t field = v >> 23;
    const uint32_t sub = f32_bits(float(int32_t(v & 0x7FFFFFu)));  // mant = 1.f · 2^p exactly
    const bool is_sub = field == 0;
    const int ev = is_sub ? int(sub >> 23) - 127 - 149 : int(field) - 127;
    const uint32_t frac = (is_sub ? sub : v) & 0x7FFFFFu;
    const int k = ev - rule.emax + int(frac > rule.threshold);
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

#ifdef HALFWAY_BLOCKS_AVX512
/// v in every lane.
HALFWAY_BLOCKS_AVX512_TARGET __attribute__((always_inline)) inline __m512i splat(uint32_t v) {
  return _mm512_set1_epi32(int32_t(v));
}

/// mx_scale_loop in AVX-512, 16 blocks a step (the last one masked), the same integer steps;
/// also counts the NaN blocks and the clamped ones.
HALFWAY_BLOCKS_AVX512_TARGET void mx_scale_avx512(const uint32_t* amax, size_t nb, MxRule rule,
                                                  uint8_t* codes,
                                                  float* scales, float* mult, uint8_t* special,
                                                  uint8_t* clamped, uint64_t& n_nan,
                                                  uint64_t& n_clamped) {
  const __m512i mant = splat(0x7FFFFFu), one = splat(1);
  for (size_t b = 0; b < nb; b += 16) {
    const __mmask16 k = nb - b >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (nb - b)) - 1);
    const __m512i a = _mm512_maskz_loadu_epi32(k, amax + b);
    const __m512i v = _mm512_castps_si512(
        _mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(rule.mult)));
    // A subnormal v through its exact conversion to float: mant = 1.f · 2^p.
    const __mmask16 is_sub = _mm512_cmplt_epu32_mask(v, splat(0x00800000u));
    const __m512i bits = _mm512_mask_mov_epi32(
        v, is_sub, _mm512_castps_si512(_mm512_cvtepi32_ps(_mm512_and_si512(v, mant))));
    const __m512i bias = _mm512_mask_mov_epi32(splat(127), is_sub, splat(127 + 149));
    const __m512i ev = _mm512_sub_epi32(_mm512_srli_epi32(bits, 23), bias);
    __m512i kv = _mm512_sub_epi32(ev, splat(uint32_t(rule.emax)));
    const __mmask16 above =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, mant), splat(rule.threshold));
    kv = _mm512_mask_add_epi32(kv, above, kv, one);
    const __mmask16 zero = _mm512_cmpeq_epi32_mask(a, _mm512_setzero_si512());
    const __mmask16 nan = _mm512_mask_cmpge_epu32_mask(k, a, splat(kInfBits));
    const __mmask16 outside = _mm512_cmpgt_epi32_mask(kv, splat(127)) |
                              _mm512_cmplt_epi32_mask(kv, splat(uint32_t(-127)));
    const __mmask16 clamp = __mmask16(outside & ~zero & ~nan & k);
    // An all-zero block gets the smallest scale by definition (not a clamp).
    const __m512i lowest = splat(uint32_t(-127));
    const __m512i kc = _mm512_mask_mov_epi32(
        _mm512_max_epi32(_mm512_min_epi32(kv, splat(127)), lowest), zero, lowest);
    const __m512i code = _mm512_mask_mov_epi32(_mm512_add_epi32(kc, splat(127)), nan, splat(0xFF));
    const __m512i normal_scale = _mm512_mask_mov_epi32(
        splat(0x00400000u), _mm512_cmpge_epi32_mask(kc, splat(uint32_t(-126))),
        _mm512_slli_epi32(_mm512_add_epi32(kc, splat(127)), 23));
    const __m512i scale = _mm512_mask_mov_epi32(normal_scale, nan, splat(0x7FC00000u));
    // x · 2^−k is exact whenever it matters (docs/blocks.md).
    const __m512i m =
        _mm512_mask_mov_epi32(splat(0x00400000u), _mm512_cmple_epi32_mask(kc, splat(126)),
                              _mm512_slli_epi32(_mm512_sub_epi32(splat(127), kc), 23));
    _mm_mask_storeu_epi8(codes + b, k, _mm512_cvtepi32_epi8(code));
    _mm512_mask_storeu_epi32(scales + b, k, scale);
    _mm512_mask_storeu_epi32(mult + b, k, m);
    _mm_mask_storeu_epi8(special + b, k, _mm_maskz_mov_epi8(nan, _mm_set1_epi8(char(kNanScale))));
    _mm_mask_storeu_epi8(clamped + b, k, _mm_maskz_mov_epi8(clamp, _mm_set1_epi8(1)));
    n_nan += uint64_t(__builtin_popcount(nan));
    n_clamped += uint64_t(__builtin_popcount(clamp));
  }
}
#endif

void mx_scales(Job& j, const std::vector<uint32_t>& amax, BlockEncoding& e) {
  const size_t nb = amax.size();
  thread_local std::vector<uint8_t> clamped;
  clamped.resize(nb);
  const MxRule rule = mx_rule(j.s);
  uint64_t nan = 0, n_clamped = 0;
#ifdef HALFWAY_BLOCKS_AVX512
  if (use_avx512()) {
    mx_scale_avx512(amax.data(), nb, rule, e.scale_codes.data(), e.scales.data(), j.mult,
                    j.special, clamped.data(), nan, n_clamped);
  } else
#endif
  {
    mx_scale_loop(amax.data(), nb, rule, e.scale_codes.data(), e.scales.data(), j.mult,
                  j.special, clamped.data());
    nan = count_of(j.special, nb, kNanScale);  // OCP MX: NaN or ±inf in the block
    n_clamped = count_of(clamped.data(), nb, 1);
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

Nvfp4Global nvfp4_global(uint32_t a) {
  const float fp32_max = FLT_MAX;
  float g = (448.0f * 6.0f) / bits_f32(a);  // amax 0 gives inf, capped below
  g = std::min(g, fp32_max);
  if (g == 0.0f) g = 1.0f;
  const float inv6 = 1.0f / 6.0f;  // torch.reciprocal(6.0) in fp32
  return {g, 1.0f / g, g * inv6};
}

/// The fp32 value of a non-negative finite e4m3 code (0..0x7E): 2^(e − 7) · (1 + m/8) for
/// exponent field e > 0, as fp32 bits the code shifted into place plus the rebias; m · 2^−9
/// for e = 0 (exact conversions). Arithmetic rather than a table: the loop over the blocks
/// vectorises without gathers.
inline float e4m3_value(uint32_t code) {
  const float normal = bits_f32((code << 20) + (uint32_t(127 - 7) << 23));
  const float subnormal = float(int32_t(code & 7u)) * 0x1p-9f;
  return code >= 8 ? normal : subnormal;
}

/// Each NVFP4 block's scale value, encode multiplier 1 / (scale × global decode) (capped at
/// fp32 max) and whether its scale underflowed to zero: branch-free, so that it vectorises.
/// PerBlock: decode[b] is block b's global decode scale (row-scaled); else decode[0] is every
/// block's.
template <bool PerBlock>
HALFWAY_BLOCKS_CLONES void nvfp4_multipliers(const uint8_t* __restrict codes,
                                             const uint32_t* __restrict amax, size_t nb,
                                             const float* __restrict decode,
                                             float* __restrict scales, float* __restrict mult,
                                             uint8_t* __restrict special,
                                             uint8_t* __restrict clamped) {
  const float fp32_max = FLT_MAX;
  for (size_t b = 0; b < nb; ++b) {
    const float s = e4m3_value(codes[b]);
    const float enc = 1.0f / (s * decode[PerBlock ? b : 0]);
    clamped[b] |= uint8_t(s == 0.0f) & uint8_t(amax[b] != 0);  // the scale underflowed to zero
    scales[b] = s;
    mult[b] = fp32_max < enc ? fp32_max : enc;  // std::min(enc, fp32 max)
    special[b] = s == 0.0f ? kZeroScale : kPlainScale;
  }
}

/// Each NVFP4 block's decode scale before the e4m3 rounding, amax × multiplier clamped to
/// fp32 max and then to 448 (clamped: it was above 448). PerBlock as nvfp4_multipliers.
template <bool PerBlock>
HALFWAY_BLOCKS_CLONES void nvfp4_decode_scales(const uint32_t* __restrict amax, size_t nb,
                                               const float* __restrict multiplier,
                                               float* __restrict ds,
                                               uint8_t* __restrict clamped) {
  const float fp32_max = FLT_MAX;
  for (size_t b = 0; b < nb; ++b) {
    float d = bits_f32(amax[b]) * multiplier[PerBlock ? b : 0];
    d = d < fp32_max ? d : fp32_max;
    clamped[b] = d > 448.0f;
    ds[b] = d < 448.0f ? d : 448.0f;
  }
}

#ifdef HALFWAY_BLOCKS_AVX512
void nvfp4_scales_avx512(const uint32_t* amax, size_t nb, float multiplier, float decode,
                         uint8_t* codes, float* scales, float* mult, uint8_t* special,
                         uint8_t* clamped, uint64_t& n_zero, uint64_t& n_clamped);
#endif

/// The line (row along the last axis, column along the first) of block b of a 1-D encoding
/// with `sc` blocks a row: row-scaled NVFP4's global scale of that block.
size_t line_of(size_t b, size_t sc, BlockAxis axis) {
  return axis == BlockAxis::last ? b / sc : b % sc;
}

/// The portable loops of nvfp4_scales: the block scales' codes and values, the element
/// multipliers, the zero scales (returned) and the clamped ones (`clamped`, counted in
/// n_clamped). PerBlock: mult and decode hold each block's global factors, else one for all.
template <bool PerBlock>
uint64_t nvfp4_scales_portable(Job& j, const std::vector<uint32_t>& amax, const float* mult,
                               const float* decode, BlockEncoding& e, uint8_t* clamped,
                               uint64_t& n_clamped) {
  const size_t nb = amax.size();
  thread_local std::vector<float> ds;
  ds.resize(nb);
  nvfp4_decode_scales<PerBlock>(amax.data(), nb, mult, ds.data(), clamped);
  round_f32(formats::e4m3, ds.data(), e.scale_codes.data(), nb);  // RNE, subnormals kept
  nvfp4_multipliers<PerBlock>(e.scale_codes.data(), amax.data(), nb, decode, e.scales.data(),
                              j.mult, j.special, clamped);
  n_clamped = count_of(clamped, nb, 1);
  return count_of(j.special, nb, kZeroScale);
}

/// `global`: the bits of the amax each line's global scale comes from (row-scaled: rows or
/// columns entries), or the call's (one entry).
void nvfp4_scales(Job& j, const std::vector<uint32_t>& amax,
                  const std::vector<uint32_t>& global, BlockEncoding& e) {
  const size_t nb = amax.size();
  thread_local std::vector<uint8_t> clamped;
  clamped.resize(nb);
  uint64_t zero = 0, n_clamped = 0;
  if (j.s.row_scaled) {
    // Transformer Engine's per-tensor arithmetic with each line's amax (docs/blocks.md), the
    // factors spread to the blocks of the line, then the portable loops.
    thread_local std::vector<float> mult, decode;
    mult.resize(nb);
    decode.resize(nb);
    e.global_scales.resize(global.size());
    std::vector<Nvfp4Global> line(global.size());
    for (size_t i = 0; i < global.size(); ++i) {
      line[i] = nvfp4_global(global[i]);
      e.global_scales[i] = line[i].encode;
    }
    for (size_t b = 0; b < nb; ++b) {
      const Nvfp4Global& g = line[line_of(b, j.sc, j.o.axis)];
      mult[b] = g.multiplier;
      decode[b] = g.decode;
    }
    zero = nvfp4_scales_portable<true>(j, amax, mult.data(), decode.data(), e, clamped.data(),
                                       n_clamped);
  } else {
    const Nvfp4Global g = nvfp4_global(global[0]);
    e.global_scale = g.encode;
#ifdef HALFWAY_BLOCKS_AVX512
    if (use_avx512()) {
      nvfp4_scales_avx512(amax.data(), nb, g.multiplier, g.decode, e.scale_codes.data(),
                          e.scales.data(), j.mult, j.special, clamped.data(), zero, n_clamped);
    } else
#endif
    {
      zero = nvfp4_scales_portable<false>(j, amax, &g.multiplier, &g.decode, e, clamped.data(),
                                          n_clamped);
    }
  }
  j.specials = zero;
  e.events.scales_clamped += n_clamped;
  // A clamp from above leaves 448 (the harmless kind); one from below, a zero scale.
  uint64_t harmless = 0;
  for (size_t b = 0; b < nb && n_clamped; ++b) harmless += clamped[b] & (e.scales[b] == 448.0f);
  e.events.scales_clamped_harmless += harmless;
  for (size_t b = 0; b < nb && n_clamped && !e.block_events.empty(); ++b) {
    e.block_events[b].scales_clamped = clamped[b];
    e.block_events[b].scales_clamped_harmless = clamped[b] & (e.scales[b] == 448.0f);
  }
}

/// Each fp8_block block's scale, element multiplier (the divisor without pow2) and whether the
/// scale was clamped: branch-free, so that it vectorises.
HALFWAY_BLOCKS_CLONES void fp8_block_scale_loop(const uint32_t* __restrict amax, size_t nb,
                                                bool pow2, float* __restrict scales,
                                                float* __restrict mult,
                                                uint8_t* __restrict clamped) {
  const float fp32_max = FLT_MAX, tiniest = std::numeric_limits<float>::denorm_min();
  for (size_t b = 0; b < nb; ++b) {
    const float a = bits_f32(amax[b]);
    const bool zero = a == 0.0f;
    // TE (pow2): q = 448 / amax in fp32 (inf → fp32 max), rounded down to a power of two 2^e
    // (e from q's exponent: q ≥ 448 / fp32 max is normal, so e ≥ −120); the decode scale is
    // its reciprocal 2^−e, exact (2^−127 is subnormal).
    const float q = 448.0f / a;
    const float qc = q > fp32_max ? fp32_max : q;
    const int eq = int(f32_bits(qc) >> 23) - 127;
    const float up = bits_f32(uint32_t(eq + 127) << 23);
    const float down = bits_f32(eq <= 126 ? uint32_t(127 - eq) << 23 : 0x00400000u);
    // DeepSeek-V3: s = amax / 448; where that rounds to 0, the smallest positive fp32.
    const float sd = a / 448.0f;
    const float sdc = sd == 0.0f ? tiniest : sd;
    scales[b] = zero ? 1.0f : pow2 ? down : sdc;
    mult[b] = zero ? 1.0f : pow2 ? up : sdc;
    clamped[b] = uint8_t(!zero & (pow2 ? q > fp32_max : sd == 0.0f));
  }
}

void fp8_block_scales(Job& j, const std::vector<uint32_t>& amax, BlockEncoding& e) {
  j.divide = !j.o.pow2_scales;
  const size_t nb = amax.size();
  thread_local std::vector<uint8_t> clamped;
  clamped.resize(nb);
  fp8_block_scale_loop(amax.data(), nb, j.o.pow2_scales, e.scales.data(), j.mult,
                       clamped.data());
  const uint64_t n_clamped = count_of(clamped.data(), nb, 1);
  e.events.scales_clamped += n_clamped;
  for (size_t b = 0; b < nb && n_clamped && !e.block_events.empty(); ++b)
    e.block_events[b].scales_clamped = clamped[b];
}

/// torchao's float8 rowwise scale of each row (float8_utils.amax_to_scale): scale =
/// fp32(elem_max / max(amax, 1e-12)) with amax widened to binary64 and 1e-12 a binary64
/// constant (the quotient rounded to binary64 then to fp32, which for an fp32 amax is the
/// correctly rounded fp32 quotient); with pow2, rounded down to a power of two. The elements
/// are fp32(x · scale), decoded as fp32(q / scale). An amax below 1e-12 other than 0 is
/// counted as a clamped scale; an all-zero row takes the scale of 1e-12 by the same rule.
void fp8_rowwise_scales(Job& j, const std::vector<uint32_t>& amax, BlockEncoding& e) {
  const size_t nb = amax.size();
  const double elem_max = double(j.s.element_max), eps = 1e-12;
  uint64_t n_clamped = 0;
  for (size_t b = 0; b < nb; ++b) {
    const double a = double(bits_f32(amax[b]));
    const bool clamped = a != 0.0 && a < eps;
    float q = float(elem_max / std::max(a, eps));
    if (j.o.pow2_scales) q = bits_f32(f32_bits(q) & kInfBits);  // q is normal: ≥ 2^−1
    e.scales[b] = q;
    j.mult[b] = q;
    n_clamped += clamped;
    if (clamped && !e.block_events.empty()) e.block_events[b].scales_clamped = 1;
  }
  e.events.scales_clamped += n_clamped;
}

/// The constants of the fused element step, which rounds |y| ≤ max to nearest even on the
/// element grid with one fp32 addition and reads the code off the sum's bits. Let
/// E = max(exponent of |y|, emin), d = (E − emin) << 23 (from |y|'s exponent field by a
/// subtraction clamped at zero) and c = 2^(E − m + 23). The sum s = |y| + c lies in c's binade
/// (|y| < 2^(E+1) ≤ c), where the ulp is the grid's quantum 2^(E − m): fp32's own
/// round-to-nearest-even rounds |y| exactly once, and as c's significand is even, the integer
/// n = bits(s) − bits(c) is |y| / 2^(E − m) rounded to nearest even (2^m ≤ n ≤ 2^(m+1) for
/// normal elements, n < 2^m for subnormal ones). The code is n + ((E − emin) << m) =
/// n + (d >> (23 − m)): for normal elements the implicit bit in n adds one to the exponent
/// field, and a carry (n = 2^(m+1)) moves to the next binade.
struct ElementGrid {
  uint32_t lim_bits = 0;       ///< the largest finite element value, as fp32 bits
  uint32_t half_min_bits = 0;  ///< at most this rounds to ±0, as fp32 bits
  uint32_t min_field = 0;   ///< bits of 2^emin
  uint32_t c_base = 0;      ///< bits of 2^(emin − m + 23): c = d + c_base
  uint32_t shift = 0;       ///< 23 − m: d >> shift is (E − emin) << m
  uint32_t sign_bit = 0;    ///< the element's sign bit

  explicit ElementGrid(const BlockScheme& s)
      : ElementGrid(s.element, s.element_max, s.half_min_subnormal) {}
  ElementGrid(const Format& f, float max_value, float half_min_subnormal) {
    const int m = f.frac_bits, emin = f.emin();
    lim_bits = f32_bits(max_value);
    half_min_bits = f32_bits(half_min_subnormal);
    min_field = uint32_t(127 + emin) << 23;
    c_base = min_field + (uint32_t(23 - m) << 23);
    shift = uint32_t(23 - m);
    sign_bit = uint32_t(1) << (f.exp_bits + f.frac_bits);
  }
};

/// One element: y = x · mult (or x / mult), its events, and its code rounded to nearest even
/// with saturation: exactly what round_f32 gives for y (NVFP4: for y clamped to ±6 plus +0).
/// |y| is clamped to max first (saturation; rounding is monotone), rounded as described at
/// ElementGrid, and the sign is y's.
template <bool Divide, bool Clamp>
inline uint8_t encode_one(const ElementGrid& g, float v, float m, uint32_t& sat, uint32_t& fl) {
  // Comparisons on magnitude bits rather than floats: they cannot trap, so the loop has no
  // branches and vectorises (a NaN's bits exceed every finite value's).
  const uint32_t y = f32_bits(Divide ? v / m : v * m);
  const uint32_t a = y & kAbs;
  fl += uint32_t((f32_bits(v) & kAbs) != 0) & uint32_t(a <= g.half_min_bits);
  sat += uint32_t(a > g.lim_bits);
  const uint32_t t = a < g.lim_bits ? a : g.lim_bits;  // saturate; NaN blocks come later
  // NVFP4: TE clamps to ±6 before the e2m1 cast, and its table gives −0.0 the code of +0
  // (TE's clamp then + 0 in fp32): the sign of a zero is dropped; a negative value that
  // rounds to zero keeps its sign.
  const uint32_t neg = Clamp ? uint32_t(y > 0x80000000u) : y >> 31;
  const uint32_t field = t & kInfBits;
  const uint32_t d = field > g.min_field ? field - g.min_field : 0;
  const uint32_t c = d + g.c_base;
  const uint32_t s = f32_bits(bits_f32(t) + bits_f32(c));
  const uint32_t mag = (s - c) + (d >> g.shift);
  return uint8_t((neg ? g.sign_bit : 0) | mag);
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
  if (tc % 16 != 0) {  // a block length of the user's choice: one loop per block
    for (size_t b = 0; b < sc; ++b) {
      const float m = mult[b];
      uint32_t n = 0, f = 0;
      for (size_t c = b * tc; c < (b + 1) * tc; ++c)
        codes[c] = encode_one<Divide, Clamp>(g, x[c], m, n, f);
      sat[base + b] += n;
      flushed[base + b] += f;
    }
    return;
  }
  // A block length that is a multiple of 16: a loop of 16 elements, with its trip count
  // known, is vectorised 16 floats (and codes) wide, where one over the block length would be
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
/// ElementGrid's constants in AVX-512 registers.
struct GridAvx512 {
  __m512i abs, lim, half_min, inf, min_field, c_base, shift, sign_bit, sign_shift;
  HALFWAY_BLOCKS_AVX512_TARGET explicit GridAvx512(const ElementGrid& g)
      : abs(_mm512_set1_epi32(int32_t(kAbs))),
        lim(_mm512_set1_epi32(int32_t(g.lim_bits))),
        half_min(_mm512_set1_epi32(int32_t(g.half_min_bits))),
        inf(_mm512_set1_epi32(int32_t(kInfBits))),
        min_field(_mm512_set1_epi32(int32_t(g.min_field))),
        c_base(_mm512_set1_epi32(int32_t(g.c_base))),
        shift(_mm512_set1_epi32(int32_t(g.shift))),
        sign_bit(_mm512_set1_epi32(int32_t(g.sign_bit))),
        sign_shift(_mm512_set1_epi32(31 - __builtin_ctz(g.sign_bit))) {}
};

/// The element codes of 16 magnitudes t ≤ max (fp32 bits), rounded to nearest even as
/// described at ElementGrid. The exponent difference d = max(field − min_field, 0) is one
/// unsigned saturating subtraction of 16-bit halves (the low halves of both are zero).
HALFWAY_BLOCKS_AVX512_TARGET __attribute__((always_inline)) inline __m512i round_mag16(
    const GridAvx512& g, __m512i t) {
  const __m512i d = _mm512_subs_epu16(_mm512_and_si512(t, g.inf), g.min_field);
  const __m512i c = _mm512_add_epi32(d, g.c_base);
  const __m512i s =
      _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(t), _mm512_castsi512_ps(c)));
  return _mm512_add_epi32(_mm512_sub_epi32(s, c), _mm512_srlv_epi32(d, g.shift));
}

/// encode_one for 16 lanes (masked loads: lanes outside `k` read 0 and are not counted): the
/// same fp32 operations and integer readings, lane by lane.
template <bool Divide, bool Clamp>
HALFWAY_BLOCKS_AVX512_TARGET __attribute__((always_inline)) inline __m512i encode16_avx512(
    const GridAvx512& g, __m512 v, __m512 m, __mmask16 k, __mmask16& sat, __mmask16& fl) {
  const __m512i y = _mm512_castps_si512(Divide ? _mm512_div_ps(v, m) : _mm512_mul_ps(v, m));
  const __m512i a = _mm512_and_si512(y, g.abs);
  fl = _mm512_mask_cmple_epu32_mask(_mm512_mask_test_epi32_mask(k, _mm512_castps_si512(v), g.abs),
                                    a, g.half_min);
  sat = _mm512_mask_cmpgt_epu32_mask(k, a, g.lim);
  const __m512i mag = round_mag16(g, _mm512_min_epu32(a, g.lim));
  if constexpr (Clamp) {
    const __mmask16 neg = _mm512_cmpgt_epu32_mask(y, _mm512_set1_epi32(int32_t(0x80000000u)));
    return _mm512_mask_or_epi32(mag, neg, mag, g.sign_bit);
  } else {
    // y's sign bit moved to the element's sign position, merged into mag: mag | (ys & sign_bit)
    return _mm512_ternarylogic_epi32(mag, _mm512_srlv_epi32(y, g.sign_shift), g.sign_bit, 0xF8);
  }
}

/// The multipliers of the 16 lanes at column c: one per lane for blocks down the columns
/// (V = 0: the multipliers of the row's columns), else their block's (V vectors a block).
template <int V>
HALFWAY_BLOCKS_AVX512_TARGET __attribute__((always_inline)) inline __m512 lane_mult(
    const float* mult, size_t c, __mmask16 k) {
  if constexpr (V == 0) return _mm512_maskz_loadu_ps(k, mult + c);
  else return _mm512_set1_ps(mult[c / (16 * V)]);
}

/// Adds the lanes of `k` to the per-lane counters at p (16 of them, those of `valid`).
HALFWAY_BLOCKS_AVX512_TARGET __attribute__((always_inline)) inline void count_lanes(
    uint32_t* p, __mmask16 k, __mmask16 valid) {
  const __m512i n = _mm512_maskz_loadu_epi32(valid, p);
  _mm512_mask_storeu_epi32(p, valid, _mm512_mask_sub_epi32(n, k, n, _mm512_set1_epi32(-1)));
}

/// The events of `count` vectors from column c (their masks in m, lane masks `valid` for
/// V = 0) into the counters of their blocks, or of their columns: one population count per
/// block and group. Without PerBlock, into `total` only: one population count per group.
template <int V, bool PerBlock>
HALFWAY_BLOCKS_AVX512_TARGET __attribute__((always_inline)) inline void count_group(
    uint32_t* counts, uint64_t& total, size_t c, const __mmask16* m, int count,
    __mmask16 valid) {
  if constexpr (!PerBlock) {
    uint64_t bits = 0;
    for (int i = 0; i < count; ++i) bits |= uint64_t(m[i]) << (16 * i);
    total += uint64_t(__builtin_popcountll(bits));
  } else if constexpr (V == 0) {
    for (int i = 0; i < count; ++i) count_lanes(counts + c + 16 * size_t(i), m[i], valid);
  } else {
    constexpr int per = V < 4 ? V : 4;  // vectors of one block in a group of four
    for (int i = 0; i < count; i += per) {
      uint64_t bits = 0;
      for (int k = 0; k < per && i + k < count; ++k) bits |= uint64_t(m[i + k]) << (16 * k);
      counts[(c + 16 * size_t(i)) / (16 * V)] += uint32_t(__builtin_popcountll(bits));
    }
  }
}

/// encode_row in AVX-512: blocks along a row, V (1, 2 or 8) vectors long, or (V = 0) blocks
/// down the columns (any number of columns: the last vector is masked). Groups of four
/// vectors: their codes are packed to bytes together and stored as one 64-byte vector.
/// Without PerBlock the events are only added to totals[0] (saturated) and [1] (flushed).
template <bool Divide, bool Clamp, int V, bool PerBlock>
HALFWAY_BLOCKS_AVX512_TARGET void encode_row_avx512(const Job& j, const ElementGrid& grid,
                                                    size_t r, uint8_t* codes_, uint32_t* sat_,
                                                    uint32_t* flushed_, uint64_t* totals) {
  const float* x = j.x + r * j.cols;
  uint8_t* codes = codes_ + r * j.cols;
  const size_t base = (r / j.tr) * j.sc, cols = j.cols;
  const float* mult = j.mult + base;
  uint32_t* sat = PerBlock ? sat_ + base : nullptr;
  uint32_t* fl = PerBlock ? flushed_ + base : nullptr;
  const GridAvx512 g(grid);
  // packus_epi32 then packus_epi16 of four vectors leaves, in 128-bit lane k, the 4-byte
  // groups k of vectors 0..3; this permutation puts them back in order.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __mmask16 all = 0xFFFF;
  uint64_t n_sat = 0, n_fl = 0;
  size_t c = 0;
  for (; c + 64 <= cols; c += 64) {
    __m512i q[4];
    __mmask16 s[4], f[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const size_t ci = c + 16 * size_t(i);
      q[i] = encode16_avx512<Divide, Clamp>(g, _mm512_loadu_ps(x + ci),
                                            lane_mult<V>(mult, ci, all), all, s[i], f[i]);
    }
    count_group<V, PerBlock>(sat, n_sat, c, s, 4, all);
    count_group<V, PerBlock>(fl, n_fl, c, f, 4, all);
    const __m512i w = _mm512_packus_epi16(_mm512_packus_epi32(q[0], q[1]),
                                          _mm512_packus_epi32(q[2], q[3]));
    _mm512_storeu_si512(codes + c, _mm512_permutexvar_epi32(order, w));
  }
  for (; c < cols; c += 16) {
    const __mmask16 k = cols - c >= 16 ? all : __mmask16((1u << (cols - c)) - 1);
    __mmask16 s, f;
    const __m512i q = encode16_avx512<Divide, Clamp>(g, _mm512_maskz_loadu_ps(k, x + c),
                                                     lane_mult<V>(mult, c, k), k, s, f);
    count_group<V, PerBlock>(sat, n_sat, c, &s, 1, k);
    count_group<V, PerBlock>(fl, n_fl, c, &f, 1, k);
    _mm_mask_storeu_epi8(codes + c, k, _mm512_cvtepi32_epi8(q));
  }
  totals[0] += n_sat;
  totals[1] += n_fl;
}
/// nvfp4_decode_scales, the e4m3 rounding and nvfp4_multipliers in AVX-512, 16 blocks a step
/// (the last one masked): the same fp32 operations in the same order, the e4m3 code by
/// round_mag16 (d ≤ 448 needs no saturation). Also counts the zero scales and the clamped
/// ones.
HALFWAY_BLOCKS_AVX512_TARGET void nvfp4_scales_avx512(const uint32_t* amax, size_t nb,
                                                      float multiplier, float decode,
                                                      uint8_t* codes, float* scales, float* mult,
                                                      uint8_t* special, uint8_t* clamped,
                                                      uint64_t& n_zero, uint64_t& n_clamped) {
  static const ElementGrid e4m3(formats::e4m3, 448.0f, 0x1p-10f);
  const GridAvx512 g(e4m3);
  const __m512 fp32_max = _mm512_set1_ps(FLT_MAX), v448 = _mm512_set1_ps(448.0f);
  for (size_t b = 0; b < nb; b += 16) {
    const __mmask16 k = nb - b >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (nb - b)) - 1);
    const __m512i a = _mm512_maskz_loadu_epi32(k, amax + b);
    __m512 d = _mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(multiplier));
    d = _mm512_min_ps(d, fp32_max);  // d < max ? d : max
    __mmask16 clamp = _mm512_mask_cmp_ps_mask(k, d, v448, _CMP_GT_OQ);
    d = _mm512_min_ps(d, v448);
    const __m512i code = round_mag16(g, _mm512_castps_si512(d));  // RNE, subnormals kept
    // The e4m3 value: (code << 20) rebiased for exponent field e > 0, code · 2^−9 for e = 0.
    const __m512i normal =
        _mm512_add_epi32(_mm512_slli_epi32(code, 20), splat(uint32_t(127 - 7) << 23));
    const __m512 s =
        _mm512_mask_mov_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(code), _mm512_set1_ps(0x1p-9f)),
                           _mm512_cmpge_epu32_mask(code, splat(8)), _mm512_castsi512_ps(normal));
    const __m512 enc =
        _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(s, _mm512_set1_ps(decode)));
    const __mmask16 zero = _mm512_mask_cmp_ps_mask(k, s, _mm512_setzero_ps(), _CMP_EQ_OQ);
    clamp |= __mmask16(zero & _mm512_test_epi32_mask(a, a));  // the scale underflowed to zero
    _mm_mask_storeu_epi8(codes + b, k, _mm512_cvtepi32_epi8(code));
    _mm512_mask_storeu_ps(scales + b, k, s);
    _mm512_mask_storeu_ps(mult + b, k, _mm512_min_ps(enc, fp32_max));
    _mm_mask_storeu_epi8(special + b, k, _mm_maskz_mov_epi8(zero, _mm_set1_epi8(char(kZeroScale))));
    _mm_mask_storeu_epi8(clamped + b, k, _mm_maskz_mov_epi8(clamp, _mm_set1_epi8(1)));
    n_zero += uint64_t(__builtin_popcount(zero));
    n_clamped += uint64_t(__builtin_popcount(clamp));
  }
}
#endif

/// Every element rounding but near_even goes through the bulk kernels: row r scaled (x · mult,
/// or x / mult for fp8_block without pow2) and clamped to ±max into `buf` (saturation, in
/// every direction), counting per block the elements beyond max (the flushed ones come from
/// the codes). NVFP4 adds +0 (TE's rule for −0.0). MX: x / 2^k is exact in the definition; a
/// non-zero x whose product underflows fp32 to zero becomes the smallest fp32 subnormal with
/// x's sign, which rounds as x / 2^k does in every direction (both lie far below half the
/// element's smallest subnormal: only the sign decides, and stochastic rounding's fraction has
/// no bit within its 32 random bits).
HALFWAY_BLOCKS_CLONES void scale_row_bulk(const Job& j, size_t r, float* buf_, uint32_t* sat) {
  const float* __restrict x = j.x + r * j.cols;
  float* __restrict buf = buf_;
  const size_t base = (r / j.tr) * j.sc, cols = j.cols, tc = j.tc;
  const float* __restrict mult = j.mult + base;
  const float lim = j.s.element_max, tiny = std::numeric_limits<float>::denorm_min();
  const bool nvfp4 = j.s.family == BlockFamily::nvfp4, mx = j.s.family == BlockFamily::mx;
  const bool divide = j.divide;
  // Element c scaled by m into buf[c]; whether it lay beyond max.
  const auto scale = [&](size_t c, float m) {
    float y = divide ? x[c] / m : x[c] * m;
    if (mx && y == 0.0f && x[c] != 0.0f) y = std::copysign(tiny, x[c]);
    const uint32_t over = uint32_t(std::fabs(y) > lim);
    y = y > lim ? lim : (y < -lim ? -lim : y);
    buf[c] = nvfp4 ? y + 0.0f : y;
    return over;
  };
  if (tc == 1) {  // blocks down the columns: element c is in block c
    for (size_t c = 0; c < cols; ++c) sat[base + c] += scale(c, mult[c]);
    return;
  }
  // Blocks along the row, one at a time (no division per element).
  for (size_t b = 0, c0 = 0; c0 < cols; ++b, c0 += tc) {
    const size_t c1 = std::min(cols, c0 + tc);
    const float m = mult[b];
    uint32_t over = 0;
    for (size_t c = c0; c < c1; ++c) over += scale(c, m);
    sat[base + b] += over;
  }
}

/// After the bulk rounding of row r: the non-zero inputs whose code is ±0, per block.
void count_flushed_codes(const Job& j, size_t r, const uint8_t* codes, uint32_t* flushed) {
  const float* x = j.x + r * j.cols;
  const size_t base = (r / j.tr) * j.sc, cols = j.cols, tc = j.tc;
  const uint8_t mag = uint8_t(j.s.element.mag_mask());
  for (size_t b = 0, c0 = 0; c0 < cols; ++b, c0 += tc) {
    uint32_t n = 0;
    for (size_t c = c0; c < std::min(cols, c0 + tc); ++c)
      n += x[c] != 0.0f && (codes[c] & mag) == 0;
    flushed[base + b] += n;
  }
}

using EncodeRowFn = void (*)(const Job&, const ElementGrid&, size_t, uint8_t*, uint32_t*,
                            uint32_t*);

/// n elements, each with its own multiplier m[i], into codes and per-element event flags (0
/// or 1): encode_one in one loop that vectorises whatever the row length.
template <bool Divide, bool Clamp>
HALFWAY_BLOCKS_CLONES void encode_flat(const ElementGrid& g_, const float* __restrict x,
                                       const float* __restrict m, uint8_t* __restrict codes,
                                       uint8_t* __restrict sat, uint8_t* __restrict flushed,
                                       size_t n) {
  const ElementGrid g = g_;
  for (size_t i = 0; i < n; ++i) {
    uint32_t s = 0, f = 0;
    codes[i] = encode_one<Divide, Clamp>(g, x[i], m[i], s, f);
    sat[i] = uint8_t(s);
    flushed[i] = uint8_t(f);
  }
}

using EncodeFlatFn = void (*)(const ElementGrid&, const float*, const float*, uint8_t*,
                              uint8_t*, uint8_t*, size_t);

/// Rows narrower than this, with blocks down the columns, are encoded a block row at a time
/// (encode_narrow_columns): encode_row's loop over one row would run scalar, its vector
/// loop being 32 or 64 codes wide.
constexpr size_t kNarrowColumns = 64;

/// Blocks down the columns (tc = 1) of a tensor with short rows: each block row (tr rows of
/// `cols` values, contiguous) is one flat loop, with each column's multiplier repeated down
/// the rows; the per-element events are then added into their column's block. The same
/// element steps as encode_row, so the same codes and counts.
void encode_narrow_columns(const Job& j, const ElementGrid& g, EncodeFlatFn fn, uint8_t* codes,
                           uint32_t* sat, uint32_t* flushed) {
  const size_t cols = j.cols, n = j.tr * cols;
  thread_local std::vector<float> m;  // scratch kept between calls
  thread_local std::vector<uint8_t> s, f;
  m.resize(n);
  s.resize(n);
  f.resize(n);
  for (size_t br = 0; br < j.sr; ++br) {
    const float* mb = j.mult + br * j.sc;
    for (size_t r = 0; r < j.tr; ++r) std::copy(mb, mb + cols, m.begin() + r * cols);
    fn(g, j.x + br * n, m.data(), codes + br * n, s.data(), f.data(), n);
    uint32_t* st = sat + br * j.sc;
    uint32_t* ft = flushed + br * j.sc;
    for (size_t r = 0; r < j.tr; ++r)
      for (size_t c = 0; c < cols; ++c) {
        st[c] += s[r * cols + c];
        ft[c] += f[r * cols + c];
      }
  }
}

#ifdef HALFWAY_BLOCKS_AVX512
using EncodeRowAvx512Fn = void (*)(const Job&, const ElementGrid&, size_t, uint8_t*, uint32_t*,
                                   uint32_t*, uint64_t*);

/// The AVX-512 element kernel for j's scheme and block shape.
template <int V, bool PerBlock>
EncodeRowAvx512Fn encode_row_avx512_v(const Job& j) {
  if (j.s.family == BlockFamily::nvfp4) return encode_row_avx512<false, true, V, PerBlock>;
  return j.divide ? encode_row_avx512<true, false, V, PerBlock>
                  : encode_row_avx512<false, false, V, PerBlock>;
}

template <bool PerBlock>
EncodeRowAvx512Fn encode_row_avx512_for(const Job& j) {
  switch (j.tc) {
    case 1: return encode_row_avx512_v<0, PerBlock>(j);
    case 16: return encode_row_avx512_v<1, PerBlock>(j);
    case 32: return encode_row_avx512_v<2, PerBlock>(j);
    default: return encode_row_avx512_v<8, PerBlock>(j);  // 128
  }
}
#endif

/// Blocks whose scale is NaN (MX) or zero (NVFP4): codes 0 for NaN blocks, nothing saturated,
/// every non-zero input flushed for zero scales. Rare, so a second look at those blocks only.
void special_blocks(const Job& j, uint8_t* codes, uint32_t* sat, uint32_t* flushed) {
  for (size_t b = 0; b < j.sr * j.sc; ++b) {
    if (j.special[b] == kPlainScale) continue;
    const bool nan = j.special[b] == kNanScale;
    sat[b] = 0;
    flushed[b] = 0;
    const size_t r0 = (b / j.sc) * j.tr, c0 = (b % j.sc) * j.tc;
    for (size_t r = r0; r < r0 + j.tr; ++r)
      for (size_t c = c0; c < c0 + j.tc; ++c) {
        if (nan) codes[r * j.cols + c] = 0;
        else flushed[b] += (f32_bits(j.x[r * j.cols + c]) & kAbs) != 0;
      }
  }
}

/// The elements by the bulk kernels (every rounding but near_even): whole rows at a time, about
/// 16Ki elements, so that the bulk kernel is called few times on a buffer in cache.
void encode_elements_bulk(const Job& j, uint8_t* codes_, uint32_t* sat, uint32_t* flushed) {
  const size_t chunk_rows = std::max<size_t>(1, (size_t(1) << 14) / std::max<size_t>(1, j.cols));
  thread_local std::vector<float> buf;  // scratch kept between calls, one per thread
  buf.resize(std::min(chunk_rows, std::max<size_t>(j.rows, 1)) * j.cols);
  BulkOptions bo;
  bo.rounding = j.o.rounding;
  bo.seed = j.o.seed;
  bo.subsequence = j.o.subsequence;
  bo.random_bits = j.o.random_bits;
  bo.pack_random_bits = j.o.pack_random_bits;
  for (size_t r0 = 0; r0 < j.rows; r0 += chunk_rows) {
    const size_t r1 = std::min(j.rows, r0 + chunk_rows);
    for (size_t r = r0; r < r1; ++r)
      scale_row_bulk(j, r, buf.data() + (r - r0) * j.cols, sat);
    bo.offset = j.o.offset + r0 * j.cols;  // element (r, c) at stream position offset + r·cols + c
    uint8_t* codes = codes_ + r0 * j.cols;
    round_f32(j.s.element, buf.data(), codes, (r1 - r0) * j.cols, bo);
    for (size_t r = r0; r < r1; ++r)
      count_flushed_codes(j, r, codes + (r - r0) * j.cols, flushed);
  }
}

/// The element pass of j (or of a band of it), with the events per block into sat and flushed.
void encode_per_block(const Job& j, uint8_t* codes, uint32_t* sat, uint32_t* flushed) {
  const ElementGrid g(j.s);
  if (j.o.rounding != Rounding::near_even) {
    encode_elements_bulk(j, codes, sat, flushed);
  } else {
#ifdef HALFWAY_BLOCKS_AVX512
    if (avx512_length(j.tc) && use_avx512()) {
      const EncodeRowAvx512Fn fn = encode_row_avx512_for<true>(j);
      uint64_t unused[2] = {0, 0};
      for (size_t r = 0; r < j.rows; ++r) fn(j, g, r, codes, sat, flushed, unused);
    } else
#endif
    if (j.tc == 1 && j.cols < kNarrowColumns) {
      const EncodeFlatFn fn = j.s.family == BlockFamily::nvfp4 ? encode_flat<false, true>
                              : j.divide                       ? encode_flat<true, false>
                                                               : encode_flat<false, false>;
      encode_narrow_columns(j, g, fn, codes, sat, flushed);
    } else {
      const EncodeRowFn fn = j.s.family == BlockFamily::nvfp4 ? encode_row<false, true>
                             : j.divide                       ? encode_row<true, false>
                                                              : encode_row<false, false>;
      for (size_t r = 0; r < j.rows; ++r) fn(j, g, r, codes, sat, flushed);
    }
  }
  if (j.specials) special_blocks(j, codes, sat, flushed);
}

/// Every element's code and the call's events, in bands of block rows on the pool (in_bands):
/// each band writes its own rows' codes and its own blocks' counts, and the totals are sums of
/// integers, so the encoding does not depend on the bands.
void encode_elements(const Job& j, BlockEncoding& e, int threads) {
  const size_t nb = j.sr * j.sc;
  uint8_t* codes = e.codes.data();
#ifdef HALFWAY_BLOCKS_AVX512
  // Only the totals wanted (no per-block events, no block needing a second look): the
  // kernel counts per group of vectors, not per block.
  if (j.o.rounding == Rounding::near_even && avx512_length(j.tc) && use_avx512() &&
      e.block_events.empty() && j.specials == 0) {
    std::vector<std::array<uint64_t, 2>> totals(size_t(std::max(threads, 1)), {0, 0});
    const int parts = in_bands(j, threads, [&](int p, const Job& b, size_t br0) {
      const EncodeRowAvx512Fn fn = encode_row_avx512_for<false>(b);
      const ElementGrid g(b.s);
      uint8_t* band_codes = codes + br0 * j.tr * j.cols;
      for (size_t r = 0; r < b.rows; ++r)
        fn(b, g, r, band_codes, nullptr, nullptr, totals[size_t(p)].data());
    });
    for (int p = 0; p < parts; ++p) {
      e.events.saturated += totals[size_t(p)][0];
      e.events.flushed += totals[size_t(p)][1];
    }
    return;
  }
#endif
  thread_local std::vector<uint32_t> sat_, flushed_;  // scratch kept between calls
  sat_.assign(nb, 0);
  flushed_.assign(nb, 0);
  uint32_t *sat = sat_.data(), *flushed = flushed_.data();  // written by the pool's threads
  in_bands(j, threads, [&](int, const Job& b, size_t br0) {
    encode_per_block(b, codes + br0 * j.tr * j.cols, sat + br0 * j.sc, flushed + br0 * j.sc);
  });
  e.events.saturated += sum_of(sat, nb, j.tr * j.tc);
  e.events.flushed += sum_of(flushed, nb, j.tr * j.tc);
  for (size_t b = 0; b < nb && !e.block_events.empty(); ++b) {
    BlockEvents& be = e.block_events[b];
    be.elements = j.tr * j.tc;
    be.blocks = 1;
    be.saturated = sat[b];
    be.flushed = flushed[b];
    be.nan_scales = j.special[b] == kNanScale;
  }
}

/// Four Over Six (Cook et al. 2025, mit-han-lab/fouroversix, `quantize/reference.py` with
/// its default rule `mse`): each block is quantized twice, with the e4m3 scale that maps its
/// amax to 6 and with 1.5 times it (amax to 4), under the tensor amax A and the scale range
/// 256; the candidate with the smaller squared error is kept (docs/blocks.md, "Four Over
/// Six"). Per block b with amax a: s6 = e4m3(fp32(fp32(a · 256) / A)), s4 =
/// e4m3(fp32(fp32(a · 256) / A) · 1.5); elements y = fp32(fp32(fp32(x · 6) · 256) / fp32(A · s)),
/// rounded to e2m1 nearest even, clamped to ±6; decoded fp32(fp32(fp32(q · s) · A) / 1536).
struct FourOverSix {
  float a_all;  ///< the tensor amax A
  float value(uint8_t code, float s) const {
    Env env;
    const float q = to_f32(formats::e2m1, code, env);
    return (q * s) * a_all / 1536.0f;
  }
  /// The code of x under block scale s (0: every element 0), with its events.
  uint8_t code(float x, float s, bool& saturated) const {
    saturated = false;
    if (s == 0.0f || x == 0.0f) return 0;
    float y = ((x * 6.0f) * 256.0f) / (a_all * s);
    if (y == 0.0f) return 0;  // y underflowed: fouroversix's sign(y) · 0 is +0 (torch.sign(−0) = 0)
    saturated = std::fabs(y) > 6.0f;
    y = std::fmax(-6.0f, std::fmin(6.0f, y));
    Env env;
    return uint8_t(from_f32(formats::e2m1, y, env));  // a negative y that rounds to 0: −0
  }
};

void encode_4over6(const Job& j, const std::vector<uint32_t>& amax, uint32_t amax_all,
                   BlockEncoding& e) {
  const float a_all = bits_f32(amax_all);
  if (!(a_all <= FLT_MAX / 256.0f))
    throw InputError(j.s.name + ": the tensor's amax " + std::to_string(a_all) +
                     " exceeds fp32 max / 256 (Four Over Six's first product a · 256 overflows)");
  const FourOverSix f{a_all};
  const size_t nb = j.sr * j.sc;
  Env env;
  std::vector<float> s6(nb), s4(nb);
  std::vector<uint8_t> c6(nb), c4(nb);
  for (size_t b = 0; b < nb; ++b) {
    const float hp = a_all == 0.0f ? 0.0f : (bits_f32(amax[b]) * 256.0f) / a_all;
    c6[b] = uint8_t(from_f32(formats::e4m3, hp, env));
    c4[b] = uint8_t(from_f32(formats::e4m3, hp * 1.5f, env));
    s6[b] = to_f32(formats::e4m3, c6[b], env);
    s4[b] = to_f32(formats::e4m3, c4[b], env);
  }
  // The squared errors of both candidates, per block, in binary64 in row-major order.
  std::vector<double> err6(nb, 0.0), err4(nb, 0.0);
  bool sat = false;
  for (size_t r = 0; r < j.rows; ++r)
    for (size_t c = 0; c < j.cols; ++c) {
      const size_t b = (r / j.tr) * j.sc + c / j.tc;
      const float x = j.x[r * j.cols + c];
      const double d6 = double(f.value(f.code(x, s6[b], sat), s6[b])) - double(x);
      const double d4 = double(f.value(f.code(x, s4[b], sat), s4[b])) - double(x);
      err6[b] += d6 * d6;
      err4[b] += d4 * d4;
    }
  std::vector<uint32_t> n_sat(nb, 0), n_flushed(nb, 0);
  for (size_t b = 0; b < nb; ++b) {
    const bool four = err4[b] < err6[b];
    e.scale_codes[b] = four ? c4[b] : c6[b];
    e.scales[b] = four ? s4[b] : s6[b];
    const bool clamped = e.scales[b] == 0.0f && amax[b] != 0;
    e.events.scales_clamped += clamped;
    if (!e.block_events.empty()) e.block_events[b].scales_clamped = clamped;
  }
  for (size_t r = 0; r < j.rows; ++r)
    for (size_t c = 0; c < j.cols; ++c) {
      const size_t b = (r / j.tr) * j.sc + c / j.tc;
      const float x = j.x[r * j.cols + c];
      const uint8_t q = f.code(x, e.scales[b], sat);
      e.codes[r * j.cols + c] = q;
      n_sat[b] += sat;
      n_flushed[b] += x != 0.0f && (q & 7) == 0;
    }
  e.global_scale = a_all;
  for (size_t b = 0; b < nb; ++b) {
    e.events.saturated += n_sat[b];
    e.events.flushed += n_flushed[b];
    if (e.block_events.empty()) continue;
    BlockEvents& be = e.block_events[b];
    be.elements = j.tr * j.tc;
    be.blocks = 1;
    be.saturated = n_sat[b];
    be.flushed = n_flushed[b];
  }
}

/// The bits of the amax each global scale comes from: the call's (one entry), or each line's
/// (row-scaled NVFP4: the largest block amax of each row, or of each column for blocks down
/// the columns); BlockOptions::global_amax in their place, each checked to be finite and at
/// least the call's own.
std::vector<uint32_t> global_amax(const Job& j, const std::vector<uint32_t>& amax,
                                  uint32_t amax_all) {
  std::vector<uint32_t> own;
  if (!j.s.row_scaled) {
    own.assign(1, amax_all);
  } else if (j.o.axis == BlockAxis::last) {  // 1×k blocks: a row's blocks are consecutive
    own.resize(j.rows);
    for (size_t r = 0; r < j.rows; ++r) own[r] = max_of(amax.data() + r * j.sc, j.sc);
  } else {  // k×1 blocks: column c's blocks are c, c + cols, ...
    own.assign(j.cols, 0);
    for (size_t br = 0; br < j.sr; ++br)
      for (size_t c = 0; c < j.cols; ++c) own[c] = std::max(own[c], amax[br * j.sc + c]);
  }
  const std::span<const float> given = j.o.global_amax;
  if (given.empty()) return own;
  for (size_t i = 0; i < own.size(); ++i) {
    if (!(std::fabs(given[i]) <= FLT_MAX) || !(given[i] >= bits_f32(own[i])))
      throw InputError(j.s.name + ": a given global amax, " + std::to_string(given[i]) +
                       (own.size() > 1 ? " (line " + std::to_string(i) + ")" : std::string()) +
                       ", is not finite or below the values' own, " +
                       std::to_string(bits_f32(own[i])));
    own[i] = f32_bits(given[i]) & kAbs;
  }
  return own;
}

/// MXINT8: the sign-magnitude codes of its e1m6 grid as int8 two's complement (−0 as 0).
void to_twos_complement(const BlockScheme& s, std::vector<uint8_t>& codes) {
  const uint8_t sign = uint8_t(s.element.sign_bit()), mag = uint8_t(s.element.mag_mask());
  for (uint8_t& c : codes) c = (c & sign) ? uint8_t(-(c & mag)) : c;
}

}  // namespace

namespace {

/// A whole number in [lo, kMaxBlock] from an option's value, or an InputError naming it.
long option_number(std::string_view text, long lo, const std::string& what) {
  long v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < lo || v > kMaxBlock)
    throw InputError(what + " must be a whole number in " + std::to_string(lo) + ".." +
                     std::to_string(kMaxBlock) + ", not '" + std::string(text) + "'");
  return v;
}

/// One ":option" of a scheme name into s (docs/blocks.md, "Options"); `seen` holds the kinds
/// of option given so far (1 a scale rule, 2 a block length, 4 a tile, 8 row scaling), each
/// allowed once.
void apply_scheme_option(BlockScheme& s, std::string_view base, std::string_view opt,
                         unsigned& seen) {
  const std::string where = "block scheme '" + std::string(base) + "'";
  const unsigned kind = parse_mx_scale_rule(opt)        ? 1
                        : opt.substr(0, 6) == "block=" ? 2
                        : opt.substr(0, 5) == "tile="  ? 4
                        : opt == "row_scaled"          ? 8
                                                       : 0;
  if (kind & seen)
    throw InputError("option ':" + std::string(opt) + "' of " + where +
                     ": that kind of option is given twice");
  seen |= kind;
  if (const std::optional<MxScaleRule> rule = parse_mx_scale_rule(opt)) {
    if (s.family != BlockFamily::mx)
      throw InputError("option ':" + std::string(opt) + "' of " + where +
                       ": only the MX schemes take a scale rule (" + mx_rule_list() + ")");
    s.scale_rule = *rule;
  } else if (opt.substr(0, 6) == "block=") {
    if (s.two_d)
      throw InputError("option ':block=' of " + where + ": a 2-D scheme takes ':tile=RxC'");
    s.block = int(option_number(opt.substr(6), 0, "the block length of " + where));
  } else if (opt.substr(0, 5) == "tile=") {
    if (!s.two_d)
      throw InputError("option ':tile=' of " + where + ": a 1-D scheme takes ':block=N'");
    const std::string_view v = opt.substr(5);
    const size_t x = v.find('x');
    if (x == std::string_view::npos)
      throw InputError("option ':tile=' of " + where + " must be RxC, not '" + std::string(v) + "'");
    s.tile_rows = int(option_number(v.substr(0, x), 1, "the tile rows of " + where));
    s.tile_cols = int(option_number(v.substr(x + 1), 1, "the tile columns of " + where));
  } else if (opt == "row_scaled") {
    // Transformer Engine's row-scaled NVFP4: a global scale per line along the blocks.
    if (s.family == BlockFamily::nvfp4 && s.two_d)
      throw InputError("option ':row_scaled' of " + where + ": a global scale per row needs "
                       "1-D blocks (a tile spans rows of different global scales; Transformer "
                       "Engine refuses 2-D row-scaled quantization too): use nvfp4:row_scaled");
    if (s.family == BlockFamily::nvfp4_4over6)
      throw InputError("option ':row_scaled' of " + where + ": Four Over Six's arithmetic "
                       "(fouroversix's reference) is defined with the tensor's amax only");
    if (s.family != BlockFamily::nvfp4)
      throw InputError("option ':row_scaled' of " + where + ": only nvfp4 takes it (a global "
                       "fp32 scale per row; the other schemes have no global scale)");
    s.row_scaled = true;
  } else {
    throw InputError("unknown option ':" + std::string(opt) + "' of " + where + " (" +
                     mx_rule_list() + " for MX, :block=N for 1-D schemes, :tile=RxC for 2-D, "
                     ":row_scaled for nvfp4)");
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
    if (s.two_d) s.tile_rows = s.tile_cols = entry.block;
    s.twos_complement = base == "mxint8";
    Env env;
    s.element_max = to_f32(s.element, s.element.max_mag(), env);
    s.element_emax = s.element.emax();
    s.half_min_subnormal = to_f32(s.element, 1, env) / 2;  // exact: a power of two
    unsigned seen = 0;
    for (size_t at = colon; at != std::string_view::npos;) {
      const size_t next = name.find(':', at + 1);
      apply_scheme_option(s, base, name.substr(at + 1, next == std::string_view::npos
                                                           ? std::string_view::npos
                                                           : next - at - 1),
                          seen);
      at = next;
    }
    return s;
  }
  throw InputError("unknown block scheme '" + std::string(name) + "' (" + scheme_list() +
                   "; options: " + mx_rule_list() + " for MX, :block=N, :tile=RxC, "
                   ":row_scaled)");
}

const char* mx_scale_rule_name(MxScaleRule r) {
  for (const auto& [name, rule] : kMxRules)
    if (rule == r) return name;
  return "floor";
}

const std::vector<std::string>& block_scheme_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& e : kSchemes) v.emplace_back(e.name);
    return v;
  }();
  return names;
}

std::pair<size_t, size_t> block_tile(const BlockScheme& s, BlockAxis axis, size_t rows,
                                     size_t cols) {
  if (s.two_d) return {size_t(s.tile_rows), size_t(s.tile_cols)};
  const bool last = axis == BlockAxis::last;
  const size_t whole = last ? cols : rows;
  const size_t k = s.block == 0 ? std::max<size_t>(whole, 1) : size_t(s.block);
  return last ? std::pair<size_t, size_t>{1, k} : std::pair<size_t, size_t>{k, 1};
}

std::pair<size_t, size_t> block_tile(const BlockScheme& s, BlockAxis axis) {
  if (!s.two_d && s.block == 0)
    throw InputError(s.name + ": its block is the whole dimension, so its shape depends on the "
                     "tensor's");
  return block_tile(s, axis, 0, 0);
}

BlockScheme fixed_blocks(const BlockScheme& s, BlockAxis axis, size_t rows, size_t cols) {
  BlockScheme f = s;
  if (!s.two_d && s.block == 0) {
    const auto [tr, tc] = block_tile(s, axis, rows, cols);
    const size_t k = axis == BlockAxis::last ? tc : tr;
    f.block = int(std::min<size_t>(k, size_t(kMaxBlock)));
  }
  return f;
}

std::pair<size_t, size_t> padded_shape(const BlockScheme& s, BlockAxis axis, size_t rows,
                                       size_t cols) {
  const auto [tr, tc] = block_tile(s, axis, rows, cols);
  return {(rows + tr - 1) / tr * tr, (cols + tc - 1) / tc * tc};
}

void check_blocks(const BlockScheme& s, size_t rows, size_t cols, const BlockOptions& o) {
  const auto [tr, tc] = block_tile(s, o.axis, rows, cols);
  if (rows % tr != 0 || cols % tc != 0)
    throw InputError(s.name + ": shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                     "] does not divide into " + std::to_string(tr) + "x" + std::to_string(tc) +
                     " blocks");
  if (cols != 0 && rows > (size_t(1) << 40) / cols)
    throw InputError(s.name + ": shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                     "] has more than 2^40 elements");
  if (o.rounding == Rounding::stochastic && (o.random_bits < 1 || o.random_bits > 32))
    throw InputError(s.name + ": random_bits must be in 1..32, not " +
                     std::to_string(o.random_bits));
  if (o.rht && (s.family != BlockFamily::nvfp4 || s.two_d || s.block != 16))
    throw InputError(s.name + ": the random Hadamard transform is an option of nvfp4 (1x16) only");
  if (s.family == BlockFamily::nvfp4_4over6 && o.rounding != Rounding::near_even)
    throw InputError(s.name + ": Four Over Six's selection is defined for round-to-nearest-even "
                     "elements only");
  if (o.pow2_scales && s.family != BlockFamily::fp8_block && s.family != BlockFamily::fp8_rowwise)
    throw InputError(s.name + ": power-of-two scales are an option of fp8_block, fp8_block_2d "
                     "and fp8_rowwise");
  if (tr * tc > size_t(kMaxBlock))
    throw InputError(s.name + ": a block of " + std::to_string(tr) + "x" + std::to_string(tc) +
                     " has more than 2^24 elements");
  const size_t lines = o.axis == BlockAxis::last ? rows : cols;
  if (!o.global_amax.empty() && !s.has_global_scale() && !s.has_line_scales())
    throw InputError(s.name + ": has no global scale to take a given amax");
  if (!o.global_amax.empty() && s.has_global_scale() && o.global_amax.size() != 1)
    throw InputError(s.name + ": takes one global amax, not " +
                     std::to_string(o.global_amax.size()));
  if (!o.global_amax.empty() && s.has_line_scales() && o.global_amax.size() != lines)
    throw InputError(s.name + ": takes one global amax per " +
                     (o.axis == BlockAxis::last ? "row" : "column") + " (" +
                     std::to_string(lines) + "), not " + std::to_string(o.global_amax.size()));
}

BlockEncoding encode_blocks(const BlockScheme& s, const float* x, size_t rows, size_t cols,
                            const BlockOptions& o, int threads) {
  check_blocks(s, rows, cols, o);
  const auto [tr, tc] = block_tile(s, o.axis, rows, cols);
  BlockEncoding e;
  e.rows = rows;
  e.cols = cols;
  e.tile_rows = tr;
  e.tile_cols = tc;
  e.axis = o.axis;
  const size_t n = rows * cols;
  thread_local std::vector<float> transformed;  // scratch kept between calls: no page faults
  if (o.rht) {
    transformed.assign(x, x + n);
    detail::apply_rht(transformed.data(), rows, cols, o.axis, threads);
    x = transformed.data();
  }
  Job j{s, o, x, rows, cols, tr, tc, rows / tr, cols / tc, false, nullptr, nullptr};
  const size_t nb = j.sr * j.sc;
  thread_local std::vector<float> mult;  // scratch kept between calls
  thread_local std::vector<uint8_t> special;
  mult.resize(nb);     // every scale rule writes every block's
  special.resize(nb);  // MX and NVFP4 write every block's; fp8_block has none
  if (s.fp32_scales()) std::fill(special.begin(), special.end(), kPlainScale);
  j.mult = mult.data();
  j.special = special.data();
  e.codes.assign(n, 0);
  e.scales.assign(nb, 0.0f);
  if (!s.fp32_scales()) e.scale_codes.assign(nb, 0);
  if (o.per_block_events) e.block_events.assign(nb, BlockEvents{});
  e.events.elements = n;
  e.events.blocks = nb;
  const std::vector<uint32_t>& amax = block_amax(j, threads);
  const uint32_t amax_all = s.family == BlockFamily::mx ? 0 : max_of(amax.data(), nb);
  if (s.family != BlockFamily::mx) require_finite(s, x, rows, cols, amax_all);
  const std::vector<uint32_t> global =
      s.has_global_scale() || s.has_line_scales() ? global_amax(j, amax, amax_all)
                                                  : std::vector<uint32_t>{};
  switch (s.family) {
    case BlockFamily::mx: mx_scales(j, amax, e); break;
    case BlockFamily::nvfp4: nvfp4_scales(j, amax, global, e); break;
    case BlockFamily::fp8_rowwise: fp8_rowwise_scales(j, amax, e); break;
    case BlockFamily::nvfp4_4over6: encode_4over6(j, amax, global[0], e); return e;
    default: fp8_block_scales(j, amax, e); break;
  }
  encode_elements(j, e, threads);
  if (s.twos_complement) to_twos_complement(s, e.codes);
  return e;
}

namespace {

/// Every element code's value, and every block's fp32 scale, as decode_blocks multiplies them.
/// The values are kept for the next call with the same element format (a thread's tables).
struct DecodeTables {
  float value[256];
  std::vector<float> scale;
  Format element;
  bool twos_complement = false, filled = false;
  /// Codes c and c | 0x80 (c < 0x80) have the same value bits but for the sign bit (every
  /// sign-magnitude 8-bit format whose NaNs and zeros come in pairs: e4m3, e5m2, not fnuz).
  bool sign_pairs = false;
};

void element_values(const BlockScheme& s, DecodeTables& t) {
  if (t.filled && t.twos_complement == s.twos_complement &&
      std::memcmp(&t.element, &s.element, sizeof(Format)) == 0)
    return;
  const uint32_t limit = s.element.enc_mask();
  for (uint32_t c = 0; c < 256; ++c) {
    Env env;
    t.value[c] = s.twos_complement ? float(int8_t(c)) / 64.0f  // MXINT8: k · 2^−6, exact
                 : c <= limit      ? to_f32(s.element, c, env)
                                   : 0.0f;
  }
  t.sign_pairs = limit == 0xFF && !s.twos_complement;
  for (uint32_t c = 0; c < 0x80; ++c)
    t.sign_pairs = t.sign_pairs && f32_bits(t.value[c | 0x80]) == (f32_bits(t.value[c]) | ~kAbs);
  t.element = s.element;
  t.twos_complement = s.twos_complement;
  t.filled = true;
}

void decode_tables(const BlockScheme& s, const BlockEncoding& e, DecodeTables& t) {
  element_values(s, t);
  const size_t nb = e.scale_rows() * e.scale_cols();
  t.scale.resize(nb);
  const float gd = s.has_global_scale() && s.family == BlockFamily::nvfp4
                       ? 1.0f / *e.global_scale
                       : 1.0f;
  std::vector<float> line_gd(e.global_scales.size());  // row-scaled: each line's 1 / g
  for (size_t i = 0; i < line_gd.size(); ++i) line_gd[i] = 1.0f / e.global_scales[i];
  const bool e4m3_scales = s.family == BlockFamily::nvfp4 || s.family == BlockFamily::nvfp4_4over6;
  static const std::array<float, 256> e4m3 = [] {  // every e4m3 code, sign and NaN included
    std::array<float, 256> v{};
    for (uint32_t c = 0; c < 256; ++c) {
      Env env;
      v[c] = to_f32(formats::e4m3, c, env);
    }
    return v;
  }();
  for (size_t b = 0; b < nb; ++b) {
    if (s.family == BlockFamily::mx)
      t.scale[b] = e.scale_codes[b] == 0xFF ? std::numeric_limits<float>::quiet_NaN()
                                            : pow2f(int(e.scale_codes[b]) - 127);
    else if (s.row_scaled)
      t.scale[b] = e4m3[e.scale_codes[b]] * line_gd[line_of(b, e.scale_cols(), e.axis)];
    else if (e4m3_scales)
      t.scale[b] = e4m3[e.scale_codes[b]] * gd;  // 4over6: gd = 1, the e4m3 value
    else
      t.scale[b] = e.scales[b];
  }
}

/// The first code above the element format's last encoding, as a one-line error.
[[noreturn]] void bad_code(const BlockScheme& s, const BlockEncoding& e) {
  const uint32_t limit = s.element.enc_mask();
  for (size_t i = 0; i < e.codes.size(); ++i)
    if (e.codes[i] > limit)
      throw InputError(s.name + ": code " + std::to_string(e.codes[i]) + " at [" +
                       std::to_string(i / e.cols) + ", " + std::to_string(i % e.cols) +
                       "] is not an encoding of " + format_name(s.element));
  throw std::logic_error("bad_code: no bad code");
}

HALFWAY_BLOCKS_CLONES uint8_t max_code(const uint8_t* __restrict v, size_t n) {
  uint8_t m = 0;
  for (size_t i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

/// One row of a block-at-a-time decode: a block's scale is read once, then each element is
/// its code's value times that scale (the same fp32 product as element by element), or
/// divided by it (Divide: fp8_rowwise, as torchao).
template <bool Divide>
HALFWAY_BLOCKS_CLONES void decode_row(const float* __restrict value, const uint8_t* __restrict code,
                                     const float* __restrict scale, size_t cols, size_t tc,
                                     float* __restrict out) {
  if (tc == 1) {  // blocks run down the columns: every element of the row has its own scale
    for (size_t c = 0; c < cols; ++c)
      out[c] = Divide ? value[code[c]] / scale[c] : value[code[c]] * scale[c];
    return;
  }
  for (size_t b = 0, c0 = 0; c0 < cols; ++b, c0 += tc) {
    const float sc = scale[b];
    for (size_t k = 0; k < tc; ++k)
      out[c0 + k] = Divide ? value[code[c0 + k]] / sc : value[code[c0 + k]] * sc;
  }
}

using DecodeRowFn = void (*)(const float*, const uint8_t*, const float*, size_t, size_t,
                            float*);

#ifdef HALFWAY_BLOCKS_AVX512
/// How 16 codes become their values in AVX-512, by the number of codes the element format has:
/// one permute for 16 (e2m1), two and a select on bit 5 for 64 (e2m3, e3m2); for
/// 256, four and three selects on the magnitude's 128 codes and the sign bit put back
/// (sign_pairs: e4m3, e5m2), else a gather from the table (fnuz formats, MXINT8).
enum class Lookup { perm16, perm64, perm128_sign, gather };

/// Codes 0 .. 63 of the 128 in t, the half that bit 6 picks.
HALFWAY_BLOCKS_AVX512_TARGET __attribute__((always_inline)) inline __m512 lookup64(
    const __m512* t, __m512i code) {
  const __mmask16 high = _mm512_test_epi32_mask(code, _mm512_set1_epi32(32));
  return _mm512_mask_blend_ps(high, _mm512_permutex2var_ps(t[0], code, t[1]),
                              _mm512_permutex2var_ps(t[2], code, t[3]));
}

template <Lookup L>
HALFWAY_BLOCKS_AVX512_TARGET __attribute__((always_inline)) inline __m512 lookup16(
    const float* value, const __m512 (&t)[8], __m512i code) {
  if constexpr (L == Lookup::perm16) return _mm512_permutexvar_ps(code, t[0]);
  if constexpr (L == Lookup::perm64) return lookup64(t, code);
  if constexpr (L == Lookup::perm128_sign) {
    const __mmask16 high = _mm512_test_epi32_mask(code, _mm512_set1_epi32(64));
    const __m512 mag = _mm512_mask_blend_ps(high, lookup64(t, code), lookup64(t + 4, code));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(code, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(mag), sign));
  }
  if constexpr (L == Lookup::gather) return _mm512_i32gather_ps(code, value, 4);
}

/// Elements c .. c + 15 of a row (those in k) of decode_row_avx512.
template <bool Divide, Lookup L>
HALFWAY_BLOCKS_AVX512_TARGET __attribute__((always_inline)) inline void decode16_avx512(
    const float* value, const __m512 (&t)[8], const uint8_t* code, const float* scale, size_t tc,
    float* out, size_t c, __mmask16 k) {
  const __m512i q = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, code + c));
  const __m512 v = lookup16<L>(value, t, q);
  const __m512 s = tc == 1 ? _mm512_maskz_loadu_ps(k, scale + c) : _mm512_set1_ps(scale[c / tc]);
  _mm512_mask_storeu_ps(out + c, k, Divide ? _mm512_div_ps(v, s) : _mm512_mul_ps(v, s));
}

/// decode_row in AVX-512, 16 elements a step with the same fp32 product (or quotient) per
/// element. Blocks run down the columns (tc = 1: a scale per element) or along the row in
/// lengths that are a multiple of 16 (one scale per step); decode_row_for picks it only then.
template <bool Divide, Lookup L>
HALFWAY_BLOCKS_AVX512_TARGET void decode_row_avx512(const float* __restrict value,
                                                    const uint8_t* __restrict code,
                                                    const float* __restrict scale, size_t cols,
                                                    size_t tc, float* __restrict out) {
  __m512 t[8];
  for (int i = 0; i < 8; ++i)
    t[i] = L == Lookup::gather ? _mm512_setzero_ps() : _mm512_loadu_ps(value + 16 * i);
  size_t c = 0;
  for (; c + 16 <= cols; c += 16) decode16_avx512<Divide, L>(value, t, code, scale, tc, out, c, 0xFFFF);
  if (c < cols)
    decode16_avx512<Divide, L>(value, t, code, scale, tc, out, c,
                               __mmask16((1u << (cols - c)) - 1));
}

template <bool Divide>
DecodeRowFn decode_row_avx512_for(uint32_t codes, bool sign_pairs) {
  if (codes <= 16) return decode_row_avx512<Divide, Lookup::perm16>;
  if (codes <= 64) return decode_row_avx512<Divide, Lookup::perm64>;
  if (sign_pairs) return decode_row_avx512<Divide, Lookup::perm128_sign>;
  return decode_row_avx512<Divide, Lookup::gather>;
}
#endif

/// The row decoder for s and a block length tc: the AVX-512 one where it serves, else
/// decode_row.
DecodeRowFn decode_row_for(const BlockScheme& s, const DecodeTables& t, size_t tc) {
  const bool divide = s.family == BlockFamily::fp8_rowwise;
#ifdef HALFWAY_BLOCKS_AVX512
  if ((tc == 1 || tc % 16 == 0) && use_avx512()) {
    const uint32_t codes = s.twos_complement ? 256 : s.element.enc_mask() + 1;
    return divide ? decode_row_avx512_for<true>(codes, t.sign_pairs)
                  : decode_row_avx512_for<false>(codes, t.sign_pairs);
  }
#endif
  return divide ? decode_row<true> : decode_row<false>;
}

/// decode_blocks without its checks, for encodings known to be well formed.
void decode_trusted(const BlockScheme& s, const BlockEncoding& e, float* out, int threads = 1) {
  thread_local DecodeTables t;
  decode_tables(s, e, t);
  const size_t tr = e.tile_rows, tc = e.tile_cols, sc = e.scale_cols();
  if (s.family == BlockFamily::nvfp4_4over6) {  // fp32(fp32(fp32(q · s) · A) / 1536)
    const float a = *e.global_scale;
    for (size_t r = 0; r < e.rows; ++r)
      for (size_t c = 0; c < e.cols; ++c)
        out[r * e.cols + c] =
            (t.value[e.codes[r * e.cols + c]] * t.scale[(r / tr) * sc + c / tc]) * a / 1536.0f;
    return;
  }
  const DecodeRowFn row = decode_row_for(s, t, tc);
  // Rows in bands on the pool (each row decodes on its own), at least 32 Ki values a band.
  // The pool's threads read this thread's tables: a lambda does not capture a thread_local.
  const float *value = t.value, *scale = t.scale.data();
  const size_t least = std::max<size_t>(1, (size_t(1) << 15) / std::max<size_t>(e.cols, 1));
  parallel_for(threads, e.rows, least, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r)
      row(value, e.codes.data() + r * e.cols, scale + (r / tr) * sc, e.cols, tc, out + r * e.cols);
  });
}

}  // namespace

void decode_blocks(const BlockScheme& s, const BlockEncoding& e, float* out, int threads) {
  const auto [tr, tc] = block_tile(s, e.axis, e.rows, e.cols);
  if (e.tile_rows != tr || e.tile_cols != tc || e.rows % tr || e.cols % tc)
    throw InputError(s.name + ": the encoding's block shape does not match the scheme");
  const size_t n = e.rows * e.cols, nb = e.scale_rows() * e.scale_cols();
  if (e.codes.size() != n)
    throw InputError(s.name + ": " + std::to_string(e.codes.size()) + " codes for a [" +
                     std::to_string(e.rows) + ", " + std::to_string(e.cols) + "] tensor");
  const bool coded = !s.fp32_scales();
  if ((coded ? e.scale_codes.size() : e.scales.size()) != nb)
    throw InputError(s.name + ": expected " + std::to_string(nb) + " scales");
  if (s.has_global_scale() && s.family == BlockFamily::nvfp4 &&
      (!e.global_scale || !(*e.global_scale > 0.0f) || std::isinf(*e.global_scale)))
    throw InputError(s.name + ": needs a finite positive fp32 global scale");
  if (s.has_line_scales()) {
    const size_t lines = e.axis == BlockAxis::last ? e.rows : e.cols;
    if (e.global_scale || e.global_scales.size() != lines)
      throw InputError(s.name + ": needs " + std::to_string(lines) + " global scales, one per " +
                       (e.axis == BlockAxis::last ? "row" : "column") + ", not " +
                       (e.global_scale ? "one for the tensor"
                                       : std::to_string(e.global_scales.size())));
    for (float g : e.global_scales)
      if (!(g > 0.0f) || std::isinf(g))
        throw InputError(s.name + ": needs finite positive fp32 global scales, not " +
                         std::to_string(g));
  } else if (!e.global_scales.empty()) {
    throw InputError(s.name + ": has no global scale per line");
  }
  if (s.family == BlockFamily::nvfp4_4over6 &&
      (!e.global_scale || !(*e.global_scale >= 0.0f) || std::isinf(*e.global_scale)))
    throw InputError(s.name + ": needs the tensor's amax, a finite fp32 number >= 0, as its "
                     "global scale");
  if (!s.has_global_scale() && e.global_scale)
    throw InputError(s.name + ": has no global scale");
  if (n && max_code(e.codes.data(), n) > s.element.enc_mask()) bad_code(s, e);
  decode_trusted(s, e, out, threads);
}

BlockEvents quantize_blocks(const BlockScheme& s, const float* x, size_t rows, size_t cols,
                            float* out, const BlockOptions& o) {
  const BlockEncoding e = encode_blocks(s, x, rows, cols, o);
  decode_trusted(s, e, out);  // encode_blocks' own output: well formed by construction
  return e.events;
}

}  // namespace halfway
