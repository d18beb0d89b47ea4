/// \file thread_pool.hpp
/// The repository's one persistent thread pool (the simulator's matmuls, the tools' and the
/// tests' parallel loops): workers are started once (on first use, up to the
/// largest count asked for) and wait for work, instead of a thread being created per matmul.
/// Work is split deterministically: `run(parts, f)` calls f(0) .. f(parts - 1) exactly once
/// each, part p always covering the same slice of the problem, so results never depend on
/// which thread ran what or on the thread count. The calling thread runs part 0 and waits for
/// the rest; a call made from inside a part runs all its parts inline (no nesting deadlock).
///
///     ThreadPool::global().run(4, [&](int p) { rows(p * m / 4, (p + 1) * m / 4); });
///
/// `parallel_chunks(n, chunk, body)` is the dynamic form for loops whose parts cost different
/// amounts (exhaustive checks, searches): body(lo, hi) over [0, n) in chunks, handed out in
/// order to the pool's threads. Use it only where the result does not depend on which thread
/// ran which chunk (counts, sums of integers, per-index outputs).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace halfway {

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

/// The number of parts parallel_chunks_by_part runs for n values in chunks of `chunk` on
/// `threads` threads (0: every hardware thread): at least 1, at most one per chunk.
inline int chunk_parts(uint64_t n, uint64_t chunk, int threads) {
  if (threads <= 0) threads = ThreadPool::hardware_threads();
  const uint64_t chunks = chunk ? (n + chunk - 1) / chunk : 0;
  return int(std::max<uint64_t>(1, std::min<uint64_t>(uint64_t(threads), chunks)));
}

/// How many equal parts [0, n) splits into for `threads` threads (at least 1 thread) with no
/// part smaller than `min_part`: at least 1, at most `threads`.
inline int even_parts(uint64_t n, uint64_t min_part, int threads) {
  const uint64_t most = min_part ? n / min_part : n;
  return int(std::max<uint64_t>(1, std::min<uint64_t>(uint64_t(std::max(threads, 1)), most)));
}

/// body(part, lo, hi) on `parts` equal slices of [0, n), part p always the same slice: the
/// static form, for per-part results merged in part order and for loops whose elements are
/// computed each on their own.
template <class Body>
void parallel_slices(int parts, uint64_t n, Body&& body) {
  if (parts <= 1) {
    body(0, uint64_t(0), n);
    return;
  }
  ThreadPool::global().run(parts, [&](int p) {
    body(p, n * uint64_t(p) / uint64_t(parts), n * uint64_t(p + 1) / uint64_t(parts));
  });
}

/// body(lo, hi) over [0, n) in parts on the pool (up to `threads`, none smaller than
/// `min_part`). For loops whose elements are computed each on their own, so the results do not
/// depend on the parts.
template <class Body>
void parallel_for(int threads, size_t n, size_t min_part, Body&& body) {
  parallel_slices(even_parts(n, min_part, threads), n,
                  [&](int, uint64_t lo, uint64_t hi) { body(size_t(lo), size_t(hi)); });
}

/// body(part, lo, hi) over [0, n) in chunks of `chunk`, on chunk_parts(n, chunk, threads)
/// parts of the pool, each taking the next chunk when it is done with one. `part` (0 ..
/// parts-1) names the part that runs the chunk, for per-part partial results that are merged
/// afterwards; which chunks a part gets varies from run to run, so the merge must not depend
/// on it (sums, minima, maxima).
template <class Body>
void parallel_chunks_by_part(uint64_t n, uint64_t chunk, int threads, Body&& body) {
  std::atomic<uint64_t> next{0};
  ThreadPool::global().run(chunk_parts(n, chunk, threads), [&](int part) {
    for (uint64_t lo; (lo = next.fetch_add(chunk)) < n;) body(part, lo, std::min(n, lo + chunk));
  });
}

/// body(lo, hi) over [0, n) in chunks of `chunk`, as parallel_chunks_by_part.
template <class Body>
void parallel_chunks(uint64_t n, uint64_t chunk, Body&& body, int threads = 0) {
  parallel_chunks_by_part(n, chunk, threads,
                          [&](int, uint64_t lo, uint64_t hi) { body(lo, hi); });
}

}  // namespace halfway
