#include "halfway/thread_pool.hpp"

namespace halfway {

namespace {
thread_local bool in_part = false;  ///< this thread is running a part of some run()
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool;
  return pool;
}

int ThreadPool::hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::grow(int workers) {
  while (int(threads_.size()) < workers) {
    const int id = int(threads_.size());
    threads_.emplace_back([this, id] { work(id); });
  }
}

void ThreadPool::drain(std::unique_lock<std::mutex>& l) {
  while (next_ < parts_) {
    const int p = next_++;
    ++running_;
    const std::function<void(int)>& job = *job_;
    l.unlock();
    in_part = true;
    job(p);
    in_part = false;
    l.lock();
    --running_;
  }
}

void ThreadPool::work(int) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    wake_.wait(l, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    drain(l);
    if (next_ >= parts_ && running_ == 0) done_.notify_all();
  }
}

void ThreadPool::run(int parts, const std::function<void(int)>& f) {
  if (parts <= 1 || in_part) {
    for (int p = 0; p < parts; ++p) f(p);
    return;
  }
  std::lock_guard<std::mutex> one(run_mu_);
  {
    std::lock_guard<std::mutex> l(mu_);
    grow(parts - 1);
    job_ = &f;
    parts_ = parts;
    next_ = 1;
    running_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  in_part = true;
  f(0);
  in_part = false;
  std::unique_lock<std::mutex> l(mu_);
  drain(l);  // the caller also takes parts no worker has started yet
  done_.wait(l, [&] { return next_ >= parts_ && running_ == 0; });
  job_ = nullptr;
  parts_ = 0;
}

}  // namespace halfway
