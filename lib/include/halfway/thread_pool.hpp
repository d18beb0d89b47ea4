/// \file thread_pool.hpp
/// The simulator's persistent thread pool: workers are started once (on first use, up to the
/// largest count asked for) and wait for work, instead of a thread being created per matmul.
/// Work is split deterministically: `run(parts, f)` calls f(0) .. f(parts - 1) exactly once
/// each, part p always covering the same slice of the problem, so results never depend on
/// which thread ran what or on the thread count. The calling thread runs part 0 and waits for
/// the rest; a call made from inside a part runs all its parts inline (no nesting deadlock).
///
///     ThreadPool::global().run(4, [&](int p) { rows(p * m / 4, (p + 1) * m / 4); });
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace halfway::sim {

class ThreadPool {
 public:
  /// The one pool of the process.
  static ThreadPool& global();
  /// f(p) for p in [0, parts), on up to `parts` threads (the caller included).
  void run(int parts, const std::function<void(int)>& f);
  /// The machine's hardware threads (at least 1): the default thread count of the tools.
  static int hardware_threads();
  ~ThreadPool();

 private:
  void grow(int workers);
  void work(int id);
  /// Run parts not yet taken (called with mu_ held; releases it while a part runs).
  void drain(std::unique_lock<std::mutex>& l);
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  int parts_ = 0, next_ = 0, running_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::mutex run_mu_;  ///< one run at a time
};

}  // namespace halfway::sim
