/// \file amx_tiles.hpp
/// Full AMX tile multiplies (`tdpbf16ps`, `tdpfp16ps` with every tile 16 rows × 64 bytes), as
/// records: generated cases to run on the hardware, or tiles recorded on an AMX machine and read
/// back on any machine. Every output C[m][n] sums C and 32 products of 16-bit elements, so these
/// show how a whole row of 16 element pairs is accumulated, which one pair per row cannot.
///
///     std::vector<AmxTile> t = read_amx_tiles("tests/data/amx/tdpbf16ps_tiles.bin");
///     DotReport r = compare_tiles("amx-bf16", accumulation::amx_bf16, formats::bf16, t);
///     // r.total == 256 * t.size(); r.mismatches == 0
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dot.hpp"
#include "halfway/accumulate.hpp"

namespace halfway::hw {

/// One tile multiply; the record layout of the files (4,112 bytes, little endian):
/// A at 0 (16 rows × 32 elements: row m, element 2k+j), B at 1024 (the layout the instruction
/// reads: row k, element 2n+j), C before at 2048 and C after at 3072 (16 × 16 fp32, row m,
/// column n), the case family at 4096 (uint32), 12 zero bytes.
struct AmxTile {
  uint16_t a[16][32];
  uint16_t b[16][32];
  uint32_t c[16][16];
  uint32_t d[16][16];  ///< the hardware's result (zero in a generated case not yet run)
  uint32_t family;
};

inline constexpr size_t kAmxRecordBytes = 4112;
inline constexpr int kAmxFamilies = 10;
inline constexpr uint64_t kAmxOutputs = 256;  ///< outputs of one tile multiply
/// Stream of the generated tile cases ("amxtiles").
inline constexpr uint64_t kAmxSeed = 0x616D7874696C6573ull;
/// Records one file may hold (1 GiB): a larger file is refused rather than read.
inline constexpr uint64_t kAmxMaxRecords = uint64_t(1) << 18;

/// "ordinary", "wide_alignment", ...: the families of the record layout (record i of a generated
/// set has family i mod 10).
const char* amx_family_name(int family);

/// Reads every record of `path`; throws InputError (one line: the file and what is wrong) if it
/// cannot be read, its size is not a whole number of records, it is empty or too large, or a
/// family is not 0..9.
std::vector<AmxTile> read_amx_tiles(const std::string& path);
/// Writes the records to `path` (a temporary file renamed into place); throws on any error.
void write_amx_tiles(const std::string& path, const std::vector<AmxTile>& tiles);

/// `count` generated tile cases for elements of `in` (bf16 or fp16): record i is of family
/// i mod 10, drawn from the stream (kAmxSeed, i). C after is left zero.
std::vector<AmxTile> amx_tile_cases(const Format& in, size_t count);

/// Output (m, n) of `t` under `model`: dot() of A's row m and B's column n (element 2k+j of B's
/// column is B[k][2n+j]) with accumulator C[m][n].
uint32_t amx_tile_output(const AccumulationModel& model, const Format& in, const AmxTile& t,
                         int m, int n);

/// Every output of `tiles` against `model`: DotReport's lanes are outputs, its families the
/// record families. Class examples name the output by index (tile·256 + m·16 + n).
DotReport compare_tiles(const std::string& backend, const AccumulationModel& model,
                        const Format& in, const std::vector<AmxTile>& tiles,
                        unsigned threads = 0);
/// Scores every dot_candidates() model on the outputs of the first `max_tiles` tiles.
DotSearchResult search_tiles(const Format& in, const std::vector<AmxTile>& tiles,
                             size_t max_tiles, unsigned threads = 0);

}  // namespace halfway::hw
