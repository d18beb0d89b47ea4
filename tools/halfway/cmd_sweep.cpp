// `halfway sweep SWEEP.toml [--out DIR] [--jobs N] [--shard I/N]`: run the cartesian product of
// a sweep file's lists over config keys, resumably, in parallel, optionally one shard of it.
// `halfway merge DIR... [--out FILE]`: one sweep.csv from the run folders of shards.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <toml++/toml.h>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_parse.hpp"
#include "commands.hpp"
#include "format_util.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/sim/csv.hpp"
#include "halfway/sim/memory.hpp"
#include "size_option.hpp"
#include "halfway/sim/trainer.hpp"
#include "progress.hpp"
#include "sweep.hpp"

namespace fs = std::filesystem;

namespace halfway::cli {

namespace {

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

/// The text of a scalar TOML value as it appears in sweep.csv.
std::string value_text(const toml::node& n) {
  if (auto s = n.as_string()) return s->get();
  if (auto i = n.as_integer()) return std::to_string(i->get());
  if (auto f = n.as_floating_point()) return sim::number_text(f->get());
  if (auto b = n.as_boolean()) return b->get() ? "true" : "false";
  std::ostringstream o;
  if (auto a = n.as_array()) o << toml::json_formatter{*a};
  else if (auto t = n.as_table()) o << toml::json_formatter{*t};
  return one_line(o.str());
}

/// Set `table.option` (any depth) in `root`, creating tables on the way.
void set_key(toml::table& root, const std::string& key, const toml::node& value) {
  toml::table* t = &root;
  size_t start = 0;
  for (size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1) {
    const std::string part = key.substr(start, dot - start);
    toml::node* n = t->get(part);
    if (!n) {
      t->insert(part, toml::table{});
      n = t->get(part);
    }
    if (!n->is_table())
      throw InputError("key '" + key + "': '" + part + "' is not a table in the config");
    t = n->as_table();
  }
  const std::string last = key.substr(start);
  value.visit([&](auto&& x) { t->insert_or_assign(last, x); });
}

void check_key_syntax(const std::string& key, const std::string& where) {
  if (key.find('.') == std::string::npos || key.front() == '.' || key.back() == '.' ||
      key.find("..") != std::string::npos)
    throw InputError(where + " '" + key + "' must name a config key as TABLE.OPTION "
                     "(e.g. scaler.scale)");
}

// Limits of a sweep, checked before anything is expanded (docs/experiments.md states them).
constexpr uint64_t kMaxAxisValues = 100000;  ///< values of one axis (list, range or pow2)
constexpr uint64_t kMaxRuns = 100000;        ///< runs of a whole sweep (cases x axes)
constexpr int64_t kPow2Limit = 1000;         ///< pow2 exponents within -1000..1000

/// Expand one axis: a list of values, or { pow2 = [lo, hi] } (2^lo..2^hi as floats), or
/// { range = [lo, hi] } (integers lo..hi).
std::vector<std::shared_ptr<toml::node>> axis_values(const std::string& key, const toml::node& n) {
  std::vector<std::shared_ptr<toml::node>> out;
  auto copy = [](const toml::node& v) -> std::shared_ptr<toml::node> {
    std::shared_ptr<toml::node> p;
    v.visit([&](auto&& x) { p = std::make_shared<std::decay_t<decltype(x)>>(x); });
    return p;
  };
  if (auto a = n.as_array()) {
    if (a->size() > kMaxAxisValues)
      throw InputError("axis '" + key + "' has " + std::to_string(a->size()) +
                       " values, more than " + std::to_string(kMaxAxisValues));
    for (const toml::node& v : *a) out.push_back(copy(v));
  } else if (auto t = n.as_table()) {
    const bool pow2 = t->contains("pow2"), range = t->contains("range");
    if (t->size() != 1 || !(pow2 || range))
      throw InputError("axis '" + key + "': a table must be { pow2 = [lo, hi] } or "
                       "{ range = [lo, hi] }");
    const toml::array* lim = t->get_as<toml::array>(pow2 ? "pow2" : "range");
    if (!lim || lim->size() != 2 || !(*lim)[0].is_integer() || !(*lim)[1].is_integer())
      throw InputError("axis '" + key + "': pow2/range takes two integers [lo, hi]");
    const int64_t lo = (*lim)[0].as_integer()->get(), hi = (*lim)[1].as_integer()->get();
    const std::string bounds = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (lo > hi) throw InputError("axis '" + key + "': bad bounds " + bounds + " (lo > hi)");
    if (pow2 && (lo < -kPow2Limit || hi > kPow2Limit))
      throw InputError("axis '" + key + "': bad bounds " + bounds + " (pow2 exponents are "
                       "within -" + std::to_string(kPow2Limit) + ".." +
                       std::to_string(kPow2Limit) + ")");
    // hi - lo in unsigned arithmetic: exact for every lo <= hi, no signed overflow.
    const uint64_t span = uint64_t(hi) - uint64_t(lo);
    if (span >= kMaxAxisValues)
      throw InputError("axis '" + key + "': " + bounds + " has more than " +
                       std::to_string(kMaxAxisValues) + " values");
    for (uint64_t k = 0; k <= span; ++k) {
      const int64_t v = int64_t(uint64_t(lo) + k);
      if (pow2) out.push_back(std::make_shared<toml::value<double>>(std::ldexp(1.0, int(v))));
      else out.push_back(std::make_shared<toml::value<int64_t>>(v));
    }
  } else {
    throw InputError("axis '" + key + "' must be a list of values (or a pow2/range table)");
  }
  if (out.empty()) throw InputError("axis '" + key + "' has no values");
  return out;
}


std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

std::string json_number(const nlohmann::json& j) {
  if (j.is_null()) return "";
  if (j.is_number_float()) return sim::number_text(j.get<double>());
  return j.dump();
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

/// Column sums of steps.csv for the gradient counters.
void grad_sums(const std::string& steps_csv, int64_t& values, int64_t& under, int64_t& over) {
  values = under = over = 0;
  std::istringstream in(sim::read_file(steps_csv));
  std::string line;
  if (!std::getline(in, line)) return;
  const auto head = split_csv_line(line);
  int iv = -1, iu = -1, io = -1;
  for (size_t i = 0; i < head.size(); ++i) {
    if (head[i] == "grad_values") iv = int(i);
    // Run folders written before the count was renamed call it grad_underflow.
    if (head[i] == "grad_flushed" || head[i] == "grad_underflow") iu = int(i);
    if (head[i] == "grad_overflow") io = int(i);
  }
  while (std::getline(in, line)) {
    const auto f = split_csv_line(line);
    auto get = [&](int i) -> int64_t {
      return i >= 0 && size_t(i) < f.size() && !f[i].empty() ? std::stoll(f[i]) : 0;
    };
    values += get(iv);
    under += get(iu);
    over += get(io);
  }
}

const char* kSummaryHeader =
    "steps,final_loss,final_scale,found_inf_steps,skipped_steps,memory_bytes,k_low,k_high,"
    "grad_values,grad_flushed,grad_overflow,grad_flushed_fraction";

std::string index_header(const nlohmann::json& def) {
  std::string h = "run,dir";
  if (def.value("has_cases", false)) h += ",case";
  for (const auto& k : def["axes"]) h += "," + csv_field(k.get<std::string>());
  return h + "," + kSummaryHeader + "\n";
}

/// One sweep.csv row from a finished run folder (`rel`: the folder as written in the table).
std::string index_row_of(const nlohmann::json& def, const nlohmann::json& run,
                         const std::string& run_dir, const std::string& rel);

/// index_row_of, with a run folder whose files were changed by hand (a manifest that is not
/// JSON or lacks a field, a steps.csv count that is not a number) reported as bad input.
std::string index_row(const nlohmann::json& def, const nlohmann::json& run,
                      const std::string& run_dir, const std::string& rel) {
  try {
    return index_row_of(def, run, run_dir, rel);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(run_dir + "/manifest.json cannot be read as a run's manifest (" +
                     e.what() + ")");
  } catch (const std::logic_error&) {  // std::stoll: invalid_argument, out_of_range
    throw InputError(run_dir + "/steps.csv holds a count that is not an integer");
  }
}

/// A run folder written before the MX scale rule ':ceil' was renamed ':rceil' (docs/blocks.md,
/// "Renamed") records the old name in its manifest, where it named the old rule. Manifests
/// of block recipes written before [precision.blocks] (their recipe has no "input_sr") could
/// name ':ceil' only so: their recipes were the presets', and no preset names it since the
/// rename. A newer manifest's ':ceil' is the rule of today's name.
void refuse_renamed_schemes(const nlohmann::json& m, const std::string& run_dir) {
  const auto p = m.find("policy");
  if (p == m.end() || !p->is_object()) return;
  const auto b = p->find("blocks");
  if (b == p->end() || !b->is_object() || b->contains("input_sr")) return;
  for (const char* role : {"input", "weight", "grad"}) {
    const auto n = b->find(role);
    if (n == b->end() || !n->is_string()) continue;
    const std::string name = n->get<std::string>();
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ":ceil") == 0)
      throw InputError(run_dir + " was written before the MX scale rule ':ceil' was renamed "
                       "':rceil' (its manifest names " + name + "); remove the folder and "
                       "resume to rerun it");
  }
}

std::string index_row_of(const nlohmann::json& def, const nlohmann::json& run,
                         const std::string& run_dir, const std::string& rel) {
  const nlohmann::json m = nlohmann::json::parse(sim::read_file(run_dir + "/manifest.json"));
  refuse_renamed_schemes(m, run_dir);
  const nlohmann::json& s = m["summary"];
  std::string r = std::to_string(run["run"].get<int>()) + "," + csv_field(rel);
  if (def.value("has_cases", false)) r += "," + csv_field(run["case"].get<std::string>());
  for (const auto& k : def["axes"]) r += "," + csv_field(run["values"][k.get<std::string>()]);
  int64_t gv, gu, go;
  grad_sums(run_dir + "/steps.csv", gv, gu, go);
  r += "," + json_number(s["steps"]) + "," + json_number(s["final_loss"]) + "," +
       json_number(s["final_scale"]) + "," + json_number(s["found_inf_steps"]) + "," +
       json_number(s["skipped_steps"]) + "," + json_number(s["memory_bytes"]) + ",";
  if (s["safe_window"].is_object())
    r += json_number(s["safe_window"]["k_low"]) + "," + json_number(s["safe_window"]["k_high"]);
  else
    r += ",";
  r += "," + std::to_string(gv) + "," + std::to_string(gu) + "," + std::to_string(go) + ",";
  if (gv > 0) r += sim::number_text(double(gu) / double(gv));
  return r + "\n";
}

nlohmann::json definition_json(const SweepDef& d) {
  nlohmann::json j;
  j["sweep_hash"] = d.hash;
  j["sweep_file"] = fs::path(d.path).filename().string();
  j["halfway_version"] = sim::sim_version();
  j["axes"] = d.axis_keys;
  j["has_cases"] = d.has_cases;
  nlohmann::json runs = nlohmann::json::array();
  for (const SweepRun& r : d.runs) {
    nlohmann::json o;
    o["run"] = r.index;
    o["dir"] = "runs/" + run_dir_name(r.index);
    o["case"] = r.case_name;
    nlohmann::json v = nlohmann::json::object();
    for (const auto& [k, t] : r.values) v[k] = t;
    o["values"] = v;
    runs.push_back(o);
  }
  j["runs"] = runs;
  return j;
}

/// An advisory lock (flock) on `path`, created if missing, held until destruction, and removed
/// then. A lock file left by a killed process is simply taken over (the kernel released the
/// lock when the process died). Removing the file while holding its lock is safe: whoever
/// locks a file after it was unlinked sees another inode behind the path (or, over NFS, a
/// stale handle) and starts over. On a file system without locks the sweep goes on unlocked,
/// with one warning.
class FileLock {
 public:
  explicit FileLock(fs::path path) : path_(std::move(path)) {
    for (;;) {
      fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
      if (fd_ < 0)
        throw std::runtime_error("cannot create the lock file '" + path_.string() + "': " +
                                 std::strerror(errno));
      int rc;
      while ((rc = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
      }
      const int e = rc != 0 ? errno : 0;
      if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {
        static std::atomic<bool> warned{false};
        if (!warned.exchange(true))
          std::fprintf(stderr, "halfway sweep: warning: no file locks in %s (%s); do not start "
                       "two sweeps of this folder together\n",
                       printable(path_.parent_path().string()).c_str(), std::strerror(e));
        ::close(fd_);
        ::unlink(path_.c_str());
        fd_ = -1;
        return;
      }
      if (e != 0 && e != ESTALE) {
        ::close(fd_);
        throw std::runtime_error("cannot lock '" + path_.string() + "': " + std::strerror(e));
      }
      struct stat held, now;
      if (e == 0 && ::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &now) == 0 &&
          held.st_dev == now.st_dev && held.st_ino == now.st_ino)
        return;
      ::close(fd_);  // unlinked (or replaced) by the previous holder: lock the new file
    }
  }
  ~FileLock() {
    if (fd_ < 0) return;
    ::unlink(path_.c_str());
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  fs::path path_;
  int fd_ = -1;
};

/// "I-of-N" (digits only): a shard marker under DIR/shards/; anything else (a temporary file
/// of the marker's atomic write, say) is not one.
bool parse_marker(const std::string& name, std::string& i, std::string& n) {
  const size_t p = name.find("-of-");
  if (p == std::string::npos || p == 0 || p + 4 == name.size()) return false;
  i = name.substr(0, p);
  n = name.substr(p + 4);
  auto digits = [](const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return digits(i) && digits(n);
}

/// A temporary file of write_file_atomic ("NAME.tmp.PID@HOST", io.hpp's parse_tmp_name).
bool is_atomic_tmp(const std::string& file) {
  std::string name, host;
  long pid;
  return sim::parse_tmp_name(file, name, pid, host);
}

/// Parse "I/N" (0 <= I < N).
void parse_shard(const std::string& s, int& i, int& n, const std::string& what) {
  const size_t slash = s.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument("");
    size_t p1 = 0, p2 = 0;
    i = std::stoi(s.substr(0, slash), &p1);
    n = std::stoi(s.substr(slash + 1), &p2);
    if (p1 != slash || p2 != s.size() - slash - 1) throw std::invalid_argument("");
  } catch (const std::exception&) {
    throw InputError(what + " '" + s + "' must be I/N, e.g. 0/4");
  }
  if (n < 1 || i < 0 || i >= n)
    throw InputError(what + " " + s + " is out of range: N >= 1 and 0 <= I < N (I counts "
                     "from 0)");
}

}  // namespace

void resolve_shard(const std::string& option, int& shard, int& count) {
  shard = 0;
  count = 1;
  const char* sid = std::getenv("SLURM_ARRAY_TASK_ID");
  const char* scount = std::getenv("SLURM_ARRAY_TASK_COUNT");
  if (!option.empty()) parse_shard(option, shard, count, "--shard");
  if (sid && scount && *sid && *scount) {
    const char* smin = std::getenv("SLURM_ARRAY_TASK_MIN");
    int si = 0, sn = 0;
    try {
      si = std::stoi(sid) - (smin && *smin ? std::stoi(smin) : 0);
      sn = std::stoi(scount);
    } catch (const std::exception&) {
      throw InputError("SLURM_ARRAY_TASK_ID/COUNT are not integers");
    }
    const std::string s = std::to_string(si) + "/" + std::to_string(sn);
    int i2 = 0, n2 = 1;
    parse_shard(s, i2, n2, "SLURM_ARRAY_TASK_ID/COUNT (minus SLURM_ARRAY_TASK_MIN)");
    if (!option.empty() && (i2 != shard || n2 != count))
      throw InputError("conflicting shard numbers: --shard " + option + " but SLURM says " + s);
    shard = i2;
    count = n2;
  }
}

uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string run_dir_name(int i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d", i);
  return buf;
}

/// A TOML file parsed, its errors as "FILE:LINE: description" input errors.
toml::table parse_toml_file(const std::string& text, const std::string& path) {
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw InputError(path + ":" + std::to_string(e.source().begin.line) + ": " +
                     one_line(std::string(e.description())));
  }
}

/// The sweep's base config: a table, or a config file named relative to the sweep.
toml::table sweep_base(const toml::table& root, const std::string& path,
                       const std::string& base_dir) {
  const toml::node* b = root.get("base");
  if (!b) return {};
  if (auto s = b->as_string()) {
    const std::string bp = (fs::path(base_dir) / s->get()).string();
    return parse_toml_file(sim::read_text_file(bp), bp);
  }
  if (auto t = b->as_table()) return *t;
  throw InputError(path + ": 'base' must be a config file name or a table");
}

using Axis = std::pair<std::string, std::vector<std::shared_ptr<toml::node>>>;

/// A bundle axis (a key without a dot): each value is { name = "...", "TABLE.OPTION" = ... }.
void check_bundle_axis(const std::string& key, const toml::node* values) {
  const toml::array* arr = values->as_array();
  const std::string what = "axis '" + key + "' must name a config key as TABLE.OPTION (e.g. "
                           "scaler.scale), or be a list of { name = ..., \"TABLE.OPTION\" = "
                           "... } bundles";
  if (!arr || arr->empty()) throw InputError(what);
  for (const toml::node& v : *arr) {
    const toml::table* b = v.as_table();
    if (!b || !b->get_as<std::string>("name")) throw InputError(what);
    for (auto&& [bk, bv] : *b)
      if (bk.str() != "name") check_key_syntax(std::string(bk.str()), "axis '" + key + "' key");
  }
}

/// [axes], in file order (their keys also go to d.axis_keys).
std::vector<Axis> sweep_axes(const toml::table& root, const std::string& path, SweepDef& d) {
  std::vector<Axis> axes;
  const toml::node* a = root.get("axes");
  if (!a) return axes;
  const toml::table* t = a->as_table();
  if (!t) throw InputError(path + ": [axes] must be a table of KEY = [values]");
  std::vector<std::tuple<uint32_t, uint32_t, std::string>> order;
  for (auto&& [k, v] : *t)
    order.emplace_back(v.source().begin.line, v.source().begin.column, std::string(k.str()));
  std::sort(order.begin(), order.end());
  for (const auto& [line, col, key] : order) {
    if (key.find('.') == std::string::npos) check_bundle_axis(key, t->get(key));
    axes.emplace_back(key, axis_values(key, *t->get(key)));
    d.axis_keys.push_back(key);
  }
  return axes;
}

struct SweepCase {
  std::string name;
  std::vector<std::pair<std::string, const toml::node*>> set;
};

/// The [[case]] tables (one unnamed case without them).
std::vector<SweepCase> sweep_cases(const toml::table& root, const std::string& path,
                                   SweepDef& d) {
  std::vector<SweepCase> cases;
  if (const toml::node* c = root.get("case")) {
    const toml::array* arr = c->as_array();
    if (!arr || !arr->is_array_of_tables())
      throw InputError(path + ": cases are written [[case]] with name = \"...\" and settings");
    d.has_cases = true;
    for (const toml::node& n : *arr) {
      const toml::table& t = *n.as_table();
      SweepCase cs;
      const auto* nm = t.get_as<std::string>("name");
      if (!nm) throw InputError(path + ": every [[case]] needs name = \"...\"");
      cs.name = nm->get();
      for (const SweepCase& o : cases)
        if (o.name == cs.name) throw InputError(path + ": duplicate case name '" + cs.name + "'");
      for (auto&& [k, v] : t) {
        const std::string key(k.str());
        if (key == "name") continue;
        check_key_syntax(key, "case '" + cs.name + "' key");
        if (std::find(d.axis_keys.begin(), d.axis_keys.end(), key) != d.axis_keys.end())
          throw InputError(path + ": case '" + cs.name + "' sets '" + key +
                           "', which is also an axis");
        cs.set.emplace_back(key, &v);
      }
      cases.push_back(std::move(cs));
    }
  }
  if (cases.empty()) cases.push_back(SweepCase{});
  return cases;
}

/// Sets one axis value in cfg (a bundle sets each of its keys); returns the value's text.
std::string apply_axis(toml::table& cfg, const std::string& key, const toml::node& v) {
  if (key.find('.') != std::string::npos) {
    set_key(cfg, key, v);
    return value_text(v);
  }
  for (auto&& [bk, bv] : *v.as_table())
    if (bk.str() != "name") set_key(cfg, std::string(bk.str()), bv);
  return v.as_table()->get_as<std::string>("name")->get();
}

/// A run's config that does not parse: names the axis whose setting breaks it (the config
/// parses without that axis) when there is one.
[[noreturn]] void blame_axis(const std::string& path, const SweepDef& d, const toml::table& base,
                             const SweepCase& cs, const std::vector<Axis>& axes,
                             const std::vector<size_t>& idx, const std::string& where,
                             const InputError& e) {
  for (size_t a = 0; a < axes.size(); ++a) {
    if (axes[a].first.find('.') == std::string::npos) continue;
    toml::table alt = base;
    for (const auto& [k, v] : cs.set) set_key(alt, k, *v);
    for (size_t b = 0; b < axes.size(); ++b)
      if (b != a) apply_axis(alt, axes[b].first, *axes[b].second[idx[b]]);
    std::ostringstream ao;
    ao << toml::toml_formatter{alt};
    try {
      (void)sim::parse_config(ao.str(), d.base_dir, "config.toml");
    } catch (const InputError&) {
      continue;
    }
    throw InputError(path + ": axis '" + axes[a].first + "' (" + where + ") names no "
                     "valid setting of this config: " + e.what());
  }
  throw InputError(path + ": " + where + ": " + e.what());
}

/// The next combination of axis values (the last axis fastest); false after the last one.
bool next_combination(std::vector<size_t>& idx, const std::vector<Axis>& axes) {
  for (size_t a = axes.size(); a-- > 0;) {
    if (++idx[a] < axes[a].second.size()) return true;
    idx[a] = 0;
  }
  return false;
}

SweepDef load_sweep(const std::string& path) {
  SweepDef d;
  d.path = path;
  d.base_dir = fs::path(path).parent_path().string();
  if (d.base_dir.empty()) d.base_dir = ".";
  // A regular file of at most 1 MiB.
  const toml::table root = parse_toml_file(sim::read_text_file(path), path);
  for (auto&& [k, v] : root) {
    const std::string key(k.str());
    if (key != "base" && key != "axes" && key != "case" && key != "name")
      throw InputError(path + ": unknown top-level key '" + key +
                       "' (expected base, axes, case, name)");
  }
  const toml::table base = sweep_base(root, path, d.base_dir);
  const std::vector<Axis> axes = sweep_axes(root, path, d);
  const std::vector<SweepCase> cases = sweep_cases(root, path, d);
  // The number of runs, before expanding them (each factor is at most kMaxAxisValues, so a
  // product that is still <= kMaxRuns never overflows).
  uint64_t total = cases.size();
  for (const auto& [key, values] : axes) {
    total *= values.size();
    if (total > kMaxRuns) break;
  }
  if (total > kMaxRuns)
    throw InputError(path + ": the sweep has more than " + std::to_string(kMaxRuns) +
                     " runs (cases x axis values)");

  // Expand: case slowest, then the axes in file order (the last varies fastest).
  std::string hash_text;
  for (const SweepCase& cs : cases) {
    std::vector<size_t> idx(axes.size(), 0);
    do {
      SweepRun r;
      r.index = int(d.runs.size());
      r.case_name = cs.name;
      toml::table cfg = base;
      std::string where = "run " + std::to_string(r.index) + " (";
      if (d.has_cases) where += "case " + cs.name;
      for (const auto& [k, v] : cs.set) set_key(cfg, k, *v);
      for (size_t a = 0; a < axes.size(); ++a) {
        const std::string text = apply_axis(cfg, axes[a].first, *axes[a].second[idx[a]]);
        r.values.emplace_back(axes[a].first, text);
        where += (where.back() == '(' ? "" : ", ") + axes[a].first + " = " + text;
      }
      where += ")";
      std::ostringstream o;
      o << toml::toml_formatter{cfg};
      r.config_toml = o.str() + "\n";
      try {
        (void)sim::parse_config(r.config_toml, d.base_dir, "config.toml");
      } catch (const InputError& e) {
        blame_axis(path, d, base, cs, axes, idx, where, e);
      }
      hash_text += "run " + std::to_string(r.index) + "\ncase " + r.case_name + "\n";
      for (const auto& [k, v] : r.values) hash_text += k + " = " + v + "\n";
      hash_text += r.config_toml + "\n";
      d.runs.push_back(std::move(r));
    } while (next_combination(idx, axes));
  }
  // Data files named by relative paths are part of the definition through their names only.
  d.hash = hex64(fnv1a(hash_text));
  return d;
}

/// The runs of this shard that are not finished yet, together, against the disk they may use.
void check_sweep_disk(const SweepDef& d, const fs::path& root, int shard, int shard_count,
                      uint64_t max_disk) {
  sim::DiskEstimate sum;
  int left = 0;
  for (const SweepRun& r : d.runs) {
    if (r.index % shard_count != shard ||
        sim::run_complete((root / "runs" / run_dir_name(r.index)).string()))
      continue;
    const sim::DiskEstimate e =
        sim::estimate_disk(sim::parse_config(r.config_toml, d.base_dir, "config.toml"));
    sum.csv += e.csv, sum.archives += e.archives, ++left;
  }
  sim::check_disk(sum, max_disk, root.string(),
                  "the sweep's " + std::to_string(left) + " runs left");
}

namespace {

/// Removes the temporary files a killed sweep left at the top of the folder and in shards/.
void remove_stale_tmp(const fs::path& root) {
  for (const fs::path dir : {root, root / "shards"}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (is_atomic_tmp(n) && (dir != root || n.rfind("sweep.json.", 0) == 0 ||
                               n.rfind("sweep.shard-", 0) == 0))
        fs::remove(e.path(), ec);  // left by a killed sweep
    }
  }
}

/// Writes sweep.json into a new folder, or checks that the folder's is this sweep's.
void claim_definition(const SweepDef& d, const nlohmann::json& def, const fs::path& root,
                      const std::string& out) {
  const fs::path def_path = root / "sweep.json";
  if (fs::exists(def_path)) {
    nlohmann::json old;
    try {
      old = nlohmann::json::parse(sim::read_file(def_path.string()));
    } catch (const nlohmann::json::exception&) {
      throw InputError(def_path.string() + " is not valid JSON; not a halfway sweep folder?");
    }
    if (old.value("sweep_hash", std::string()) != d.hash)
      throw InputError("results folder " + out + " holds a different sweep (hash " +
                       old.value("sweep_hash", std::string("?")) + ", this one " + d.hash +
                       "); use another --out");
  } else {
    if (fs::exists(root / "runs") && !fs::is_empty(root / "runs"))
      throw InputError("results folder " + out +
                       " has runs but no sweep.json; refusing to mix");
    sim::write_file_atomic(def_path.string(), def.dump(2) + "\n");
  }
}

/// Writes this shard's marker shards/I-of-N, after checking that no other shard of the folder
/// was started with another N.
void mark_shard(const fs::path& root, const std::string& out, int shard, int shard_count) {
  fs::create_directories(root / "shards");
  const std::string mine = std::to_string(shard) + "-of-" + std::to_string(shard_count);
  for (const auto& e : fs::directory_iterator(root / "shards")) {
    std::string i, n;
    if (parse_marker(e.path().filename().string(), i, n) && n != std::to_string(shard_count))
      throw InputError("conflicting shard numbers: " + out + " already has shard " + i + "/" +
                       n + ", asked for " + std::to_string(shard) + "/" +
                       std::to_string(shard_count));
  }
  if (!fs::exists(root / "shards" / mine))
    sim::write_file_atomic((root / "shards" / mine).string(), mine + "\n");
}

/// Sets up the results folder: sweep.json, the shard marker and runs/. Everything written at
/// the top of the folder (sweep.json, shard markers, the index) is written holding DIR/.lock,
/// so sweeps and shards started together see one definition and each other's markers, and
/// temporary files found there while holding it are stale.
void prepare_folder(const SweepDef& d, const nlohmann::json& def, const fs::path& root,
                    const std::string& out, int shard, int shard_count) {
  const FileLock folder(root / ".lock");
  remove_stale_tmp(root);
  claim_definition(d, def, root, out);
  if (shard_count > 1) mark_shard(root, out, shard, shard_count);
  fs::create_directories(root / "runs");
}

/// This shard's runs: all of them (`total`) and those not finished yet (`todo`, run indices).
struct ShardPlan {
  std::vector<int> todo;
  int total = 0;
  int already() const { return total - int(todo.size()); }
};

ShardPlan plan_shard(const SweepDef& d, const fs::path& root, int shard, int shard_count) {
  ShardPlan p;
  for (const SweepRun& r : d.runs) {
    if (r.index % shard_count != shard) continue;
    ++p.total;
    if (!sim::run_complete((root / "runs" / run_dir_name(r.index)).string()))
      p.todo.push_back(r.index);
  }
  return p;
}

/// Runs `r` into runs/NNNN unless it is complete by now: into runs/.tmp-NNNN first, renamed
/// when its last step is written. True when it ran here.
bool run_one(const SweepDef& d, const SweepRun& r, const fs::path& root, uint64_t max_memory,
             uint64_t max_disk) {
  const fs::path dir = root / "runs" / run_dir_name(r.index);
  const fs::path tmp = root / "runs" / (".tmp-" + run_dir_name(r.index));
  const FileLock lock(root / "runs" / ("." + run_dir_name(r.index) + ".lock"));
  if (sim::run_complete(dir.string())) return false;
  // Left by an interrupted run: a temporary folder, a folder without its manifest.
  if (fs::exists(tmp)) fs::remove_all(tmp);
  if (fs::exists(dir)) fs::remove_all(dir);
  const sim::TrainConfig c = sim::parse_config(r.config_toml, d.base_dir, "config.toml");
  fs::create_directories(tmp);
  sim::write_file_atomic((tmp / "config.toml").string(), r.config_toml);
  sim::TrainOptions o;
  o.max_memory = max_memory;
  o.max_disk = max_disk;
  if (!sim::write_run(c, tmp.string(), o).complete()) {  // stopped: not done
    fs::remove_all(tmp);
    throw std::runtime_error("stopped before its last step; a resume reruns it");
  }
  fs::rename(tmp, dir);
  return true;
}

/// What the workers did: the runs they ran, and the errors of those that failed.
struct PoolResult {
  int ran = 0;
  std::vector<std::string> errors;
};

/// Runs the plan's runs on `jobs` threads, drawing the progress line until they are done or
/// a signal stops them. Each run is written holding runs/.NNNN.lock: another process of the
/// same sweep (a shard started twice, a resubmitted array task) waits for it and then finds it
/// done.
PoolResult run_pool(const SweepDef& d, const ShardPlan& plan, const fs::path& root, int jobs,
                    bool quiet, uint64_t max_memory, uint64_t max_disk) {
  const std::vector<int>& todo = plan.todo;
  Progress bar(todo.size(), !quiet && isatty(STDERR_FILENO) != 0);
  std::atomic<size_t> next{0};
  std::atomic<int> ran{0};
  std::mutex progress_mu;  // the progress line is redrawn every 200 ms and when a run ends
  std::condition_variable progress_cv;
  std::mutex err_mu;
  PoolResult res;
  auto worker = [&] {
    for (;;) {
      if (sim::stop_signal()) return;  // SIGINT...: the runs begun stop at a step boundary
      const size_t k = next.fetch_add(1);
      if (k >= todo.size()) return;
      const SweepRun& r = d.runs[size_t(todo[k])];
      try {
        if (run_one(d, r, root, max_memory, max_disk)) ++ran;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> g(err_mu);
        if (!sim::stop_signal())
          res.errors.push_back("run " + std::to_string(r.index) + ": " + one_line(e.what()));
      }
      bar.add(1);
      {
        std::lock_guard<std::mutex> g(progress_mu);
      }
      progress_cv.notify_one();
    }
  };
  const int n = std::max(1, std::min<int>(jobs, int(todo.size())));
  std::vector<std::thread> pool;
  for (int i = 0; i < n; ++i) pool.emplace_back(worker);
  for (std::unique_lock<std::mutex> lk(progress_mu);
       bar.done() < todo.size() && !sim::stop_signal();) {
    bar.label(std::to_string(plan.already() + bar.done()) + "/" + std::to_string(plan.total) +
              " runs");
    bar.draw();
    progress_cv.wait_for(lk, std::chrono::milliseconds(200));
  }
  for (auto& t : pool) t.join();
  bar.finish();
  res.ran = ran.load();
  return res;
}

/// The index of this shard's runs (all of them without sharding; after a stop, the finished
/// ones), in run order.
struct SweepIndex {
  std::string csv;
  int indexed = 0;
};

SweepIndex shard_index(const nlohmann::json& def, const fs::path& root, int shard,
                       int shard_count, bool stopped) {
  SweepIndex x{index_header(def), 0};
  for (const auto& run : def["runs"]) {
    const int i = run["run"].get<int>();
    if (i % shard_count != shard) continue;
    const std::string rel = "runs/" + run_dir_name(i);
    if (stopped && !sim::run_complete((root / rel).string())) continue;
    x.csv += index_row(def, run, (root / rel).string(), rel);
    ++x.indexed;
  }
  return x;
}

/// The index's file name: sweep.csv, or sweep.shard-I-of-N.csv for a shard.
std::string index_name(int shard, int shard_count) {
  return shard_count > 1 ? "sweep.shard-" + std::to_string(shard) + "-of-" +
                               std::to_string(shard_count) + ".csv"
                         : "sweep.csv";
}

}  // namespace

int run_sweep(const SweepDef& d, const std::string& out, int jobs, int shard, int shard_count,
              bool quiet, uint64_t max_memory, uint64_t max_disk) {
  const fs::path root(out);
  fs::create_directories(root);
  check_sweep_disk(d, root, shard, shard_count, max_disk);
  const nlohmann::json def = definition_json(d);
  prepare_folder(d, def, root, out, shard, shard_count);
  const ShardPlan plan = plan_shard(d, root, shard, shard_count);
  const PoolResult res = run_pool(d, plan, root, jobs, quiet, max_memory, max_disk);
  for (const auto& e : res.errors)
    std::fprintf(stderr, "halfway sweep: error: %s\n", printable(e).c_str());
  if (!res.errors.empty()) return 1;
  const int stopped_by = sim::stop_signal();
  const SweepIndex index = shard_index(def, root, shard, shard_count, stopped_by != 0);
  const fs::path index_path = root / index_name(shard, shard_count);
  {
    const FileLock folder(root / ".lock");
    sim::write_file_atomic(index_path.string(), index.csv);
  }
  if (stopped_by) {
    std::fprintf(stderr, "halfway sweep: stopped by %s: %d of %d runs done, indexed in %s; "
                 "run again to continue\n", sim::signal_name(stopped_by).c_str(), index.indexed,
                 plan.total, index_path.string().c_str());
    return 128 + stopped_by;
  }
  if (!quiet)
    std::printf("halfway sweep: %d runs (%d already done, %d run now) -> %s\n", plan.total,
                plan.total - res.ran, res.ran, index_path.string().c_str());
  return 0;
}

int cmd_sweep(int argc, char** argv) {
  CLI::App app{"Run the cartesian product of a sweep file's lists over config keys", "halfway sweep"};
  std::string file, out, shard_s;
  int jobs = 1;
  bool quiet = false;
  app.add_option("sweep", file, "the sweep file (TOML)");
  app.add_option("--out", out, "results folder (default: the sweep file's name without .toml)");
  app.add_option("--jobs,-j", jobs, "runs in parallel (results do not depend on it)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--shard", shard_s, "run only runs with index % N == I (I from 0); default "
                                     "from SLURM_ARRAY_TASK_ID/COUNT");
  app.add_flag("--quiet,-q", quiet, "print nothing on success");
  const SizeOption max_memory(app, "--max-memory", "refuse each run whose estimated peak "
                                                    "memory is over SIZE (e.g. 2G; default: "
                                                    "80% of physical memory)");
  const SizeOption max_disk(app, "--max-disk", "refuse a sweep whose runs left would write "
                                               "more than SIZE together, estimated (e.g. 50G; "
                                               "default: the free space where --out is)");
  if (parse_or_help(app, argc, argv)) return 0;
  if (file.empty()) throw InputError("missing SWEEP.toml (usage: halfway sweep SWEEP.toml "
                                     "[--out DIR] [--jobs N] [--shard I/N])");
  int shard = 0, count = 1;
  resolve_shard(shard_s, shard, count);
  const SweepDef d = load_sweep(file);
  if (out.empty()) {
    fs::path p(file);
    out = (p.parent_path() / p.stem()).string();
  }
  // SIGINT, SIGTERM, SIGHUP, SIGQUIT: the runs in progress stop at a step boundary (and are
  // removed), no new run starts, and the finished runs are indexed.
  sim::install_stop_handlers();
  return run_sweep(d, out, jobs, shard, count, quiet, max_memory.bytes(), max_disk.bytes());
}

int cmd_merge(int argc, char** argv) {
  CLI::App app{"Combine the run folders of sweep shards into one sweep.csv", "halfway merge"};
  std::vector<std::string> dirs;
  std::string out;
  app.add_option("dirs", dirs, "results folders of the shards (same sweep)");
  app.add_option("--out", out, "the table to write (default: FIRST_DIR/sweep.csv)");
  if (parse_or_help(app, argc, argv)) return 0;
  if (dirs.empty()) throw InputError("usage: halfway merge DIR... [--out FILE]");
  nlohmann::json def;
  for (const std::string& dir : dirs) {
    const std::string p = dir + "/sweep.json";
    if (!fs::exists(p)) throw InputError(dir + " is not a sweep results folder (no sweep.json)");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(sim::read_file(p));
    } catch (const nlohmann::json::exception&) {
      throw InputError(p + " is not valid JSON");
    }
    if (def.is_null()) def = j;
    else if (j.value("sweep_hash", std::string()) != def.value("sweep_hash", std::string()))
      throw InputError(dir + " holds a different sweep (hash " +
                       j.value("sweep_hash", std::string("?")) + " vs " +
                       def.value("sweep_hash", std::string("?")) + ")");
  }
  if (out.empty()) out = dirs.front() + "/sweep.csv";
  // A symlink is written through: run folders are named relative to the file it points to.
  out = sim::write_target(out);
  const fs::path out_dir = fs::absolute(fs::path(out)).parent_path();
  std::string csv = index_header(def);
  std::vector<int> missing;
  for (const auto& run : def["runs"]) {
    const int i = run["run"].get<int>();
    std::string found;
    for (const std::string& dir : dirs) {
      const fs::path rd = fs::path(dir) / "runs" / run_dir_name(i);
      if (sim::run_complete(rd.string())) {
        found = rd.string();
        break;
      }
    }
    if (found.empty()) {
      missing.push_back(i);
      continue;
    }
    const std::string rel =
        fs::absolute(found).lexically_normal().lexically_relative(out_dir).generic_string();
    csv += index_row(def, run, found, rel);
  }
  if (!missing.empty()) {
    std::string m;
    for (size_t k = 0; k < missing.size() && k < 10; ++k) m += " " + std::to_string(missing[k]);
    std::fprintf(stderr, "halfway merge: error: %zu of %zu runs are not done:%s%s\n",
                 missing.size(), def["runs"].size(), m.c_str(), missing.size() > 10 ? " ..." : "");
    return 1;
  }
  sim::write_file_atomic(out, csv);
  std::printf("halfway merge: %zu runs -> %s\n", def["runs"].size(), out.c_str());
  return 0;
}

}  // namespace halfway::cli
