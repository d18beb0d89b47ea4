#include "halfway/sim/fp8.hpp"

#include <cmath>
#include <limits>

#include "halfway/softfloat.hpp"

namespace halfway::sim {

float fp8_scale_from_amax(float amax, float fmax, int margin, float fallback) {
  if (!(std::isfinite(amax) && amax > 0.0f)) return fallback;
  const float scaled_max = fmax * std::exp2(static_cast<float>(-margin));
  const float s = scaled_max / amax;
  if (std::isinf(s)) return std::numeric_limits<float>::max();
  return s;
}

float Fp8State::scale(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? 1.0f : it->second.scale;
}

void Fp8State::update(Entry& e, float amax, float fmax) const {
  const size_t len = static_cast<size_t>(cfg_.amax_history_len < 1 ? 1 : cfg_.amax_history_len);
  if (e.history.size() < len) {
    e.history.push_back(amax);
  } else {
    e.history[e.next] = amax;
    e.next = (e.next + 1) % len;
  }
  float a = amax;
  if (cfg_.amax_compute_algo == AmaxAlgo::max) {
    a = 0.0f;
    for (float h : e.history) a = std::fmax(a, h);
  }
  e.scale = fp8_scale_from_amax(a, fmax, cfg_.margin, e.scale);
}

template <class T>
float Fp8State::cast(const std::string& key, const Format& f, const T* x, size_t n, T* q,
                     Runtime& rt, const TraceTag* tag) {
  float amax = 0.0f;
  for (size_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(static_cast<float>(x[i])));
  Env env;
  const float fmax = to_f32(f, f.max_mag(), env);
  Entry& e = entries_[key];
  const float s = cfg_.scaling == Fp8Scaling::current
                      ? fp8_scale_from_amax(amax, fmax, cfg_.margin, 1.0f)
                      : e.scale;
  for (size_t i = 0; i < n; ++i) q[i] = static_cast<T>(static_cast<float>(x[i]) * s);
  round_into(rt, DType::low(f), q, n, tag);
  if (cfg_.scaling == Fp8Scaling::current)
    e.scale = s;
  else
    update(e, amax, fmax);
  return s;
}

float Fp8State::quantize(const std::string& key, const Format& f, const double* x, size_t n,
                         std::vector<double>& q, Runtime& rt, const TraceTag* tag) {
  q.resize(n);
  return cast(key, f, x, n, q.data(), rt, tag);
}

float Fp8State::quantize(const std::string& key, const Format& f, const float* x, size_t n,
                         float* q, Runtime& rt, const TraceTag* tag) {
  return cast(key, f, x, n, q, rt, tag);
}

}  // namespace halfway::sim
