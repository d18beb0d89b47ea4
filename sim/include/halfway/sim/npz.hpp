/// \file npz.hpp
/// numpy `.npy`/`.npz` reading and writing, self-contained (zip "stored" and "deflated"
/// members through zlib, ZIP64 extents). Arrays come back as doubles with their shape and
/// numpy dtype; f2/f4/f8, signed/unsigned integers and bool are supported, little-endian,
/// C or Fortran order.
///
///     NpzFile f = read_npz("data.npz");     // f.at("x").shape, f.at("x").values
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "halfway/sim/tensor.hpp"

namespace halfway::sim {

struct NpyArray {
  Shape shape;
  std::string dtype = "f8";  ///< numpy kind and size without byte order: f4, f8, i8, ...
  std::vector<double> values;
  bool is_integer() const { return !dtype.empty() && (dtype[0] == 'i' || dtype[0] == 'u' || dtype[0] == 'b'); }
};

using NpzFile = std::map<std::string, NpyArray>;

/// Parse one `.npy` image. Throws InputError naming `what` on malformed input.
NpyArray parse_npy(const std::string& bytes, const std::string& what);
/// Read an `.npz` archive: member names without the ".npy" suffix. Throws InputError.
NpzFile read_npz(const std::string& path);
/// Serialise one array as `.npy` (dtype "f4", "f8" or "i8").
std::string npy_bytes(const NpyArray& a);
/// Write an uncompressed `.npz` (like numpy.savez), atomically (temporary file + rename).
void write_npz(const std::string& path, const std::vector<std::pair<std::string, NpyArray>>& arrays);

}  // namespace halfway::sim
