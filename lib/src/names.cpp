#include "halfway/names.hpp"

#include <charconv>
#include <utility>

namespace halfway {
namespace {

struct Preset {
  const char* name;
  Format format;
};

const Preset kPresets[] = {
    {"fp16", formats::fp16},         {"bf16", formats::bf16}, {"tf32", formats::tf32},
    {"fp32", formats::fp32},         {"e4m3", formats::e4m3}, {"e5m2", formats::e5m2},
    {"e4m3fnuz", formats::e4m3fnuz}, {"e5m2fnuz", formats::e5m2fnuz},
    {"e2m3", formats::e2m3},         {"e3m2", formats::e3m2}, {"e2m1", formats::e2m1},
    {"e8m0", formats::e8m0},
};

const std::pair<const char*, const char*> kAliases[] = {
    {"f16", "fp16"},         {"half", "fp16"},         {"float16", "fp16"},
    {"binary16", "fp16"},    {"bfloat16", "bf16"},     {"f32", "fp32"},
    {"float32", "fp32"},     {"float", "fp32"},        {"binary32", "fp32"},
    {"e4m3fn", "e4m3"},      {"fp8_e4m3", "e4m3"},     {"float8_e4m3fn", "e4m3"},
    {"fp8_e5m2", "e5m2"},    {"float8_e5m2", "e5m2"},  {"float8_e4m3fnuz", "e4m3fnuz"},
    {"float8_e5m2fnuz", "e5m2fnuz"}, {"fp6_e2m3", "e2m3"}, {"fp6_e3m2", "e3m2"},
    {"fp4_e2m1", "e2m1"},    {"float4_e2m1fn", "e2m1"}, {"ue8m0", "e8m0"},
    {"float8_e8m0fnu", "e8m0"},
};

std::string quote(std::string_view s) { return "'" + std::string(s) + "'"; }

bool parse_int(std::string_view s, int& out) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, out);
  return ec == std::errc() && p == e && b != e;
}

/// The X or Y of a custom eXmY: decimal digits written the one way (no sign, no leading zero),
/// so that no two names give one format and "e8m00" cannot pass for the preset e8m0.
bool parse_width(std::string_view s, int& out) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  for (const char c : s)
    if (c < '0' || c > '9') return false;
  return parse_int(s, out);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& p : kPresets) v.emplace_back(p.name);
    return v;
  }();
  return names;
}

void validate(const Format& f) {
  const std::string name = "e" + std::to_string(f.exp_bits) + "m" + std::to_string(f.frac_bits);
  if (f.exp_bits < 1 || f.exp_bits > 8)
    throw InputError("impossible format " + name + ": exponent bits must be 1..8");
  if (f.frac_bits > 23)
    throw InputError("impossible format " + name + ": fraction bits must be 0..23");
  if (f.nbits() > 32) throw InputError("impossible format " + name + ": wider than 32 bits");
  if (f.specials == Specials::ieee && f.frac_bits == 0)
    throw InputError("impossible format " + name +
                     ": IEEE specials need a fraction bit to tell NaN from infinity");
  if (f.specials == Specials::ieee && f.exp_bits < 2)
    throw InputError("impossible format " + name + ": IEEE specials need 2+ exponent bits");
  if (f.specials == Specials::fnuz && !f.is_signed)
    throw InputError("impossible format " + name + ": fnuz needs a sign bit (NaN is -0)");
  if (f.overflow == Overflow::infinity && !f.has_inf())
    throw InputError("impossible format " + name + ": overflow to infinity needs IEEE specials");
  if (f.overflow == Overflow::nan && !f.has_nan())
    throw InputError("impossible format " + name + ": overflow to NaN needs a NaN encoding");
  if (!f.has_zero && (f.is_signed || f.frac_bits != 0))
    throw InputError("impossible format " + name + ": 'nozero' is only for unsigned eXm0 scales");
  if (f.max_mag() == 0 || (f.has_zero && (f.max_mag() >> f.frac_bits) == 0 && f.frac_bits == 0))
    throw InputError("impossible format " + name + ": no finite non-zero value");
  // Every value must be exactly representable in binary32, so the bulk kernels can hand values
  // back as float: the exponent range must fit in binary32's.
  if (f.emax() > 127)
    throw InputError("impossible format " + name + ": largest exponent " +
                     std::to_string(f.emax()) + " exceeds binary32's 127 (check the bias)");
  const int min_exp = f.has_zero ? f.emin() - f.frac_bits : f.emin();
  if (min_exp < -149)
    throw InputError("impossible format " + name + ": smallest exponent " +
                     std::to_string(min_exp) + " is below binary32's -149 (check the bias)");
}

Format parse_format(std::string_view text) {
  if (text.empty()) throw InputError("empty format name");
  const auto parts = split(text, ':');
  std::string base(parts[0]);
  for (auto& c : base) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& [alias, target] : kAliases)
    if (base == alias) base = target;
  Format f;
  bool found = false;
  for (const auto& p : kPresets)
    if (base == p.name) {
      f = p.format;
      found = true;
    }
  if (!found) {
    // Custom eXmY: IEEE-like by default (bias 2^(X-1)-1, inf/NaN, overflow to inf).
    int e = -1, m = -1;
    const auto mpos = base.find('m');
    if (base.size() < 4 || base[0] != 'e' || mpos == std::string::npos ||
        !parse_width(std::string_view(base).substr(1, mpos - 1), e) ||
        !parse_width(std::string_view(base).substr(mpos + 1), m))
      throw InputError("unknown format " + quote(text) +
                       " (presets: fp16 bf16 tf32 fp32 e4m3 e5m2 e4m3fnuz e5m2fnuz e2m3 e3m2 "
                       "e2m1 e8m0; custom: eXmY[:options])");
    if (e < 1 || e > 8 || m < 0 || m > 23)
      throw InputError("impossible format " + quote(text) +
                       ": need 1 <= X <= 8 exponent and 0 <= Y <= 23 fraction bits");
    f = Format{};
    f.exp_bits = static_cast<uint8_t>(e);
    f.frac_bits = static_cast<uint8_t>(m);
    f.bias = static_cast<int16_t>((1 << (e - 1)) - 1);
    if (e < 2 || m == 0) {
      f.specials = Specials::none;
      f.overflow = Overflow::saturate;
    }
  }
  bool overflow_set = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string_view o = parts[i];
    int v = 0;
    if (o.substr(0, 5) == "bias=") {
      if (!parse_int(o.substr(5), v) || v < -1000 || v > 1000)
        throw InputError("bad bias in format " + quote(text));
      f.bias = static_cast<int16_t>(v);
    } else if (o == "ieee") {
      f.specials = Specials::ieee;
      if (!overflow_set) f.overflow = Overflow::infinity;
    } else if (o == "fn") {
      f.specials = Specials::fn;
      if (!overflow_set) f.overflow = Overflow::nan;
    } else if (o == "fnuz") {
      f.specials = Specials::fnuz;
      if (!overflow_set) f.overflow = Overflow::nan;
      if (!found) f.bias = static_cast<int16_t>(f.bias + 1);
    } else if (o == "nospecials") {
      f.specials = Specials::none;
      f.overflow = Overflow::saturate;
    } else if (o == "inf") {
      f.overflow = Overflow::infinity;
      overflow_set = true;
    } else if (o == "sat" || o == "satfinite") {
      f.overflow = Overflow::saturate;
      overflow_set = true;
    } else if (o == "overflow_nan") {
      f.overflow = Overflow::nan;
      overflow_set = true;
    } else if (o == "nosat") {
      // NVIDIA's __NV_NOSAT: overflow to infinity where the format has one, else to NaN.
      f.overflow = f.has_inf() ? Overflow::infinity : Overflow::nan;
      overflow_set = true;
    } else if (o == "ftz") {
      f.ftz = true;
    } else if (o == "daz") {
      f.daz = true;
    } else if (o == "gradual") {
      f.ftz = f.daz = false;
    } else if (o == "unsigned") {
      f.is_signed = false;
    } else if (o == "nozero") {
      f.has_zero = false;
    } else {
      throw InputError("unknown option " + quote(o) + " in format " + quote(text) +
                       " (options: bias=N ieee fn fnuz nospecials inf sat nosat overflow_nan ftz "
                       "daz gradual unsigned nozero)");
    }
  }
  validate(f);
  return f;
}

std::string format_name(const Format& f) {
  for (const auto& p : kPresets)
    if (p.format == f) return p.name;
  // Find the closest preset with the same widths and list what differs, or build from eXmY.
  std::string name;
  Format base{};
  for (const auto& p : kPresets) {
    Format q = p.format;
    if (q.exp_bits == f.exp_bits && q.frac_bits == f.frac_bits && q.bias == f.bias &&
        q.specials == f.specials && q.is_signed == f.is_signed && q.has_zero == f.has_zero) {
      name = p.name;
      base = q;
      break;
    }
  }
  if (name.empty()) {
    name = "e" + std::to_string(f.exp_bits) + "m" + std::to_string(f.frac_bits);
    base = parse_format(name);
    if (f.specials != base.specials) {
      name += f.specials == Specials::ieee ? ":ieee"
              : f.specials == Specials::fn ? ":fn"
              : f.specials == Specials::fnuz ? ":fnuz"
                                             : ":nospecials";
      base = parse_format(name);
    }
    if (f.bias != base.bias) name += ":bias=" + std::to_string(f.bias);
    if (!f.is_signed) name += ":unsigned";
    if (!f.has_zero) name += ":nozero";
    base.bias = f.bias;
  }
  if (f.overflow != base.overflow)
    name += f.overflow == Overflow::saturate ? ":sat"
            : f.overflow == Overflow::nan    ? ":overflow_nan"
                                             : ":inf";
  if (f.ftz) name += ":ftz";
  if (f.daz) name += ":daz";
  return name;
}

Rounding parse_rounding(std::string_view text) {
  static const std::pair<const char*, Rounding> names[] = {
      {"near_even", Rounding::near_even},     {"rne", Rounding::near_even},
      {"near_maxMag", Rounding::near_maxMag}, {"rna", Rounding::near_maxMag},
      {"minMag", Rounding::minMag},           {"rtz", Rounding::minMag},
      {"min", Rounding::min},                 {"rd", Rounding::min},
      {"max", Rounding::max},                 {"ru", Rounding::max},
      {"odd", Rounding::odd},                 {"rto", Rounding::odd},
      {"stochastic", Rounding::stochastic},   {"sr", Rounding::stochastic},
  };
  for (const auto& [n, r] : names)
    if (text == n) return r;
  throw InputError("unknown rounding " + quote(text) +
                   " (near_even near_maxMag minMag min max odd stochastic, or rne rna rtz rd ru "
                   "rto sr)");
}

const char* rounding_name(Rounding r) {
  switch (r) {
    case Rounding::near_even: return "near_even";
    case Rounding::near_maxMag: return "near_maxMag";
    case Rounding::minMag: return "minMag";
    case Rounding::min: return "min";
    case Rounding::max: return "max";
    case Rounding::odd: return "odd";
    default: return "stochastic";
  }
}

std::string flags_name(uint8_t flags) {
  static const std::pair<uint8_t, const char*> names[] = {
      {flag::invalid, "invalid"},     {flag::infinite, "infinite"}, {flag::overflow, "overflow"},
      {flag::underflow, "underflow"}, {flag::inexact, "inexact"},
  };
  std::string out;
  for (const auto& [bit, n] : names)
    if (flags & bit) out += (out.empty() ? "" : "|") + std::string(n);
  return out.empty() ? "-" : out;
}

const char* specials_name(Specials s) {
  switch (s) {
    case Specials::ieee: return "ieee";
    case Specials::fn: return "fn";
    case Specials::fnuz: return "fnuz";
    default: return "none";
  }
}

const char* overflow_name(Overflow o) {
  switch (o) {
    case Overflow::infinity: return "inf";
    case Overflow::saturate: return "saturate";
    default: return "nan";
  }
}

}  // namespace halfway
