#include "halfway/sim/memory.hpp"

#include <map>
#include <unordered_set>

namespace halfway::sim {

std::vector<MemoryRow> account_memory(const Tensor& loss, std::vector<Param>& params,
                                      const Policy& policy, int optimizer_state_per_element) {
  // (category, dtype) → (elements, bits); std::map keeps the output order stable.
  std::map<std::pair<std::string, std::string>, std::pair<uint64_t, int>> acc;
  auto add = [&](const std::string& cat, const DType& dt, uint64_t n) {
    auto& e = acc[{cat, dt.name()}];
    e.first += n;
    e.second = dt.bits();
  };
  const bool master = policy.master_weights();
  for (Param& p : params) {
    const uint64_t n = uint64_t(p.t.numel());
    add(master ? "master_weights" : "weights", p.t.dtype(), n);
    add("gradients", p.t.dtype(), n);
    if (optimizer_state_per_element > 0)
      add("optimizer_state", DType::f32(), n * uint64_t(optimizer_state_per_element));
  }
  if (loss && loss.requires_grad()) {
    std::unordered_set<const TensorImpl*> seen;
    for (TensorImpl* node : topo_order(loss.impl())) {
      std::vector<const TensorImpl*> kept;
      for (const auto& s : node->saved) kept.push_back(s.get());
      if (node->saves_output) kept.push_back(node);
      for (const TensorImpl* t : kept) {
        if (t->is_param || !seen.insert(t).second) continue;
        add(t->weight ? "weights" : "activations", t->dtype, uint64_t(t->data.size()));
      }
    }
  }
  std::vector<MemoryRow> rows;
  for (const auto& [key, v] : acc) {
    MemoryRow r;
    r.category = key.first;
    r.dtype = key.second;
    r.elements = v.first;
    r.bytes = (v.first * uint64_t(v.second) + 7) / 8;
    rows.push_back(r);
  }
  return rows;
}

uint64_t total_bytes(const std::vector<MemoryRow>& rows) {
  uint64_t t = 0;
  for (const auto& r : rows) t += r.bytes;
  return t;
}

}  // namespace halfway::sim
