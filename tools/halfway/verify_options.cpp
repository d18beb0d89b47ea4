// `halfway verify`'s options: the help text and the command line's parser.
#include <algorithm>
#include <string>
#include <thread>

#include "format_util.hpp"
#include "halfway/names.hpp"
#include "verify_checks.hpp"

namespace halfway::cli::verify_cmd {

const char* const kHelp =
    "usage: halfway verify [--exhaustive] [--op OP] [--format F] [--rounding R] [--threads N]\n"
    "\n"
    "Checks the library against an independent oracle (binary64 arithmetic under the host's\n"
    "rounding modes), results and exception flags bit for bit, scalar routines and bulk kernels.\n"
    "Without --exhaustive: a quick run (seconds) over every encoding of the 16-bit formats\n"
    "(conversions, sqrt), every pair of the formats of at most 10 bits (+ - * /), and sampled\n"
    "f32 inputs and 16-bit pairs, in every deterministic rounding direction. Arithmetic is\n"
    "checked for formats of at most 16 bits.\n"
    "\n"
    "  --exhaustive     also all 2^32 f32 inputs into each format (every direction) and all 2^32\n"
    "                   pairs of each 16-bit format for add sub mul div (near_even by default)\n"
    "  --op OP          restrict to convert add sub mul div sqrt (repeatable, or comma list)\n"
    "  --format F       restrict to format F (repeatable; default fp16 bf16 e4m3 e5m2)\n"
    "  --rounding R     restrict to rounding direction R (repeatable); with --exhaustive, the\n"
    "                   directions of the exhaustive pair checks (default near_even)\n"
    "  --tininess T     after (default) or before\n"
    "  --threads N      worker threads (default: hardware concurrency)\n"
    "  --bulk-path P    bulk kernel implementation to check: reference, a SIMD level this CPU\n"
    "                   runs (avx2, avx512) or best (repeatable). Default: every SIMD level in\n"
    "                   the quick checks, the best (what callers get) in the exhaustive ones\n"
    "  --max-report N   mismatches printed per check (default 5)\n"
    "  --inject-fault   corrupt one library result, flag and count per check, to show that the\n"
    "                   checker catches it (every check must then report mismatches; exit 1)\n"
    "\n"
    "Exit status: 0 all checks agree, 1 a mismatch, 2 bad arguments.\n";

namespace {

constexpr Rounding kAllModes[] = {Rounding::near_even, Rounding::near_maxMag, Rounding::minMag,
                                  Rounding::min,       Rounding::max,         Rounding::odd};
const char* const kOps[] = {"convert", "add", "sub", "mul", "div", "sqrt"};

unsigned parse_count(const std::string& opt, const std::string& v, unsigned lo, unsigned hi) {
  unsigned long n = 0;
  size_t pos = 0;
  try {
    n = std::stoul(v, &pos);
  } catch (...) {
    pos = 0;
  }
  if (pos != v.size() || v.empty() || v[0] == '-' || n < lo || n > hi)
    throw InputError(opt + " needs an integer in " + std::to_string(lo) + ".." +
                     std::to_string(hi) + ", not '" + v + "'");
  return unsigned(n);
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    const auto eq = a.find('=');
    const bool has_eq = a.rfind("--", 0) == 0 && eq != std::string::npos;
    if (has_eq) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    const auto value = [&]() -> std::string {
      if (has_eq) return v;
      if (i + 1 >= argc) throw InputError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--exhaustive") {
      o.exhaustive = true;
    } else if (a == "--inject-fault") {
      o.inject = true;
    } else if (a == "--op") {
      std::string list = value();
      size_t start = 0;
      while (start <= list.size()) {
        const size_t c = list.find(',', start);
        const std::string op = list.substr(start, c == std::string::npos ? c : c - start);
        if (std::find_if(std::begin(kOps), std::end(kOps),
                         [&](const char* k) { return op == k; }) == std::end(kOps))
          throw InputError("unknown --op '" + op + "' (convert add sub mul div sqrt)");
        o.ops.push_back(op);
        if (c == std::string::npos) break;
        start = c + 1;
      }
    } else if (a == "--format") {
      o.formats.push_back(parse_format(value()));
    } else if (a == "--rounding") {
      const Rounding r = parse_rounding(value());
      if (r == Rounding::stochastic)
        throw InputError("--rounding stochastic: the oracle covers the deterministic directions");
      o.modes.push_back(r);
      o.modes_given = true;
    } else if (a == "--tininess") {
      const std::string t = value();
      if (t == "after") o.tininess = Tininess::after_rounding;
      else if (t == "before") o.tininess = Tininess::before_rounding;
      else throw InputError("--tininess takes 'after' or 'before', not '" + t + "'");
    } else if (a == "--threads") {
      o.threads = parse_count(a, value(), 1, 1024);
    } else if (a == "--bulk-path") {
      const std::string name = value();
      const auto best = detail::bulk_path_supported();
      bool found = false;
      for (int p = 0; p <= int(best); ++p)
        if (name == detail::bulk_path_name(detail::BulkPath(p)) ||
            (name == "best" && p == int(best))) {
          o.bulk_paths.push_back(detail::BulkPath(p));
          found = true;
        }
      if (!found) {
        std::string names;
        for (int p = 0; p <= int(best); ++p)
          names += std::string(p ? " " : "") + detail::bulk_path_name(detail::BulkPath(p));
        throw InputError("--bulk-path '" + name + "' is not one this CPU runs (" + names +
                         " best)");
      }
    } else if (a == "--max-report") {
      o.max_report = int(parse_count(a, value(), 0, 1000000));
    } else {
      throw InputError("unknown option '" + std::string(argv[i]) + "' (see 'halfway verify --help')");
    }
  }
  if (o.formats.empty())
    o.formats = {formats::fp16, formats::bf16, formats::e4m3, formats::e5m2};
  if (o.modes.empty()) o.modes.assign(std::begin(kAllModes), std::end(kAllModes));
  if (o.threads == 0) o.threads = std::max(1u, std::thread::hardware_concurrency());
  return o;
}

}  // namespace halfway::cli::verify_cmd
