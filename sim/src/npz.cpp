#include "halfway/sim/npz.hpp"

#include <zlib.h>

#include <cstring>

#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"
#include "halfway/sim/io.hpp"

namespace halfway::sim {

namespace {

uint64_t le(const std::string& b, size_t off, int n, const std::string& what) {
  if (off + size_t(n) > b.size()) throw InputError(what + ": truncated file");
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[off + size_t(i)]);
  return v;
}

void put_le(std::string& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
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
    if (c == ')' || c == ']') --depth;
    if ((c == ',' || c == '}') && depth == 0) break;
  }
  return h.substr(p, e - p);
}

}  // namespace

NpyArray parse_npy(const std::string& b, const std::string& what) {
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0)
    throw InputError(what + ": not a .npy array");
  const int major = static_cast<unsigned char>(b[6]);
  size_t hlen, hoff;
  if (major == 1) {
    hlen = le(b, 8, 2, what);
    hoff = 10;
  } else {
    hlen = le(b, 8, 4, what);
    hoff = 12;
  }
  if (hoff + hlen > b.size()) throw InputError(what + ": truncated npy header");
  const std::string h = b.substr(hoff, hlen);
  std::string descr = dict_value(h, "descr", what);
  if (descr.size() < 4 || (descr[0] != '\'' && descr[0] != '"'))
    throw InputError(what + ": unsupported dtype " + descr);
  descr = descr.substr(1, descr.size() - 2);
  const char order = descr[0];
  if (order == '>') throw InputError(what + ": big-endian arrays are not supported");
  if (order != '<' && order != '|' && order != '=')
    throw InputError(what + ": unsupported dtype '" + descr + "'");
  NpyArray a;
  a.dtype = descr.substr(1);
  const bool fortran = dict_value(h, "fortran_order", what).find("True") != std::string::npos;
  const std::string shp = dict_value(h, "shape", what);
  {
    size_t i = 0;
    while (i < shp.size()) {
      if (std::isdigit(static_cast<unsigned char>(shp[i]))) {
        int64_t v = 0;
        while (i < shp.size() && std::isdigit(static_cast<unsigned char>(shp[i])))
          v = v * 10 + (shp[i++] - '0');
        a.shape.push_back(v);
      } else {
        ++i;
      }
    }
  }
  const int64_t n = numel(a.shape);
  static const std::pair<const char*, int> kinds[] = {
      {"f2", 2}, {"f4", 4}, {"f8", 8}, {"i1", 1}, {"i2", 2}, {"i4", 4}, {"i8", 8},
      {"u1", 1}, {"u2", 2}, {"u4", 4}, {"u8", 8}, {"b1", 1}};
  int size = 0;
  for (const auto& [k, s] : kinds)
    if (a.dtype == k) size = s;
  if (!size) throw InputError(what + ": unsupported dtype '" + descr + "'");
  const size_t off = hoff + hlen;
  if (b.size() < off + size_t(n) * size_t(size)) throw InputError(what + ": truncated data");
  a.values.resize(size_t(n));
  const char kind = a.dtype[0];
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t raw = le(b, off + size_t(i) * size_t(size), size, what);
    double v = 0;
    if (kind == 'f') {
      if (size == 2) {
        Env env;
        v = to_f64(formats::fp16, uint32_t(raw), env);
      } else if (size == 4) {
        float f;
        const uint32_t r32 = uint32_t(raw);
        std::memcpy(&f, &r32, 4);
        v = f;
      } else {
        std::memcpy(&v, &raw, 8);
      }
    } else if (kind == 'i') {
      const int shift = 64 - 8 * size;
      v = double(int64_t(raw << shift) >> shift);
    } else {
      v = double(raw);
    }
    a.values[size_t(i)] = v;
  }
  if (fortran && a.shape.size() > 1) {
    // Column-major → row-major.
    std::vector<double> c(a.values.size());
    const size_t r = a.shape.size();
    std::vector<int64_t> idx(r, 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t f = 0, stride = 1;
      for (size_t d = 0; d < r; ++d) {
        f += idx[d] * stride;
        stride *= a.shape[d];
      }
      c[size_t(i)] = a.values[size_t(f)];
      for (size_t d = r; d-- > 0;) {
        if (++idx[d] < a.shape[d]) break;
        idx[d] = 0;
      }
    }
    a.values = std::move(c);
  }
  return a;
}

NpzFile read_npz(const std::string& path) {
  const std::string b = read_file(path);
  const std::string what = "'" + path + "'";
  // End of central directory: the last "PK\5\6" within the final 64 KiB + 22 bytes.
  if (b.size() < 22) throw InputError(what + ": not an .npz (zip) file");
  size_t eocd = std::string::npos;
  const size_t lo = b.size() > 65557 ? b.size() - 65557 : 0;
  for (size_t p = b.size() - 22 + 1; p-- > lo;)
    if (le(b, p, 4, what) == 0x06054b50) {
      eocd = p;
      break;
    }
  if (eocd == std::string::npos) throw InputError(what + ": not an .npz (zip) file");
  uint64_t entries = le(b, eocd + 10, 2, what);
  uint64_t cd_off = le(b, eocd + 16, 4, what);
  if ((entries == 0xFFFF || cd_off == 0xFFFFFFFF) && eocd >= 20 &&
      le(b, eocd - 20, 4, what) == 0x07064b50) {
    const uint64_t z = le(b, eocd - 20 + 8, 8, what);
    if (le(b, size_t(z), 4, what) != 0x06064b50) throw InputError(what + ": bad ZIP64 record");
    entries = le(b, size_t(z) + 32, 8, what);
    cd_off = le(b, size_t(z) + 48, 8, what);
  }
  NpzFile out;
  size_t p = size_t(cd_off);
  for (uint64_t e = 0; e < entries; ++e) {
    if (le(b, p, 4, what) != 0x02014b50) throw InputError(what + ": corrupt zip directory");
    const int method = int(le(b, p + 10, 2, what));
    const uint32_t crc = uint32_t(le(b, p + 16, 4, what));
    uint64_t csize = le(b, p + 20, 4, what), usize = le(b, p + 24, 4, what);
    const size_t nlen = size_t(le(b, p + 28, 2, what)), xlen = size_t(le(b, p + 30, 2, what)),
                 clen = size_t(le(b, p + 32, 2, what));
    uint64_t loff = le(b, p + 42, 4, what);
    const std::string name = b.substr(p + 46, nlen);
    // ZIP64 extra field: the 0xFFFFFFFF fields, in order usize, csize, offset.
    for (size_t x = p + 46 + nlen; x + 4 <= p + 46 + nlen + xlen;) {
      const uint64_t id = le(b, x, 2, what), sz = le(b, x + 2, 2, what);
      if (id == 0x0001) {
        size_t q = x + 4;
        if (usize == 0xFFFFFFFF) { usize = le(b, q, 8, what); q += 8; }
        if (csize == 0xFFFFFFFF) { csize = le(b, q, 8, what); q += 8; }
        if (loff == 0xFFFFFFFF) { loff = le(b, q, 8, what); q += 8; }
      }
      x += 4 + size_t(sz);
    }
    p += 46 + nlen + xlen + clen;
    if (le(b, size_t(loff), 4, what) != 0x04034b50) throw InputError(what + ": corrupt zip entry");
    const size_t data = size_t(loff) + 30 + size_t(le(b, size_t(loff) + 26, 2, what)) +
                        size_t(le(b, size_t(loff) + 28, 2, what));
    if (data + csize > b.size()) throw InputError(what + ": truncated zip entry '" + name + "'");
    std::string raw;
    if (method == 0) {
      raw = b.substr(data, size_t(csize));
    } else if (method == 8) {
      raw.resize(size_t(usize));
      z_stream zs{};
      if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) throw InputError(what + ": zlib failure");
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(b.data() + data));
      zs.avail_in = uInt(csize);
      zs.next_out = reinterpret_cast<Bytef*>(raw.data());
      zs.avail_out = uInt(usize);
      const int rc = inflate(&zs, Z_FINISH);
      inflateEnd(&zs);
      if (rc != Z_STREAM_END || zs.total_out != usize)
        throw InputError(what + ": cannot inflate '" + name + "'");
    } else {
      throw InputError(what + ": zip compression method " + std::to_string(method) +
                       " is not supported (use numpy.savez or savez_compressed)");
    }
    if (uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(raw.data()), uInt(raw.size()))) != crc)
      throw InputError(what + ": CRC mismatch in '" + name + "'");
    std::string key = name;
    if (key.size() > 4 && key.compare(key.size() - 4, 4, ".npy") == 0)
      key.resize(key.size() - 4);
    out[key] = parse_npy(raw, what + " member '" + name + "'");
  }
  return out;
}

std::string npy_bytes(const NpyArray& a) {
  std::string descr;
  int size;
  if (a.dtype == "f4") { descr = "<f4"; size = 4; }
  else if (a.dtype == "f8") { descr = "<f8"; size = 8; }
  else if (a.dtype == "i8") { descr = "<i8"; size = 8; }
  else throw InputError("npy: cannot write dtype '" + a.dtype + "'");
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i)
    shape += std::to_string(a.shape[i]) + (a.shape.size() == 1 ? "," : i + 1 < a.shape.size() ? ", " : "");
  shape += ")";
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so the data starts on a 64-byte boundary; the header ends in '\n'.
  while ((10 + h.size() + 1) % 64) h.push_back(' ');
  h.push_back('\n');
  std::string b = "\x93NUMPY";
  b.push_back(1);
  b.push_back(0);
  put_le(b, h.size(), 2);
  b += h;
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
  return b;
}

void write_npz(const std::string& path, const std::vector<std::pair<std::string, NpyArray>>& arrays) {
  std::string zip, cd;
  uint64_t count = 0;
  for (const auto& [key, arr] : arrays) {
    const std::string name = key + ".npy";
    const std::string data = npy_bytes(arr);
    const uint32_t crc =
        uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(data.data()), uInt(data.size())));
    const uint64_t off = zip.size();
    put_le(zip, 0x04034b50, 4);
    put_le(zip, 20, 2);  // version needed
    put_le(zip, 0, 2);   // flags
    put_le(zip, 0, 2);   // stored
    put_le(zip, 0, 2);   // time
    put_le(zip, 0x21, 2);  // date 1980-01-01
    put_le(zip, crc, 4);
    put_le(zip, data.size(), 4);
    put_le(zip, data.size(), 4);
    put_le(zip, name.size(), 2);
    put_le(zip, 0, 2);
    zip += name + data;
    put_le(cd, 0x02014b50, 4);
    put_le(cd, 20, 2);
    put_le(cd, 20, 2);
    put_le(cd, 0, 2);
    put_le(cd, 0, 2);
    put_le(cd, 0, 2);
    put_le(cd, 0x21, 2);
    put_le(cd, crc, 4);
    put_le(cd, data.size(), 4);
    put_le(cd, data.size(), 4);
    put_le(cd, name.size(), 2);
    put_le(cd, 0, 2);
    put_le(cd, 0, 2);
    put_le(cd, 0, 2);
    put_le(cd, 0, 2);
    put_le(cd, 0, 4);
    put_le(cd, off, 4);
    cd += name;
    ++count;
  }
  const uint64_t cd_off = zip.size();
  zip += cd;
  put_le(zip, 0x06054b50, 4);
  put_le(zip, 0, 2);
  put_le(zip, 0, 2);
  put_le(zip, count, 2);
  put_le(zip, count, 2);
  put_le(zip, cd.size(), 4);
  put_le(zip, cd_off, 4);
  put_le(zip, 0, 2);
  write_file_atomic(path, zip);
}

}  // namespace halfway::sim
