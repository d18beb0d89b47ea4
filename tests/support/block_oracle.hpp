/// \file block_oracle.hpp
/// A reference for halfway's block quantization (blocks.hpp), used only by the tests, written
/// separately from lib/src/blocks.cpp and the other way round: it walks the tensor block by
/// block (not row by row), finds amax in double, takes MX scale exponents from std::frexp and a
/// search over powers of two (not from fp32 bit fields), divides MX elements by the scale
/// exactly in binary64 and rounds them once with the scalar core (`from_f64`, not the bulk
/// kernels), maps NVFP4 elements with Transformer Engine's own threshold table (not a
/// rounding routine), and builds the Hadamard matrix by Sylvester's doubling.
/// What it shares with the library is the definition (docs/blocks.md) and the scalar core for
/// element and e4m3 rounding, which has its own exhaustive tests.
#pragma once

#include <optional>
#include <vector>

#include "halfway/blocks.hpp"

namespace block_oracle {

struct Result {
  std::vector<uint8_t> codes, scale_codes;
  std::vector<float> scales;
  std::optional<float> global_scale;
  std::vector<float> global_scales;  ///< row-scaled NVFP4: each line's global encode scale
  halfway::BlockEvents events;
  std::vector<halfway::BlockEvents> block_events;
  std::vector<float> decoded;  ///< the dequantized tensor
};

Result encode(const halfway::BlockScheme& s, const std::vector<float>& x, size_t rows,
              size_t cols, const halfway::BlockOptions& o = {});

/// The random Hadamard transform of every 16-element block along `axis`, in place: the matrix
/// from Sylvester's doubling, each output summed in fp32 in the order k = 0..15.
void hadamard(std::vector<float>& x, size_t rows, size_t cols, halfway::BlockAxis axis);

/// Transformer Engine's `cast_to_fp4x2` table for one value (already clamped to ±6).
uint8_t te_e2m1_code(float y);

}  // namespace block_oracle
