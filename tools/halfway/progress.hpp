// A progress bar with an ETA on stderr, drawn only when stderr is a terminal (quiet when piped
// or redirected, so logs and test output stay clean). Workers add to an atomic counter; one
// thread (usually the one waiting for the workers) calls `draw()` now and then.
//
//     halfway::cli::Progress bar(total_cases);
//     ... workers: bar.add(n);  ... waiter: while (!done) { bar.draw(); sleep(200ms); }
//     bar.finish();
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace halfway::cli {

class Progress {
 public:
  explicit Progress(uint64_t total, bool enabled = isatty(STDERR_FILENO) != 0)
      : total_(total ? total : 1), enabled_(enabled), start_(Clock::now()) {}
  ~Progress() { finish(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(uint64_t n) { done_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t done() const { return done_.load(std::memory_order_relaxed); }
  bool enabled() const { return enabled_; }
  /// Text shown after the bar (e.g. the name of the running check).
  void label(std::string s) { label_ = std::move(s); }

  /// Redraw the bar: fraction done, elapsed time and the remaining time at the rate so far.
  void draw() {
    if (!enabled_) return;
    const uint64_t d = done();
    const double frac = d >= total_ ? 1.0 : double(d) / double(total_);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    constexpr int kWidth = 30;
    const int fill = int(frac * kWidth);
    std::string bar(size_t(fill), '#');
    bar.append(size_t(kWidth - fill), '.');
    std::string eta = "--";
    // After 10 s the rate so far means something even below 0.1% (a long training run).
    if (d > 0 && ((frac > 0.001 && elapsed > 0.5) || elapsed > 10))
      eta = duration(elapsed / frac - elapsed);
    std::fprintf(stderr, "\r[%s] %5.1f%%  %s elapsed, ETA %s  %-40.40s", bar.c_str(),
                 100.0 * frac, duration(elapsed).c_str(), eta.c_str(), label_.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }

  /// Clear the bar's line (once).
  void finish() {
    if (enabled_ && drawn_) {
      std::fprintf(stderr, "\r%*s\r", 110, "");
      std::fflush(stderr);
      drawn_ = false;
    }
  }

  /// "42 s", "3 min 05 s", "1 h 02 min".
  static std::string duration(double s) {
    char buf[32];
    if (s < 60) {
      std::snprintf(buf, sizeof buf, s < 10 ? "%.1f s" : "%.0f s", s);
    } else if (s < 3600) {
      std::snprintf(buf, sizeof buf, "%d min %02d s", int(s) / 60, int(s) % 60);
    } else if (s < 360000) {
      std::snprintf(buf, sizeof buf, "%d h %02d min", int(s) / 3600, (int(s) / 60) % 60);
    } else {  // 100 h or more (no int overflow for an ETA of years)
      std::snprintf(buf, sizeof buf, "%.3g h", s / 3600);
    }
    return buf;
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::atomic<uint64_t> done_{0};
  uint64_t total_;
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point start_;
  std::string label_;
};

}  // namespace halfway::cli
