#include "halfway/sim/io.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "halfway/names.hpp"

namespace halfway::sim {

// A dangling symlink names the file it would create.
std::string write_target(const std::string& path) {
  std::string p = path;
  for (int hops = 0;; ++hops) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) {
      if (errno == ENOENT) return p;
      throw InputError("cannot write '" + path + "': " + std::strerror(errno));
    }
    if (S_ISREG(st.st_mode)) return p;
    if (!S_ISLNK(st.st_mode))
      throw InputError("cannot write '" + path + "': not a regular file");
    if (hops == 40)
      throw InputError("cannot write '" + path + "': " + std::strerror(ELOOP));
    std::string target(size_t(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
    const ssize_t n = ::readlink(p.c_str(), target.data(), target.size());
    if (n < 0 || size_t(n) >= target.size())
      throw InputError("cannot write '" + path + "': cannot read the symlink '" + p + "'");
    target.resize(size_t(n));
    const size_t slash = p.rfind('/');
    p = target.front() == '/' || slash == std::string::npos ? target
                                                            : p.substr(0, slash + 1) + target;
  }
}

/// An output buffer on a file descriptor that keeps the first write error (errno).
class AtomicFile::Buf : public std::streambuf {
 public:
  explicit Buf(int fd) : fd_(fd) { setp(buf_, buf_ + sizeof buf_); }
  ~Buf() override {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }
  int error() const { return err_; }
  /// Write the buffer out; false (and error() set) when a write failed.
  bool drain() {
    const char* p = pbase();
    size_t n = size_t(pptr() - pbase());
    while (n > 0 && err_ == 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) err_ = w < 0 ? errno : EIO;
      else p += w, n -= size_t(w);
    }
    setp(buf_, buf_ + sizeof buf_);
    return err_ == 0;
  }
  /// Close the descriptor; false (and error() set) when that fails.
  bool close() {
    const int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && ::close(fd) != 0 && err_ == 0) err_ = errno;
    return err_ == 0;
  }
  void fail(int e) {
    if (err_ == 0) err_ = e;
  }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  int fd_;
  int err_ = 0;
  char buf_[1 << 16];
};

const std::string& tmp_suffix() {
  static const std::string suffix = [] {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || !host[0]) std::strcpy(host, "localhost");
    std::string h = host;
    for (char& c : h)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '_';
    return ".tmp." + std::to_string(::getpid()) + "@" + h;
  }();
  return suffix;
}

AtomicFile::AtomicFile(std::string path) : path_(write_target(path)) {
  tmp_ = path_ + tmp_suffix();
  const int fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) throw InputError("cannot write '" + tmp_ + "': " + std::strerror(errno));
  buf_ = std::make_unique<Buf>(fd);
  out_.rdbuf(buf_.get());
}

AtomicFile::~AtomicFile() {
  if (!done_) {
    buf_->close();
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::commit() {
  finish();
  publish();
}

void AtomicFile::finish() {
  if (finished_) return;
  out_.flush();
  if (buf_->error() == 0 && !out_) buf_->fail(EIO);
  if (buf_->error() == 0 && ::fsync(buf_->fd()) != 0) buf_->fail(errno);
  buf_->close();
  if (buf_->error() != 0)
    throw std::runtime_error("write to '" + path_ + "' failed: " + std::strerror(buf_->error()));
  finished_ = true;
}

void AtomicFile::publish() {
  if (!finished_) throw std::logic_error("AtomicFile::publish before finish");
  if (done_) return;
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw std::runtime_error("cannot rename '" + tmp_ + "' to '" + path_ + "': " +
                             std::strerror(errno));
  done_ = true;
}

void sync_folder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const int e = fd < 0 ? errno : ::fsync(fd) != 0 ? errno : 0;
  if (fd >= 0) ::close(fd);
  // Some file systems cannot fsync a folder (EINVAL); their renames are as durable as it gets.
  if (e != 0 && e != EINVAL && e != ENOTSUP)
    throw std::runtime_error("cannot sync the folder '" + dir + "': " + std::strerror(e));
}

void unpublish_folder(const std::string& dir, const std::vector<std::string>& stale) {
  const std::string manifest = dir + "/manifest.json";
  if (::unlink(manifest.c_str()) != 0 && errno != ENOENT)
    throw std::runtime_error("cannot remove the old '" + manifest + "': " +
                             std::strerror(errno));
  for (const std::string& f : stale) ::unlink((dir + "/" + f).c_str());
  sync_folder(dir);
}

void publish_folder(const std::string& dir, const std::vector<std::string>& stale,
                    const std::vector<std::function<void()>>& renames,
                    const std::string& manifest) {
  unpublish_folder(dir, stale);
  for (const auto& rename : renames) rename();
  sync_folder(dir);
  write_file_atomic(dir + "/manifest.json", manifest);
  sync_folder(dir);
}

void write_file_atomic(const std::string& path, const std::string& content) {
  AtomicFile f(path);
  f.out() << content;
  f.commit();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

uint64_t default_memory_limit() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t(1) << 32;
  return uint64_t(pages) / 5 * 4 * uint64_t(page);
}

std::string read_text_file(const std::string& path, size_t max_bytes) {
  const std::string what = "cannot read '" + path + "': ";
  // stat first, so that a device is never opened; fstat again on what was opened.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw InputError(what + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw InputError(what + file_kind(st.st_mode) + ", not a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) throw InputError(what + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0) throw InputError(what + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw InputError(what + file_kind(st.st_mode) + ", not a regular file");
  auto too_big = [&] {
    return InputError("'" + path + "' is larger than " + std::to_string(max_bytes) +
                      " bytes, the most it may hold");
  };
  if (uint64_t(st.st_size) > max_bytes) throw too_big();
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(what + std::strerror(errno));
    if (n == 0) break;
    if (out.size() + size_t(n) > max_bytes) throw too_big();  // it grew while being read
    out.append(buf, size_t(n));
  }
  return out;
}

bool parse_tmp_name(const std::string& file, std::string& name, long& pid, std::string& host) {
  // NAME.tmp.PID@HOST or NAME.tmp.PID, then maybe .SUFFIX (a writer's spool, libzip's file).
  // HOST has no '.', so the last ".tmp." before the PID is the one.
  for (size_t p = file.rfind(".tmp."); p != std::string::npos && p > 0;
       p = file.rfind(".tmp.", p - 1)) {
    size_t i = p + 5, j = i;
    while (j < file.size() && j - i <= 9 && std::isdigit(static_cast<unsigned char>(file[j]))) ++j;
    if (j == i || j - i > 9) continue;
    std::string h;
    size_t k = j;
    if (k < file.size() && file[k] == '@') {
      k = file.find('.', j);
      h = file.substr(j + 1, (k == std::string::npos ? file.size() : k) - j - 1);
      if (h.empty()) continue;
    }
    if (k != std::string::npos && k < file.size() && file[k] != '.') continue;
    name = file.substr(0, p);
    pid = std::stol(file.substr(i, j - i));
    host = h;
    return true;
  }
  return false;
}

void remove_stale_tmp_files(const std::string& dir, const std::vector<std::string>& names) {
  namespace fs = std::filesystem;
  // This host's name as tmp_suffix() writes it, after ".tmp.PID@".
  const std::string& suffix = tmp_suffix();
  const std::string me = suffix.substr(suffix.find('@') + 1);
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name, host;
    long pid = 0;
    if (!parse_tmp_name(it->path().filename().string(), name, pid, host)) continue;
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    if (!host.empty() && host != me) continue;  // another host's: its PIDs are not ours
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::error_code rm;
    if (it->is_regular_file(rm)) fs::remove(it->path(), rm);
  }
}

namespace {

std::atomic<int> g_stop_signal{0};
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
static_assert(std::atomic<int>::is_always_lock_free, "used in a signal handler");

extern "C" void halfway_sim_on_stop_signal(int sig) {
  g_stop_signal.store(sig);
  // A second SIGINT or SIGTERM ends the process as it would without this handler.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int s : kStopSignals) ::sigaction(s, &dfl, nullptr);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = halfway_sim_on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // writes in progress continue rather than fail with EINTR
  for (int s : kStopSignals) ::sigaction(s, &sa, nullptr);
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    default: return "signal " + std::to_string(sig);
  }
}

void request_stop(int signal_number) {
  g_stop_signal.store(signal_number ? signal_number : SIGINT);
}

int stop_signal() { return g_stop_signal.load(); }

void clear_stop() { g_stop_signal.store(0); }

}  // namespace halfway::sim
