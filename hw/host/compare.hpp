/// \file compare.hpp
/// Runs a backend's operation over its input domain (exhaustively, or on a structured sample)
/// next to the library's reference, and classifies every difference (diff.hpp).
///
///     OpReport r = compare_op(*find_backend("f16c"), Op::f32_to_f16_rn, Coverage::sample);
///     // r.mismatches, r.classes[i].description, r.classes[i].example
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend.hpp"
#include "halfway/hw/describe.hpp"
#include "halfway/hw/diff.hpp"
#include "halfway/hw/ops.hpp"

namespace halfway::hw {

enum class Coverage { sample, exhaustive };

/// One input and both results.
struct Example {
  uint64_t index = 0;  ///< input index in the operation's domain (ops.hpp: domain_operands)
  uint32_t a = 0, b = 0, c = 0;
  uint32_t hw = 0, ref = 0;
};

struct ClassReport {
  Diff diff = Diff::other;
  uint64_t count = 0;
  uint32_t hw_and = 0, hw_or = 0;
  Example example;          ///< the smallest input index in the class
  std::string description;  ///< e.g. "NaN payload canonicalized to 0x7FFF"
};

/// One ClassReport per difference class that occurred in `st`, in Diff order. Each example is
/// the class's smallest input index; `complete(e)` fills in its operands and both results.
std::vector<ClassReport> class_reports(const CheckStats& st, const OpInfo& info,
                                       const std::function<void(Example&)>& complete);

struct OpReport {
  Op op = Op::count;
  std::string backend;
  bool exhaustive = false;  ///< the whole input domain
  bool random = false;      ///< random operands (fma: fma_operands, stream kSampleSeed)
  uint64_t total = 0;
  uint64_t mismatches = 0;
  uint64_t hw_hash = 0, ref_hash = 0;  ///< fingerprints over (domain index, result)
  std::vector<ClassReport> classes;    ///< only classes that occurred, in Diff order
  double seconds = 0;
};

/// Stream of the random fma operands of hw-report (ops.hpp: fma_operands).
inline constexpr uint64_t kSampleSeed = 0x68616C6677617921ull;  // "halfway!"

/// Inputs a sampled check covers (the whole domain when it has at most 2^16 inputs; fma:
/// 2^22 random triples, 2^30 with Coverage::exhaustive, as 2^48 triples are out of reach).
uint64_t sample_count(Op op);
/// Domain index of sample number k (deterministic): every sign/exponent combination with
/// random fractions and fractions at the rounding boundaries of fp16, bf16, e4m3 and e5m2 for
/// conversions; every first operand against special, neighbouring and random second operands
/// for arithmetic.
uint64_t sample_index(Op op, uint64_t k);

/// Compare `backend` with the reference on `op`. `threads` = 0: one per hardware thread.
/// Throws std::invalid_argument if the backend does not implement `op`.
OpReport compare_op(const Backend& backend, Op op, Coverage coverage, unsigned threads = 0);

}  // namespace halfway::hw
