#include "halfway/sim/block_quant.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include <unistd.h>

#include "halfway/sim/tracer.hpp"
#include "halfway/thread_pool.hpp"

namespace halfway::sim {

namespace {

BlockOptions block_options(Runtime& rt, const BlockCopy& c) {
  BlockOptions o;
  o.axis = c.axis;
  o.rht = c.rht;
  o.pow2_scales = c.pow2_scales;
  const BulkOptions b = next_rounding(rt);
  if (c.sr) {
    o.rounding = Rounding::stochastic;
    o.random_bits = b.random_bits;  // precision.sr_random_bits
    o.pack_random_bits = b.pack_random_bits;  // precision.sr_pack_random_bits
    o.seed = b.seed;
    o.subsequence = b.subsequence;
    o.offset = b.offset;
  }
  return o;
}

/// A record of copy `c` under `tag`, with nothing counted yet.
BlockRecord empty_record(const BlockCopy& c, const TraceTag& tag) {
  BlockRecord r;
  r.name = tag.name;
  r.gemm = c.gemm;
  r.op = tag.op;
  r.kind = tag.kind;
  r.scheme = c.scheme;
  r.axis = c.axis;
  r.sr = c.sr;
  r.rht = c.rht;
  return r;
}

/// x: the values the scheme quantized (the operand, or its random Hadamard transform).
BlockRecord make_record(const BlockCopy& c, const TraceTag& tag, const BlockEncoding& e,
                        const float* x, const float* q) {
  BlockRecord r = empty_record(c, tag);
  r.events = e.events;
  add_block_errors(r, e, x, q, e.scale_rows());
  return r;
}

/// Parts of at least this many values run on the pool (the copy's padding and its check).
constexpr size_t kPart = size_t(1) << 15;

/// No NaN or infinity in v: one branch-free pass over the exponent fields, which the compiler
/// vectorises (a copy is nearly always finite, so stopping early saves nothing), in parts.
bool all_finite(int threads, const RawVector<float>& v) {
  std::atomic<uint32_t> special{0};
  parallel_for(threads, v.size(), kPart, [&](size_t lo, size_t hi) {
    uint32_t part = 0;
    for (size_t i = lo; i < hi; ++i) {
      uint32_t b;
      std::memcpy(&b, &v[i], sizeof b);
      part |= uint32_t((b & 0x7F800000u) == 0x7F800000u);
    }
    special |= part;
  });
  return special == 0;
}

/// pad_blocks in row bands on the pool (each row is its own copy).
template <class T>
void pad_rows(int threads, const T* x, size_t rows, size_t cols, float* out, size_t prows,
              size_t pcols) {
  const size_t least = std::max<size_t>(1, kPart / std::max<size_t>(pcols, 1));
  parallel_for(threads, prows, least, [&](size_t r0, size_t r1) {
    const size_t lo = std::min(r0, rows), hi = std::min(r1, rows);
    pad_blocks(x + lo * cols, hi - lo, cols, out + r0 * pcols, r1 - r0, pcols);
  });
}

/// The record of a copy that could not be quantized: every block counted as a NaN scale.
BlockRecord nonfinite_record(const BlockCopy& c, const TraceTag& tag, const BlockScheme& s,
                             size_t rows, size_t cols) {
  BlockRecord r = empty_record(c, tag);
  const auto [tr, tc] = block_tile(s, c.axis, rows, cols);
  mark_nonfinite(r, rows * cols, (rows / tr) * (cols / tc));
  return r;
}

}  // namespace

namespace {

/// One block's elements into the running sums (signal, noise), in add_block_errors' order,
/// and into b (its own sums and amax), which a caller's `each` reads.
void add_block(const BlockEncoding& e, const float* x, const float* q, size_t br, size_t bc,
               double& signal, double& noise, BlockStat& b) {
  for (size_t i = br * e.tile_rows; i < (br + 1) * e.tile_rows; ++i)
    for (size_t j = bc * e.tile_cols; j < (bc + 1) * e.tile_cols; ++j) {
      const size_t at = i * e.cols + j;
      const double v = x[at], d = v - double(q[at]);
      signal += v * v;
      noise += d * d;
      b.signal += v * v;
      b.noise += d * d;
      const float a = std::fabs(x[at]);
      if (std::isnan(a) || a > b.amax) b.amax = a;  // a NaN sticks
    }
}

/// floor(log2 |s|) of a finite non-zero fp32 s (std::ilogb), from its bits where s is normal.
int scale_exponent(float s) {
  uint32_t b;
  std::memcpy(&b, &s, sizeof b);
  const int field = int((b >> 23) & 0xFF);
  return field != 0 ? field - 127 : std::ilogb(s);
}

/// The zero scales and the histogram of floor(log2 scale) of the first n blocks of e: counted
/// in an array by exponent (fp32's −149..127), then added to the record's map.
void add_scales(BlockRecord& r, const BlockEncoding& e, size_t n) {
  constexpr int kLow = -149;
  std::array<uint64_t, 127 - kLow + 1> hist{};
  for (size_t b = 0; b < n; ++b) {
    const float s = e.scales[b];
    if (s == 0.0f) ++r.zero_scales;
    else if (std::isfinite(s)) ++hist[size_t(scale_exponent(s) - kLow)];
  }
  for (size_t k = 0; k < hist.size(); ++k)
    if (hist[k]) r.scale_hist[int(k) + kLow] += hist[k];
}

/// A run of n consecutive elements of x and q into the running sums, in memory order: the
/// chain of binary64 additions alone (blocks along the rows, 1×k, visited in row-major order
/// are one run; a 2-D tile's rows are runs of their own).
void add_row_blocks(const float* x, const float* q, size_t n, double& signal, double& noise) {
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i], d = v - double(q[i]);
    signal += v * v;
    noise += d * d;
  }
}

/// Blocks down the columns (k×1): each row of blocks' values in add_block_errors' order (column
/// by column, each column's k values in row order), gathered into scratch in 16-column tiles,
/// then summed as one run: the same additions in the same order, without a strided load on
/// the chain's path.
void add_column_blocks(const BlockEncoding& e, const float* x, const float* q, size_t block_rows,
                       double& signal, double& noise) {
  const size_t tr = e.tile_rows, cols = e.cols;
  thread_local RawVector<float> xt, qt;  // scratch kept between calls, one per thread
  xt.resize(tr * cols);
  qt.resize(tr * cols);
  for (size_t br = 0; br < block_rows; ++br) {
    const float *xb = x + br * tr * cols, *qb = q + br * tr * cols;
    for (size_t c0 = 0; c0 < cols; c0 += 16) {
      const size_t c1 = std::min(cols, c0 + 16);
      for (size_t i = 0; i < tr; ++i)
        for (size_t c = c0; c < c1; ++c) {
          xt[c * tr + i] = xb[i * cols + c];
          qt[c * tr + i] = qb[i * cols + c];
        }
    }
    add_row_blocks(xt.data(), qt.data(), tr * cols, signal, noise);
  }
}

}  // namespace

void add_block_errors(BlockRecord& r, const BlockEncoding& e, const float* x, const float* q,
                      size_t block_rows, const std::function<void(const BlockStat&)>& each) {
  const size_t sc = e.scale_cols();
  double signal = r.signal, noise = r.noise;
  if (each) {
    for (size_t br = 0; br < block_rows; ++br)
      for (size_t bc = 0; bc < sc; ++bc) {
        BlockStat b{br, bc, e.scales[br * sc + bc], 0.0f, 0.0, 0.0};
        add_block(e, x, q, br, bc, signal, noise, b);
        each(b);
      }
  } else if (e.tile_rows == 1) {  // the training step's copies: the sums alone
    add_row_blocks(x, q, block_rows * e.cols, signal, noise);
  } else if (e.tile_cols == 1) {
    add_column_blocks(e, x, q, block_rows, signal, noise);
  } else {  // 2-D tiles: each block's rows are runs in memory order
    const size_t tr = e.tile_rows, tc = e.tile_cols;
    for (size_t br = 0; br < block_rows; ++br)
      for (size_t bc = 0; bc < sc; ++bc)
        for (size_t i = br * tr; i < (br + 1) * tr; ++i) {
          const size_t at = i * e.cols + bc * tc;
          add_row_blocks(x + at, q + at, tc, signal, noise);
        }
  }
  add_scales(r, e, block_rows * sc);
  r.signal = signal, r.noise = noise;
}

void mark_nonfinite(BlockRecord& r, uint64_t elements, uint64_t blocks) {
  r.events.elements = elements;
  r.events.blocks = r.events.nan_scales = blocks;
  r.signal = r.noise = std::numeric_limits<double>::quiet_NaN();
}

std::pair<size_t, size_t> copy_tile(const BlockCopy& c) {
  const BlockScheme s = parse_block_scheme(c.scheme);
  if (!s.two_d && s.block == 0) return {1, 1};  // the whole padded dimension, whatever it is
  return block_tile(s, c.axis);
}

namespace {

/// One background thread that computes block records (decode, then add_block_errors' chain of
/// binary64 additions) while the step goes on, for runs on two or more threads; and the
/// buffers it hands back, so that scratch of a copy's size is reused instead of faulted in.
class RecordWorker {
 public:
  /// This process's worker. It is never destroyed (its thread waits, idle, when the process
  /// ends: every step drains its records first), and a child made by fork() starts its own,
  /// as the parent's thread does not exist there.
  static RecordWorker& get() {
    static std::mutex m;
    static RecordWorker* w = nullptr;
    static pid_t owner = 0;
    std::lock_guard<std::mutex> l(m);
    if (!w || owner != getpid()) w = new RecordWorker, owner = getpid();
    return *w;
  }
  /// Queue a job (waiting while kQueued are queued); its record comes through the future.
  template <class F>
  std::future<BlockRecord> submit(F&& job) {
    std::packaged_task<BlockRecord()> t(std::forward<F>(job));
    std::future<BlockRecord> f = t.get_future();
    std::unique_lock<std::mutex> l(m_);
    room_.wait(l, [&] { return jobs_.size() < kQueued; });
    jobs_.push_back(std::move(t));
    work_.notify_one();
    return f;
  }
  /// A buffer of n values, not yet written: a returned one where there is one (the largest, so
  /// that it seldom has to grow), else a new one.
  RawVector<float> take(size_t n) {
    RawVector<float> b;
    {
      std::lock_guard<std::mutex> l(m_);
      if (!free_.empty()) {
        auto big = std::max_element(free_.begin(), free_.end(), [](const auto& a, const auto& c) {
          return a.capacity() < c.capacity();
        });
        b = std::move(*big);
        free_.erase(big);
      }
    }
    b.resize(n);
    return b;
  }
  void give(RawVector<float> b) {
    std::lock_guard<std::mutex> l(m_);
    if (free_.size() < kKept) free_.push_back(std::move(b));
  }

 private:
  static constexpr size_t kQueued = 2, kKept = 6;
  RecordWorker() { std::thread([this] { run(); }).detach(); }
  void run() {
    for (;;) {
      std::packaged_task<BlockRecord()> t;
      {
        std::unique_lock<std::mutex> l(m_);
        work_.wait(l, [&] { return !jobs_.empty(); });
        t = std::move(jobs_.front());
        jobs_.pop_front();
      }
      room_.notify_one();
      t();
    }
  }

  std::mutex m_;
  std::condition_variable work_, room_;
  std::deque<std::packaged_task<BlockRecord()>> jobs_;
  std::vector<RawVector<float>> free_;
};

/// block_copy into `out` (prows×pcols). The padded operand lives in a per-thread scratch kept
/// between calls: a copy is made once per GEMM operand, and fresh buffers of that size cost
/// more in page faults than the quantization itself.
template <class T>
void copy_into(Runtime& rt, const BlockCopy& c, const TraceTag& tag, const T* x, size_t rows,
               size_t cols, size_t prows, size_t pcols, float* out) {
  if (prows < rows || pcols < cols) throw std::logic_error("block_copy: padding below the size");
  const BlockScheme s = parse_block_scheme(c.scheme);
  BlockOptions o = block_options(rt, c);
  thread_local RawVector<float> xf;  // written whole by pad_rows: no zero fill
  xf.resize(prows * pcols);
  pad_rows(rt.threads, x, rows, cols, xf.data(), prows, pcols);
  if (s.family != BlockFamily::mx && !all_finite(rt.threads, xf)) {
    // lib refuses NaN and infinity for NVFP4 and fp8_block (TE's kernels define no result):
    // the copy becomes NaN, so the step's gradients are non-finite and a scaler skips it.
    if (rt.tracer && rt.tracer->active())
      rt.tracer->record_blocks(nonfinite_record(c, tag, s, prows, pcols));
    std::fill(out, out + xf.size(), std::numeric_limits<float>::quiet_NaN());
    return;
  }
  if (o.rht) {  // transformed here, once: the encoding and the trace read the same values
    check_blocks(s, prows, pcols, o);
    detail::apply_rht(xf.data(), prows, pcols, o.axis, rt.threads);
    o.rht = false;
  }
  BlockEncoding e = encode_blocks(s, xf.data(), prows, pcols, o, rt.threads);
  decode_blocks(s, e, out, rt.threads);
  if (!rt.tracer || !rt.tracer->active()) return;
  if (rt.threads < 2) return rt.tracer->record_blocks(make_record(c, tag, e, xf.data(), out));
  // On two or more threads the record is made on the background thread from the values and
  // the encoding (decoded again there): the same record, merged in the same order at the end
  // of the step, while this thread goes on. xf's values go with it; xf takes a spare buffer.
  RecordWorker& w = RecordWorker::get();
  RawVector<float> values = std::exchange(xf, w.take(xf.size()));
  rt.tracer->record_blocks_later(
      w.submit([&w, c, tag, s, e = std::move(e), x = std::move(values)]() mutable {
        RawVector<float> q = w.take(x.size());
        decode_blocks(s, e, q.data());
        BlockRecord r = make_record(c, tag, e, x.data(), q.data());
        w.give(std::move(x));
        w.give(std::move(q));
        return r;
      }));
}

}  // namespace

void block_copy(Runtime& rt, const BlockCopy& c, const TraceTag& tag, const float* x,
                size_t rows, size_t cols, size_t prows, size_t pcols, float* out) {
  copy_into(rt, c, tag, x, rows, cols, prows, pcols, out);
}

Values block_copy(Runtime& rt, const BlockCopy& c, const TraceTag& tag, const Values& x,
                  size_t rows, size_t cols, size_t prows, size_t pcols) {
  Values q = Values::uninitialized(prows * pcols, false);  // copy_into writes every value
  x.visit([&](const auto* v) { copy_into(rt, c, tag, v, rows, cols, prows, pcols, q.f32()); });
  return q;
}

}  // namespace halfway::sim
