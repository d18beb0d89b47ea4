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

struct AmxTile;  // amx_tiles.hpp

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
  /// out[i] = lane(a[i], b[i], c[i]). Only call when present. Not for full-tile instructions.
  virtual void run(const uint32_t* a, const uint32_t* b, const uint32_t* c, uint32_t* out,
                   size_t n) const = 0;
  /// True for the AMX instructions, which are checked on full tiles (amx_tiles.hpp): every
  /// output sums C and 32 products, so compare_dot() and search_dot() run generated tiles
  /// through run_tiles() and count outputs as lanes.
  virtual bool full_tiles() const { return false; }
  /// Fills each tile's C after from its A, B and C before. Only call when present.
  virtual void run_tiles(AmxTile* tiles, size_t n) const {
    (void)tiles, (void)n;
  }

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
  /// Mismatches per case family (documented model): dot_operands' families for lanes, the
  /// record families for tiles; `family_name(f)` names family f.
  std::vector<uint64_t> family_mismatches;
  const char* (*family_name)(int) = nullptr;
  double seconds = 0;
};

/// Cases 0..n-1 of the kDotSeed stream (dot_cases.hpp) through the instruction and the model;
/// for a full-tile instruction, the outputs of ceil(n / 256) generated tiles (amx_tile_cases).
DotReport compare_dot(const DotInstruction& d, uint64_t n, unsigned threads = 0);

/// The alternative models searched: sequential fma or multiply-then-add (two roundings) in
/// either element order, or one rounding of the exact sum (block of 2, 24 or 48 bits kept);
/// with or without DAZ; FTZ off, after or before rounding; nearest-even or toward zero; and
/// 1, 2 or 4 interleaved fma chains from +0 added to C at the end (split_fma, a block of 32:
/// one AMX instruction), FTZ off or after rounding (the recorded tiles hold no result that is
/// tiny before rounding and not after, so the two cannot be told apart there).
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
/// The search's result from each candidate's mismatch count on `cases` outputs.
DotSearchResult rank_candidates(const std::vector<AccumulationModel>& candidates,
                                const std::vector<uint64_t>& mismatches, uint64_t cases);
/// Run cases 0..n-1 on the instruction once, then score every candidate on those outputs
/// (full-tile instructions: ceil(n / 256) generated tiles).
DotSearchResult search_dot(const DotInstruction& d, uint64_t n, unsigned threads = 0);

}  // namespace halfway::hw
