/// \file blocks.hpp
/// Block-scaled quantization of row-major 2-D float32 tensors: OCP MX (one e8m0 scale per 32
/// elements), NVIDIA NVFP4 (an e4m3 scale per 16 e2m1 elements plus an fp32 global scale, or
/// one per row with `:row_scaled`; and Four Over Six's variant), blockwise fp8 (an fp32 scale per 1×128 row tile or 128×128 tile)
/// and torchao's rowwise fp8. Each scheme is defined bit for bit in docs/blocks.md, with its
/// source. Host only.
///
///     const halfway::BlockScheme s = halfway::parse_block_scheme("mxfp4");
///     halfway::BlockEncoding e = halfway::encode_blocks(s, x.data(), rows, cols);
///     // e.codes: rows×cols e2m1 codes; e.scale_codes: rows×(cols/32) e8m0 codes
///     std::vector<float> y(rows * cols);
///     halfway::decode_blocks(s, e, y.data());   // e2m1 value × 2^(scale − 127)
///
/// Blocks run along the last axis (1×k, as an operand whose reduction dimension is its rows'
/// length) or, with `BlockAxis::first`, along the first (k×1, the transposed operand); the
/// 2-D schemes use k×k tiles either way. Codes keep the shape and layout of the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "halfway/env.hpp"
#include "halfway/format.hpp"

namespace halfway {

/// How a scheme computes its scales.
enum class BlockFamily : uint8_t {
  mx,         ///< OCP MX v1.0: e8m0 scale 2^e per block
  nvfp4,      ///< Transformer Engine's NVFP4: e4m3 block scale and fp32 global scale
  fp8_block,  ///< DeepSeek-V3 style blockwise fp8: fp32 scale amax/448 per block
  fp8_rowwise,  ///< torchao's float8 rowwise (axiswise) scaling: fp32 scale 448/amax per row
  nvfp4_4over6,  ///< NVFP4 with Four Over Six's adaptive block scales (each block to 4 or 6)
};

/// How an MX scheme chooses its e8m0 scale 2^k from a block's amax (docs/blocks.md, "MX"),
/// named as torchao's ScaleCalculationMode names them.
enum class MxScaleRule : uint8_t {
  floor,  ///< OCP MX v1.0 §6.3, microxcaling: k = floor(log2 amax) − emax_elem (the default)
  ceil,   ///< torchao CEIL: k = ceil(log2 amax) − emax_elem
  rceil,  ///< torchao RCEIL, cuBLAS, Transformer Engine's MXFP8: 2^k = fp32(amax · fp32(1 /
          ///< elem_max)) rounded up to a power of two
  even,   ///< torchao EVEN: k = floor(log2 r) − emax_elem, r = amax rounded to the element's
          ///< mantissa width, ties away from zero
};

/// The name of a rule as a scheme suffix takes it ("floor", "ceil", "rceil", "even").
const char* mx_scale_rule_name(MxScaleRule r);

struct BlockScheme {
  std::string name;     ///< as parsed, e.g. "mxfp8_e4m3:rceil"
  BlockFamily family = BlockFamily::mx;
  /// The element format, saturating (e4m3:sat, e5m2:sat, e2m3, e3m2, e2m1; MXINT8: e1m6 with
  /// bias 1, whose grid is k/64 for |k| ≤ 127, codes then stored as two's complement)
  Format element;
  /// Elements per block along the block axis (1-D schemes); 0: the whole dimension, one
  /// block per row (axis last) or per column (axis first), whatever the tensor's shape.
  int block = 32;
  bool two_d = false;   ///< tile_rows × tile_cols tiles whatever the axis (nvfp4_2d, ...)
  int tile_rows = 0, tile_cols = 0;  ///< the 2-D tile (two_d only; default block × block)
  bool twos_complement = false;  ///< MXINT8: element codes are int8 two's complement
  MxScaleRule scale_rule = MxScaleRule::floor;  ///< MX only: the suffix ":floor", ":ceil", ...
  /// nvfp4 (1-D) only, the suffix ":row_scaled" (Transformer Engine's row-scaled NVFP4): one
  /// fp32 global scale per line along the blocks, from that line's amax: per row for blocks
  /// along the last axis, per column for blocks down the first.
  bool row_scaled = false;
  float element_max = 0;  ///< the element format's largest finite value
  int element_emax = 0;   ///< its exponent (MX: emax_elem)
  float half_min_subnormal = 0;  ///< half its smallest subnormal: at most this rounds to ±0

  /// Whether the scales are fp32 values (fp8_block, fp8_rowwise: BlockEncoding::scales), not
  /// codes (MX e8m0, NVFP4 e4m3: BlockEncoding::scale_codes).
  bool fp32_scales() const {
    return family == BlockFamily::fp8_block || family == BlockFamily::fp8_rowwise;
  }
  /// Whether an encoding has one global scale (NVFP4's encode scale; 4over6's tensor amax).
  bool has_global_scale() const {
    return (family == BlockFamily::nvfp4 || family == BlockFamily::nvfp4_4over6) && !row_scaled;
  }
  /// Whether an encoding has one global scale per line (row-scaled NVFP4:
  /// BlockEncoding::global_scales).
  bool has_line_scales() const { return row_scaled; }
};

/// Parse a scheme name: mxfp8_e4m3 mxfp8_e5m2 mxfp6_e2m3 mxfp6_e3m2 mxfp4 mxint8 nvfp4
/// nvfp4_2d nvfp4_4over6 nvfp4_4over6_2d fp8_block fp8_block_2d fp8_rowwise fp8_rowwise_e5m2,
/// each optionally followed by
/// options, each after a colon (docs/blocks.md, "Options"): a scale rule for the MX schemes
/// (":floor" ":ceil" ":rceil" ":even"), ":block=N" for the 1-D schemes (N elements per
/// block, 0 the whole dimension), ":tile=RxC" for the 2-D ones, ":row_scaled" for nvfp4 (a
/// global scale per line). The one parser of scheme names. Throws InputError.
BlockScheme parse_block_scheme(std::string_view name);
/// The scheme names without options, in the order above.
const std::vector<std::string>& block_scheme_names();

enum class BlockAxis : uint8_t {
  last,   ///< 1×k blocks along each row (x's last axis)
  first,  ///< k×1 blocks down each column (x's first axis)
};

struct BlockOptions {
  BlockAxis axis = BlockAxis::last;
  /// The rounding of the elements into the element format, any direction (docs/blocks.md,
  /// "Element rounding"); stochastic: element (r, c) uses the random bits of stream position
  /// offset + r·cols + c (env.hpp), `random_bits` of them (1..32).
  Rounding rounding = Rounding::near_even;
  int random_bits = kSrRandomBits;
  bool pack_random_bits = false;  ///< packed draws, as BulkOptions::pack_random_bits
  uint64_t seed = 0;
  uint64_t subsequence = 0;  ///< stochastic rounding subsequence (as BulkOptions)
  uint64_t offset = 0;
  /// nvfp4 (1×16) only: apply Transformer Engine's 16-point random Hadamard transform to each
  /// block before quantizing; codes, scales and decoded values are then those of the
  /// transformed tensor (what TE's wgrad GEMM consumes).
  bool rht = false;
  /// fp8_block: power-of-two scales (Transformer Engine's force_pow_2_scales); fp8_rowwise:
  /// scales rounded down to a power of two (torchao's round_scales_to_power_of_2).
  bool pow2_scales = false;
  /// Also fill BlockEncoding::block_events.
  bool per_block_events = false;
  /// For callers that quantize a tensor in parts (the analyzer's chunks): the amax that the
  /// global scale comes from, in place of the call's own largest |x| (of the values quantized,
  /// after the Hadamard transform): nvfp4 and nvfp4_4over6, one value, the whole tensor's;
  /// row-scaled nvfp4, one per line of the call (rows along the last axis, columns along the
  /// first), each line's in the whole tensor. Each must be finite and at least the call's own
  /// amax of its line (InputError otherwise). Empty: the call's own.
  std::span<const float> global_amax;
};

/// Event counts of a call or of one block.
struct BlockEvents {
  uint64_t elements = 0;
  uint64_t blocks = 0;
  /// Elements whose value before element rounding was beyond the element format's largest
  /// finite value, so they were clamped to ±max (MX floor rule, NVFP4's clamp to ±6, fp8).
  uint64_t saturated = 0;
  /// Non-zero elements that decode to zero: the element code is ±0, or the block's scale is 0.
  uint64_t flushed = 0;
  /// Blocks whose scale left the scale format's range and was clamped (docs/blocks.md).
  uint64_t scales_clamped = 0;
  /// Of scales_clamped, the harmless ones: NVFP4 decode scales a few fp32 ulps above 448 (the
  /// blocks that hold the tensor's amax), clamped to 448, the scale e4m3's rounding gives them
  /// anyway. Every other clamp (MX, fp8_block, an NVFP4 scale that underflowed to 0) is real.
  uint64_t scales_clamped_harmless = 0;
  /// MX blocks holding a NaN or an infinity: their scale is NaN (e8m0 0xFF).
  uint64_t nan_scales = 0;

  BlockEvents& operator+=(const BlockEvents& o) {
    elements += o.elements;
    blocks += o.blocks;
    saturated += o.saturated;
    flushed += o.flushed;
    scales_clamped += o.scales_clamped;
    scales_clamped_harmless += o.scales_clamped_harmless;
    nan_scales += o.nan_scales;
    return *this;
  }
  bool operator==(const BlockEvents&) const = default;
};

/// A quantized tensor.
struct BlockEncoding {
  size_t rows = 0, cols = 0;
  size_t tile_rows = 1, tile_cols = 1;  ///< the shape of one block in the tensor
  BlockAxis axis = BlockAxis::last;
  std::vector<uint8_t> codes;        ///< rows×cols element encodings, row-major
  /// (rows/tile_rows)×(cols/tile_cols), row-major: e8m0 codes (MX) or e4m3 codes (NVFP4);
  /// empty for fp8_block and fp8_rowwise.
  std::vector<uint8_t> scale_codes;
  /// The same shape: each block's scale as an fp32 value (MX 2^e or NaN, NVFP4 the e4m3
  /// value, fp8_block the scale itself (decode multiplies), fp8_rowwise torchao's scale
  /// 448/amax (the encode multiplier; decode divides, as torchao does)).
  std::vector<float> scales;
  /// NVFP4: the fp32 global encode scale; nvfp4_4over6: the tensor's amax, as Four Over Six
  /// keeps it (decoding multiplies by amax / 1536)
  std::optional<float> global_scale;
  /// Row-scaled NVFP4, in place of global_scale: each line's fp32 global encode scale, rows
  /// (axis last) or columns (axis first) entries; empty for every other scheme.
  std::vector<float> global_scales;
  BlockEvents events;                 ///< the whole call
  std::vector<BlockEvents> block_events;  ///< per block (only with per_block_events)

  size_t scale_rows() const { return rows / tile_rows; }
  size_t scale_cols() const { return cols / tile_cols; }
};

/// The block shape of `s` for `axis` (rows, cols) in a rows × cols tensor: a block of 0 (the
/// whole dimension) is that dimension's length.
std::pair<size_t, size_t> block_tile(const BlockScheme& s, BlockAxis axis, size_t rows,
                                     size_t cols);
/// The same for a scheme whose blocks do not depend on the shape; throws InputError for a
/// whole-dimension block.
std::pair<size_t, size_t> block_tile(const BlockScheme& s, BlockAxis axis);

/// `s` with a whole-dimension block (block 0) replaced by that dimension's length in a
/// rows × cols tensor (its name kept), for callers that quantize such a tensor in parts.
BlockScheme fixed_blocks(const BlockScheme& s, BlockAxis axis, size_t rows, size_t cols);

/// The shape of a rows×cols tensor padded to whole blocks of `s` along `axis`: each dimension
/// rounded up to a multiple of the block's (block_tile).
std::pair<size_t, size_t> padded_shape(const BlockScheme& s, BlockAxis axis, size_t rows,
                                       size_t cols);

/// x (rows×cols, row-major) zero-padded at the end of each dimension into out (prows×pcols,
/// prows ≥ rows, pcols ≥ cols), each value converted to float: how the simulator's
/// block-scaled GEMMs pad their operands to whole blocks, and what Python's pad=True does.
template <class T>
void pad_blocks(const T* x, size_t rows, size_t cols, float* out, size_t prows, size_t pcols) {
  for (size_t r = 0; r < rows; ++r) {
    const T* src = x + r * cols;
    float* dst = out + r * pcols;
    for (size_t c = 0; c < cols; ++c) dst[c] = static_cast<float>(src[c]);
    for (size_t c = cols; c < pcols; ++c) dst[c] = 0.0f;
  }
  for (size_t i = rows * pcols; i < prows * pcols; ++i) out[i] = 0.0f;
}

/// Check a call before any work: the shape divides into blocks, the options fit the scheme.
/// Throws InputError with a one-line message.
void check_blocks(const BlockScheme& s, size_t rows, size_t cols, const BlockOptions& o);

/// Quantize x (rows×cols, row-major). Throws InputError for a bad shape or options, and for a
/// NaN or infinity in x with the NVFP4 and fp8_block schemes (MX gives such a block a NaN
/// scale, as the OCP MX specification does). Uses AVX-512 kernels when the calling thread's
/// bulk path (detail::bulk_path) is avx512, portable loops otherwise; the results are the
/// same. With threads > 1, the passes over the elements (the transform, the block amax, the
/// element codes) run in bands of whole block rows on up to that many threads of the pool,
/// each with the calling thread's bulk path; the encoding is the same, bit for bit (element i
/// of a stochastic rounding draws stream position offset + i wherever its band starts).
BlockEncoding encode_blocks(const BlockScheme& s, const float* x, size_t rows, size_t cols,
                            const BlockOptions& o = {}, int threads = 1);

/// The dequantized values of `e` (rows×cols fp32, row-major): element × scale in fp32, rounded
/// once (NVFP4: element × fp32(e4m3 scale × fp32(1 / global scale)), row-scaled with the
/// block's line's global scale). Reads scale_codes for MX
/// and NVFP4, scales for fp8_block. Throws InputError for inconsistent sizes. With threads > 1,
/// bands of rows decode on up to that many threads of the pool; the values are the same.
void decode_blocks(const BlockScheme& s, const BlockEncoding& e, float* out, int threads = 1);

/// encode_blocks then decode_blocks; returns the call's events.
BlockEvents quantize_blocks(const BlockScheme& s, const float* x, size_t rows, size_t cols,
                            float* out, const BlockOptions& o = {});

namespace detail {
/// Transformer Engine's random Hadamard transform of one 16-element vector (in place, stride
/// between elements): y_j = Σ_k x_k · s_k · H_kj / 4, H the Sylvester Hadamard matrix, s TE's
/// wgrad sign vector, summed in fp32 in the order k = 0..15.
void rht16(float* v, size_t stride);
/// rht16 on every 16-element block of a rows × cols row-major tensor along `axis` (rows, or
/// cols for BlockAxis::last, a multiple of 16), in place, vectorised. With threads > 1, bands
/// of blocks are transformed on up to that many threads of the pool; the values are the same.
void apply_rht(float* v, size_t rows, size_t cols, BlockAxis axis, int threads = 1);
/// TE's fixed sign vector of the wgrad RHT.
extern const float kRhtSigns[16];
}  // namespace detail

}  // namespace halfway
