/// \file npz.hpp
/// numpy `.npy`/`.npz` reading and writing. The zip container is libzip's (stored and deflated
/// members, ZIP64); the `.npy` header parser is ours. Arrays come back as doubles with their
/// shape and numpy dtype; f2/f4/f8, signed/unsigned integers and bool are supported,
/// little-endian, C or Fortran order.
///
///     NpzFile f = read_npz("data.npz");     // f.at("x").shape, f.at("x").values
///
/// Every size read from a file is checked before it is used: the shape's element count and
/// byte count in 64 bits without wrapping, a member's size against its header and against the
/// compressed bytes in the file, and the memory its values take (8 bytes a value) against a
/// limit. Nothing larger than what the file really holds is allocated.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
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

/// The header of one `.npy` array: what it holds, before any of its data is read.
struct NpyHeader {
  Shape shape;
  std::string dtype;           ///< as NpyArray::dtype: f2, f4, f8, i1 ... u8, b1
  bool fortran_order = false;  ///< data in column-major order
  uint64_t count = 0;          ///< elements
  int item_size = 0;           ///< bytes per element
};
/// Receives an array's data in file order, in chunks of at most 64 Ki raw little-endian items.
using NpyChunkFn = std::function<void(const unsigned char* raw, size_t items)>;
/// Called for each array of an archive with its key, header and a one-line description for
/// messages ("'f.npz' member 'x.npy'"); returns where its data go (an empty function skips
/// them; they are still read, and CRC-checked). May throw to stop.
using NpzArrayFn =
    std::function<NpyChunkFn(const std::string& key, const NpyHeader& h, const std::string& what)>;

/// Parse one `.npy` image (exactly: no bytes may follow the data). Throws InputError naming
/// `what` on malformed input or when its values need more than `max_bytes` (0: the default).
NpyArray parse_npy(const std::string& bytes, const std::string& what, uint64_t max_bytes = 0);
/// Read an `.npz` archive: member names without the ".npy" suffix. `path` must be a regular
/// file; all arrays together may take at most `max_bytes` (0: default_memory_limit(), io.hpp). Throws
/// InputError, with one line, on anything else.
NpzFile read_npz(const std::string& path, uint64_t max_bytes = 0);
/// Read an `.npz` archive array by array in bounded memory (one 64 Ki-item buffer), with the
/// same checks as read_npz but no limit on the arrays' sizes: nothing is held. Throws
/// InputError, with one line, on a malformed archive or member; the data of a member already
/// passed to its sink may precede the error (a CRC mismatch is found at the member's end).
void stream_npz(const std::string& path, const NpzArrayFn& on_array);
/// Text from a file as it may appear in a one-line message: printable ASCII as is, every other
/// byte as \xNN, at most 80 characters.
std::string shown_text(const std::string& s);

/// Serialise one array as `.npy` (dtype "f4", "f8" or "i8").
std::string npy_bytes(const NpyArray& a);

/// An uncompressed `.npz` (like numpy.savez) written in bounded memory: each array goes to a
/// spool file next to `path` (`path` + tmp_suffix() + `.data`) as it is added; finish() builds
/// the archive from it (ZIP64 when needed) as `path` + tmp_suffix() and flushes it to disk,
/// publish() renames that over `path`. Without both, nothing is left behind.
class NpzWriter {
 public:
  explicit NpzWriter(std::string path);
  ~NpzWriter();
  NpzWriter(const NpzWriter&) = delete;
  NpzWriter& operator=(const NpzWriter&) = delete;
  /// Add member `key`.npy (dtype "f4", "f8" or "i8").
  void add(const std::string& key, const NpyArray& a);
  /// Add member `key`.npy as float32 straight from `n` floats.
  void add_f4(const std::string& key, const Shape& shape, const float* v, size_t n);
  /// Write the archive and rename it into place: finish() then publish(). Throws
  /// std::runtime_error on failure.
  void commit();
  /// Write the archive under its temporary name, flushed to disk. Throws std::runtime_error.
  void finish();
  /// Rename the finished archive into place. Throws std::runtime_error.
  void publish();
  size_t members() const { return members_.size(); }

 private:
  struct Member {
    std::string name;
    uint64_t offset, size;
  };
  void append(const std::string& key, const std::string& bytes);
  std::string path_, tmp_, spool_;
  std::FILE* spool_file_ = nullptr;
  uint64_t spool_size_ = 0;
  std::vector<Member> members_;
  bool finished_ = false, done_ = false;
};

/// Write an uncompressed `.npz` (like numpy.savez), atomically (temporary file + rename).
void write_npz(const std::string& path, const std::vector<std::pair<std::string, NpyArray>>& arrays);

}  // namespace halfway::sim
