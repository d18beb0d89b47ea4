#include "format_util.hpp"

#include <boost/multiprecision/cpp_int.hpp>
#include <cstdio>

#include "halfway/softfloat.hpp"

namespace halfway::cli {

std::string fields(const Format& f, uint32_t enc) {
  std::string s;
  auto bits = [&](int hi, int lo) {
    for (int b = hi; b >= lo; --b) s += ((enc >> b) & 1) ? '1' : '0';
  };
  const int m = f.frac_bits, e = f.exp_bits;
  if (f.is_signed) {
    bits(e + m, e + m);
    s += ' ';
  }
  bits(e + m - 1, m);
  if (m > 0) {
    s += ' ';
    bits(m - 1, 0);
  }
  return s;
}

int hex_width(const Format& f) { return (f.nbits() + 3) / 4; }

std::string hex(const Format& f, uint32_t enc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%0*X", hex_width(f), enc & f.enc_mask());
  return buf;
}

std::string exact_decimal(const Format& f, uint32_t enc) {
  const Unpacked u = unpack(f, enc);
  switch (u.cls) {
    case Class::inf: return u.sign ? "-inf" : "inf";
    case Class::qnan:
    case Class::snan: return u.sign ? "-nan" : "nan";
    case Class::zero: return u.sign ? "-0" : "0";
    default: break;
  }
  // value = sig · 2^(exp − 63); strip trailing zero bits, then print sig · 2^k exactly.
  uint64_t sig = u.sig;
  int k = u.exp - 63;
  while ((sig & 1) == 0) {
    sig >>= 1;
    ++k;
  }
  using boost::multiprecision::cpp_int;
  std::string out;
  if (k >= 0) {
    out = (cpp_int(sig) << k).str();
  } else {
    // sig / 2^-k = sig · 5^-k / 10^-k
    const cpp_int scaled = cpp_int(sig) * boost::multiprecision::pow(cpp_int(5), -k);
    std::string digits = scaled.str();
    const size_t frac = static_cast<size_t>(-k);
    if (digits.size() <= frac) digits.insert(0, frac - digits.size() + 1, '0');
    out = digits.substr(0, digits.size() - frac) + "." + digits.substr(digits.size() - frac);
    while (out.back() == '0') out.pop_back();
    if (out.back() == '.') out.pop_back();
  }
  return (u.sign ? "-" : "") + out;
}

std::string hexfloat(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

std::string printable(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  auto esc = [&out](unsigned char c) {
    static const char* hexd = "0123456789abcdef";
    out += "\\x";
    out += hexd[c >> 4];
    out += hexd[c & 15];
  };
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) esc(c);
      else out += char(c);
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence (no overlong forms, surrogates or code points past
    // U+10FFFF) is kept unless it encodes a C1 control (U+0080..U+009F).
    const int len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                  : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    bool ok = len > 0 && i + size_t(len) <= s.size();
    for (int k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(s[i + size_t(k)]) & 0xc0) == 0x80;
    if (ok) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0) || (c == 0xf0 && c1 < 0x90) ||
          (c == 0xf4 && c1 >= 0x90) || (c == 0xc2 && c1 < 0xa0))
        ok = false;
    }
    if (!ok) {
      esc(c);
      ++i;
      continue;
    }
    out.append(s, i, size_t(len));
    i += size_t(len);
  }
  return out;
}

}  // namespace halfway::cli
