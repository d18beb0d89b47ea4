/// \file bulk.hpp
/// Array kernels: round f32 arrays into a format (as encodings, or as f32 values exactly
/// representable in the format), decode encodings, and elementwise + − × ÷ and fma. Each call
/// can also return event counts, which the tracer uses to count every rounding of a run.
/// Results are bit-identical to the scalar routines in softfloat.hpp, element by element; for
/// stochastic rounding element i of a call uses the random bits
/// `sr_random(seed, subsequence, offset + i, random_bits, pack_random_bits)` (env.hpp; unpacked,
/// `sr_bits(seed, subsequence, offset + i) & sr_mask(random_bits)`), so results do not depend
/// on how an array is split between threads.
///
///     std::vector<float> x = ...;  std::vector<uint16_t> h(x.size());
///     halfway::EventCounts ev;
///     halfway::round_f32(halfway::formats::fp16, x.data(), h.data(), x.size(), {}, &ev);
///     // ev.flushed: how many non-zero inputs became zero
#pragma once

#include <cstddef>
#include <cstdint>

#include "halfway/env.hpp"
#include "halfway/format.hpp"

namespace halfway {

/// What happened to the results of a bulk call. An element is counted in every class it meets.
struct EventCounts {
  uint64_t total = 0;      ///< elements processed
  uint64_t inexact = 0;    ///< result differs from the exact value (NaN results excluded)
  uint64_t zero = 0;       ///< result is ±0 (exact zeros and flushed values alike)
  uint64_t flushed = 0;    ///< non-zero finite exact value, zero result (was `underflow`)
  uint64_t subnormal = 0;  ///< result is a non-zero subnormal of the target format
  uint64_t overflow = 0;   ///< finite exact value, result ±inf / saturated / NaN by overflow
  uint64_t nan = 0;        ///< result is NaN (NaN inputs and invalid operations)
  uint8_t flags = 0;       ///< OR of the IEEE flags of all elements

  EventCounts& operator+=(const EventCounts& o) {
    total += o.total;
    inexact += o.inexact;
    zero += o.zero;
    flushed += o.flushed;
    subnormal += o.subnormal;
    overflow += o.overflow;
    nan += o.nan;
    flags |= o.flags;
    return *this;
  }
  bool operator==(const EventCounts&) const = default;
};

/// Options of a bulk call.
struct BulkOptions {
  Rounding rounding = Rounding::near_even;
  Tininess tininess = Tininess::after_rounding;
  uint64_t seed = 0;         ///< stochastic rounding seed (cuRAND's `seed`)
  uint64_t subsequence = 0;  ///< stochastic rounding subsequence (cuRAND's `subsequence`)
  uint64_t offset = 0;       ///< stream index of element 0 (cuRAND's `offset`)
  int random_bits = kSrRandomBits;  ///< random bits per stochastic rounding (0-32, sr_mask)
  /// Packed draws: one 32-bit draw serves ⌊32/random_bits⌋ consecutive elements (1 to 16
  /// random bits; sr_random). Opt-in: it changes which bits an element reads.
  bool pack_random_bits = false;
};

/// The environment of element `i` of a bulk call: its rounding options and its place in the
/// stochastic-rounding stream.
inline Env element_env(const BulkOptions& o, uint64_t i) {
  Env e{o.rounding, o.seed};
  e.tininess = o.tininess;
  e.sr_subsequence = o.subsequence;
  e.sr_counter = o.offset + i;
  e.sr_random_bits = o.random_bits;
  e.sr_pack = o.pack_random_bits;
  return e;
}

/// out[i] = the random bits element i of a stochastic bulk call with options `o` uses:
/// `sr_random(o.seed, o.subsequence, o.offset + i, o.random_bits, o.pack_random_bits)`
/// (`sr_bits(...) & sr_mask(o.random_bits)` unpacked), vectorised.
void sr_bits(const BulkOptions& o, uint32_t* out, size_t n);

enum class BinaryOp : uint8_t { add, sub, mul, div };

/// f32 → encodings of `f` (low `f.nbits()` bits of each element). `counts` may be null.
void round_f32(const Format& f, const float* in, uint8_t* out, size_t n, const BulkOptions& o = {},
               EventCounts* counts = nullptr);
void round_f32(const Format& f, const float* in, uint16_t* out, size_t n,
               const BulkOptions& o = {}, EventCounts* counts = nullptr);
void round_f32(const Format& f, const float* in, uint32_t* out, size_t n,
               const BulkOptions& o = {}, EventCounts* counts = nullptr);

/// f32 → f32 values exactly representable in `f` ("chop"/"quantize"). `out` may equal `in`.
void quantize_f32(const Format& f, const float* in, float* out, size_t n,
                  const BulkOptions& o = {}, EventCounts* counts = nullptr);

/// Encodings of `f` → f32 (exact).
void decode_f32(const Format& f, const uint8_t* in, float* out, size_t n);
void decode_f32(const Format& f, const uint16_t* in, float* out, size_t n);
void decode_f32(const Format& f, const uint32_t* in, float* out, size_t n);

/// out[i] = a[i] op b[i] in format `f`, correctly rounded.
void binary(BinaryOp op, const Format& f, const uint8_t* a, const uint8_t* b, uint8_t* out,
            size_t n, const BulkOptions& o = {}, EventCounts* counts = nullptr);
void binary(BinaryOp op, const Format& f, const uint16_t* a, const uint16_t* b, uint16_t* out,
            size_t n, const BulkOptions& o = {}, EventCounts* counts = nullptr);
void binary(BinaryOp op, const Format& f, const uint32_t* a, const uint32_t* b, uint32_t* out,
            size_t n, const BulkOptions& o = {}, EventCounts* counts = nullptr);

/// out[i] = a[i]·b[i] + c[i] with one rounding.
void fma(const Format& f, const uint8_t* a, const uint8_t* b, const uint8_t* c, uint8_t* out,
         size_t n, const BulkOptions& o = {}, EventCounts* counts = nullptr);
void fma(const Format& f, const uint16_t* a, const uint16_t* b, const uint16_t* c, uint16_t* out,
         size_t n, const BulkOptions& o = {}, EventCounts* counts = nullptr);
void fma(const Format& f, const uint32_t* a, const uint32_t* b, const uint32_t* c, uint32_t* out,
         size_t n, const BulkOptions& o = {}, EventCounts* counts = nullptr);

namespace detail {

/// The scalar reference of every bulk kernel: the routines of softfloat.hpp applied element by
/// element. The fast paths must reproduce these results and counts bit for bit; tests and
/// `halfway verify` compare against them.
void reference_round_f32(const Format& f, const float* in, uint8_t* out, size_t n,
                         const BulkOptions& o = {}, EventCounts* counts = nullptr);
void reference_round_f32(const Format& f, const float* in, uint16_t* out, size_t n,
                         const BulkOptions& o = {}, EventCounts* counts = nullptr);
void reference_round_f32(const Format& f, const float* in, uint32_t* out, size_t n,
                         const BulkOptions& o = {}, EventCounts* counts = nullptr);
void reference_quantize_f32(const Format& f, const float* in, float* out, size_t n,
                            const BulkOptions& o = {}, EventCounts* counts = nullptr);
void reference_decode_f32(const Format& f, const uint8_t* in, float* out, size_t n);
void reference_decode_f32(const Format& f, const uint16_t* in, float* out, size_t n);
void reference_decode_f32(const Format& f, const uint32_t* in, float* out, size_t n);
void reference_binary(BinaryOp op, const Format& f, const uint8_t* a, const uint8_t* b,
                      uint8_t* out, size_t n, const BulkOptions& o = {},
                      EventCounts* counts = nullptr);
void reference_binary(BinaryOp op, const Format& f, const uint16_t* a, const uint16_t* b,
                      uint16_t* out, size_t n, const BulkOptions& o = {},
                      EventCounts* counts = nullptr);
void reference_binary(BinaryOp op, const Format& f, const uint32_t* a, const uint32_t* b,
                      uint32_t* out, size_t n, const BulkOptions& o = {},
                      EventCounts* counts = nullptr);
void reference_fma(const Format& f, const uint8_t* a, const uint8_t* b, const uint8_t* c,
                   uint8_t* out, size_t n, const BulkOptions& o = {},
                   EventCounts* counts = nullptr);
void reference_fma(const Format& f, const uint16_t* a, const uint16_t* b, const uint16_t* c,
                   uint16_t* out, size_t n, const BulkOptions& o = {},
                   EventCounts* counts = nullptr);
void reference_fma(const Format& f, const uint32_t* a, const uint32_t* b, const uint32_t* c,
                   uint32_t* out, size_t n, const BulkOptions& o = {},
                   EventCounts* counts = nullptr);

/// Which implementation the bulk kernels use. `reference` is the scalar reference above; the
/// SIMD levels run branch-free vector code (chosen at run time from what the CPU supports) and
/// fall back to the reference for what they do not cover: fp32, e8m0 and other unsigned
/// formats, arithmetic in other modes than near_even or in formats of more than 10 fraction
/// bits, partially overlapping arrays.
enum class BulkPath : uint8_t { reference, avx2, avx512 };

/// The best path this CPU supports.
BulkPath bulk_path_supported();
/// The path bulk calls of the calling thread use now (the best supported one by default).
BulkPath bulk_path();
/// Limit the calling thread's bulk calls to `p` (or the best supported path below it); returns
/// the previous setting. For tests and benchmarks that compare implementations.
BulkPath set_bulk_path(BulkPath p);
/// Allow or forbid hardware conversion instructions (F16C `vcvtps2ph`/`vcvtph2ps` for fp16
/// near_even, AVX512-BF16 `vcvtneps2bf16` for bf16 near_even on lanes without f32 subnormal
/// inputs; proven identical to the reference by the exhaustive tests) in the calling thread's
/// bulk calls; returns the previous setting. Allowed by default.
bool set_bulk_hardware_conversions(bool allow);
const char* bulk_path_name(BulkPath p);

}  // namespace detail

/// Classify one result for the scalar reference of the counts: `exact_nonzero_finite` tells
/// whether the exact value was finite and non-zero (round_f32: the input; arithmetic: the
/// rounding raised inexact), `flags` are the IEEE flags of the rounding.
void count_event(const Format& f, uint32_t result, bool exact_nonzero_finite, uint8_t flags,
                 EventCounts& c);

}  // namespace halfway
