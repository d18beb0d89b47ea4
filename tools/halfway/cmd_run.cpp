// `halfway run EXPERIMENT_DIR... [--all] [--jobs N] [--results DIR] [--plot-only]`: run one
// experiment (its sweep.toml, accumulation.toml, bisect.toml or Python run.py, if any, into
// RESULTS/<name>/)
// and draw its figures with its plot.py, which reads only the results folder.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <boost/multiprecision/cpp_int.hpp>
#include <toml++/toml.h>

#include "cli_parse.hpp"
#include "commands.hpp"
#include "halfway/accumulate.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/sim/trainer.hpp"
#include "spawn.hpp"
#include "sweep.hpp"

namespace fs = std::filesystem;

namespace halfway::cli {

namespace {

std::string default_python() {
  if (const char* p = std::getenv("HALFWAY_PYTHON"); p && *p) return p;
  // Debian's interpreter has the packaged matplotlib/numpy/pandas.
  if (fs::exists("/usr/bin/python3")) return "/usr/bin/python3";
  return "python3";
}

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string shortest(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  for (int p = 1; p <= 17; ++p) {
    char t[64];
    std::snprintf(t, sizeof t, "%.*g", p, v);
    if (std::strtod(t, nullptr) == v) return t;
  }
  return buf;
}

/// One [[case]] of an experiment's bisect.toml: `halfway bisect CONFIG` with these options.
struct BisectCase {
  std::string name, config, granularity = "op", metric = "final_loss";
  int64_t budget = 64;
  std::vector<int64_t> seeds;
};

/// The cases of `file` (each: name, config, and optionally granularity, metric, budget,
/// seeds); an unknown key or a bad value is an InputError naming it.
std::vector<BisectCase> load_bisect_cases(const fs::path& file) {
  toml::table t;
  try {
    t = toml::parse_file(file.string());
  } catch (const toml::parse_error& e) {
    throw InputError(file.string() + ": " + std::string(e.description()));
  }
  const toml::array* cases = t.get_as<toml::array>("case");
  if (t.size() != 1 || !cases || cases->empty())
    throw InputError(file.string() + ": holds [[case]] tables only, at least one");
  std::vector<BisectCase> r;
  for (const toml::node& n : *cases) {
    const toml::table* c = n.as_table();
    if (!c) throw InputError(file.string() + ": every case must be a [[case]] table");
    BisectCase b;
    const std::string where = file.string() + ": case " + std::to_string(r.size() + 1);
    for (auto&& [k, v] : *c) {
      const std::string key(k.str());
      std::string* text = key == "name" ? &b.name : key == "config" ? &b.config
                        : key == "granularity" ? &b.granularity : key == "metric" ? &b.metric
                                                                     : nullptr;
      if (text && v.is_string()) {
        *text = *v.value<std::string>();
      } else if (key == "budget" && v.is_integer()) {
        b.budget = *v.value<int64_t>();
      } else if (key == "seeds" && v.is_array()) {
        for (const toml::node& s : *v.as_array()) {
          if (!s.is_integer() || *s.value<int64_t>() < 0)
            throw InputError(where + ": seeds must be non-negative integers");
          b.seeds.push_back(*s.value<int64_t>());
        }
      } else {
        throw InputError(where + ": unknown key or bad value '" + key +
                         "' (name, config, granularity, metric, budget, seeds)");
      }
    }
    const bool plain = !b.name.empty() && std::all_of(b.name.begin(), b.name.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
    });
    if (!plain || b.config.empty())
      throw InputError(where + ": needs a name of letters, digits, '_' and '-', and a config");
    r.push_back(b);
  }
  return r;
}

/// An experiment's bisect.toml: each case runs `halfway bisect` (this program) on its config,
/// a path relative to the experiment, into OUT/<case>/, resuming from the runs kept there. A
/// case whose config shows no gap (exit 2, "no gap: ...") leaves OUT/<case>.no_gap.txt with
/// that line instead, and the plot says so; any other failure stops the experiment.
int run_bisect_cases(const fs::path& file, const fs::path& out, int jobs) {
  const std::vector<BisectCase> cases = load_bisect_cases(file);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  fs::create_directories(out);
  for (const BisectCase& c : cases) {
    std::vector<std::string> args = {self, "bisect", (file.parent_path() / c.config).string(),
                                     "--out", (out / c.name).string(), "--granularity",
                                     c.granularity, "--metric", c.metric, "--budget",
                                     std::to_string(c.budget), "--jobs", std::to_string(jobs)};
    if (!c.seeds.empty()) {
      std::string s;
      for (int64_t v : c.seeds) s += (s.empty() ? "" : ",") + std::to_string(v);
      args.insert(args.end(), {"--seeds", s});
    }
    std::printf("halfway run: bisect %s (%s, %s)\n", c.name.c_str(), c.config.c_str(),
                c.granularity.c_str());
    std::fflush(stdout);
    std::string said;
    const int rc = run_captured(args, said);
    std::fputs(said.c_str(), stdout);
    const fs::path no_gap = out / (c.name + ".no_gap.txt");
    const size_t at = said.find("no gap: ");
    if (rc == 2 && at != std::string::npos) {
      sim::write_file_atomic(no_gap.string(), said.substr(at, said.find('\n', at) - at) + "\n");
      continue;
    }
    fs::remove(no_gap);
    if (rc != 0 && rc != 1) {  // 1: an answer that is unfinished or does not explain the gap
      std::fprintf(stderr, "halfway run: bisect %s failed (exit status %d)\n", c.name.c_str(), rc);
      return 1;
    }
  }
  return 0;
}

/// The accumulation experiment (experiments/accumulation/accumulation.toml): dot products of
/// fp16 vectors with entries uniform in [0, 1), accumulated by several models, against the
/// exact sum of the exact products (Boost.Multiprecision integers: every fp16 product is a
/// multiple of 2^-48). Writes OUT/accumulation.csv and OUT/manifest.json.
void run_accumulation(const fs::path& cfg_path, const fs::path& out) {
  toml::table t;
  try {
    t = toml::parse_file(cfg_path.string());
  } catch (const toml::parse_error& e) {
    throw InputError(cfg_path.string() + ": " + std::string(e.description()));
  }
  for (auto&& [k, v] : t)
    if (k.str() != "lengths" && k.str() != "trials" && k.str() != "seed")
      throw InputError(cfg_path.string() + ": unknown key '" + std::string(k.str()) +
                       "' (lengths, trials, seed)");
  const toml::array* lens = t.get_as<toml::array>("lengths");
  if (!lens || lens->empty()) throw InputError(cfg_path.string() + ": lengths = [..] required");
  const int64_t trials = t["trials"].value_or<int64_t>(10);
  const uint64_t seed = uint64_t(t["seed"].value_or<int64_t>(0));
  if (trials < 1 || trials > 100000) throw InputError(cfg_path.string() + ": bad trials");
  using namespace halfway;
  const Format in = accumulation::kF16;
  struct M {
    const char* name;
    AccumulationModel m;
  };
  AccumulationModel f16 = accumulation::fp32_sequential;
  f16.acc = accumulation::kF16;
  AccumulationModel f16sr = f16;
  f16sr.rounding = Rounding::stochastic;
  const M models[] = {{"fp16 accumulation (fma, rne)", f16},
                      {"fp16 accumulation, stochastic rounding", f16sr},
                      {"fp32 accumulation (fma, rne)", accumulation::fp32_sequential},
                      {"tensor-core block model (16 terms, fp32)", accumulation::h100_fp32}};
  std::string csv = "model,n,trial,exact,computed,abs_error,rel_error\n";
  for (const toml::node& ln : *lens) {
    const auto nv = ln.value<int64_t>();
    if (!nv || *nv < 1 || *nv > (int64_t(1) << 24))
      throw InputError(cfg_path.string() + ": lengths must be integers in 1..2^24");
    const int n = int(*nv);
    for (int64_t tr = 0; tr < trials; ++tr) {
      uint64_t st = seed * 0x100000001B3ull + uint64_t(n) * 1000003ull + uint64_t(tr);
      std::vector<uint32_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      Env env;
      boost::multiprecision::cpp_int exact = 0;  // in units of 2^-48
      for (int i = 0; i < n; ++i) {
        a[size_t(i)] = from_f64(in, double(splitmix64(st) >> 11) * 0x1p-53, env);
        b[size_t(i)] = from_f64(in, double(splitmix64(st) >> 11) * 0x1p-53, env);
        const double x = to_f64(in, a[size_t(i)], env), y = to_f64(in, b[size_t(i)], env);
        exact += boost::multiprecision::cpp_int(std::ldexp(x * y, 48));  // x*y exact in binary64
      }
      const double ex = std::ldexp(exact.convert_to<double>(), -48);  // for the table only
      for (const M& m : models) {
        Env e;
        e.sr_seed = seed + uint64_t(tr);
        const uint32_t r = dot(m.m, in, a.data(), b.data(), n, 0u, e);
        const double c = to_f64(m.m.acc, r, e);
        // |c - exact| exactly, then rounded once to binary64.
        boost::multiprecision::cpp_int cc = 0;
        if (std::isfinite(c)) cc = boost::multiprecision::cpp_int(std::ldexp(c, 48));
        const boost::multiprecision::cpp_int diff = abs(cc - exact);
        const double ae = std::isfinite(c) ? std::ldexp(diff.convert_to<double>(), -48)
                                           : std::numeric_limits<double>::infinity();
        csv += std::string("\"") + m.name + "\"," + std::to_string(n) + "," + std::to_string(tr) +
               "," + shortest(ex) + "," + shortest(c) + "," + shortest(ae) + "," +
               shortest(ex > 0 ? ae / ex : 0.0) + "\n";
      }
    }
  }
  fs::create_directories(out);
  sim::write_file_atomic((out / "accumulation.csv").string(), csv);
  std::string m = "{\n  \"experiment\": \"accumulation\",\n  \"config_file\": \"" +
                  cfg_path.filename().string() + "\",\n  \"halfway_version\": \"" +
                  sim::sim_version() + "\",\n  \"git_revision\": \"" + sim::git_revision() +
                  "\",\n  \"seed\": " + std::to_string(seed) + ",\n  \"trials\": " +
                  std::to_string(trials) + "\n}\n";
  sim::write_file_atomic((out / "manifest.json").string(), m);
}

int run_one(const fs::path& exp, const fs::path& results_root, int jobs, bool plot_only,
            const std::string& python) {
  const std::string name = fs::absolute(exp).lexically_normal().filename().string();
  if (!fs::is_directory(exp)) throw InputError("no experiment folder " + exp.string());
  const fs::path sweep = exp / "sweep.toml", plot = exp / "plot.py";
  const fs::path acc = exp / "accumulation.toml", runner = exp / "run.py";
  const fs::path bisect = exp / "bisect.toml";
  if (!fs::exists(sweep) && !fs::exists(plot))
    throw InputError(exp.string() + " has neither sweep.toml nor plot.py");
  const fs::path out = results_root / name;
  if (fs::exists(runner) && !plot_only) {
    // A Python experiment (emulate_recipes: a PyTorch model under halfway.torch.emulate):
    // run.py RESULTS --jobs N trains into the results folder, resuming; 77 is "cannot run here".
    std::printf("halfway run: %s -> %s\n", name.c_str(), out.string().c_str());
    std::fflush(stdout);
    build_package_first();
    const std::string failed =
        run_program({python, runner.string(), out.string(), "--jobs", std::to_string(jobs)});
    if (failed == "exit status 77") {
      std::printf("halfway run: %s: skipped, nothing drawn (run.py cannot run here)\n",
                  name.c_str());
      return 0;
    }
    if (!failed.empty()) {
      std::fprintf(stderr, "halfway run: %s: run.py failed (%s)\n", name.c_str(), failed.c_str());
      return 1;
    }
  }
  if (fs::exists(acc) && !plot_only) {
    std::printf("halfway run: %s -> %s\n", name.c_str(), out.string().c_str());
    std::fflush(stdout);
    run_accumulation(acc, out);
  }
  if (fs::exists(bisect) && !plot_only) {
    std::printf("halfway run: %s -> %s\n", name.c_str(), out.string().c_str());
    std::fflush(stdout);
    if (run_bisect_cases(bisect, out, jobs) != 0) return 1;
  }
  if (fs::exists(sweep) && !plot_only) {
    const SweepDef d = load_sweep(sweep.string());
    std::printf("halfway run: %s: %zu runs -> %s\n", name.c_str(), d.runs.size(),
                out.string().c_str());
    std::fflush(stdout);
    const int rc = run_sweep(d, out.string(), jobs, 0, 1, true);
    if (rc != 0) return rc;
  }
  if (fs::exists(plot)) {
    fs::create_directories(out);
    std::fflush(stdout);
    // No shell between us and the plot: a folder name is an argument, never a command.
    const std::string failed = run_program({python, plot.string(), out.string()});
    if (!failed.empty()) {
      std::fprintf(stderr, "halfway run: %s: plot.py failed (%s)\n", name.c_str(),
                   failed.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  CLI::App app{"Run experiments and draw their figures", "halfway run"};
  std::vector<std::string> exps;
  std::string results, root = "experiments", python = default_python();
  int jobs = 1;
  bool all = false, plot_only = false;
  app.add_option("experiments", exps, "experiment folders (each with sweep.toml and plot.py), "
                                      "or names of folders under --experiments");
  app.add_flag("--all", all, "every folder with a plot.py under --experiments");
  app.add_option("--experiments", root, "where --all and bare names look (default: experiments)");
  app.add_option("--results", results, "results root (default: results/ next to the "
                                        "experiments folder)");
  app.add_option("--jobs,-j", jobs, "runs in parallel")->check(CLI::Range(1, 1024));
  app.add_flag("--plot-only", plot_only, "only redraw figures from existing results");
  app.add_option("--python", python, "Python with matplotlib (default: $HALFWAY_PYTHON or "
                                     "/usr/bin/python3)");
  if (parse_or_help(app, argc, argv)) return 0;
  std::vector<fs::path> list;
  if (all) {
    if (!exps.empty()) throw InputError("--all takes no experiment folders");
    if (!fs::is_directory(root)) throw InputError("no experiments folder " + root);
    for (const auto& e : fs::directory_iterator(root))
      if (e.is_directory() && fs::exists(e.path() / "plot.py")) list.push_back(e.path());
    std::sort(list.begin(), list.end());
  } else {
    // A bare name that is not a folder here names one under --experiments (`halfway run
    // text_lm` from the repository root).
    for (const auto& e : exps)
      list.emplace_back(!fs::is_directory(e) && fs::is_directory(fs::path(root) / e)
                            ? fs::path(root) / e
                            : fs::path(e));
  }
  if (list.empty()) throw InputError("usage: halfway run EXPERIMENT_DIR... | --all");
  int rc = 0;
  for (const fs::path& e : list) {
    const fs::path res = !results.empty()
                             ? fs::path(results)
                             : fs::absolute(e).lexically_normal().parent_path().parent_path() /
                                   "results";
    const int r = run_one(e, res, jobs, plot_only, python);
    if (r != 0) rc = r;
  }
  return rc;
}

}  // namespace halfway::cli
