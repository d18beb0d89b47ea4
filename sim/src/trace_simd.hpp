// The tracer's per-value statistics of one traced rounding in one pass (tracer.cpp), internal
// to sim/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "halfway/sim/tracer.hpp"

namespace halfway::sim::detail {

/// The extremes and non-finite count of a pass over values into r (add_values' and the
/// fused pass's last step): max_bits/min_bits are the largest and smallest |bits| of the
/// finite non-zero values (max_bits 0: there were none).
void add_value_facts(TraceRecord& r, uint32_t max_bits, uint32_t min_bits, uint64_t nonfinite);

/// add_values(r, x, n) followed by add_rounding(r, fmt, x, q, n) for a format of largest
/// magnitude fmax, in one pass with AVX-512: the same record bit for bit (every statistic is
/// an integer sum, a count, an extreme or an exact sum of squares); with `out`, q's values are
/// also copied there (out may be x). False, with r and out untouched, when the CPU lacks
/// AVX-512 or the build has no x86 kernels.
bool values_and_error_avx512(TraceRecord& r, const float* x, const float* q, size_t n,
                             float fmax, float* out = nullptr);

}  // namespace halfway::sim::detail
