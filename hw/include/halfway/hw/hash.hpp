/// \file hash.hpp
/// Order-independent fingerprints of large result sets, so that 2^32 results computed on a GPU
/// can be compared with results computed elsewhere without moving them: the fingerprint of a set
/// of (index, value) pairs is the sum, modulo 2^64, of a 64-bit mix of each pair. Any thread
/// may add any pair in any order; two sets agree when their fingerprints do (up to collisions of
/// a 64-bit hash). `halfway hw-report --json` and the GPU campaign print the same fingerprints.
///
///     uint64_t h = 0;
///     for (uint32_t i = 0; i < n; ++i) h += halfway::hw::hash_term(i, out[i]);
#pragma once

#include "halfway/config.hpp"

namespace halfway::hw {

/// SplitMix64's finaliser (Steele, Lea & Flood 2014): a bijection of 64-bit words.
HALFWAY_INLINE uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Exhaustive GPU checks also fingerprint the inputs whose index is a multiple of this stride,
/// so a CPU can replay a 1/4099 slice of a 2^32 check in a second.
inline constexpr uint64_t kReplayStride = 4099;

/// The contribution of result `value` at input index `index` to a fingerprint.
HALFWAY_INLINE uint64_t hash_term(uint64_t index, uint32_t value) {
  return mix64(mix64(index) ^ (uint64_t(value) * 0xD6E8FEB86659FD93ull + 0x2545F4914F6CDD1Dull));
}

/// Counter-based random bits: word `index` of stream `seed` (used to draw random operands
/// reproducibly on the GPU and on the CPU alike).
HALFWAY_INLINE uint64_t random64(uint64_t seed, uint64_t index) {
  return mix64(mix64(seed ^ 0x6A09E667F3BCC908ull) + index * 0x9E3779B97F4A7C15ull);
}

}  // namespace halfway::hw
