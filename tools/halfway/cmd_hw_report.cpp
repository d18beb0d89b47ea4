// `halfway hw-report [--backend NAME] [--op OP] [--exhaustive] [--json]`: conformance of the
// hardware backends available without a GPU (NVIDIA's host code from the CUDA headers, x86 F16C,
// AVX512-BF16) against the library, with every difference classified.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "commands.hpp"
#include "compare.hpp"
#include "amx_tiles.hpp"
#include "dot.hpp"
#include "halfway/names.hpp"

namespace halfway::cli {

namespace {

using hw::Backend;
using hw::OpReport;

const char* kHelp =
    "usage: halfway hw-report [--backend NAME] [--op OP] [--exhaustive] [--cases N] [--json]\n"
    "                         [--threads N] [--from-file FILE] [--record FILE]\n"
    "Compares hardware implementations available without a GPU with the library, operation by\n"
    "operation, and classifies every difference (\"NaN payload canonicalized to 0x7FFF\",\n"
    "\"fp32 subnormal inputs flushed to zero\", ...), with a count and an example each.\n"
    "\n"
    "  --backend NAME  nvidia-host (cuda_fp16.h/cuda_bf16.h/cuda_fp8.h host code), f16c,\n"
    "                  avx512bf16, avx512fp16; the dot-product instructions avx512bf16-dot\n"
    "                  (vdpbf16ps), amx-bf16 (tdpbf16ps), amx-fp16 (tdpfp16ps); default:\n"
    "                  every backend present (absent ones are listed)\n"
    "  --op OP         only this operation (e.g. f32_to_f16_rn, f16_add)\n"
    "  --exhaustive    all 2^32 f32 inputs for conversions, all 2^32 operand pairs for\n"
    "                  arithmetic (minutes per operation); default: a structured sample of\n"
    "                  2^22 inputs (every 8/16-bit input domain is always covered in full);\n"
    "                  fma: 2^22 random triples, 2^30 with --exhaustive; dot instructions:\n"
    "                  2^22 structured and random lanes, 2^27 with --exhaustive\n"
    "  --cases N       dot instructions: this many lanes (1..2^36); AMX runs full 16x16 tiles,\n"
    "                  and N counts their outputs (256 a tile)\n"
    "  --from-file FILE  amx-bf16, amx-fp16: compare and search on tiles recorded in FILE (the\n"
    "                  record layout of tests/data/amx/README.md) instead of running the\n"
    "                  instruction; works on any machine\n"
    "  --record FILE   amx-bf16, amx-fp16 on an AMX machine: also write the tiles run, in\n"
    "                  that layout\n"
    "  --json          machine-readable output\n"
    "  --threads N     worker threads (default: one per hardware thread)\n"
    "Exit status: 0 when the comparison ran (differences are findings, not failures), 2 on bad\n"
    "input or a backend that is not present. HALFWAY_HW_DISABLE=a,b hides backends.\n";

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

int cmd_hw_report(int argc, char** argv) {
  std::string backend_name, op_name;
  bool exhaustive = false, json = false;
  unsigned threads = 0;
  uint64_t dot_cases = 0;
  std::string from_file, record;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* opt) -> std::string {
      if (i + 1 >= argc) throw InputError(std::string(opt) + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      fmt::print("{}", kHelp);
      return 0;
    } else if (a == "--backend") {
      backend_name = value("--backend");
    } else if (a == "--op") {
      op_name = value("--op");
    } else if (a == "--exhaustive") {
      exhaustive = true;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--cases") {
      const std::string v = value("--cases");
      char* end = nullptr;
      const unsigned long long c = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || v[0] == '-' || *end || c < 1 || c > (1ull << 36))
        throw InputError("--cases needs 1..2^36, got '" + v + "'");
      dot_cases = c;
    } else if (a == "--from-file") {
      from_file = value("--from-file");
    } else if (a == "--record") {
      record = value("--record");
    } else if (a == "--threads") {
      const std::string v = value("--threads");
      char* end = nullptr;
      const long t = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || t < 1 || t > 1024) throw InputError("--threads needs 1..1024, got '" + v + "'");
      threads = static_cast<unsigned>(t);
    } else {
      throw InputError("unknown argument '" + a + "' (see 'halfway hw-report --help')");
    }
  }

  std::vector<const Backend*> chosen;
  std::vector<const hw::DotInstruction*> dots;
  const hw::DotInstruction* tile_backend = hw::find_dot_instruction(backend_name);
  if (!from_file.empty() || !record.empty()) {
    if (!tile_backend || !tile_backend->full_tiles())
      throw InputError(std::string(from_file.empty() ? "--record" : "--from-file") +
                       " needs --backend amx-bf16 or amx-fp16");
    if (!from_file.empty() && !record.empty())
      throw InputError("--from-file and --record exclude each other");
    if (dot_cases || exhaustive) {
      if (!from_file.empty()) throw InputError("--from-file compares the file's tiles: no --cases or --exhaustive");
    }
  }
  if (!from_file.empty()) {
    const std::vector<hw::AmxTile> tiles = hw::read_amx_tiles(from_file);
    return report_tiles(*tile_backend, tiles, json, threads);
  }
  if (const hw::DotInstruction* d = tile_backend) {
    if (!op_name.empty())
      throw InputError("--op does not apply to backend '" + backend_name +
                       "' (it checks one instruction)");
    const std::string why = d->absent_reason();
    if (!why.empty()) throw InputError("backend '" + backend_name + "' is not available here: " + why);
    dots.push_back(d);
  } else if (!backend_name.empty()) {
    const Backend* b = hw::find_backend(backend_name);
    if (!b) {
      bool known = false;
      for (const auto& n : hw::known_backend_names()) known = known || n == backend_name;
      if (known)
        throw InputError("backend '" + backend_name +
                         "' is not built in (nvidia-host needs the CUDA toolkit's headers at "
                         "build time)");
      throw InputError("unknown backend '" + backend_name + "' (" + names_list() + ")");
    }
    const std::string why = b->absent_reason();
    if (!why.empty()) throw InputError("backend '" + backend_name + "' is not available here: " + why);
    chosen.push_back(b);
  } else {
    chosen = hw::all_backends();
    if (op_name.empty()) dots = hw::all_dot_instructions();
  }

  hw::Op only = hw::Op::count;
  if (!op_name.empty()) {
    for (int o = 0; o < hw::kOpCount; ++o)
      if (op_name == hw::op_info(static_cast<hw::Op>(o)).name) only = static_cast<hw::Op>(o);
    if (only == hw::Op::count) throw InputError("unknown operation '" + op_name + "'");
    bool offered = false;
    for (const Backend* b : chosen)
      if (b->absent_reason().empty())
        for (hw::Op o : b->ops()) offered = offered || o == only;
    if (!offered) throw InputError("no available backend implements '" + op_name + "'");
  }

  const hw::Coverage cov = exhaustive ? hw::Coverage::exhaustive : hw::Coverage::sample;
  std::vector<std::string> parts;  // JSON objects, one per backend
  for (const Backend* b : chosen) {
    const std::string why = b->absent_reason();
    if (!why.empty()) {
      if (only != hw::Op::count) continue;  // only backends that can run the operation
      if (json)
        parts.push_back(fmt::format("{{\"name\": \"{}\", \"present\": false, \"absent_reason\": {}}}",
                                    b->name(), json_str(why)));
      else
        fmt::print("backend {}: absent ({})\n", b->name(), why);
      continue;
    }
    std::vector<OpReport> reports;
    for (hw::Op o : b->ops()) {
      if (only != hw::Op::count && o != only) continue;
      reports.push_back(hw::compare_op(*b, o, cov, threads));
    }
    if (reports.empty()) continue;
    if (json) {
      std::string js = fmt::format("{{\"name\": \"{}\", \"present\": true, \"description\": {}, \"ops\": [",
                                   b->name(), json_str(b->description()));
      for (size_t i = 0; i < reports.size(); ++i) js += (i ? ", " : "") + json_report(reports[i]);
      parts.push_back(js + "]}");
    } else {
      print_text(*b, reports);
    }
  }
  const uint64_t lanes = dot_cases ? dot_cases : (exhaustive ? uint64_t(1) << 27 : uint64_t(1) << 22);
  for (const hw::DotInstruction* d : dots) {
    const std::string why = d->absent_reason();
    if (!why.empty()) {
      if (json)
        parts.push_back(fmt::format("{{\"name\": \"{}\", \"present\": false, \"absent_reason\": {}}}",
                                    d->name(), json_str(why)));
      else
        fmt::print("backend {}: absent ({})\n", d->name(), why);
      continue;
    }
    if (d->full_tiles()) {
      std::vector<hw::AmxTile> tiles =
          hw::amx_tile_cases(d->input(), size_t((lanes + hw::kAmxOutputs - 1) / hw::kAmxOutputs));
      d->run_tiles(tiles.data(), tiles.size());
      if (!record.empty()) hw::write_amx_tiles(record, tiles);
      const DotRun run = tile_run(*d, tiles, threads);
      if (json) parts.push_back(dot_json(*d, run));
      else print_dot(*d, run);
      continue;
    }
    DotRun run;
    run.report = hw::compare_dot(*d, lanes, threads);
    run.search = hw::search_dot(*d, std::min(lanes, kDotSearchCases), threads);
    if (json) parts.push_back(dot_json(*d, run));
    else print_dot(*d, run);
  }
  if (json) fmt::print("{}\n", json_document(exhaustive ? "exhaustive" : "sample", parts));
  return 0;
}

}  // namespace halfway::cli
