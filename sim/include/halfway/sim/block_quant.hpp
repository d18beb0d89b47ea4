/// \file block_quant.hpp
/// One block-scaled copy of a GEMM operand, as the block-scaled policies make them (policy.hpp
/// BlockRecipe, docs/sim.md "Block-scaled policies"): lib's encode_blocks and decode_blocks on
/// the operand zero-padded to whole blocks, traced as a BlockRecord (blocks.csv).
///
///     const BlockCopy c{"mxfp8_e4m3:rceil", BlockAxis::last, "fprop"};
///     Values xq = block_copy(rt, c, tag, x.data(), M, K, M, pad(K, 32));
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "halfway/blocks.hpp"
#include "halfway/sim/context.hpp"
#include "halfway/sim/tracer.hpp"

namespace halfway::sim {

struct BlockCopy {
  std::string scheme;  ///< blocks.hpp scheme name
  BlockAxis axis = BlockAxis::last;
  const char* gemm = "fprop";  ///< the GEMM that reads it (fprop, dgrad, wgrad)
  bool sr = false;             ///< stochastic rounding of the elements
  bool rht = false;            ///< random Hadamard transform (nvfp4 1×16)
  bool pow2_scales = false;    ///< fp8_block, fp8_rowwise power-of-two scales
};

/// The (rows, cols) tile of a copy's scheme along its axis, the multiple its padded operand
/// must have: 1 along the axis for a whole-dimension block (it spans the padded dimension).
std::pair<size_t, size_t> copy_tile(const BlockCopy& c);

/// x (rows×cols, row-major, fp32 values; fp64 storage narrowed) zero-padded to prows×pcols (each a
/// multiple of the copy's tile, at least the tensor's size), quantized and dequantized: the
/// prows×pcols fp32 values the GEMM reads. Stochastic rounding draws from the stream of the
/// runtime's next rounding call (next_rounding: the run's seed, subsequence step·2^32 +
/// call), which every copy advances, stochastic or not. When the runtime's tracer is active
/// the copy is recorded under tag's name and op.
Values block_copy(Runtime& rt, const BlockCopy& c, const TraceTag& tag, const Values& x,
                  size_t rows, size_t cols, size_t prows, size_t pcols);
/// The same copy of fp32 x written into `out` (prows×pcols floats).
void block_copy(Runtime& rt, const BlockCopy& c, const TraceTag& tag, const float* x,
                size_t rows, size_t cols, size_t prows, size_t pcols, float* out);

/// One block of an encoding, as add_block_errors visits it.
struct BlockStat {
  size_t row = 0, col = 0;  ///< the block's place in the encoding's grid of blocks
  float scale = 0;          ///< the encoding's scale (BlockEncoding::scales)
  float amax = 0;           ///< the largest |x| of the block (NaN when it holds a NaN)
  double signal = 0, noise = 0;  ///< Σ x², Σ (x − q)² of the block alone, binary64
};

/// Add the first `block_rows` rows of blocks of `e` to `r`: the signal Σ x² and the noise
/// Σ (x − q)² (binary64 sums running block by block in row-major order of the blocks, each
/// block's elements in row-major order, so that cutting a tensor into chunks of whole blocks
/// visited in that order gives the same bits), the zero scales and the histogram of
/// floor(log2 scale). `x` are the values quantized and `q` the decoded ones, both with e's
/// shape. Events are not added (the caller knows which). `each` (optional) sees every block.
void add_block_errors(BlockRecord& r, const BlockEncoding& e, const float* x, const float* q,
                      size_t block_rows,
                      const std::function<void(const BlockStat&)>& each = nullptr);

/// A copy that could not be quantized (NaN or infinity given to NVFP4 or fp8_block, which
/// define no result for them): `elements` values in `blocks` blocks, every block counted as a
/// NaN scale, signal and noise NaN.
void mark_nonfinite(BlockRecord& r, uint64_t elements, uint64_t blocks);

}  // namespace halfway::sim
