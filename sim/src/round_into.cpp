// round_into: every rounding of the simulator into a tensor's dtype, traced and observed.
#include <algorithm>
#include <vector>

#include "halfway/bulk.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/context.hpp"
#include "halfway/sim/tracer.hpp"
#include "halfway/thread_pool.hpp"

namespace halfway::sim {

BulkOptions next_rounding(Runtime& rt) {
  constexpr uint64_t kMax = uint64_t(1) << 32;
  if (rt.sr_step >= kMax || rt.sr_tensor >= kMax)
    throw InputError("more than 2^32 steps, or rounding calls in one step: the "
                     "stochastic-rounding streams would overlap");
  BulkOptions o = rt.rounding;
  o.subsequence = rt.sr_step << 32 | rt.sr_tensor++;
  o.offset = 0;
  return o;
}

void round_into(Runtime& rt, const DType& dt, double* v, size_t n, const TraceTag* tag) {
  const BulkOptions o = next_rounding(rt);
  if (dt.is_f64()) return;
  if (!dt.is_low()) {
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<double>(static_cast<float>(v[i]));
    if (tag && rt.on_round) rt.on_round(*tag, dt, v, n);
    return;
  }
  // Two buffers: the binary32 "opmath" values before rounding (for the histogram) and the
  // rounded results.
  thread_local std::vector<float> pre, out;
  pre.resize(n);
  out.resize(n);
  float* const pv = pre.data();  // this thread's buffers, for the pool's threads too
  float* const ov = out.data();
  Tracer* tr = (tag && rt.tracer && rt.tracer->active()) ? rt.tracer : nullptr;
  // Large tensors in parts on the thread pool: element i keeps its place in the rounding's
  // stream (offset i), and the parts' event counts and histograms are integer sums, so the
  // result does not depend on the number of parts.
  constexpr size_t kMinPart = size_t(1) << 15;
  const int np =
      int(std::max<size_t>(1, std::min<size_t>(size_t(std::max(rt.threads, 1)), n / kMinPart)));
  std::vector<EventCounts> ev(static_cast<size_t>(np));
  std::vector<TraceRecord> hist(tr ? size_t(np) : 0);
  ThreadPool::global().run(np, [&](int p) {
    const size_t lo = n * size_t(p) / size_t(np), hi = n * size_t(p + 1) / size_t(np);
    for (size_t i = lo; i < hi; ++i) pv[i] = static_cast<float>(v[i]);
    BulkOptions op = o;
    op.offset = o.offset + lo;
    quantize_f32(dt.fmt, pv + lo, ov + lo, hi - lo, op,
                 tr ? &ev[size_t(p)] : nullptr);
    if (tr) add_values(hist[size_t(p)], pv + lo, hi - lo);
    for (size_t i = lo; i < hi; ++i) v[i] = static_cast<double>(ov[i]);
  });
  if (tr) {
    for (int p = 1; p < np; ++p) {
      ev[0] += ev[size_t(p)];
      merge_values(hist[0], hist[size_t(p)]);
    }
    tr->record(*tag, dt, hist[0], ev[0]);
  }
  if (tag && rt.on_round) rt.on_round(*tag, dt, v, n);
}

}  // namespace halfway::sim
