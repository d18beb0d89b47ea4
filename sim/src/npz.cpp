#include "halfway/sim/npz.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <ctime>
#include <algorithm>
#include <functional>
#include <set>
#include <stdexcept>

#include "halfway/names.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/softfloat.hpp"

namespace halfway::sim {

namespace {

// Every size that comes from a file goes through these: a product or sum that does not fit
// in 64 bits is an error, never a wrapped value.
bool mul_u64(uint64_t a, uint64_t b, uint64_t& r) { return !__builtin_mul_overflow(a, b, &r); }
bool add_u64(uint64_t a, uint64_t b, uint64_t& r) { return !__builtin_add_overflow(a, b, &r); }

std::string sys_error() { return std::strerror(errno); }

/// Text from the file as it may appear in a message: printable ASCII as is, every other byte as
/// \xNN (a message must be valid UTF-8 without control characters, for the terminal and for
/// Python's ValueError), at most 80 characters of it.
std::string shown(const std::string& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (r.size() >= 80) return r + "...";
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      r.push_back(char(c));
    } else {
      static const char hex[] = "0123456789abcdef";
      r += "\\x";
      r.push_back(hex[c >> 4]);
      r.push_back(hex[c & 15]);
    }
  }
  return r;
}

void put_le(std::string& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint64_t get_le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

/// A stream of bytes: read() returns how many it gave (0 only at the end) or throws.
struct ByteSource {
  virtual ~ByteSource() = default;
  virtual size_t read(char* dst, size_t n) = 0;
};

struct StringSource : ByteSource {
  const std::string& s;
  size_t pos = 0;
  explicit StringSource(const std::string& str) : s(str) {}
  size_t read(char* dst, size_t n) override {
    const size_t k = std::min(n, s.size() - pos);
    std::memcpy(dst, s.data() + pos, k);
    pos += k;
    return k;
  }
};

/// Read exactly n bytes; false when the stream ends first.
bool read_exact(ByteSource& in, char* dst, size_t n) {
  while (n) {
    const size_t k = in.read(dst, n);
    if (!k) return false;
    dst += k;
    n -= k;
  }
  return true;
}

/// Value of `key` in numpy's header dict (a Python literal), up to the next top-level comma.
std::string dict_value(const std::string& h, const std::string& key, const std::string& what) {
  const std::string k = "'" + key + "'";
  size_t p = h.find(k);
  if (p == std::string::npos) throw InputError(what + ": npy header lacks " + k);
  p = h.find(':', p + k.size());
  if (p == std::string::npos) throw InputError(what + ": malformed npy header");
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  int depth = 0;
  size_t e = p;
  for (; e < h.size(); ++e) {
    const char c = h[e];
    if (c == '(' || c == '[') ++depth;
    if ((c == ')' || c == ']') && --depth < 0) throw InputError(what + ": malformed npy header");
    if ((c == ',' || c == '}') && depth == 0) break;
  }
  if (e == h.size()) throw InputError(what + ": malformed npy header");
  size_t end = e;
  while (end > p && h[end - 1] == ' ') --end;
  return h.substr(p, end - p);
}

/// numpy's shape tuple: "()", "(3,)", "(3, 4)". Every dimension a non-negative integer that
/// fits in int64; nothing else is accepted.
Shape parse_shape(const std::string& s, const std::string& what) {
  const auto bad = [&]() { return InputError(what + ": malformed shape " + shown(s) + " in npy header"); };
  if (s.size() < 2 || s.front() != '(' || s.back() != ')') throw bad();
  Shape shape;
  size_t i = 1;
  const size_t end = s.size() - 1;
  auto spaces = [&]() {
    while (i < end && s[i] == ' ') ++i;
  };
  spaces();
  while (i < end) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) throw bad();
    uint64_t v = 0;
    while (i < end && std::isdigit(static_cast<unsigned char>(s[i]))) {
      if (!mul_u64(v, 10, v) || !add_u64(v, uint64_t(s[i] - '0'), v) || v > uint64_t(INT64_MAX))
        throw InputError(what + ": dimension too large in shape " + shown(s));
      ++i;
    }
    if (shape.size() >= 64) throw InputError(what + ": more than 64 dimensions in npy header");
    shape.push_back(int64_t(v));
    spaces();
    if (i < end) {
      if (s[i] != ',') throw bad();
      ++i;
      spaces();
    }
  }
  if (shape.size() == 1 && s.find(',') == std::string::npos) throw bad();  // "(3)" is no tuple
  return shape;
}

constexpr uint64_t kMaxHeader = 1 << 20;  // numpy writes a few hundred bytes

/// Read the header of one `.npy` image of exactly `total` bytes from `in`, leaving `in` at the
/// first data byte. Every size is checked: the element count, the data bytes, and that header
/// and data fill exactly `total` bytes.
NpyHeader read_npy_header(ByteSource& in, uint64_t total, const std::string& what) {
  unsigned char pre[12];
  if (total < 10 || !read_exact(in, reinterpret_cast<char*>(pre), 10) ||
      std::memcmp(pre, "\x93NUMPY", 6) != 0)
    throw InputError(what + ": not a .npy array");
  const int major = pre[6];
  if (major < 1 || major > 3)
    throw InputError(what + ": unsupported .npy version " + std::to_string(major));
  uint64_t hoff = 10, hlen = get_le(pre + 8, 2);
  if (major > 1) {
    if (total < 12 || !read_exact(in, reinterpret_cast<char*>(pre) + 10, 2))
      throw InputError(what + ": truncated npy header");
    hoff = 12;
    hlen = get_le(pre + 8, 4);
  }
  if (hlen > kMaxHeader) throw InputError(what + ": npy header of " + std::to_string(hlen) +
                                          " bytes (more than 1 MiB)");
  if (hoff + hlen > total) throw InputError(what + ": truncated npy header");
  std::string h(size_t(hlen), '\0');
  if (!read_exact(in, h.data(), h.size())) throw InputError(what + ": truncated npy header");

  std::string descr = dict_value(h, "descr", what);
  if (descr.size() < 4 || (descr[0] != '\'' && descr[0] != '"') || descr.back() != descr[0])
    throw InputError(what + ": unsupported dtype " + shown(descr));
  descr = descr.substr(1, descr.size() - 2);
  const char order = descr[0];
  if (order == '>') throw InputError(what + ": big-endian arrays are not supported");
  if (order != '<' && order != '|' && order != '=')
    throw InputError(what + ": unsupported dtype '" + shown(descr) + "'");
  NpyHeader a;
  a.dtype = descr.substr(1);
  static const std::pair<const char*, int> kinds[] = {
      {"f2", 2}, {"f4", 4}, {"f8", 8}, {"i1", 1}, {"i2", 2}, {"i4", 4}, {"i8", 8},
      {"u1", 1}, {"u2", 2}, {"u4", 4}, {"u8", 8}, {"b1", 1}};
  int size = 0;
  for (const auto& [k, s] : kinds)
    if (a.dtype == k) size = s;
  if (!size) throw InputError(what + ": unsupported dtype '" + shown(descr) + "'");
  const std::string fo = dict_value(h, "fortran_order", what);
  if (fo != "True" && fo != "False")
    throw InputError(what + ": malformed fortran_order " + shown(fo) + " in npy header");
  a.fortran_order = fo == "True";
  a.shape = parse_shape(dict_value(h, "shape", what), what);

  // Sizes: the element count, the data's bytes and the member's bytes, each checked.
  uint64_t n = 1;
  for (int64_t d : a.shape)
    if (!mul_u64(n, uint64_t(d), n))
      throw InputError(what + ": shape " + shape_str(a.shape) + " has too many elements");
  uint64_t data_bytes = 0, expect = 0, value_bytes = 0;
  if (!mul_u64(n, uint64_t(size), data_bytes) || !add_u64(hoff + hlen, data_bytes, expect) ||
      !mul_u64(n, sizeof(double), value_bytes))  // what read_npz needs for the values
    throw InputError(what + ": shape " + shape_str(a.shape) + " has too many elements");
  if (expect != total)
    throw InputError(what + ": holds " + std::to_string(total) + " bytes, but its header (" +
                     shape_str(a.shape) + " " + a.dtype + ") implies " + std::to_string(expect) +
                     (expect > total ? " (truncated data)" : ""));
  a.count = n;
  a.item_size = size;
  return a;
}

/// Pass the data of an array whose header `h` was just read to `sink` in chunks of at most
/// 64 Ki raw little-endian items, then check that the stream ends there.
void read_npy_data(ByteSource& in, const NpyHeader& h, const std::string& what,
                   const std::function<void(const unsigned char*, size_t)>& sink) {
  constexpr size_t kChunk = 1 << 16;  // items
  const size_t size = size_t(h.item_size);
  std::vector<unsigned char> buf(size_t(std::min<uint64_t>(kChunk, h.count)) * size);
  for (uint64_t done = 0; done < h.count;) {
    const size_t k = size_t(std::min<uint64_t>(h.count - done, kChunk));
    if (!read_exact(in, reinterpret_cast<char*>(buf.data()), k * size))
      throw InputError(what + ": truncated data");
    sink(buf.data(), k);
    done += k;
  }
  // The end of the stream (for a zip member, this is where its CRC is checked).
  char extra;
  if (in.read(&extra, 1) != 0) throw InputError(what + ": data continue past the array");
}

/// Parse one `.npy` image of exactly `total` bytes from `in`, taking its values' memory
/// (8 bytes a value) out of `budget`. Nothing is allocated before the header's sizes have been
/// checked against `total` and `budget`; the data are converted in chunks as they arrive.
NpyArray parse_npy_stream(ByteSource& in, uint64_t total, uint64_t& budget,
                          const std::string& what) {
  const NpyHeader h = read_npy_header(in, total, what);
  NpyArray a;
  a.shape = h.shape;
  a.dtype = h.dtype;
  const uint64_t n = h.count, value_bytes = n * sizeof(double);  // checked by the header
  const bool fortran = h.fortran_order;
  const int size = h.item_size;
  if (value_bytes > budget)
    throw InputError(what + ": array " + shape_str(a.shape) + " needs " +
                     std::to_string(value_bytes) + " bytes in memory, over the limit of " +
                     std::to_string(budget) + " bytes left for this .npz");
  budget -= value_bytes;

  a.values.resize(size_t(n));
  const char kind = a.dtype[0];
  uint64_t done = 0;
  read_npy_data(in, h, what, [&](const unsigned char* raw, size_t k) {
    for (size_t j = 0; j < k; ++j) {
      const uint64_t bits = get_le(raw + j * size_t(size), size);
      double v = 0;
      if (kind == 'f') {
        if (size == 2) {
          Env env;
          v = to_f64(formats::fp16, uint32_t(bits), env);
        } else if (size == 4) {
          float f;
          const uint32_t r32 = uint32_t(bits);
          std::memcpy(&f, &r32, 4);
          v = f;
        } else {
          std::memcpy(&v, &bits, 8);
        }
      } else if (kind == 'i') {
        const int shift = 64 - 8 * size;
        v = double(int64_t(bits << shift) >> shift);
      } else {
        v = double(bits);
      }
      a.values[size_t(done + j)] = v;
    }
    done += k;
  });

  if (fortran && a.shape.size() > 1 && n > 1) {
    // Column-major → row-major. With no dimension 0 (n > 1), every stride is at most n.
    const size_t r = a.shape.size();
    std::vector<uint64_t> stride(r);
    for (size_t d = 0, s = 1; d < r; ++d) {
      stride[d] = s;
      s *= size_t(a.shape[d]);
    }
    std::vector<double> c(static_cast<size_t>(n));
    std::vector<int64_t> idx(r, 0);
    uint64_t f = 0;
    for (uint64_t i = 0; i < n; ++i) {
      if (f >= n) throw std::logic_error("npz: Fortran-order index out of range");
      c[size_t(i)] = a.values[size_t(f)];
      for (size_t d = r; d-- > 0;) {
        if (++idx[d] < a.shape[d]) {
          f += stride[d];
          break;
        }
        f -= uint64_t(a.shape[d] - 1) * stride[d];
        idx[d] = 0;
      }
    }
    a.values = std::move(c);
  }
  return a;
}

/// One member of an open archive, read through libzip (inflated and CRC-checked by it).
struct ZipMemberSource : ByteSource {
  zip_file_t* f;
  std::string what;
  ZipMemberSource(zip_file_t* file, std::string w) : f(file), what(std::move(w)) {}
  ~ZipMemberSource() override { zip_fclose(f); }
  size_t read(char* dst, size_t n) override {
    const zip_int64_t k = zip_fread(f, dst, n);
    if (k < 0) {
      if (zip_error_code_zip(zip_file_get_error(f)) == ZIP_ER_CRC)
        throw InputError(what + ": CRC mismatch");
      throw InputError(what + ": cannot read (" + zip_file_strerror(f) + ")");
    }
    return size_t(k);
  }
};

struct ZipCloser {
  zip_t* z;
  ~ZipCloser() {
    if (z) zip_discard(z);
  }
};

std::string zip_open_error(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string s = zip_error_strerror(&e);
  zip_error_fini(&e);
  return s;
}

/// Why libzip could not open an archive to read, in words that fit what it found: with
/// ZIP_CHECKCONS, some of its codes describe the archive, not the file system ("No such file"
/// is a member whose declared size or offset lies beyond the data; "File already exists", a
/// name twice).
std::string zip_read_error(int code) {
  switch (code) {
    case ZIP_ER_NOENT:
      return "a member's declared size or offset lies beyond the data in the file";
    case ZIP_ER_EXISTS:
      return "two members have the same name";
    case ZIP_ER_INCONS:
      return "its directory and its members disagree";
    case ZIP_ER_NOZIP:
      return "no consistent zip directory";
    default:
      return zip_open_error(code);
  }
}

/// Deflate never expands more than 1032 to 1 (zlib's technical note); anything that claims
/// more is a lie about its size.
constexpr uint64_t kMaxDeflateRatio = 1032;

}  // namespace

NpyArray parse_npy(const std::string& b, const std::string& what, uint64_t max_bytes) {
  StringSource in(b);
  uint64_t budget = max_bytes ? max_bytes : default_memory_limit();
  return parse_npy_stream(in, b.size(), budget, what);
}

namespace {

/// Open the archive `path` and call `fn(key, member, size, what)` for each member in turn: its
/// name without ".npy", its bytes (inflated and CRC-checked as they are read) and its declared
/// size, checked against the file. A key that appears twice is an error.
void for_each_member(const std::string& path,
                     const std::function<void(const std::string&, ByteSource&, uint64_t,
                                              const std::string&)>& fn) {
  const std::string what = "'" + path + "'";
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below anyway.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw InputError("cannot read " + what + ": " + sys_error());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(what + ": not a regular file");
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  const uint64_t file_size = uint64_t(st.st_size);
  int err = 0;
  zip_t* za = zip_fdopen(fd, ZIP_CHECKCONS, &err);  // on success, libzip owns fd
  if (!za) {
    ::close(fd);
    if (err == ZIP_ER_MEMORY) throw std::bad_alloc();  // the machine's limit, not the file's
    throw InputError(what + ": not an .npz (zip) file (" + zip_read_error(err) + ")");
  }
  ZipCloser closer{za};
  const zip_int64_t entries = zip_get_num_entries(za, 0);
  if (entries < 0) throw InputError(what + ": not an .npz (zip) file");
  std::set<std::string> seen;
  for (zip_int64_t i = 0; i < entries; ++i) {
    zip_stat_t zs;
    zip_stat_init(&zs);
    // Names as UTF-8 (libzip reads one that is not valid UTF-8 as CP437 and converts it).
    if (zip_stat_index(za, zip_uint64_t(i), ZIP_FL_ENC_GUESS, &zs) != 0)
      throw InputError(what + ": corrupt zip directory (" + zip_strerror(za) + ")");
    const zip_uint64_t need = ZIP_STAT_NAME | ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE |
                              ZIP_STAT_COMP_METHOD | ZIP_STAT_ENCRYPTION_METHOD;
    if ((zs.valid & need) != need) throw InputError(what + ": corrupt zip directory");
    const std::string name = zs.name;
    const std::string mwhat = what + " member '" + shown(name) + "'";
    if (zs.encryption_method != ZIP_EM_NONE) throw InputError(mwhat + ": encrypted");
    if (zs.comp_method != ZIP_CM_STORE && zs.comp_method != ZIP_CM_DEFLATE)
      throw InputError(what + ": zip compression method " + std::to_string(zs.comp_method) +
                       " is not supported (use numpy.savez or savez_compressed)");
    // The declared sizes against what the file can hold: the compressed bytes lie within the
    // file, and the uncompressed size is what they can expand to.
    uint64_t most = 0;
    if (zs.comp_size > file_size ||
        (zs.comp_method == ZIP_CM_STORE && zs.size != zs.comp_size) ||
        (zs.comp_method == ZIP_CM_DEFLATE &&
         (!mul_u64(zs.comp_size, kMaxDeflateRatio, most) || zs.size > most + 1024)))
      throw InputError(mwhat + ": declared size " + std::to_string(zs.size) +
                       " does not fit its " + std::to_string(zs.comp_size) +
                       " compressed bytes in a file of " + std::to_string(file_size));
    zip_file_t* zf = zip_fopen_index(za, zip_uint64_t(i), 0);
    if (!zf) throw InputError(mwhat + ": cannot open (" + zip_strerror(za) + ")");
    ZipMemberSource src(zf, mwhat);
    std::string key = name;
    if (key.size() > 4 && key.compare(key.size() - 4, 4, ".npy") == 0) key.resize(key.size() - 4);
    if (!seen.insert(key).second)
      throw InputError(what + ": array '" + shown(key) + "' appears twice");
    fn(key, src, zs.size, mwhat);
  }
}

}  // namespace

NpzFile read_npz(const std::string& path, uint64_t max_bytes) {
  uint64_t budget = max_bytes ? max_bytes : default_memory_limit();
  NpzFile out;
  for_each_member(path, [&](const std::string& key, ByteSource& src, uint64_t size,
                            const std::string& what) {
    out.emplace(key, parse_npy_stream(src, size, budget, what));
  });
  return out;
}

void stream_npz(const std::string& path, const NpzArrayFn& on_array) {
  for_each_member(path, [&](const std::string& key, ByteSource& src, uint64_t size,
                            const std::string& what) {
    const NpyHeader h = read_npy_header(src, size, what);
    const NpyChunkFn sink = on_array(key, h, what);
    read_npy_data(src, h, what, sink ? sink : [](const unsigned char*, size_t) {});
  });
}

std::string shown_text(const std::string& s) { return shown(s); }

// ---------------------------------------------------------------------------------------------
// Writing.

namespace {

std::string npy_header(const std::string& descr, const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    s += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
  s += ")";
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + s + ", }";
  // Pad with spaces so the data starts on a 64-byte boundary; the header ends in '\n'.
  while ((10 + h.size() + 1) % 64) h.push_back(' ');
  h.push_back('\n');
  std::string b = "\x93NUMPY";
  b.push_back(1);
  b.push_back(0);
  put_le(b, h.size(), 2);
  return b + h;
}

int item_size(const std::string& dtype, std::string& descr) {
  if (dtype == "f4") return descr = "<f4", 4;
  if (dtype == "f8") return descr = "<f8", 8;
  if (dtype == "i8") return descr = "<i8", 8;
  throw InputError("npy: cannot write dtype '" + dtype + "'");
}

void put_values(std::string& b, const NpyArray& a) {
  std::string descr;
  const int size = item_size(a.dtype, descr);
  for (double v : a.values) {
    if (size == 4) {
      const float f = static_cast<float>(v);
      uint32_t r;
      std::memcpy(&r, &f, 4);
      put_le(b, r, 4);
    } else if (a.dtype == "f8") {
      uint64_t r;
      std::memcpy(&r, &v, 8);
      put_le(b, r, 8);
    } else {
      put_le(b, uint64_t(int64_t(v)), 8);
    }
  }
}

/// 1980-01-01 00:00 local time: the zip (DOS) epoch, so that an archive's bytes do not depend
/// on when it was written.
time_t dos_epoch() {
  std::tm t{};
  t.tm_year = 80;
  t.tm_mday = 1;
  t.tm_isdst = -1;
  return std::mktime(&t);
}

/// A window of the spool file as a libzip source: read with pread from one shared descriptor,
/// so that an archive of many members opens no file per member.
struct SpoolWindow {
  int fd;
  uint64_t offset, size, pos = 0;
  time_t mtime;
  zip_error_t error;
};

zip_int64_t spool_window(void* state, void* data, zip_uint64_t len, zip_source_cmd_t cmd) {
  auto* w = static_cast<SpoolWindow*>(state);
  switch (cmd) {
    case ZIP_SOURCE_OPEN:
      w->pos = 0;
      return 0;
    case ZIP_SOURCE_READ: {
      const uint64_t n = std::min<uint64_t>(len, w->size - w->pos);
      auto* dst = static_cast<char*>(data);
      for (uint64_t done = 0; done < n;) {
        const ssize_t k = ::pread(w->fd, dst + done, size_t(n - done), off_t(w->offset + w->pos + done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
          zip_error_set(&w->error, ZIP_ER_READ, k < 0 ? errno : EIO);
          return -1;
        }
        done += uint64_t(k);
      }
      w->pos += n;
      return zip_int64_t(n);
    }
    case ZIP_SOURCE_CLOSE:
      return 0;
    case ZIP_SOURCE_STAT: {
      zip_stat_t* st = ZIP_SOURCE_GET_ARGS(zip_stat_t, data, len, &w->error);
      if (!st) return -1;
      zip_stat_init(st);
      st->size = st->comp_size = w->size;
      st->mtime = w->mtime;
      st->comp_method = ZIP_CM_STORE;
      st->encryption_method = ZIP_EM_NONE;
      st->valid = ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_MTIME | ZIP_STAT_COMP_METHOD |
                  ZIP_STAT_ENCRYPTION_METHOD;
      return sizeof(*st);
    }
    case ZIP_SOURCE_ERROR:
      return zip_error_to_data(&w->error, data, len);
    case ZIP_SOURCE_FREE:
      zip_error_fini(&w->error);
      delete w;
      return 0;
    case ZIP_SOURCE_SUPPORTS:
      return ZIP_SOURCE_SUPPORTS_READABLE | ZIP_SOURCE_MAKE_COMMAND_BITMASK(ZIP_SOURCE_SUPPORTS);
    default:
      zip_error_set(&w->error, ZIP_ER_OPNOTSUPP, 0);
      return -1;
  }
}

}  // namespace

std::string npy_bytes(const NpyArray& a) {
  std::string descr;
  item_size(a.dtype, descr);
  std::string b = npy_header(descr, a.shape);
  put_values(b, a);
  return b;
}

// A symlink is written through; a device, FIFO or directory is refused (as AtomicFile does).
NpzWriter::NpzWriter(std::string path) : path_(write_target(path)) {
  tmp_ = path_ + tmp_suffix();
  spool_ = tmp_ + ".data";
  spool_file_ = std::fopen(spool_.c_str(), "wb");
  if (!spool_file_) throw InputError("cannot write '" + spool_ + "': " + sys_error());
}

NpzWriter::~NpzWriter() {
  if (spool_file_) std::fclose(spool_file_);
  std::remove(spool_.c_str());
  if (!done_) std::remove(tmp_.c_str());
}

void NpzWriter::append(const std::string& key, const std::string& bytes) {
  if (finished_ || !spool_file_) throw std::logic_error("NpzWriter: add after commit");
  if (std::fwrite(bytes.data(), 1, bytes.size(), spool_file_) != bytes.size())
    throw std::runtime_error("write to '" + spool_ + "' failed: " + sys_error());
  members_.push_back({key + ".npy", spool_size_, bytes.size()});
  spool_size_ += bytes.size();
}

void NpzWriter::add(const std::string& key, const NpyArray& a) { append(key, npy_bytes(a)); }

void NpzWriter::add_f4(const std::string& key, const Shape& shape, const float* v, size_t n) {
  std::string b = npy_header("<f4", shape);
  const size_t h = b.size();
  b.resize(h + 4 * n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t r;
    std::memcpy(&r, &v[i], 4);
    for (int k = 0; k < 4; ++k) b[h + 4 * i + size_t(k)] = char((r >> (8 * k)) & 0xFF);
  }
  append(key, b);
}

void NpzWriter::commit() {
  finish();
  publish();
}

void NpzWriter::finish() {
  if (finished_ || !spool_file_) throw std::logic_error("NpzWriter: commit twice");
  const bool ok = std::fflush(spool_file_) == 0;
  const std::string why = ok ? "" : sys_error();
  std::fclose(spool_file_);
  spool_file_ = nullptr;
  if (!ok) throw std::runtime_error("write to '" + spool_ + "' failed: " + why);

  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } spool{::open(spool_.c_str(), O_RDONLY | O_CLOEXEC)};
  if (spool.fd < 0) throw std::runtime_error("cannot read '" + spool_ + "': " + sys_error());
  int err = 0;
  zip_t* za = zip_open(tmp_.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  if (!za) throw std::runtime_error("cannot write '" + tmp_ + "': " + zip_open_error(err));
  const time_t epoch = dos_epoch();
  auto fail = [&](const std::string& step) {
    const std::string msg = "write to '" + tmp_ + "' failed: " + step + ": " + zip_strerror(za);
    zip_discard(za);
    std::remove(tmp_.c_str());
    throw std::runtime_error(msg);
  };
  for (const Member& m : members_) {
    auto* w = new SpoolWindow{spool.fd, m.offset, m.size, 0, epoch, {}};
    zip_error_init(&w->error);
    zip_source_t* src = zip_source_function(za, spool_window, w);
    if (!src) {
      zip_error_fini(&w->error);
      delete w;
      fail("member '" + m.name + "'");
    }
    const zip_int64_t idx = zip_file_add(za, m.name.c_str(), src, ZIP_FL_ENC_UTF_8);
    if (idx < 0) {
      zip_source_free(src);
      fail("member '" + m.name + "'");
    }
    if (zip_set_file_compression(za, zip_uint64_t(idx), ZIP_CM_STORE, 0) != 0 ||
        zip_file_set_mtime(za, zip_uint64_t(idx), epoch, 0) != 0)
      fail("member '" + m.name + "'");
  }
  if (zip_close(za) != 0) fail("closing");
  // libzip wrote a temporary file of its own and renamed it to tmp_; now flush it.
  std::remove(spool_.c_str());
  const int fd = ::open(tmp_.c_str(), O_RDONLY | O_CLOEXEC);
  const bool synced = fd >= 0 && ::fsync(fd) == 0;
  const std::string why2 = synced ? "" : sys_error();
  if (fd >= 0) ::close(fd);
  if (!synced) {
    std::remove(tmp_.c_str());
    throw std::runtime_error("write to '" + tmp_ + "' failed: " + why2);
  }
  finished_ = true;
}

void NpzWriter::publish() {
  if (!finished_) throw std::logic_error("NpzWriter: publish before finish");
  if (done_) return;
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = sys_error();
    std::remove(tmp_.c_str());
    throw std::runtime_error("cannot rename '" + tmp_ + "' to '" + path_ + "': " + why);
  }
  done_ = true;
}

void write_npz(const std::string& path, const std::vector<std::pair<std::string, NpyArray>>& arrays) {
  NpzWriter w(path);
  for (const auto& [key, arr] : arrays) w.add(key, arr);
  w.commit();
}

}  // namespace halfway::sim
