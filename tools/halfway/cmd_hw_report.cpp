// `halfway hw-report [--backend NAME] [--op OP] [--exhaustive] [--json]`: conformance of the
// hardware backends available without a GPU (NVIDIA's host code from the CUDA headers, x86 F16C,
// AVX512-BF16) against the library, with every difference classified.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli_parse.hpp"
#include "commands.hpp"
#include "compare.hpp"
#include "amx_tiles.hpp"
#include "dot.hpp"
#include "halfway/names.hpp"

namespace halfway::cli {

namespace {

using hw::Backend;
using hw::OpReport;

/// What `halfway hw-report` was asked for.
struct HwReportOptions {
  std::string backend, op, from_file, record;
  bool exhaustive = false, json = false;
  unsigned threads = 0;   ///< 0: one per hardware thread
  uint64_t dot_cases = 0;  ///< 0: the default lanes (2^22, 2^27 exhaustive)
};

/// The options from argv (CLI11); returns false after --help.
bool parse_options(int argc, char** argv, HwReportOptions& o) {
  CLI::App app{"Compares hardware implementations available without a GPU with the library, "
               "operation by operation, and classifies every difference (\"NaN payload "
               "canonicalized to 0x7FFF\", \"fp32 subnormal inputs flushed to zero\", ...), "
               "with a count and an example each. Exit status: 0 when the comparison ran "
               "(differences are findings, not failures), 2 on bad input or a backend that is "
               "not present. HALFWAY_HW_DISABLE=a,b hides backends.",
               "halfway hw-report"};
  app.add_option("--backend", o.backend,
                 "nvidia-host (cuda_fp16.h/cuda_bf16.h/cuda_fp8.h host code), f16c, avx512bf16, "
                 "avx512fp16; the dot-product instructions avx512bf16-dot (vdpbf16ps), amx-bf16 "
                 "(tdpbf16ps), amx-fp16 (tdpfp16ps); default: every backend present (absent "
                 "ones are listed)");
  app.add_option("--op", o.op, "only this operation (e.g. f32_to_f16_rn, f16_add)");
  app.add_flag("--exhaustive", o.exhaustive,
               "all 2^32 f32 inputs for conversions, all 2^32 operand pairs for arithmetic "
               "(minutes per operation); default: a structured sample of 2^22 inputs (every "
               "8/16-bit input domain is always covered in full); fma: 2^22 random triples, "
               "2^30 with --exhaustive; dot instructions: 2^22 structured and random lanes, "
               "2^27 with --exhaustive");
  app.add_option("--cases", o.dot_cases, "dot instructions: this many lanes (1..2^36); AMX runs "
                                         "full 16x16 tiles, and N counts their outputs (256 a "
                                         "tile)")
      ->check(CLI::Range(uint64_t(1), uint64_t(1) << 36));
  app.add_option("--from-file", o.from_file,
                 "amx-bf16, amx-fp16: compare and search on tiles recorded in FILE (the record "
                 "layout of tests/data/amx/README.md) instead of running the instruction; works "
                 "on any machine");
  app.add_option("--record", o.record, "amx-bf16, amx-fp16 on an AMX machine: also write the "
                                       "tiles run, in that layout");
  app.add_flag("--json", o.json, "machine-readable output");
  app.add_option("--threads", o.threads, "worker threads (default: one per hardware thread)")
      ->check(CLI::Range(1u, 1024u));
  return !parse_or_help(app, argc, argv);
}

std::string hx(uint64_t v) { return fmt::format("0x{:016X}", v); }

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

std::string operands(const hw::OpInfo& info, const hw::Example& e) {
  if (info.arity == 3)
    return fmt::format("a={} b={} c={}", hw::hex_enc(info.in, e.a), hw::hex_enc(info.in, e.b),
                       hw::hex_enc(info.in, e.c));
  if (info.arity == 2)
    return fmt::format("a={} b={}", hw::hex_enc(info.in, e.a), hw::hex_enc(info.in, e.b));
  return hw::hex_enc(info.in, e.a);
}

void print_text(const Backend& b, const std::vector<OpReport>& reports) {
  fmt::print("backend {}: {}\n", b.name(), b.description());
  for (const OpReport& r : reports) {
    const hw::OpInfo info = hw::op_info(r.op);
    fmt::print("  {:<22} {:<10} {:>10} inputs  {:>10} mismatches  ({:.1f} s)\n", info.name,
               r.random ? "random" : r.exhaustive ? "exhaustive" : "sample", r.total, r.mismatches,
               r.seconds);
    for (const auto& c : r.classes)
      fmt::print("      {:>10}  {:<46} e.g. {} -> hw {}, library {}\n", c.count, c.description,
                 operands(info, c.example), hw::hex_enc(info.out, c.example.hw),
                 hw::hex_enc(info.out, c.example.ref));
  }
}

std::string classes_json(const hw::OpInfo& info, const std::vector<hw::ClassReport>& classes) {
  std::string s = "[";
  for (size_t i = 0; i < classes.size(); ++i) {
    const auto& c = classes[i];
    s += fmt::format(
        "{}{{\"class\": \"{}\", \"count\": {}, \"description\": {}, \"hw_and\": \"{}\", "
        "\"hw_or\": \"{}\", \"example\": {{\"index\": {}, \"a\": \"{}\", \"b\": {}, \"c\": {}, "
        "\"hw\": \"{}\", \"ref\": \"{}\"}}}}",
        i ? ", " : "", hw::diff_id(c.diff), c.count, json_str(c.description),
        hw::hex_enc(info.out, c.hw_and), hw::hex_enc(info.out, c.hw_or), c.example.index,
        hw::hex_enc(info.in, c.example.a),
        info.arity >= 2 ? "\"" + hw::hex_enc(info.in, c.example.b) + "\"" : std::string("null"),
        info.arity == 3 ? "\"" + hw::hex_enc(info.in, c.example.c) + "\"" : std::string("null"),
        hw::hex_enc(info.out, c.example.hw), hw::hex_enc(info.out, c.example.ref));
  }
  return s + "]";
}

std::string json_report(const OpReport& r) {
  const hw::OpInfo info = hw::op_info(r.op);
  return fmt::format(
      "{{\"op\": \"{}\", \"coverage\": \"{}\", \"total\": {}, \"mismatches\": {}, "
      "\"hw_hash\": \"{}\", \"ref_hash\": \"{}\", \"seconds\": {:.3f}, \"classes\": {}}}",
      info.name, r.random ? "random" : r.exhaustive ? "exhaustive" : "sample", r.total, r.mismatches, hx(r.hw_hash),
      hx(r.ref_hash), r.seconds, classes_json(info, r.classes));
}

// --- dot-product instructions ------------------------------------------------------------------

/// Lanes a dot instruction's search looks at (the comparison covers all of them).
constexpr uint64_t kDotSearchCases = uint64_t(1) << 18;

/// Operands and results of a dot lane printed as 32-bit words (two 16-bit elements in a, b).
hw::OpInfo dot_info(const hw::DotInstruction& d) {
  hw::OpInfo info;
  info.name = d.name();
  info.arity = 3;
  info.in = hw::fmt_fp32();  // a, b: element pairs; c: fp32
  info.out = hw::fmt_fp32();
  return info;
}

struct DotRun {
  hw::DotReport report;
  hw::DotSearchResult search;
};

void print_dot(const hw::DotInstruction& d, const DotRun& run) {
  const hw::DotReport& r = run.report;
  const hw::OpInfo info = dot_info(d);
  fmt::print("backend {}: {}\n", d.name(), d.description());
  fmt::print("  documented model: {}\n", hw::describe_dot_model(d.documented()));
  const char* unit = d.full_tiles() ? "outputs" : "lanes";
  fmt::print("  {:>10} {}  {:>10} mismatches against the documented model  ({:.1f} s)\n", r.total,
             unit, r.mismatches, r.seconds);
  auto classes = [&](const std::vector<hw::ClassReport>& cs) {
    for (const auto& c : cs)
      fmt::print("      {:>10}  {:<46} e.g. {} -> hw {}, model {}\n", c.count, c.description,
                 operands(info, c.example), hw::hex_enc(info.out, c.example.hw),
                 hw::hex_enc(info.out, c.example.ref));
  };
  classes(r.classes);
  for (size_t f = 0; f < r.family_mismatches.size(); ++f)
    if (r.family_mismatches[f])
      fmt::print("      {:>10}  of them in family {}\n", r.family_mismatches[f], r.family_name(int(f)));
  fmt::print("  {:>10} differences from IEEE fp32 fmas in index order without flushing:\n",
             r.ieee_mismatches);
  classes(r.ieee_classes);
  const hw::DotSearchResult& s = run.search;
  fmt::print("  search: {} of {} candidate models reproduce all {} {} searched\n",
             s.matched.size(), s.matched.size() + s.others.size(), s.cases, unit);
  for (const auto& m : s.matched)
    fmt::print("      match: {}{}\n", hw::describe_dot_model(m),
               hw::same_dot_model(m, d.documented()) ? " (the documented model)" : "");
  for (size_t i = 0; i < s.others.size() && i < 3; ++i)
    fmt::print("      {:>10} mismatches: {}\n", s.others[i].second,
               hw::describe_dot_model(s.others[i].first));
}

std::string dot_json(const hw::DotInstruction& d, const DotRun& run) {
  const hw::DotReport& r = run.report;
  const hw::OpInfo info = dot_info(d);
  std::string fams;
  for (size_t f = 0; f < r.family_mismatches.size(); ++f)
    fams += fmt::format("{}\"{}\": {}", f ? ", " : "", r.family_name(int(f)), r.family_mismatches[f]);
  const hw::DotSearchResult& s = run.search;
  std::string matched, others;
  bool documented_matched = false;
  for (const auto& m : s.matched) {
    documented_matched = documented_matched || hw::same_dot_model(m, d.documented());
    matched += (matched.empty() ? "" : ", ") + json_str(hw::describe_dot_model(m));
  }
  for (const auto& [m, n] : s.others)
    others += fmt::format("{}{{\"model\": {}, \"mismatches\": {}}}", others.empty() ? "" : ", ",
                          json_str(hw::describe_dot_model(m)), n);
  return fmt::format(
      "{{\"name\": \"{}\", \"present\": true, \"description\": {}, \"dot\": {{"
      "\"documented_model\": {}, \"lanes\": {}, \"mismatches\": {}, \"hw_hash\": \"{}\", "
      "\"ref_hash\": \"{}\", \"seconds\": {:.3f}, \"classes\": {}, \"family_mismatches\": {{{}}}, "
      "\"ieee_mismatches\": {}, \"ieee_classes\": {}, \"search\": {{\"lanes\": {}, "
      "\"candidates\": {}, \"matched\": [{}], \"documented_matched\": {}, \"others\": [{}]}}}}}}",
      d.name(), json_str(d.description()), json_str(hw::describe_dot_model(d.documented())),
      r.total, r.mismatches, hx(r.hw_hash), hx(r.ref_hash), r.seconds,
      classes_json(info, r.classes), fams, r.ieee_mismatches, classes_json(info, r.ieee_classes),
      s.cases, s.matched.size() + s.others.size(), matched, documented_matched ? "true" : "false",
      others);
}

/// The documented model and the search on tiles (recorded or just run).
DotRun tile_run(const hw::DotInstruction& d, const std::vector<hw::AmxTile>& tiles,
                unsigned threads) {
  DotRun run;
  run.report = hw::compare_tiles(d.name(), d.documented(), d.input(), tiles, threads);
  run.search = hw::search_tiles(d.input(), tiles, size_t(kDotSearchCases / hw::kAmxOutputs), threads);
  return run;
}

std::string json_document(const char* coverage, const std::vector<std::string>& parts) {
  std::string js = fmt::format("{{\"coverage\": \"{}\", \"backends\": [", coverage);
  for (size_t i = 0; i < parts.size(); ++i) js += (i ? ", " : "") + parts[i];
  return js + "]}";
}

/// hw-report --from-file: the tiles of a file against the backend's documented model.
int report_tiles(const hw::DotInstruction& d, const std::vector<hw::AmxTile>& tiles, bool json,
                 unsigned threads) {
  const DotRun run = tile_run(d, tiles, threads);
  if (json) fmt::print("{}\n", json_document("recorded", {dot_json(d, run)}));
  else print_dot(d, run);
  return 0;
}

std::string names_list() {
  std::string s;
  for (const auto& n : hw::known_backend_names()) s += (s.empty() ? "" : " ") + n;
  return s;
}

}  // namespace

namespace {

/// The JSON object of a backend that is not present here, or its text line.
void absent(const std::string& name, const std::string& why, bool json,
            std::vector<std::string>& parts) {
  if (json)
    parts.push_back(fmt::format("{{\"name\": \"{}\", \"present\": false, \"absent_reason\": {}}}",
                                name, json_str(why)));
  else
    fmt::print("backend {}: absent ({})\n", name, why);
}

/// The backends and dot instructions the options choose; InputError for a bad choice.
void choose(const HwReportOptions& o, const hw::DotInstruction* tile_backend,
            std::vector<const Backend*>& chosen, std::vector<const hw::DotInstruction*>& dots) {
  if (const hw::DotInstruction* d = tile_backend) {
    if (!o.op.empty())
      throw InputError("--op does not apply to backend '" + o.backend +
                       "' (it checks one instruction)");
    const std::string why = d->absent_reason();
    if (!why.empty()) throw InputError("backend '" + o.backend + "' is not available here: " + why);
    dots.push_back(d);
  } else if (!o.backend.empty()) {
    const Backend* b = hw::find_backend(o.backend);
    if (!b) {
      bool known = false;
      for (const auto& n : hw::known_backend_names()) known = known || n == o.backend;
      if (known)
        throw InputError("backend '" + o.backend +
                         "' is not built in (nvidia-host needs the CUDA toolkit's headers at "
                         "build time)");
      throw InputError("unknown backend '" + o.backend + "' (" + names_list() + ")");
    }
    const std::string why = b->absent_reason();
    if (!why.empty()) throw InputError("backend '" + o.backend + "' is not available here: " + why);
    chosen.push_back(b);
  } else {
    chosen = hw::all_backends();
    if (o.op.empty()) dots = hw::all_dot_instructions();
  }
}

/// The operation --op names (Op::count: every operation), offered by some backend of `chosen`.
hw::Op chosen_op(const std::string& name, const std::vector<const Backend*>& chosen) {
  if (name.empty()) return hw::Op::count;
  hw::Op only = hw::Op::count;
  for (int o = 0; o < hw::kOpCount; ++o)
    if (name == hw::op_info(static_cast<hw::Op>(o)).name) only = static_cast<hw::Op>(o);
  if (only == hw::Op::count) throw InputError("unknown operation '" + name + "'");
  bool offered = false;
  for (const Backend* b : chosen)
    if (b->absent_reason().empty())
      for (hw::Op o : b->ops()) offered = offered || o == only;
  if (!offered) throw InputError("no available backend implements '" + name + "'");
  return only;
}

/// The element-wise backends' reports (JSON objects into `parts`, or text).
void report_backends(const std::vector<const Backend*>& chosen, hw::Op only,
                     const HwReportOptions& o, std::vector<std::string>& parts) {
  const hw::Coverage cov = o.exhaustive ? hw::Coverage::exhaustive : hw::Coverage::sample;
  for (const Backend* b : chosen) {
    const std::string why = b->absent_reason();
    if (!why.empty()) {
      if (only == hw::Op::count) absent(b->name(), why, o.json, parts);  // else: not listed
      continue;
    }
    std::vector<OpReport> reports;
    for (hw::Op op : b->ops())
      if (only == hw::Op::count || op == only)
        reports.push_back(hw::compare_op(*b, op, cov, o.threads));
    if (reports.empty()) continue;
    if (o.json) {
      std::string js = fmt::format("{{\"name\": \"{}\", \"present\": true, \"description\": {}, \"ops\": [",
                                   b->name(), json_str(b->description()));
      for (size_t i = 0; i < reports.size(); ++i) js += (i ? ", " : "") + json_report(reports[i]);
      parts.push_back(js + "]}");
    } else {
      print_text(*b, reports);
    }
  }
}

/// The dot instructions' reports: run, compared with the documented model and searched.
void report_dots(const std::vector<const hw::DotInstruction*>& dots, const HwReportOptions& o,
                 std::vector<std::string>& parts) {
  const uint64_t lanes =
      o.dot_cases ? o.dot_cases : (o.exhaustive ? uint64_t(1) << 27 : uint64_t(1) << 22);
  for (const hw::DotInstruction* d : dots) {
    const std::string why = d->absent_reason();
    if (!why.empty()) {
      absent(d->name(), why, o.json, parts);
      continue;
    }
    DotRun run;
    if (d->full_tiles()) {
      std::vector<hw::AmxTile> tiles =
          hw::amx_tile_cases(d->input(), size_t((lanes + hw::kAmxOutputs - 1) / hw::kAmxOutputs));
      d->run_tiles(tiles.data(), tiles.size());
      if (!o.record.empty()) hw::write_amx_tiles(o.record, tiles);
      run = tile_run(*d, tiles, o.threads);
    } else {
      run.report = hw::compare_dot(*d, lanes, o.threads);
      run.search = hw::search_dot(*d, std::min(lanes, kDotSearchCases), o.threads);
    }
    if (o.json) parts.push_back(dot_json(*d, run));
    else print_dot(*d, run);
  }
}

}  // namespace

int cmd_hw_report(int argc, char** argv) {
  HwReportOptions o;
  if (!parse_options(argc, argv, o)) return 0;
  const hw::DotInstruction* tile_backend = hw::find_dot_instruction(o.backend);
  if (!o.from_file.empty() || !o.record.empty()) {
    if (!tile_backend || !tile_backend->full_tiles())
      throw InputError(std::string(o.from_file.empty() ? "--record" : "--from-file") +
                       " needs --backend amx-bf16 or amx-fp16");
    if (!o.from_file.empty() && !o.record.empty())
      throw InputError("--from-file and --record exclude each other");
    if (!o.from_file.empty() && (o.dot_cases || o.exhaustive))
      throw InputError("--from-file compares the file's tiles: no --cases or --exhaustive");
  }
  if (!o.from_file.empty())
    return report_tiles(*tile_backend, hw::read_amx_tiles(o.from_file), o.json, o.threads);
  std::vector<const Backend*> chosen;
  std::vector<const hw::DotInstruction*> dots;
  choose(o, tile_backend, chosen, dots);
  const hw::Op only = chosen_op(o.op, chosen);
  std::vector<std::string> parts;  // JSON objects, one per backend
  report_backends(chosen, only, o, parts);
  report_dots(dots, o, parts);
  if (o.json) fmt::print("{}\n", json_document(o.exhaustive ? "exhaustive" : "sample", parts));
  return 0;
}

}  // namespace halfway::cli
