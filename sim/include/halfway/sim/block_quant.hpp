/// \file block_quant.hpp
/// One block-scaled copy of a GEMM operand, as the block-scaled policies make them (policy.hpp
/// BlockRecipe, docs/sim.md "Block-scaled policies"): lib's encode_blocks and decode_blocks on
/// the operand zero-padded to whole blocks, traced as a BlockRecord (blocks.csv).
///
///     const BlockCopy c{"mxfp8_e4m3:rceil", BlockAxis::last, "fprop"};
///     std::vector<float> xq = block_copy(rt, c, tag, x.data(), M, K, M, pad(K, 32));
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "halfway/blocks.hpp"
#include "halfway/sim/context.hpp"

namespace halfway::sim {

struct BlockCopy {
  std::string scheme;  ///< blocks.hpp scheme name
  BlockAxis axis = BlockAxis::last;
  const char* gemm = "fprop";  ///< the GEMM that reads it (fprop, dgrad, wgrad)
  bool sr = false;             ///< stochastic rounding of the elements
  bool rht = false;            ///< random Hadamard transform (nvfp4 1×16)
  bool pow2_scales = false;    ///< fp8_block power-of-two scales
};

/// The (rows, cols) tile of a copy's scheme along its axis.
std::pair<size_t, size_t> copy_tile(const BlockCopy& c);

/// x (rows×cols, row-major, fp32 values; fp64 storage narrowed) zero-padded to prows×pcols (each a
/// multiple of the copy's tile, at least the tensor's size), quantized and dequantized: the
/// prows×pcols fp32 values the GEMM reads. Stochastic rounding draws from the stream of the
/// runtime's next rounding call (next_rounding: the run's seed, subsequence step·2^32 +
/// call), which every copy advances, stochastic or not. When the runtime's tracer is active
/// the copy is recorded under tag's name and op.
std::vector<float> block_copy(Runtime& rt, const BlockCopy& c, const TraceTag& tag,
                              const Values& x, size_t rows, size_t cols, size_t prows,
                              size_t pcols);

}  // namespace halfway::sim
