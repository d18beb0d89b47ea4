/// \file dot.hpp
/// CPU dot-product instructions (x86 AVX512-BF16 `vdpbf16ps`; AMX `tdpbf16ps`, `tdpfp16ps`),
/// checked lane by lane against the library's accumulation model: out = c + a0·b0 + a1·b1 with
/// two 16-bit elements in each of a and b (element 0 in the low half) and an fp32 accumulator.
/// Each instruction has a documented model (its vendor's pseudo-code as an AccumulationModel);
/// compare_dot() counts and classifies the differences from it, and search_dot() finds every
/// model among a family of alternatives that reproduces the instruction's outputs, from the
/// outputs alone.
///
///     const DotInstruction* d = find_dot_instruction("avx512bf16-dot");
///     if (d && d->absent_reason().empty()) DotReport r = compare_dot(*d, uint64_t(1) << 22);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compare.hpp"
#include "halfway/accumulate.hpp"
#include "halfway/hw/dot_cases.hpp"

namespace halfway::hw {

class DotInstruction {
 public:
  virtual ~DotInstruction() = default;
  /// Backend name on the command line ("avx512bf16-dot", "amx-bf16", "amx-fp16").
  virtual const char* name() const = 0;
  virtual const char* description() const = 0;
  /// The element format (bf16 or fp16); the accumulator is fp32.
  virtual Format input() const = 0;
  /// The vendor's documented behaviour as a model: the hypothesis compared against.
  virtual AccumulationModel documented() const = 0;
  /// Empty when the instruction can run here (and HALFWAY_HW_DISABLE does not name it).
  std::string absent_reason() const;
  /// out[i] = lane(a[i], b[i], c[i]). Only call when present.
  virtual void run(const uint32_t* a, const uint32_t* b, const uint32_t* c, uint32_t* out,
                   size_t n) const = 0;

 protected:
  virtual std::string missing() const = 0;
};

/// Every dot instruction this build knows, present here or not, in a fixed order.
const std::vector<const DotInstruction*>& all_dot_instructions();
const DotInstruction* find_dot_instruction(std::string_view name);

struct DotReport {
  std::string backend;
  uint64_t total = 0;
  uint64_t mismatches = 0;             ///< against the documented model
  uint64_t hw_hash = 0, ref_hash = 0;  ///< fingerprints over (case index, result)
  std::vector<ClassReport> classes;    ///< differences from the documented model
  uint64_t ieee_mismatches = 0;        ///< against IEEE fp32 fmas in index order, no flushing
  std::vector<ClassReport> ieee_classes;
  uint64_t family_mismatches[8] = {};  ///< per dot_operands family (documented model)
  double seconds = 0;
};

/// Cases 0..n-1 of the kDotSeed stream (dot_cases.hpp) through the instruction and the model.
DotReport compare_dot(const DotInstruction& d, uint64_t n, unsigned threads = 0);

/// The alternative models searched: sequential fma or multiply-then-add (two roundings) in
/// either element order, or one rounding of the exact sum (block of 2, 24 or 48 bits kept);
/// with or without DAZ; FTZ off, after or before rounding; nearest-even or toward zero.
std::vector<AccumulationModel> dot_candidates();
/// One line for a candidate ("sequential fma, odd element first, DAZ, FTZ (after rounding), near_even").
std::string describe_dot_model(const AccumulationModel& m);
/// Same behaviour-defining fields (kind, formats, rounding, block, order, flushing).
bool same_dot_model(const AccumulationModel& x, const AccumulationModel& y);

struct DotSearchResult {
  std::vector<AccumulationModel> matched;                         ///< zero mismatches
  std::vector<std::pair<AccumulationModel, uint64_t>> others;     ///< the rest, fewest first
  uint64_t cases = 0;
};
/// Run cases 0..n-1 on the instruction once, then score every candidate on those outputs.
DotSearchResult search_dot(const DotInstruction& d, uint64_t n, unsigned threads = 0);

}  // namespace halfway::hw
