// `halfway info [FORMAT...]`: a numpy.finfo-like table of formats.
#include <fmt/format.h>

#include <cmath>

#include <string>
#include <vector>

#include "cli_parse.hpp"
#include "commands.hpp"
#include "format_util.hpp"
#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"

namespace halfway::cli {

namespace {

std::string num(double v) { return fmt::format("{:.6g}", v); }

std::string pow2(double v) {
  int e = 0;
  const double m = std::frexp(v, &e);
  if (m == 0.5) return fmt::format("2^{}", e - 1);
  return num(v);
}

/// The formats named, as named (format_name's spelling), or every preset when none is.
void named_formats(const std::vector<std::string>& given, std::vector<Format>& list,
                   std::vector<std::string>& names) {
  for (const std::string& a : given) {
    list.push_back(parse_format(a));
    names.push_back(format_name(list.back()));
  }
  if (list.empty())
    for (const auto& n : preset_names()) {
      list.push_back(parse_format(n));
      names.push_back(n);
    }
}

}  // namespace

int cmd_info(int argc, char** argv) {
  CLI::App app{"halfway info [--csv] [FORMAT...]\nPrints bits, bias, max, min normal, min "
               "subnormal, epsilon and the special encodings of each format (all presets when "
               "none is named).",
               "halfway info"};
  std::vector<std::string> given;
  bool csv = false;
  app.add_flag("--csv", csv, "comma-separated values with a header row");
  app.add_option("FORMAT", given, "a preset or eXmY[:options]");
  if (parse_or_help(app, argc, argv)) return 0;
  std::vector<Format> list;
  std::vector<std::string> names;
  named_formats(given, list, names);

  const std::vector<std::string> header = {"format", "bits", "exp", "frac", "bias", "max",
                                           "min_normal", "min_subnormal", "eps", "specials",
                                           "overflow", "max_enc", "inf_enc", "nan_enc", "neg_zero"};
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < list.size(); ++i) {
    const Format& f = list[i];
    Env env;
    const double max = to_f64(f, f.max_mag(), env);
    const uint32_t min_norm_enc = f.has_zero ? (1u << f.frac_bits) : 0u;
    const double min_normal = to_f64(f, min_norm_enc, env);
    const bool has_sub = f.has_zero && f.frac_bits > 0 && !f.daz;
    const double min_sub = has_sub ? to_f64(f, 1, env) : 0.0;
    // eps: the distance from 1.0 to the next larger value (numpy's definition).
    const double eps = std::ldexp(1.0, -f.frac_bits);
    rows.push_back({names[i], std::to_string(f.nbits()), std::to_string(f.exp_bits),
                    std::to_string(f.frac_bits), std::to_string(f.bias), num(max), pow2(min_normal),
                    has_sub ? pow2(min_sub) : "-", pow2(eps), specials_name(f.specials),
                    overflow_name(f.overflow), "0x" + hex(f, f.max_mag()),
                    f.has_inf() ? "0x" + hex(f, f.inf_mag()) : "-",
                    f.has_nan() ? "0x" + hex(f, f.default_nan()) : "-",
                    f.has_neg_zero() ? "0x" + hex(f, f.sign_bit()) : "-"});
    if (f.ftz || f.daz) rows.back()[9] += f.ftz && f.daz ? "+ftz+daz" : f.ftz ? "+ftz" : "+daz";
  }
  if (csv) {
    for (size_t c = 0; c < header.size(); ++c) fmt::print("{}{}", c ? "," : "", header[c]);
    fmt::print("\n");
    for (const auto& r : rows) {
      for (size_t c = 0; c < r.size(); ++c) fmt::print("{}{}", c ? "," : "", r[c]);
      fmt::print("\n");
    }
    return 0;
  }
  std::vector<size_t> w(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    w[c] = header[c].size();
    for (const auto& r : rows) w[c] = std::max(w[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t c = 0; c < r.size(); ++c) s += fmt::format("{:<{}}  ", r[c], w[c]);
    while (!s.empty() && s.back() == ' ') s.pop_back();
    fmt::print("{}\n", s);
  };
  line(header);
  for (const auto& r : rows) line(r);
  return 0;
}

}  // namespace halfway::cli
