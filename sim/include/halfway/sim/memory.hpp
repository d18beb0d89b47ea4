/// \file memory.hpp
/// Memory accounting per policy: bytes held in each dtype by the weights (parameters, and
/// the low-precision copies a lowered op makes of them), the fp32 master weights, the
/// activations saved for backward, the gradients and the optimizer state. Sizes are
/// elements × bits / 8, so fp8 counts one byte per value and fp4 half a byte.
///
///     auto rows = account_memory(loss, model.params(), policy, opt.state_per_element());
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "halfway/sim/model.hpp"
#include "halfway/sim/policy.hpp"

namespace halfway::sim {

struct MemoryRow {
  std::string category;  ///< weights master_weights activations gradients optimizer_state
  std::string dtype;
  uint64_t elements = 0;
  uint64_t bytes = 0;
};

/// Walk the graph of `loss` (before backward releases nothing: call it right after the
/// forward pass) and the parameters.
std::vector<MemoryRow> account_memory(const Tensor& loss, std::vector<Param>& params,
                                      const Policy& policy, int optimizer_state_per_element);

uint64_t total_bytes(const std::vector<MemoryRow>& rows);

}  // namespace halfway::sim
