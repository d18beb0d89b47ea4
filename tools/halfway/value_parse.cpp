#include "value_parse.hpp"

#include <cerrno>
#include <cfenv>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"

namespace halfway::cli {

namespace {

double strtod_mode(const std::string& s, int mode, size_t& used) {
  const int old = std::fegetround();
  std::fesetround(mode);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);  // glibc honours the rounding mode
  std::fesetround(old);
  used = static_cast<size_t>(end - s.c_str());
  return v;
}

}  // namespace

double parse_value_round_to_odd(const std::string& text) {
  if (text.empty()) throw InputError("empty number");
  for (const char c : text)
    if (std::isspace(static_cast<unsigned char>(c)))
      throw InputError("unparsable number '" + text + "'");
  size_t used = 0;
  const double down = strtod_mode(text, FE_DOWNWARD, used);
  if (used != text.size() || used == 0) throw InputError("unparsable number '" + text + "'");
  if (std::isnan(down)) return down;
  const double up = strtod_mode(text, FE_UPWARD, used);
  if (down == up) return down;  // exactly representable (or ±inf)
  // Inexact: truncate toward zero and set the last bit (round to odd).
  const double trunc = strtod_mode(text, FE_TOWARDZERO, used);
  uint64_t b = f64_bits(trunc);
  b |= 1;
  return bits_f64(b);
}

uint64_t parse_u64(const std::string& text, const std::string& what) {
  const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  const std::string digits = hex ? text.substr(2) : text;
  if (digits.empty() ||
      digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") != std::string::npos)
    throw InputError("bad " + what + " '" + text + "' (an integer from 0 to 2^64 - 1)");
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(digits.c_str(), &end, hex ? 16 : 10);
  if (errno == ERANGE || *end)
    throw InputError("bad " + what + " '" + text + "': more than 64 bits (the largest is "
                     "18446744073709551615)");
  return uint64_t(v);
}

}  // namespace halfway::cli
