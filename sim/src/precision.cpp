#include "halfway/sim/precision.hpp"

namespace halfway::sim {

Precision preset_precision(std::string_view name) {
  Precision p;
  p.policy = preset_policy(name);
  // CPU autocast's GEMMs accumulate as PyTorch's CPU matmul does (accumulate.hpp's
  // `torch-cpu`); every other preset's as cuBLAS with an fp32 compute type does.
  if (name == "torch-cpu-bf16") p.accumulation = &accumulator_by_name("torch-cpu");
  return p;
}

void apply_precision(Runtime& rt, const Precision& p, uint64_t seed) {
  rt.rounding.rounding = p.rounding;
  rt.rounding.seed = seed;
  rt.rounding.random_bits = p.sr_random_bits;
  rt.rounding.pack_random_bits = p.sr_pack_random_bits;
  rt.accumulator = p.accumulation;
}

void enter_role(Runtime& rt, const Precision& p, Role r) {
  rt.rounding.rounding = p.rounding_of(r);
  rt.promote_low = p.policy.promoted_roles[static_cast<size_t>(r)];
}

}  // namespace halfway::sim
