// round_into: every rounding of the simulator into a tensor's dtype, traced and observed.
#include <vector>

#include "halfway/bulk.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/context.hpp"
#include "halfway/sim/tracer.hpp"

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
  for (size_t i = 0; i < n; ++i) pre[i] = static_cast<float>(v[i]);
  Tracer* tr = (tag && rt.tracer && rt.tracer->active()) ? rt.tracer : nullptr;
  EventCounts ev;
  quantize_f32(dt.fmt, pre.data(), out.data(), n, o, tr ? &ev : nullptr);
  if (tr) tr->record(*tag, dt, pre.data(), n, ev);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<double>(out[i]);
  if (tag && rt.on_round) rt.on_round(*tag, dt, v, n);
}

}  // namespace halfway::sim
