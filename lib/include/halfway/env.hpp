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

/// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
/// SC 2011; the generator of Random123 and cuRAND): a 128-bit counter (`x` least significant)
/// encrypted under a 64-bit key by ten rounds of two 32x32->64-bit multiplications.
struct Philox4x32 {
  uint32_t x = 0, y = 0, z = 0, w = 0;
};
HALFWAY_INLINE bool operator==(const Philox4x32& a, const Philox4x32& b) {
  return a.x == b.x && a.y == b.y && a.z == b.z && a.w == b.w;
}
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;  ///< multipliers
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;  ///< key increments
HALFWAY_INLINE Philox4x32 philox4x32_10(Philox4x32 c, uint64_t key) {
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kPhiloxM0) * c.x, p1 = uint64_t(kPhiloxM1) * c.z;
    c = {static_cast<uint32_t>(p1 >> 32) ^ c.y ^ k0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c.w ^ k1, static_cast<uint32_t>(p0)};
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return c;
}

/// The random bits of stochastic rounding: draw number `index` of the stream (seed,
/// subsequence), exactly what cuRAND's `curand()` returns after `curand_init(seed,
/// subsequence, index, &state)` with a `curandStatePhilox4_32_10_t`: Philox4x32-10 keyed by the
/// seed, of the counter subsequence·2^64 + ⌊index/4⌋, output word index mod 4 (x, y, z, w).
/// Every seed is its own key, so different seeds never share a stream; each of the 2^64
/// subsequences of a seed holds 2^64 draws. The bits depend only on (seed, subsequence,
/// index), never on thread count or call order.
HALFWAY_INLINE uint32_t sr_bits(uint64_t seed, uint64_t subsequence, uint64_t index) {
  const uint64_t c = index >> 2;
  const Philox4x32 r =
      philox4x32_10({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32),
                     static_cast<uint32_t>(subsequence), static_cast<uint32_t>(subsequence >> 32)},
                    seed);
  switch (index & 3) {
    case 0: return r.x;
    case 1: return r.y;
    case 2: return r.z;
    default: return r.w;
  }
}

/// Stochastic rounding with `random_bits` random bits (0-32; more counts as 32) uses the top
/// `random_bits` bits of each draw, the others cleared: it rounds up when the top
/// `random_bits` bits of the remainder, as a fraction of the spacing, plus those random bits
/// carry out. The probability of rounding up is then ⌊f·2^r⌋/2^r for the exact fraction f, so
/// fewer bits bias results toward zero (docs/semantics.md); 0 bits is round toward zero.
HALFWAY_INLINE uint32_t sr_mask(int random_bits) {
  if (random_bits <= 0) return 0;
  return random_bits >= 32 ? ~0u : ~0u << (32 - random_bits);
}
inline constexpr int kSrRandomBits = 32;  ///< the default number of random bits

/// Roundings served by one 32-bit draw: ⌊32/random_bits⌋ with packed draws and 1 to 16 random
/// bits, else 1 (each rounding its own draw).
HALFWAY_INLINE uint32_t sr_fields(int random_bits, bool packed) {
  return packed && random_bits >= 1 && random_bits <= 16 ? 32u / uint32_t(random_bits) : 1u;
}

/// The random bits of stochastic rounding number `index` of the stream (seed, subsequence):
/// the top `random_bits` bits of draw `index` (sr_bits & sr_mask) or, with packed draws
/// (sr_fields k > 1), field `index` mod k of draw ⌊index/k⌋, field 0 being the draw's top
/// `random_bits` bits, field 1 the next ones, and so on, moved to the top. Each field is
/// `random_bits` uniform bits, independent of the other fields, as an unpacked draw's top
/// bits are, so the rounding probabilities are the same; only which draw a rounding reads
/// changes (docs/semantics.md, "Few-bit stochastic rounding").
HALFWAY_INLINE uint32_t sr_random(uint64_t seed, uint64_t subsequence, uint64_t index,
                                  int random_bits, bool packed) {
  const uint32_t k = sr_fields(random_bits, packed);
  if (k == 1) return sr_bits(seed, subsequence, index) & sr_mask(random_bits);
  const uint32_t shift = uint32_t(random_bits) * uint32_t(index % k);
  return (sr_bits(seed, subsequence, index / k) << shift) & sr_mask(random_bits);
}

struct Env {
  Rounding rounding = Rounding::near_even;
  Tininess tininess = Tininess::after_rounding;
  uint8_t flags = 0;        ///< accumulated exception flags (sticky, like IEEE status flags)
  uint64_t sr_seed = 0;         ///< seed of stochastic rounding (the Philox key)
  uint64_t sr_subsequence = 0;  ///< subsequence of the stream (cuRAND's `subsequence`)
  uint64_t sr_counter = 0;      ///< index of the next stochastic rounding in this stream
  int sr_random_bits = kSrRandomBits;  ///< random bits per stochastic rounding (sr_mask)
  bool sr_pack = false;  ///< packed draws: ⌊32/sr_random_bits⌋ roundings per draw (sr_random)

  Env() = default;
  HALFWAY_HD explicit Env(Rounding r, uint64_t seed = 0) : rounding(r), sr_seed(seed) {}
  HALFWAY_INLINE uint32_t next_random() {
    return sr_random(sr_seed, sr_subsequence, sr_counter++, sr_random_bits, sr_pack);
  }
};

}  // namespace halfway
