// NVIDIA's own Philox4x32-10, run on the CPU: cuRAND's host generator
// (curandCreateGeneratorHost, CURAND_RNG_PSEUDO_PHILOX4_32_10) against halfway::sr_bits. The
// host API lays its output out as 65536 curand() streams interleaved by fours: element p
// (generator offset included) is draw 4·⌊p/2^18⌋ + p mod 4 of subsequence ⌊p/4⌋ mod 65536.
// Skipped (exit 77) when libcurand cannot create a host generator.
#include <curand.h>

#include <catch2/catch.hpp>
#include <vector>

#include "halfway/bulk.hpp"
#include "test_support.hpp"

namespace {

constexpr uint64_t kHostThreads = 65536;

/// `n` values of cuRAND's host Philox generator, or none when it cannot be created.
bool curand_host(uint64_t seed, uint64_t offset, curandOrdering_t order, size_t n,
                 std::vector<uint32_t>& out) {
  curandGenerator_t g;
  if (curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10) != CURAND_STATUS_SUCCESS)
    return false;
  out.assign(n, 0);
  const bool ok = curandSetPseudoRandomGeneratorSeed(g, seed) == CURAND_STATUS_SUCCESS &&
                  curandSetGeneratorOffset(g, offset) == CURAND_STATUS_SUCCESS &&
                  curandSetGeneratorOrdering(g, order) == CURAND_STATUS_SUCCESS &&
                  curandGenerate(g, out.data(), n) == CURAND_STATUS_SUCCESS;
  curandDestroyGenerator(g);
  REQUIRE(ok);
  return true;
}

}  // namespace

TEST_CASE("sr_bits equals cuRAND's host Philox4x32-10 generator", "[philox][curand]") {
  struct Case {
    uint64_t seed, offset;
    curandOrdering_t order;
  };
  const Case cases[] = {{0, 0, CURAND_ORDERING_PSEUDO_DEFAULT},
                        {20240601, 5, CURAND_ORDERING_PSEUDO_DEFAULT},
                        {0xFEDCBA9876543210ull, 1000003, CURAND_ORDERING_PSEUDO_BEST},
                        {0x85EBCA6Bull, (uint64_t(1) << 60) + 6, CURAND_ORDERING_PSEUDO_LEGACY},
                        {~0ull, 12345, CURAND_ORDERING_PSEUDO_DEFAULT}};
  constexpr size_t n = size_t(1) << 21;  // 8 draws of each of the 65536 subsequences
  for (const Case& c : cases) {
    std::vector<uint32_t> got;
    if (!curand_host(c.seed, c.offset, c.order, n, got)) {
      halfway_test::skip("libcurand cannot create a host generator here");
      return;
    }
    size_t differ = 0;
    for (size_t k = 0; k < n; ++k) {
      const uint64_t p = c.offset + k;
      const uint64_t sub = (p / 4) % kHostThreads, index = 4 * (p / (4 * kHostThreads)) + p % 4;
      differ += got[k] != halfway::sr_bits(c.seed, sub, index);
    }
    INFO("seed " << c.seed << " offset " << c.offset);
    CHECK(differ == 0);
    // The vectorised draws: subsequence 7's run of draws, gathered from the host output.
    if (c.offset % (4 * kHostThreads) == 0) {
      halfway::BulkOptions o;
      o.seed = c.seed;
      o.subsequence = 7;
      o.offset = 4 * (c.offset / (4 * kHostThreads));
      std::vector<uint32_t> bulk(n / kHostThreads);
      halfway::sr_bits(o, bulk.data(), bulk.size());
      for (size_t i = 0; i < bulk.size(); ++i)
        CHECK(bulk[i] == got[(i / 4) * 4 * kHostThreads + 7 * 4 + i % 4]);
    }
  }
}
