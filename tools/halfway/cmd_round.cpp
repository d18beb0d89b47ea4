// `halfway round VALUE... [--to FORMAT] [--rounding MODE]`: one value, shown in full.
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "cli_parse.hpp"
#include "commands.hpp"
#include "format_util.hpp"
#include "halfway/names.hpp"
#include "halfway/softfloat.hpp"
#include "value_parse.hpp"

namespace halfway::cli {

namespace {

std::string describe(const Format& f, uint32_t enc) {
  return fmt::format("0x{}  {}  = {}", hex(f, enc), fields(f, enc), exact_decimal(f, enc));
}

/// Spacing of the format's values at the encoding's binade (its ulp).
double ulp_at(const Format& f, uint32_t enc) {
  const uint32_t field = (enc & f.mag_mask()) >> f.frac_bits;
  const int e = (f.has_zero && field == 0) ? f.emin() : int(field) - f.bias;
  return std::ldexp(1.0, e - f.frac_bits);
}

/// The values among CLI11's leftovers: everything but options, in the order given ("-inf" and
/// "-nan" are values, which CLI11 would take for short options, so the values are not a CLI11
/// positional). A leftover "--..." is an unknown option; one "--" ends the options.
std::vector<std::string> values_of(const std::vector<std::string>& rest) {
  std::vector<std::string> values;
  bool ended = false;
  for (const std::string& a : rest) {
    if (a == "--" && !ended) {
      ended = true;
    } else if (!ended && a.size() > 2 && a[0] == '-' && a[1] == '-') {
      throw InputError("unknown option '" + a + "'");
    } else {
      values.push_back(a);
    }
  }
  return values;
}

}  // namespace

int cmd_round(int argc, char** argv) {
  CLI::App app{
      "halfway round VALUE... [--to FORMAT] [--rounding MODE] [--seed N] [--tininess "
      "after|before]\nRounds each VALUE (decimal or hex-float, e.g. 0.1 -3e-8 0x1.8p-3 inf -nan) into FORMAT "
      "and shows the encoding with its fields separated, the exact decoded value, both "
      "neighbours, the error in ulps and the IEEE flags.",
      "halfway round"};
  std::string fname = "fp16", rounding = "near_even", tininess = "after";
  std::string seed = "0";  // parse_u64: CLI11 would wrap -1 and 2^64 into range
  app.add_option("--to,-t", fname, "the format (default fp16)");
  app.add_option("--rounding,-r", rounding,
                 "near_even near_maxMag minMag min max odd stochastic (or rne rna rtz rd ru rto "
                 "sr); default near_even");
  app.add_option("--seed", seed, "stochastic rounding's seed");
  app.add_option("--tininess", tininess, "tininess detection (default after)")
      ->check(CLI::IsMember({"after", "before"}));
  app.allow_extras();
  if (parse_or_help(app, argc, argv)) return 0;
  const std::vector<std::string> values = values_of(app.remaining());
  const Format f = parse_format(fname);
  Env env;
  env.rounding = parse_rounding(rounding);
  env.sr_seed = parse_u64(seed, "seed");
  env.tininess = tininess == "before" ? Tininess::before_rounding : Tininess::after_rounding;
  if (values.empty()) throw InputError("no VALUE given (try 'halfway round 0.1 --to fp16')");
  std::vector<double> parsed;
  for (const auto& v : values) parsed.push_back(parse_value_round_to_odd(v));

  for (size_t i = 0; i < values.size(); ++i) {
    if (i) fmt::print("\n");
    Env e = env;
    e.flags = 0;
    const double x = parsed[i];
    const uint32_t r = from_f64(f, x, e);
    Env quiet;
    const double rv = to_f64(f, r, quiet);
    fmt::print("input       {}\n", values[i]);
    fmt::print("format      {} (e{}m{}, bias {}), rounding {}\n", format_name(f), int(f.exp_bits),
               int(f.frac_bits), f.bias, rounding_name(e.rounding));
    fmt::print("result      {}\n", describe(f, r));
    const Unpacked u = unpack(f, r);
    if (u.cls == Class::finite || u.cls == Class::zero || u.cls == Class::inf) {
      Env n;
      const uint32_t below = next_down(f, r, n), above = next_up(f, r, n);
      fmt::print("below       {}\n", below == r ? std::string("(none)") : describe(f, below));
      fmt::print("above       {}\n", above == r ? std::string("(none)") : describe(f, above));
    }
    if (std::isfinite(x) && std::isfinite(rv)) {
      // The error of the result against the input (the input to ~17 significant digits).
      const double err = rv - x;
      fmt::print("error       {:+.6g}  = {:+.4f} ulp\n", err, err / ulp_at(f, r));
    }
    fmt::print("flags       {} (0x{:02X})\n", flags_name(e.flags), e.flags);
  }
  return 0;
}

}  // namespace halfway::cli
