// Test helper: run body(lo, hi) over [0, n) in chunks, on every hardware thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace halfway_test {

template <class Body>
void parallel_chunks(uint64_t n, uint64_t chunk, Body&& body) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<uint64_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (uint64_t lo; (lo = next.fetch_add(chunk)) < n;) body(lo, std::min(n, lo + chunk));
    });
  for (auto& t : pool) t.join();
}

}  // namespace halfway_test
