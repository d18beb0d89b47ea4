// round_into: every rounding of the simulator into a tensor's dtype, traced and observed.
#include <algorithm>
#include <stdexcept>
#include <type_traits>
#include <utility>
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

namespace {

/// `on_round` with the rounded values as binary64.
template <class T>
void observe(Runtime& rt, const TraceTag* tag, const DType& dt, const T* v, size_t n) {
  if (!tag || !rt.on_round) return;
  if constexpr (std::is_same_v<T, double>) {
    rt.on_round(*tag, dt, v, n);
  } else {
    const std::vector<double> w(v, v + n);
    rt.on_round(*tag, dt, w.data(), n);
  }
}

/// Values per chunk of a traced rounding: 128 KiB of floats, twice with the scratch that an
/// in-place rounding writes, within a core's L2. The pipeline of one 2^21-value fp16 rounding
/// (then histogram, copy, rounding, error sums) took 2.84 ns per value in chunks of 2^15
/// against 3.34 unchunked (thread CPU time, best of 12, AMD EPYC Zen 4); 2^14 and 2^16 were
/// within 2% of 2^15.
constexpr size_t kTraceChunk = size_t(1) << 15;

/// Round n values from `src` into `dt`, into `dst` (which may be `src`): see `round_into`.
template <class S, class D>
void round_values(Runtime& rt, const DType& dt, const S* src, D* dst, size_t n,
                  const TraceTag* tag) {
  const BulkOptions o = next_rounding(rt);
  if (dt.is_f64()) {
    if (static_cast<const void*>(src) != static_cast<const void*>(dst)) std::copy(src, src + n, dst);
    return;
  }
  if (!dt.is_low() || rt.promote_low) {
    // fp32: binary32 values in place are already rounded.
    const bool same = std::is_same_v<S, float> && std::is_same_v<D, float> &&
                      static_cast<const void*>(src) == static_cast<const void*>(dst);
    if (!same)  // narrowed in parts on the pool, each value on its own
      parallel_for(rt.threads, n, size_t(1) << 15, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) dst[i] = static_cast<D>(static_cast<float>(src[i]));
      });
    observe(rt, tag, dt, dst, n);
    return;
  }
  // The binary32 "opmath" values before rounding (binary32 sources as they are) and the
  // rounded results (binary32 destinations take them directly, also in place: each part's
  // histogram is taken before it is rounded).
  constexpr bool kFloatIn = std::is_same_v<S, float>, kFloatOut = std::is_same_v<D, float>;
  thread_local std::vector<float> pre, out;  // this thread's buffers, for the pool's too
  const float* pv = nullptr;
  float* pw = nullptr;  // binary64 sources narrowed here
  float* ov;
  if constexpr (kFloatIn) {
    pv = src;
  } else {
    pre.resize(n);
    pv = pw = pre.data();
  }
  if constexpr (kFloatOut) {
    ov = dst;
  } else {
    out.resize(n);
    ov = out.data();
  }
  Tracer* tr = (tag && rt.tracer && rt.tracer->active()) ? rt.tracer : nullptr;
  // Large tensors in parts on the thread pool: element i keeps its place in the rounding's
  // stream (offset i), and the parts' event counts and histograms are integer sums, so the
  // result does not depend on the number of parts.
  const int np = even_parts(n, uint64_t(1) << 15, rt.threads);
  std::vector<EventCounts> ev(static_cast<size_t>(np));
  std::vector<TraceRecord> hist(tr ? size_t(np) : 0);
  parallel_slices(np, n, [&](int p, uint64_t lo, uint64_t hi) {
    if constexpr (!kFloatIn)
      for (size_t i = lo; i < hi; ++i) pw[i] = static_cast<float>(src[i]);
    // Traced, a cache-sized chunk at a time, so that the histogram, the rounding and the
    // error sums read it from the cache (all three are exact sums or per-element results with
    // the element's own stream offset, so the chunking changes no bit).
    const size_t step = tr ? kTraceChunk : hi - lo;
    thread_local std::vector<float> rounded;
    for (size_t c0 = lo; c0 < hi; c0 += step) {
      const size_t m = std::min<size_t>(step, hi - c0);
      const float* x = pv + c0;
      // Traced in place, the chunk is rounded into a scratch buffer; the tracer's pass reads
      // both and stores the rounded values over the chunk.
      const bool in_place = tr && static_cast<const void*>(x) == static_cast<const void*>(ov + c0);
      if (in_place) rounded.resize(m);
      float* q = in_place ? rounded.data() : ov + c0;
      BulkOptions op = o;
      op.offset = o.offset + c0;
      quantize_f32(dt.fmt, x, q, m, op, tr ? &ev[size_t(p)] : nullptr);
      if (tr)
        add_values_and_rounding(hist[size_t(p)], dt.fmt, x, q, m, in_place ? ov + c0 : nullptr);
    }
    if constexpr (!kFloatOut)
      for (size_t i = lo; i < hi; ++i) dst[i] = static_cast<double>(ov[i]);
  });
  if (tr) {
    for (int p = 1; p < np; ++p) {
      ev[0] += ev[size_t(p)];
      merge_values(hist[0], hist[size_t(p)]);
    }
    tr->record(*tag, dt, hist[0], ev[0]);
  }
  observe(rt, tag, dt, dst, n);
}

template <class S>
Values rounded_from(Runtime& rt, const DType& dt, const S* v, size_t n, const TraceTag* tag) {
  Values out = Values::uninitialized(n, dt.is_f64());
  out.visit([&](auto* p) { round_values(rt, dt, v, p, n, tag); });
  return out;
}

}  // namespace

void round_into(Runtime& rt, const DType& dt, double* v, size_t n, const TraceTag* tag) {
  round_values(rt, dt, v, v, n, tag);
}

void round_into(Runtime& rt, const DType& dt, float* v, size_t n, const TraceTag* tag) {
  if (dt.is_f64()) throw std::logic_error("round_into: fp64 values in binary32 storage");
  round_values(rt, dt, v, v, n, tag);
}

Values rounded(Runtime& rt, const DType& dt, const double* v, size_t n, const TraceTag* tag) {
  return rounded_from(rt, dt, v, n, tag);
}

Values rounded(Runtime& rt, const DType& dt, const float* v, size_t n, const TraceTag* tag) {
  return rounded_from(rt, dt, v, n, tag);
}

Values rounded(Runtime& rt, const DType& dt, Values&& v, const TraceTag* tag) {
  round_into(rt, dt, v, tag);
  return std::move(v);
}

void round_into(Runtime& rt, const DType& dt, Values& v, const TraceTag* tag) {
  if (v.wide() == dt.is_f64())
    v.visit([&](auto* p) { round_values(rt, dt, p, p, v.size(), tag); });
  else
    v = std::as_const(v).visit([&](const auto* p) { return rounded(rt, dt, p, v.size(), tag); });
}

}  // namespace halfway::sim
