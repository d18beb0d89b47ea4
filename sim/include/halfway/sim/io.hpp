/// \file io.hpp
/// Output files written atomically: the content goes to a temporary file in the same
/// directory, is flushed to disk, and is renamed over the final name, so a crash never leaves
/// a half-written file that looks complete. A symlink is written through (the file it points
/// to is replaced, with the temporary file in that file's folder); a path that names something
/// other than a regular file (a device, a FIFO, a directory) is refused. Failed writes name
/// the file and the reason (strerror).
///
///     AtomicFile f(dir + "/steps.csv");   f.out() << "step,loss\n";   f.commit();
#pragma once

#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace halfway::sim {

class AtomicFile {
 public:
  /// Throws InputError when `path` names something that is not a regular file, or when the
  /// temporary file cannot be created.
  explicit AtomicFile(std::string path);
  ~AtomicFile();  ///< removes the temporary file unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  std::ostream& out() { return out_; }
  /// Flush, fsync and rename into place. Throws std::runtime_error on failure, with the reason.
  void commit();
  /// The file that is replaced (`path` with symlinks followed).
  const std::string& path() const { return path_; }

 private:
  class Buf;
  std::string path_, tmp_;
  std::unique_ptr<Buf> buf_;
  std::ostream out_{nullptr};
  bool done_ = false;
};

/// The file that writing `path` replaces: symlinks followed. Throws InputError when it exists
/// and is not a regular file.
std::string write_target(const std::string& path);
/// Write `content` to `path` atomically.
void write_file_atomic(const std::string& path, const std::string& content);
/// Read a whole file; throws InputError naming the file when it cannot be read.
std::string read_file(const std::string& path);

/// The most a config or sweep file may hold (1 MiB; the largest real one is a few KiB).
inline constexpr size_t kMaxTextFileBytes = size_t(1) << 20;
/// Read a regular file of at most `max_bytes` bytes. Throws InputError naming the file when it
/// cannot be read, is not a regular file (a device such as /dev/zero, a FIFO, a directory, a
/// socket) or is larger. Never blocks on a FIFO and never reads a device.
std::string read_text_file(const std::string& path, size_t max_bytes = kMaxTextFileBytes);

/// 80% of the physical memory (4 GiB when it cannot be read): the default --max-memory, and
/// the default budget for the values of one .npz archive.
uint64_t default_memory_limit();

/// Remove the files `NAME.tmp.PID` and `NAME.tmp.PID.*` in `dir`, for NAME in `names`, whose
/// process PID no longer exists: what an AtomicFile (or an NpzWriter) leaves behind when its
/// process is killed (SIGKILL). The temporary files of a live process are kept.
void remove_stale_tmp_files(const std::string& dir, const std::vector<std::string>& names);

/// Stopping a run at a step boundary. After `install_stop_handlers()`, SIGINT and SIGTERM only
/// record the signal (and restore the default action, so a second one ends the process at
/// once); `train()` checks after every step and ends the run early, marked incomplete.
void install_stop_handlers();
/// Ask the running `train()` calls to stop, as the signal `signal_number` would.
void request_stop(int signal_number);
/// The signal that asked to stop, 0 when none did.
int stop_signal();
/// Forget a stop request (tests; a process that runs again after an interrupted run).
void clear_stop();

}  // namespace halfway::sim
