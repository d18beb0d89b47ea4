#include "halfway/sim/io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "halfway/names.hpp"

namespace halfway::sim {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  tmp_ = path_ + ".tmp." + std::to_string(::getpid());
  out_.open(tmp_, std::ios::binary | std::ios::trunc);
  if (!out_) throw InputError("cannot write '" + tmp_ + "': " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (!done_) {
    out_.close();
    std::remove(tmp_.c_str());
  }
}

void AtomicFile::commit() {
  out_.flush();
  if (!out_) throw std::runtime_error("write to '" + tmp_ + "' failed");
  out_.close();
  const int fd = ::open(tmp_.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw std::runtime_error("cannot rename '" + tmp_ + "' to '" + path_ + "': " +
                             std::strerror(errno));
  done_ = true;
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

}  // namespace halfway::sim
