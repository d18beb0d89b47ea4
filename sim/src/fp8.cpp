#include "halfway/sim/fp8.hpp"

#include <cmath>

#include "halfway/softfloat.hpp"

namespace halfway::sim {

float Fp8State::scale(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? 1.0f : it->second.scale;
}

float Fp8State::quantize(const std::string& key, const Format& f, const double* x, size_t n,
                         std::vector<double>& q, Runtime& rt, const TraceTag* tag) {
  Entry& e = entries_[key];
  const float s = e.scale;
  float amax = 0.0f;
  q.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(x[i]);
    const float a = std::fabs(v);
    if (!(a <= amax)) amax = a;  // NaN propagates into amax
    q[i] = static_cast<double>(v * s);
  }
  round_into(rt, DType::low(f), q, tag);
  // History update and the scale for the next cast (fp32 arithmetic, as TE's kernel).
  const size_t len = static_cast<size_t>(cfg_.amax_history_len < 1 ? 1 : cfg_.amax_history_len);
  if (e.history.size() < len) {
    e.history.push_back(amax);
  } else {
    e.history[e.next] = amax;
    e.next = (e.next + 1) % len;
  }
  float hmax = 0.0f;
  bool finite = true;
  for (float h : e.history) {
    if (!std::isfinite(h)) finite = false;
    if (h > hmax) hmax = h;
  }
  Env env;
  const float fmax = to_f32(f, f.max_mag(), env);
  if (finite && hmax > 0.0f) {
    const float sf = (fmax / hmax) / std::exp2(static_cast<float>(cfg_.margin));
    if (std::isfinite(sf)) e.scale = sf;
  }
  return s;
}

}  // namespace halfway::sim
