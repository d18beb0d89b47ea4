/// \file precision.hpp
/// Every precision knob of a run in one struct, resolved once (when the config is parsed, or
/// when a preset is named), as microxcaling's `MxSpecs` holds a run's; unlike it, every value
/// was validated on the way in. The trainer, the ops (through the Runtime it sets up) and the
/// Python bindings all read it:
///
///     Precision p = preset_precision("torch-cpu-bf16");
///     p.accumulation->name == "torch-cpu";          // resolved: no lookup by name later
///     p.rounding_of(Role::update);                  // the role's rounding, or the run's
///     Runtime rt;  apply_precision(rt, p, seed);    // what every op of the run reads
#pragma once

#include <string_view>

#include "halfway/sim/accumulate.hpp"
#include "halfway/sim/context.hpp"
#include "halfway/sim/policy.hpp"

namespace halfway::sim {

struct Precision {
  /// Autocast cast rules, the low / parameter / input dtypes, the fp8 and block-scaled
  /// recipes, the per-role roundings and the optimizer's update numerics.
  Policy policy;
  /// The accumulation model of matmul/linear (accumulate.hpp), never null: `fp32` for the CUDA
  /// presets (cuBLAS with an fp32 compute type), `torch-cpu` for torch-cpu-bf16.
  const Accumulation* accumulation = &default_accumulation();
  Rounding rounding = Rounding::near_even;  ///< the run's rounding direction
  int sr_random_bits = kSrRandomBits;       ///< random bits per stochastic rounding (1-32)
  /// Packed draws: ⌊32/sr_random_bits⌋ roundings per 32-bit draw (env.hpp sr_random; opt-in)
  bool sr_pack_random_bits = false;

  /// The rounding direction of role `r`: the policy's for that role, else the run's.
  Rounding rounding_of(Role r) const { return policy.rounding(r, rounding); }
};

/// The preset `name` (policy_names()) with the accumulation it implies; throws InputError
/// listing the presets for an unknown name.
Precision preset_precision(std::string_view name);

/// Sets `rt`'s rounding direction (the run's), stochastic-rounding seed and random bits, and
/// accumulation model from `p`.
void apply_precision(Runtime& rt, const Precision& p, uint64_t seed);

/// Sets what `rt`'s roundings do in role `r`: that role's rounding direction, and whether its
/// roundings into low-precision dtypes are promoted to binary32 (Policy::promoted_roles).
void enter_role(Runtime& rt, const Precision& p, Role r);

}  // namespace halfway::sim
