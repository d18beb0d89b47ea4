// Internal interface between the public bulk entry points (bulk.cpp) and the SIMD kernels
// (bulk_simd.cpp). Each fast_* function returns false, having done nothing, when it does not
// cover the call (format, rounding mode, CPU, aliasing); the caller then runs the reference.
#pragma once

#include "halfway/bulk.hpp"

namespace halfway::detail {

bool fast_round_f32(const Format& f, const float* in, uint8_t* out, size_t n, const BulkOptions& o,
                    EventCounts* counts);
bool fast_round_f32(const Format& f, const float* in, uint16_t* out, size_t n, const BulkOptions& o,
                    EventCounts* counts);
bool fast_round_f32(const Format& f, const float* in, uint32_t* out, size_t n, const BulkOptions& o,
                    EventCounts* counts);
bool fast_quantize_f32(const Format& f, const float* in, float* out, size_t n, const BulkOptions& o,
                       EventCounts* counts);
bool fast_sr_bits(const BulkOptions& o, uint32_t* out, size_t n);
bool fast_decode_f32(const Format& f, const uint8_t* in, float* out, size_t n);
bool fast_decode_f32(const Format& f, const uint16_t* in, float* out, size_t n);
bool fast_decode_f32(const Format& f, const uint32_t* in, float* out, size_t n);
bool fast_binary(BinaryOp op, const Format& f, const uint8_t* a, const uint8_t* b, uint8_t* out,
                 size_t n, const BulkOptions& o, EventCounts* counts);
bool fast_binary(BinaryOp op, const Format& f, const uint16_t* a, const uint16_t* b, uint16_t* out,
                 size_t n, const BulkOptions& o, EventCounts* counts);
bool fast_binary(BinaryOp op, const Format& f, const uint32_t* a, const uint32_t* b, uint32_t* out,
                 size_t n, const BulkOptions& o, EventCounts* counts);
bool fast_fma(const Format& f, const uint8_t* a, const uint8_t* b, const uint8_t* c, uint8_t* out,
              size_t n, const BulkOptions& o, EventCounts* counts);
bool fast_fma(const Format& f, const uint16_t* a, const uint16_t* b, const uint16_t* c,
              uint16_t* out, size_t n, const BulkOptions& o, EventCounts* counts);
bool fast_fma(const Format& f, const uint32_t* a, const uint32_t* b, const uint32_t* c,
              uint32_t* out, size_t n, const BulkOptions& o, EventCounts* counts);

}  // namespace halfway::detail
