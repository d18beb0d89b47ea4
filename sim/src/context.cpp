#include "halfway/sim/context.hpp"

#include "halfway/sim/tracer.hpp"

namespace halfway::sim {

Runtime& default_runtime() {
  thread_local Runtime rt;
  return rt;
}

Context& context() {
  thread_local Context c;
  return c;
}

ContextGuard::ContextGuard(const Policy* policy, Runtime* rt) : saved_(context()) {
  context().policy = policy;
  context().rt = rt;
}
ContextGuard::~ContextGuard() { context() = saved_; }

Scope::Scope(std::string name) : saved_(context().scope) { context().scope = std::move(name); }
Scope::~Scope() { context().scope = saved_; }

std::string scoped(const std::string& suffix) {
  const std::string& s = context().scope;
  return s.empty() ? suffix : s + "." + suffix;
}

void round_into(Runtime& rt, const DType& dt, double* v, size_t n, const TraceTag* tag) {
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
  BulkOptions o = rt.rounding;
  if (o.rounding == Rounding::stochastic) {
    o.offset = rt.sr_next;
    rt.sr_next += n;
  }
  Tracer* tr = (tag && rt.tracer && rt.tracer->active()) ? rt.tracer : nullptr;
  EventCounts ev;
  quantize_f32(dt.fmt, pre.data(), out.data(), n, o, tr ? &ev : nullptr);
  if (tr) tr->record(*tag, dt, pre.data(), n, ev);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<double>(out[i]);
  if (tag && rt.on_round) rt.on_round(*tag, dt, v, n);
}

}  // namespace halfway::sim
