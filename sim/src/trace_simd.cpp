// The tracer's statistics of one traced rounding in one AVX-512 pass. add_values and
// add_rounding (tracer.cpp, square_sum.cpp) are the definition; every statistic is an integer
// sum, a count or an extreme, so one pass that splits each value the same way and adds it
// into the same bins gives the same record bit for bit, in any order.
//
// Per 16 values, vector code splits each value v and its rounding q into two words:
//   - (m(v)² << 9) | h, where h is v's histogram bin (TraceRecord::hist's index, kBins for a
//     zero or non-finite value) and m(v) its 24-bit significand, 0 when v is outside the
//     format's range (the signal leaves it out, the histogram counts it);
//   - (m(d)² << 8) | e for the error d = v − q (exact in binary32), e its biased exponent, or
//     255 (a bin SquareSum never reads) when the rounding left v unchanged or v is out of
//     range.
// A scalar loop adds each word into its bins; the rare values (flushed to zero, an exact power
// of two) are taken from their words by a scalar loop over their lanes. With `out`, the pass
// also stores q there, after reading v: a rounding in place keeps no copy of its input. The
// signal's bins are the histogram's (a normal value's bin h is its biased exponent + 22; every
// subnormal bin folds into the signal's bin 0), summed per chunk of 2^16 values so that no
// 64-bit bin can wrap.
#include "trace_simd.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "halfway/cpu.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's headers initialise their "undefined" vectors from themselves (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#define HALFWAY_X86_KERNELS 1
#endif

namespace halfway::sim::detail {

#ifdef HALFWAY_X86_KERNELS
namespace {

constexpr uint32_t kBins = TraceRecord::kBins;  // 277; slot kBins: zero and non-finite
constexpr size_t kSlots = kBins + 1;
constexpr size_t kSignalBins = 256;  // biased exponents; 255 collects what the sums leave out
constexpr size_t kChunk = size_t(1) << 16;  // values per chunk: no 64-bit bin can wrap
constexpr size_t kPass = 1024;              // values split per vector pass
constexpr size_t kCopies = 4;               // copies of the bins: value i into copy i % 4

/// The signal's bin (biased exponent) of histogram slot h: a normal value's slot is its biased
/// exponent + 22; every subnormal slot (below 23) folds into bin 0, whose scale SquareSum
/// shares with bin 1.
constexpr size_t signal_bin(uint64_t h) { return h < 23 ? 0 : size_t(h - 22); }

/// Bins of one chunk: per copy, the histogram slot's Σm² and count, and the error's Σm².
struct ChunkBins {
  uint64_t sum[kCopies][kSlots], count[kCopies][kSlots];
  uint64_t noise[kCopies][kSignalBins];
  uint64_t flushed[kSignalBins];
  uint64_t pow2[kSlots];
};

/// What the vector pass tells besides the words.
struct PassFacts {
  __m512i max_bits, min_bits;
  uint64_t nonfinite = 0;
};

/// Eight words (m² << shift) | tag from eight 24-bit significands m and their tags.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline __m512i words(
    __m256i m, __m256i tag, unsigned shift) {
  const __m512i w = _mm512_cvtepu32_epi64(m);
  return _mm512_or_si512(_mm512_slli_epi64(_mm512_mul_epu32(w, w), shift),
                         _mm512_cvtepu32_epi64(tag));
}

/// Sixteen words into out, from sixteen significands and tags.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline void store_words(
    uint64_t* out, __m512i m, __m512i tag, unsigned shift) {
  _mm512_storeu_si512(out, words(_mm512_castsi512_si256(m), _mm512_castsi512_si256(tag), shift));
  _mm512_storeu_si512(out + 8, words(_mm512_extracti64x4_epi64(m, 1),
                                     _mm512_extracti64x4_epi64(tag, 1), shift));
}

/// m(b): the 24-bit significand of |bits| b (a subnormal's is b itself).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline __m512i significand(
    __m512i b, __mmask16 normal) {
  return _mm512_mask_or_epi32(b, normal, _mm512_and_si512(b, _mm512_set1_epi32(0x7FFFFF)),
                              _mm512_set1_epi32(0x800000));
}

/// Splits x[0..m), q[0..m) (m ≤ kPass) into words (see the file comment); flushed[g] and
/// pow2[g] have a bit for each value of group g (16 values) flushed to zero or an exact power
/// of two. True when any has.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) bool split_pass(
    const float* x, const float* q, size_t m, float fmax, uint64_t* hw, uint64_t* nw,
    __mmask16* flushed, __mmask16* pow2, PassFacts& f, float* out) {
  unsigned any = 0;
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), exp_mask = _mm512_set1_epi32(0x7F800000);
  const __m512 vmax = _mm512_set1_ps(fmax);
  for (size_t i = 0, g = 0; i < m; i += 16, ++g) {
    const __mmask16 live = m - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (m - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(live, x + i), r = _mm512_maskz_loadu_ps(live, q + i);
    if (out) _mm512_mask_storeu_ps(out + i, live, r);  // out may be x: v is loaded already
    const __m512i b = _mm512_and_si512(_mm512_castps_si512(v), abs_mask);
    const __m512i d = _mm512_and_si512(_mm512_castps_si512(_mm512_sub_ps(v, r)), abs_mask);
    // The histogram bin: biased exponent + 22 (normal), floor(log2 b) (subnormal: the
    // exponent of float(b), exact below 2^23), kBins (zero, inf, NaN).
    const __mmask16 finite_nz =
        _mm512_cmplt_epu32_mask(_mm512_sub_epi32(b, _mm512_set1_epi32(1)),
                                _mm512_set1_epi32(0x7F7FFFFF));
    const __mmask16 normal = _mm512_test_epi32_mask(b, exp_mask);
    const __m512i field = _mm512_srli_epi32(b, 23);
    const __m512i sub_bin = _mm512_sub_epi32(
        _mm512_srli_epi32(_mm512_castps_si512(_mm512_cvtepi32_ps(b)), 23), _mm512_set1_epi32(127));
    __m512i h = _mm512_mask_add_epi32(sub_bin, normal, field, _mm512_set1_epi32(22));
    h = _mm512_mask_mov_epi32(_mm512_set1_epi32(int(kBins)), finite_nz, h);
    // The signal: values within the range (|v| ≤ fmax; false for NaN).
    const __mmask16 in = _mm512_cmp_ps_mask(_mm512_castsi512_ps(b), vmax, _CMP_LE_OQ);
    const __m512i ms = _mm512_maskz_mov_epi32(in, significand(b, normal));
    // The error: values in range that the rounding changed.
    const __mmask16 changed = in & _mm512_cmp_ps_mask(v, r, _CMP_NEQ_OQ);
    const __m512i md = significand(d, _mm512_test_epi32_mask(d, exp_mask));
    const __m512i e =
        _mm512_mask_mov_epi32(_mm512_set1_epi32(255), changed, _mm512_srli_epi32(d, 23));
    store_words(hw + i, ms, h, 9);
    store_words(nw + i, md, e, 8);
    // Rare: flushed (changed to zero) or an exact power of two (no fraction bits for a
    // normal, one bit set for a subnormal).
    flushed[g] = changed & _mm512_cmp_ps_mask(r, _mm512_setzero_ps(), _CMP_EQ_OQ);
    const __m512i rest = _mm512_mask_and_epi32(
        _mm512_and_si512(b, _mm512_sub_epi32(b, _mm512_set1_epi32(1))), normal, b,
        _mm512_set1_epi32(0x7FFFFF));
    pow2[g] = finite_nz & _mm512_testn_epi32_mask(rest, rest);
    any |= flushed[g] | pow2[g];
    f.max_bits = _mm512_mask_max_epu32(f.max_bits, finite_nz, f.max_bits, b);
    f.min_bits = _mm512_mask_min_epu32(f.min_bits, finite_nz, f.min_bits, b);
    f.nonfinite += unsigned(__builtin_popcount(
        live & _mm512_cmpge_epu32_mask(b, _mm512_set1_epi32(0x7F800000))));
  }
  return any != 0;
}

/// The words of one pass into their bins.
void add_words(const uint64_t* hw, const uint64_t* nw, size_t m, ChunkBins& c) {
  size_t i = 0;
  for (; i + kCopies <= m; i += kCopies)
    for (size_t k = 0; k < kCopies; ++k) {
      c.sum[k][hw[i + k] & 511] += hw[i + k] >> 9;
      c.count[k][hw[i + k] & 511]++;
      c.noise[k][nw[i + k] & 255] += nw[i + k] >> 8;
    }
  for (; i < m; ++i) {
    c.sum[0][hw[i] & 511] += hw[i] >> 9;
    c.count[0][hw[i] & 511]++;
    c.noise[0][nw[i] & 255] += nw[i] >> 8;
  }
}

/// The rare lanes of one pass: the flushed values' squares by their biased exponent (as
/// add_rounding_error adds them; both come from the value's word: a flushed value was in range,
/// so its m² is there), the exact powers of two by their histogram slot.
void add_rare(const uint64_t* hw, const __mmask16* flushed, const __mmask16* pow2, size_t m,
              ChunkBins& c) {
  for (size_t g = 0; g * 16 < m; ++g) {
    for (unsigned lanes = flushed[g]; lanes; lanes &= lanes - 1) {
      const uint64_t w = hw[g * 16 + size_t(__builtin_ctz(lanes))], h = w & 511;
      c.flushed[signal_bin(h)] += w >> 9;
    }
    for (unsigned lanes = pow2[g]; lanes; lanes &= lanes - 1)
      c.pow2[hw[g * 16 + size_t(__builtin_ctz(lanes))] & 511]++;
  }
}

/// A chunk's bins into r: the copies summed, the histogram's slots folded into the signal's
/// biased exponents.
void add_chunk(TraceRecord& r, const ChunkBins& c) {
  uint64_t signal[kSignalBins] = {}, noise[kSignalBins];
  for (size_t h = 0; h < kBins; ++h) {
    uint64_t sum = 0, count = 0;
    for (size_t k = 0; k < kCopies; ++k) sum += c.sum[k][h], count += c.count[k][h];
    r.hist[h] += count;
    r.pow2[h] += c.pow2[h];
    signal[signal_bin(h)] += sum;
  }
  for (size_t e = 0; e < kSignalBins; ++e) {
    noise[e] = 0;
    for (size_t k = 0; k < kCopies; ++k) noise[e] += c.noise[k][e];
  }
  r.signal.add_bins(signal);  // add_bins reads bins 0..254
  r.noise.add_bins(noise);
  r.flushed_sq.add_bins(c.flushed);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void run(
    TraceRecord& r, const float* x, const float* q, size_t n, float fmax, float* out) {
  thread_local std::vector<uint64_t> words;
  words.resize(2 * kPass);
  uint64_t *hw = words.data(), *nw = hw + kPass;
  __mmask16 flushed[kPass / 16], pow2[kPass / 16];
  PassFacts f{_mm512_setzero_si512(), _mm512_set1_epi32(-1)};
  ChunkBins c;
  for (size_t lo = 0; lo < n; lo += kChunk) {
    const size_t hi = std::min(n, lo + kChunk);
    std::memset(&c, 0, sizeof(ChunkBins));
    for (size_t p = lo; p < hi; p += kPass) {
      const size_t m = std::min(kPass, hi - p);
      const bool any_rare =
          split_pass(x + p, q + p, m, fmax, hw, nw, flushed, pow2, f, out ? out + p : nullptr);
      add_words(hw, nw, m, c);
      if (any_rare) add_rare(hw, flushed, pow2, m, c);
    }
    add_chunk(r, c);
  }
  const uint32_t mx = _mm512_reduce_max_epu32(f.max_bits), mn = _mm512_reduce_min_epu32(f.min_bits);
  add_value_facts(r, mx, mn, f.nonfinite);
}

}  // namespace
#endif

bool values_and_error_avx512(TraceRecord& r, const float* x, const float* q, size_t n,
                             float fmax, float* out) {
#ifdef HALFWAY_X86_KERNELS
  if (cpu::target() != cpu::Target::avx512) return false;
  run(r, x, q, n, fmax, out);
  return true;
#else
  return false;
#endif
}


}  // namespace halfway::sim::detail
