/// \file fp8.hpp
/// Per-tensor fp8 scaling, as Transformer Engine does it. Every tensor cast to fp8 has a key
/// (its trace name) and a scale s; the cast is q = fl_fp8(fl32(x·s)) and the GEMM that consumes
/// q multiplies its fp32 accumulator by 1/s.
///
/// - Delayed scaling (`DelayedScaling`): s comes from *earlier* casts of the same tensor: the
///   amax of each cast joins a history of `amax_history_len` values, and after the cast
///   s = fp8 max · 2^-margin / amax, with amax the history's largest value (`max`) or the
///   latest one (`most_recent`). The first cast uses s = 1; the old s is kept when that amax
///   is 0 or not finite; an s that overflows binary32 becomes FLT_MAX.
/// - Current scaling (`Float8CurrentScaling`): s = fp8 max · 2^-margin / amax of the tensor
///   being cast (1 when that amax is 0 or not finite).
/// amax is fmaxf over |x| in binary32, so NaN values do not enter it, as in TE's kernels.
///
///     Fp8State st(policy.fp8_config);
///     float s = st.quantize("0.input", fmt, x.data(), x.size(), q, rt, &tag);  // q = fl(x·s)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "halfway/sim/context.hpp"
#include "halfway/sim/policy.hpp"

namespace halfway::sim {

class Fp8State {
 public:
  explicit Fp8State(Fp8Config c) : cfg_(c) {}
  /// q[i] = round_f(fl32(x[i]·scale)) (traced under `tag`); returns the scale used. Delayed
  /// scaling then updates the tensor's amax history and its scale for the next cast.
  float quantize(const std::string& key, const Format& f, const double* x, size_t n,
                 std::vector<double>& q, Runtime& rt, const TraceTag* tag);
  /// The same cast of binary32 values into q[0..n) (binary32 storage: no binary64 copies).
  float quantize(const std::string& key, const Format& f, const float* x, size_t n, float* q,
                 Runtime& rt, const TraceTag* tag);
  /// Delayed scaling: the scale the next cast of `key` will use; current scaling: the scale
  /// of its last cast. 1 for an unseen key.
  float scale(const std::string& key) const;
  const Fp8Config& config() const { return cfg_; }

 private:
  struct Entry {
    std::vector<float> history;  ///< ring buffer of amax values
    size_t next = 0;             ///< slot of the oldest value once the buffer is full
    float scale = 1.0f;
  };
  template <class T>
  float cast(const std::string& key, const Format& f, const T* x, size_t n, T* q, Runtime& rt,
             const TraceTag* tag);
  /// Records `amax` in the entry's history and recomputes its scale (delayed scaling).
  void update(Entry& e, float amax, float fmax) const;
  Fp8Config cfg_;
  std::map<std::string, Entry> entries_;
};

/// fp8 max · 2^-margin / amax in binary32, as TE computes a scale: `fallback` when amax is 0
/// or not finite, FLT_MAX when the quotient overflows.
float fp8_scale_from_amax(float amax, float fmax, int margin, float fallback);

}  // namespace halfway::sim
