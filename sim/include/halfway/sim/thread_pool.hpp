/// \file thread_pool.hpp
/// The simulator uses the repository's thread pool (halfway/thread_pool.hpp).
#pragma once

#include "halfway/thread_pool.hpp"

namespace halfway::sim {
using halfway::ThreadPool;
}  // namespace halfway::sim
