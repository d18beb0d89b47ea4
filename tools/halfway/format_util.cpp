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

}  // namespace halfway::cli
