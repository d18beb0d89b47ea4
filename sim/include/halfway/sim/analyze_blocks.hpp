/// \file analyze_blocks.hpp
/// The per-block what-if of `halfway analyze` and `halfway.analyze`: a tensor quantized by a
/// block scheme (lib's encode_blocks, docs/blocks.md) as a GEMM would use it, blocks along a
/// chosen axis, in chunks of whole blocks so that memory does not grow with the tensor. The
/// numbers are blocks.csv's (tracer.hpp's BlockRecord, filled by add_block_errors, the tracer's
/// own counting), plus the split of clamped scales into harmless and real ones, the blocks
/// whose largest element is clipped and the moments of the scale exponents.
///
///     const BlockView v = block_view({4096, 1024}, -1);     // 1×k blocks along each row
///     BlockAnalysis a = analyze_blocks(parse_block_scheme("nvfp4"), v, read, 1 << 20);
///     // a.record.events.saturated, a.record.snr_db(), a.clamped_real, ...
///
/// No result depends on the chunk size: chunks are whole blocks visited in the blocks'
/// row-major order (the order of add_block_errors' sums), and NVFP4's global scales come from
/// the whole tensor's amax, or each whole line's (row-scaled; see analyze_blocks).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "halfway/blocks.hpp"
#include "halfway/sim/block_quant.hpp"
#include "halfway/sim/tracer.hpp"

namespace halfway::sim {

/// A tensor of some shape seen as GEMM operands with blocks along one of its axes: `count`
/// matrices of rows×cols, row-major, one after the other in the tensor's (C order) storage.
/// Blocks along the tensor's last axis: one matrix (all other axes flattened into its rows),
/// BlockAxis::last. Along an earlier axis a: one matrix per index of the axes before a, of
/// shape (size of a) × (the product of the axes after a), BlockAxis::first.
struct BlockView {
  uint64_t count = 1, rows = 1, cols = 1;
  BlockAxis axis = BlockAxis::last;
  int tensor_axis = 0;  ///< the axis the blocks run along, counted from 0
  uint64_t values() const { return count * rows * cols; }
};

/// The view of a tensor of `shape` (0-d: one value, as shape {1}) for blocks along `axis`
/// (negative counts from the end, as numpy's). Throws InputError for an axis out of range.
BlockView block_view(const std::vector<uint64_t>& shape, int axis);

/// The blocks of `v` under `s`: each matrix zero-padded to whole blocks, as the simulator's
/// block-scaled GEMMs pad their operands.
uint64_t block_count(const BlockScheme& s, const BlockView& v);

/// One tensor quantized by one scheme.
struct BlockAnalysis {
  /// blocks.csv's numbers: events over the padded matrices (elements counts the padding
  /// zeros; saturated, flushed, scales_clamped, nan_scales), zero scales, the histogram of
  /// floor(log2 scale) over finite non-zero scales, signal and noise.
  BlockRecord record;
  uint64_t values = 0;  ///< the tensor's own values (record.events.elements less the padding)
  /// record.events.scales_clamped, split: NVFP4 scales clamped to 448, which the clamp never
  /// changes (docs/analyze.md, "Harmless clamps"), and every other clamp.
  uint64_t clamped_harmless = 0, clamped_real = 0;
  uint64_t clipped_blocks = 0;  ///< blocks whose largest element saturated
  double clipped_fraction() const;  ///< clipped_blocks / blocks (NaN without blocks)
  /// Mean and (population) standard deviation of floor(log2 scale) over record.scale_hist.
  /// NaN without a finite non-zero scale.
  double scale_exp_mean() const;
  double scale_exp_std() const;
};

/// One block, for blocks_detail.csv.
struct BlockDetail {
  uint64_t matrix = 0, row = 0, col = 0;  ///< the matrix of the view, the block's place in it
  BlockEvents events;
  BlockStat stat;  ///< scale, amax, signal and noise of the block
  bool clamped_harmless = false;
};

/// Values of the tensor by position in its storage: `n` values from `offset`.
using ValueReader = std::function<void(uint64_t offset, float* out, size_t n)>;

/// Quantize the tensor that `read` gives, of view `v`, with scheme `s` (nearest-even
/// elements), at most about `chunk` values a call of encode_blocks (at least one block; a
/// chunk of whole rows of blocks, or of one row of blocks cut into runs of whole blocks). For
/// NVFP4 and Four Over Six the per-tensor scale is that of the whole tensor: each call is
/// given the tensor's amax (BlockOptions::global_amax); for row-scaled NVFP4 whose lines span
/// several calls, each line's amax in its matrix, from one more pass over the matrix (4 bytes
/// a line: rows cut into runs along the last axis, columns of a matrix taller than a call
/// down the first). A NaN or infinity given to NVFP4 or fp8_block
/// (which define no result for them) makes every block a NaN scale (mark_nonfinite), as the
/// simulator's tracer records such a copy; MX gives the blocks that hold one a NaN scale.
/// `detail` (optional) sees every block in row-major block order, matrix after matrix.
BlockAnalysis analyze_blocks(const BlockScheme& s, const BlockView& v, const ValueReader& read,
                             size_t chunk,
                             const std::function<void(const BlockDetail&)>& detail = nullptr);

/// The most memory analyze_blocks takes for a chunk of `chunk` values, with a margin of as
/// many values again: the chunk, its decoded values, codes, scales and per-block events, and
/// the amax pass's buffer; row-scaled NVFP4's line amaxes come on top (4 bytes a line, where
/// lines span several calls).
uint64_t block_working_set_bytes(size_t chunk);

/// The columns appended to kBlocksCsvHeader's in analyze's blocks.csv.
extern const char* const kAnalyzeBlockColumns;
/// Append kAnalyzeBlockColumns' columns (with their leading commas) for `a` of view `v`.
void append_analyze_block_columns(std::string& line, const BlockAnalysis& a, const BlockView& v);

/// blocks_detail.csv: one row per block.
extern const char* const kBlocksDetailCsvHeader;
/// Append a row of kBlocksDetailCsvHeader's columns for block `b` (without the line end).
void append_block_detail_columns(std::string& line, int step, const std::string& name,
                                 const std::string& scheme, const BlockDetail& b);

}  // namespace halfway::sim
