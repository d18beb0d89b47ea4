/// \file rng.hpp
/// A small seeded generator with fully specified distributions (the standard library's
/// distributions differ between implementations), so data and initial weights are the same
/// for the same seed everywhere.
///
///     Rng r(seed);  double u = r.uniform();  double z = r.normal();
#pragma once

#include <cmath>
#include <cstdint>

namespace halfway::sim {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  /// SplitMix64.
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /// Standard normal (Box–Muller, one value per call).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  /// Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }

 private:
  uint64_t s_;
};

}  // namespace halfway::sim
