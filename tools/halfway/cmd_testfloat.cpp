// `halfway testfloat FUNCTION [OPTIONS]`: a filter compatible with Berkeley TestFloat 3e.
// Reads test cases in testfloat_gen's text format from stdin (operands first; any further
// fields, such as an expected result and flags, are ignored) and writes one line per case,
// "operands result flags", uppercase hex at each type's full width, as testfloat_ver expects.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "format_util.hpp"
#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"

namespace halfway::cli {

namespace {

const char* kHelp =
    "usage: halfway testfloat FUNCTION [OPTIONS] < cases > results\n"
    "FUNCTION: <t>_add _sub _mul _div _sqrt _mulAdd _roundToInt _eq _le _lt _eq_signaling\n"
    "          _le_quiet _lt_quiet, and conversions <t>_to_<u>, where t and u are TestFloat's\n"
    "          f16 f32 f64 or bf16 tf32 e4m3 e5m2 e4m3fnuz e5m2fnuz e2m3 e3m2 e2m1 e8m0\n"
    "          (f64 only in conversions). Examples: f16_mulAdd f32_to_bf16 f32_to_e4m3.\n"
    "OPTIONS:  -rnear_even -rminMag -rmin -rmax -rnear_maxMag -rodd   rounding (default near_even)\n"
    "          -tininessbefore -tininessafter  tininess detection (default after)\n"
    "          -exact -notexact  roundToInt raises inexact or not (default notexact)\n"
    "          roundToInt -rodd rounds to odd, as SoftFloat 3e: the truncated integer, its last\n"
    "          bit set when inexact (-0.25 -> -1.0)\n"
    "          -sat   overflow saturates to +-max finite (NVIDIA __NV_SATFINITE); without it\n"
    "                 e4m3 overflows to NaN and e5m2 to inf (__NV_NOSAT)\n";

/// A TestFloat type: a halfway format, or binary64 (conversions only).
struct Type {
  bool is_f64 = false;
  Format f{};
  int width() const { return is_f64 ? 16 : hex_width(f); }
  uint64_t mask() const { return is_f64 ? ~uint64_t(0) : f.enc_mask(); }
};

std::optional<Type> parse_type(const std::string& t) {
  Type ty;
  if (t == "f64") {
    ty.is_f64 = true;
    return ty;
  }
  static const std::pair<const char*, const char*> names[] = {
      {"f16", "fp16"},       {"f32", "fp32"},         {"bf16", "bf16"}, {"tf32", "tf32"},
      {"e4m3", "e4m3"},      {"e5m2", "e5m2"},        {"e4m3fnuz", "e4m3fnuz"},
      {"e5m2fnuz", "e5m2fnuz"}, {"e2m3", "e2m3"},     {"e3m2", "e3m2"}, {"e2m1", "e2m1"},
      {"e8m0", "e8m0"},
  };
  for (const auto& [n, fmt] : names)
    if (t == n) {
      ty.f = parse_format(fmt);
      return ty;
    }
  return std::nullopt;
}

enum class Op {
  add, sub, mul, div, sqrt, mulAdd, roundToInt, eq, le, lt, eq_signaling, le_quiet, lt_quiet,
  convert
};

struct Function {
  Op op{};
  Type in, out;
  int operands = 0;
  bool bool_result = false;
};

Function parse_function(const std::string& name) {
  const auto unknown = [&]() {
    return InputError("unknown TestFloat function '" + name + "' (see 'halfway testfloat --help')");
  };
  Function fn;
  const size_t to = name.find("_to_");
  if (to != std::string::npos) {
    auto a = parse_type(name.substr(0, to));
    auto b = parse_type(name.substr(to + 4));
    if (!a || !b || (a->is_f64 && b->is_f64)) throw unknown();
    fn.op = Op::convert;
    fn.in = *a;
    fn.out = *b;
    fn.operands = 1;
    return fn;
  }
  const size_t us = name.find('_');
  if (us == std::string::npos) throw unknown();
  auto t = parse_type(name.substr(0, us));
  if (!t || t->is_f64) throw unknown();
  const std::string op = name.substr(us + 1);
  static const struct {
    const char* name;
    Op op;
    int operands;
    bool boolean;
  } ops[] = {
      {"add", Op::add, 2, false},          {"sub", Op::sub, 2, false},
      {"mul", Op::mul, 2, false},          {"div", Op::div, 2, false},
      {"sqrt", Op::sqrt, 1, false},        {"mulAdd", Op::mulAdd, 3, false},
      {"roundToInt", Op::roundToInt, 1, false},
      {"eq", Op::eq, 2, true},             {"le", Op::le, 2, true},
      {"lt", Op::lt, 2, true},             {"eq_signaling", Op::eq_signaling, 2, true},
      {"le_quiet", Op::le_quiet, 2, true}, {"lt_quiet", Op::lt_quiet, 2, true},
  };
  for (const auto& o : ops)
    if (op == o.name) {
      fn.op = o.op;
      fn.in = fn.out = *t;
      fn.operands = o.operands;
      fn.bool_result = o.boolean;
      return fn;
    }
  throw unknown();
}

bool parse_hex(const std::string& tok, uint64_t& v) {
  if (tok.empty() || tok.size() > 16) return false;
  v = 0;
  for (const char c : tok) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    v = (v << 4) | uint64_t(d);
  }
  return true;
}

std::string hex_of(const Type& t, uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%0*llX", t.width(), static_cast<unsigned long long>(v));
  return buf;
}

/// Read one line of stdin without its '\n' into `line`; false at the end of the input. A failed
/// read (stdin a directory, an I/O error) is an error, not the end; so is a line longer than
/// any TestFloat case could be (stdin /dev/zero), before it fills memory.
bool read_line(std::string& line, uint64_t lineno) {
  constexpr size_t kMaxLine = 65536;
  line.clear();
  int c;
  errno = 0;
  while ((c = getc_unlocked(stdin)) != EOF) {
    if (c == '\n') return true;
    if (line.size() == kMaxLine)
      throw InputError("line " + std::to_string(lineno) + ": longer than " +
                       std::to_string(kMaxLine) + " bytes");
    line += char(c);
  }
  if (std::ferror(stdin))
    throw std::runtime_error(std::string("cannot read standard input: ") +
                             std::strerror(errno ? errno : EIO));
  return !line.empty();
}

/// Write to stdout; stop at the first failure (a full disk) with its reason.
void write_out(const std::string& s) {
  errno = 0;
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0)
    throw std::runtime_error(std::string("write to standard output failed: ") +
                             std::strerror(errno ? errno : EIO));
}

}  // namespace

int cmd_testfloat(int argc, char** argv) {
  if (argc >= 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (argc < 2) throw InputError("no FUNCTION given (e.g. 'halfway testfloat f16_add')");
  Function fn = parse_function(argv[1]);
  Env env;
  bool exact = false, sat = false;
  for (int i = 2; i < argc; ++i) {
    const std::string o = argv[i];
    if (o == "-rnear_even" || o == "-rnear_maxMag" || o == "-rminMag" || o == "-rmin" ||
        o == "-rmax" || o == "-rodd") {
      env.rounding = parse_rounding(o.substr(2));
    } else if (o == "-tininessbefore") {
      env.tininess = Tininess::before_rounding;
    } else if (o == "-tininessafter") {
      env.tininess = Tininess::after_rounding;
    } else if (o == "-exact") {
      exact = true;
    } else if (o == "-notexact") {
      exact = false;
    } else if (o == "-sat") {
      sat = true;
    } else {
      throw InputError("unknown option '" + o + "' (see 'halfway testfloat --help')");
    }
  }
  if (sat && !fn.out.is_f64) fn.out.f.overflow = Overflow::saturate;
  if (sat && !fn.in.is_f64 && fn.op != Op::convert) fn.in.f.overflow = Overflow::saturate;

  std::string line, out;
  out.reserve(1 << 20);
  uint64_t lineno = 0;
  while (read_line(line, lineno + 1)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> tok;
    size_t p = 0;
    while (p < line.size()) {
      while (p < line.size() && (line[p] == ' ' || line[p] == '\t')) ++p;
      const size_t s = p;
      while (p < line.size() && line[p] != ' ' && line[p] != '\t') ++p;
      if (p > s) tok.push_back(line.substr(s, p - s));
      if (static_cast<int>(tok.size()) == fn.operands) break;
    }
    if (tok.empty()) continue;  // blank line
    if (static_cast<int>(tok.size()) < fn.operands)
      throw InputError("line " + std::to_string(lineno) + ": expected " +
                       std::to_string(fn.operands) + " operand(s), got " +
                       std::to_string(tok.size()));
    uint64_t v[3] = {0, 0, 0};
    for (int k = 0; k < fn.operands; ++k) {
      if (!parse_hex(tok[k], v[k]) || (v[k] & ~fn.in.mask()) ||
          static_cast<int>(tok[k].size()) > fn.in.width())
        throw InputError("line " + std::to_string(lineno) + ": bad operand '" +
                         printable(tok[k]) + "' (expected up to " +
                         std::to_string(fn.in.width()) + " hex digits)");
    }
    Env e = env;
    e.flags = 0;
    const Format& f = fn.in.f;
    const auto a = static_cast<uint32_t>(v[0]), b = static_cast<uint32_t>(v[1]),
               c = static_cast<uint32_t>(v[2]);
    uint64_t r = 0;
    switch (fn.op) {
      case Op::add: r = add(f, a, b, e); break;
      case Op::sub: r = sub(f, a, b, e); break;
      case Op::mul: r = mul(f, a, b, e); break;
      case Op::div: r = div(f, a, b, e); break;
      case Op::sqrt: r = halfway::sqrt(f, a, e); break;
      case Op::mulAdd: r = halfway::fma(f, a, b, c, e); break;
      case Op::roundToInt: r = round_to_int(f, a, e.rounding, exact, e); break;
      case Op::eq: r = eq(f, a, b, e); break;
      case Op::le: r = le(f, a, b, e, true); break;
      case Op::lt: r = lt(f, a, b, e, true); break;
      case Op::eq_signaling: r = eq_signaling(f, a, b, e); break;
      case Op::le_quiet: r = le(f, a, b, e, false); break;
      case Op::lt_quiet: r = lt(f, a, b, e, false); break;
      case Op::convert:
        if (fn.in.is_f64) r = from_f64(fn.out.f, bits_f64(v[0]), e);
        else if (fn.out.is_f64) r = to_f64_bits(fn.in.f, a, e);
        else r = convert(fn.in.f, a, fn.out.f, e);
        break;
    }
    for (int k = 0; k < fn.operands; ++k) {
      out += hex_of(fn.in, v[k]);
      out += ' ';
    }
    if (fn.bool_result) out += r ? '1' : '0';
    else out += hex_of(fn.out, r);
    char fl[8];
    std::snprintf(fl, sizeof fl, " %02X\n", e.flags);
    out += fl;
    if (out.size() > (1 << 20) - 64) {
      write_out(out);
      out.clear();
    }
  }
  write_out(out);
  return 0;
}

}  // namespace halfway::cli
