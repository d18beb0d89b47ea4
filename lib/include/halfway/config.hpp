/// \file config.hpp
/// Portability macros: the core headers compile both as host C++20 and under nvcc, where every
/// scalar routine is `__host__ __device__` so the reference can run inside a CUDA kernel.
#pragma once

// HALFWAY_NOINLINE marks the general (rare) half of a scalar routine whose common case is
// inlined: on the host a call keeps the caller's code small; under nvcc the compiler decides.
#if defined(__CUDACC__)
#define HALFWAY_HD __host__ __device__
#define HALFWAY_INLINE __host__ __device__ __forceinline__
#define HALFWAY_NOINLINE __host__ __device__ inline
#else
#define HALFWAY_HD
#define HALFWAY_INLINE inline __attribute__((always_inline))
#define HALFWAY_NOINLINE inline __attribute__((noinline))
#endif

// Plain loops that the compiler vectorises, compiled also for AVX-512 and AVX2 and chosen at
// run time (the library itself targets the baseline x86-64). Off under AddressSanitizer, whose
// instrumentation does not go with target clones.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__CUDACC__)
#define HALFWAY_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HALFWAY_VECTOR_CLONES
#endif

#include <cstdint>

namespace halfway::detail {

/// Count leading zeros of a non-zero 64-bit value.
HALFWAY_INLINE int clz64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __clzll(static_cast<long long>(x));
#else
  return __builtin_clzll(x);
#endif
}

HALFWAY_INLINE int clz128(unsigned __int128 x) {
  const uint64_t hi = static_cast<uint64_t>(x >> 64);
  return hi ? clz64(hi) : 64 + clz64(static_cast<uint64_t>(x));
}

/// Shift right, OR-ing every bit shifted out into bit 0 ("jamming"), so that the result still
/// tells exact from inexact. Any shift count is allowed.
HALFWAY_INLINE uint64_t shr_jam64(uint64_t x, int n) {
  if (n < 0) return x;
  if (n >= 64) return x != 0;
  // No branch on n == 0 (an addition of operands in the same binade): the mask is then empty.
  return (x >> n) | uint64_t((x & ((uint64_t(1) << n) - 1)) != 0);
}

HALFWAY_INLINE unsigned __int128 shr_jam128(unsigned __int128 x, int n) {
  if (n <= 0) return x;
  if (n >= 128) return x != 0;
  return (x >> n) | ((x << (128 - n)) != 0);
}

}  // namespace halfway::detail
