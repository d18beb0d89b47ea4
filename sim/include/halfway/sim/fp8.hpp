/// \file fp8.hpp
/// Per-tensor delayed scaling for fp8, as Transformer Engine does it: each tensor that is
/// cast to fp8 keeps a history of its amax; the cast uses scale = (fp8 max / max(history)) /
/// 2^margin computed from *earlier* steps, keeping the old scale when the amax is 0 or not
/// finite; after the cast the current amax joins the history. The initial scale is 1.
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
  /// q[i] = round_f(fl32(x[i]·scale)) (traced under `tag`); returns the scale used. Then
  /// records amax(|x|) and updates the tensor's scale for its next cast.
  float quantize(const std::string& key, const Format& f, const double* x, size_t n,
                 std::vector<double>& q, Runtime& rt, const TraceTag* tag);
  float scale(const std::string& key) const;
  const Fp8Config& config() const { return cfg_; }

 private:
  struct Entry {
    std::vector<float> history;  ///< ring buffer of amax values
    size_t next = 0;
    float scale = 1.0f;
  };
  Fp8Config cfg_;
  std::map<std::string, Entry> entries_;
};

}  // namespace halfway::sim
