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
#include <functional>
#include <memory>
#include <ostream>
#include <stdexcept>
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
  /// Flush, fsync and rename into place: finish() then publish(). Throws std::runtime_error
  /// on failure, with the reason.
  void commit();
  /// Flush, fsync and close the temporary file (a full disk fails here, with the file in
  /// place untouched). Throws std::runtime_error on failure, with the reason.
  void finish();
  /// Rename the finished temporary file over the file in place.
  void publish();
  /// The file that is replaced (`path` with symlinks followed).
  const std::string& path() const { return path_; }

 private:
  class Buf;
  std::string path_, tmp_;
  std::unique_ptr<Buf> buf_;
  std::ostream out_{nullptr};
  bool finished_ = false, done_ = false;
};

/// The suffix of this process's temporary files, ".tmp.PID@HOST": HOST is the host name with
/// every character but [A-Za-z0-9-] made '_'. Two hosts writing one folder on a shared file
/// system never take each other's files for stale (remove_stale_tmp_files).
const std::string& tmp_suffix();

/// Replacing the files of a result folder (`halfway train`, `halfway analyze`,
/// halfway.torch.trace) in one step, so that a full disk, a kill or a crash at any point
/// leaves either the old folder as it was or a folder without manifest.json (not a finished
/// run: run_complete() is false, a sweep reruns it), never new files under an old manifest:
///   1. every file is written under its temporary name and flushed to disk (AtomicFile::finish,
///      NpzWriter::finish): a full disk fails here, with the folder untouched;
///   2. unpublish_folder(): the old manifest.json goes first, durably (the folder is fsynced);
///   3. publish_folder(): the files are renamed into place, the folder is fsynced, and
///      manifest.json is written last (atomically) and fsynced with its folder.
///
///     f.finish();  g.finish();  publish_folder(dir, {"old.csv"}, {[&] { f.publish(); },
///                                                                 [&] { g.publish(); }}, text);
///
/// unpublish_folder(dir, stale): remove dir/manifest.json, then the files named in `stale`
/// (what an earlier run wrote and this one does not), and fsync the folder. Throws
/// std::runtime_error when the manifest cannot be removed.
void unpublish_folder(const std::string& dir, const std::vector<std::string>& stale);
/// Steps 2 and 3: unpublish_folder(dir, stale), each of `renames` in order (a file's
/// publish()), fsync the folder, then write `manifest` as dir/manifest.json.
void publish_folder(const std::string& dir, const std::vector<std::string>& stale,
                    const std::vector<std::function<void()>>& renames,
                    const std::string& manifest);
/// fsync a folder, so that the renames and removals in it survive a crash. Throws
/// std::runtime_error naming the folder.
void sync_folder(const std::string& dir);

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

/// Remove the files `NAME.tmp.PID@HOST` and `NAME.tmp.PID@HOST.*` in `dir`, for NAME in
/// `names`, HOST this host (tmp_suffix) and PID a process that no longer exists: what an
/// AtomicFile (or an NpzWriter) leaves behind when its process is killed (SIGKILL). The
/// temporary files of a live process, and of other hosts, are kept. `NAME.tmp.PID` and
/// `NAME.tmp.PID.*`, as earlier versions named them, are taken to be this host's.
void remove_stale_tmp_files(const std::string& dir, const std::vector<std::string>& names);

/// Whether `file` is a temporary file of an AtomicFile or NpzWriter: `NAME.tmp.PID@HOST`,
/// `NAME.tmp.PID` (earlier versions) or either with a `.SUFFIX`. Sets `name`, `pid` and
/// `host` (empty for the earlier names).
bool parse_tmp_name(const std::string& file, std::string& name, long& pid, std::string& host);

/// Stopping a run at a step boundary. After `install_stop_handlers()`, SIGINT, SIGTERM,
/// SIGHUP (a terminal or SSH session closed) and SIGQUIT only record the signal (and restore
/// the default action, so a second one ends the process at once); `train()` checks after
/// every step and ends the run early, marked incomplete.
void install_stop_handlers();
/// Ask the running `train()` calls to stop, as the signal `signal_number` would.
void request_stop(int signal_number);
/// The signal that asked to stop, 0 when none did.
int stop_signal();
/// Forget a stop request (tests; a process that runs again after an interrupted run).
void clear_stop();
/// "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT" or "signal N".
std::string signal_name(int signal_number);

/// Thrown by work that stops early on a stop request and keeps nothing (`halfway analyze`):
/// the temporary files are removed as the stack unwinds; the command exits 128 + signal.
struct Stopped : std::runtime_error {
  explicit Stopped(int sig)
      : std::runtime_error("stopped by " + signal_name(sig)), signal_number(sig) {}
  int signal_number;
};

}  // namespace halfway::sim
