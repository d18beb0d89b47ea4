/// \file env.hpp
/// The floating-point environment is passed explicitly to every operation: rounding direction,
/// tininess detection, the seed of stochastic rounding, and the accumulated exception flags.
/// There is no global state, so two threads (or a tracer) never see each other's flags.
///
///     halfway::Env env{halfway::Rounding::minMag};
///     uint32_t h = halfway::from_f32(halfway::formats::fp16, 1e-8f, env);
///     if (env.flags & halfway::flag::underflow) { ... }
#pragma once

#include "halfway/config.hpp"

namespace halfway {

/// Rounding directions, named as in Berkeley TestFloat/SoftFloat.
enum class Rounding : uint8_t {
  near_even,    ///< rne: to nearest, ties to even
  near_maxMag,  ///< rna: to nearest, ties away from zero
  minMag,       ///< rtz: toward zero
  min,          ///< rd: toward -inf
  max,          ///< ru: toward +inf
  odd,          ///< rto: toward zero, then set the last bit if inexact ("jamming")
  stochastic,   ///< sr: up with probability (distance to lower neighbour) / spacing
};
inline constexpr int kRoundingCount = 7;

enum class Tininess : uint8_t { after_rounding, before_rounding };

/// IEEE exception flags with SoftFloat's bit values.
namespace flag {
inline constexpr uint8_t inexact = 0x01;
inline constexpr uint8_t underflow = 0x02;
inline constexpr uint8_t overflow = 0x04;
inline constexpr uint8_t infinite = 0x08;  ///< division by zero
inline constexpr uint8_t invalid = 0x10;
}  // namespace flag

/// Counter-based random bits for stochastic rounding: the bits for rounding number `index` of a
/// stream depend only on (seed, index), never on thread count or call order. Bulk kernels use
/// the element index; scalar operations use `Env::sr_counter`, which advances per rounding.
HALFWAY_INLINE uint32_t sr_key(uint64_t seed, uint64_t index) {
  return static_cast<uint32_t>(seed) ^ (static_cast<uint32_t>(seed >> 32) * 0x85EBCA6Bu) ^
         (static_cast<uint32_t>(index >> 32) * 0xC2B2AE35u);
}
/// 32-bit operations only (a Weyl sequence through Wellons' "lowbias32" mixer), so the bulk
/// kernels vectorise it with AVX2. For a fixed key it is a bijection of the low 32 index bits.
HALFWAY_INLINE uint32_t sr_mix(uint32_t key, uint32_t index_lo) {
  uint32_t x = index_lo * 0x9E3779B9u + key;
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}
HALFWAY_INLINE uint32_t sr_bits(uint64_t seed, uint64_t index) {
  return sr_mix(sr_key(seed, index), static_cast<uint32_t>(index));
}

struct Env {
  Rounding rounding = Rounding::near_even;
  Tininess tininess = Tininess::after_rounding;
  uint8_t flags = 0;        ///< accumulated exception flags (sticky, like IEEE status flags)
  uint64_t sr_seed = 0;     ///< seed of stochastic rounding
  uint64_t sr_counter = 0;  ///< index of the next stochastic rounding in this stream

  Env() = default;
  HALFWAY_HD explicit Env(Rounding r, uint64_t seed = 0) : rounding(r), sr_seed(seed) {}
  HALFWAY_INLINE uint32_t next_random() { return sr_bits(sr_seed, sr_counter++); }
};

}  // namespace halfway
