/// \file io.hpp
/// Output files written atomically: the content goes to a temporary file in the same
/// directory, is flushed to disk, and is renamed over the final name, so a crash never leaves
/// a half-written file that looks complete.
///
///     AtomicFile f(dir + "/steps.csv");   f.out() << "step,loss\n";   f.commit();
#pragma once

#include <fstream>
#include <string>

namespace halfway::sim {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();  ///< removes the temporary file unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  std::ostream& out() { return out_; }
  /// Flush, fsync and rename into place. Throws std::runtime_error on failure.
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  std::ofstream out_;
  bool done_ = false;
};

/// Write `content` to `path` atomically.
void write_file_atomic(const std::string& path, const std::string& content);
/// Read a whole file; throws InputError naming the file when it cannot be read.
std::string read_file(const std::string& path);

}  // namespace halfway::sim
