// Test helper: run body(lo, hi) over [0, n) in chunks, on the repository's thread pool.
#pragma once

#include "halfway/thread_pool.hpp"

namespace halfway_test {
using halfway::parallel_chunks;
}  // namespace halfway_test
