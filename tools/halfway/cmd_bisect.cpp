// `halfway bisect CONFIG.toml [--against fp32|CONFIG2] [--metric final_loss|val_loss|drift]
// [--granularity op|role|layer] [--budget N] [--out DIR] [--jobs N] [--seeds S,...]`: which part
// of a precision policy explains its gap to the fp32 reference. Promotes parts of the policy to
// fp32 and reruns, by an adaptive group search (delta debugging, sim/bisect.hpp), and reports
// the smallest set that closes at least 90% of the gap, with each member's share alone and the
// original run's trace evidence. Finished runs are kept as DIR/runs/KEY.json, so a stopped
// bisection resumes where it stopped.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <deque>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_parse.hpp"
#include "commands.hpp"
#include "format_util.hpp"
#include "halfway/names.hpp"
#include "halfway/sim/bisect.hpp"
#include "halfway/sim/io.hpp"
#include "halfway/sim/tracer.hpp"
#include "halfway/sim/trainer.hpp"
#include "spawn.hpp"
#include "sweep.hpp"

namespace halfway::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kCloseTarget = 0.9;  ///< the share of the gap the answer must close

struct BisectOptions {
  std::string config, against = "fp32", metric = "final_loss", granularity = "op", out;
  int budget = 64, jobs = 1;
  std::vector<uint64_t> seeds;
  double min_gap = -1;  ///< < 0: the default (see no_gap_limit)
  bool plot = false;
  std::string python;
  std::string direction = "promote";  ///< promote (default) or demote
  std::string shard;         ///< --shard I/N (or Slurm's job array)
  double shard_wait = 3600;  ///< seconds a shard waits for another's run before training it
};

/// Traced totals of one tensor over the original run's steps (the evidence).
struct TensorTotals {
  std::string op;
  std::string role;  ///< the role that rounds it: forward, backward, update
  uint64_t total = 0, flushed = 0, overflow = 0;  ///< overflow: saturated, for a block copy
  std::string gemm;  ///< a block-scaled copy (blocks.csv): the GEMM that reads it; else empty
};

/// One training run's outcome, as stored in DIR/runs/KEY.json.
struct RunResult {
  double metric = NAN;
  std::vector<double> losses;
  // Evidence (the original run only): per tensor, and the updates over every step.
  std::map<std::string, TensorTotals> tensors;
  uint64_t nonzero = 0, vanished = 0;
  double drift = NAN;  ///< mean over the parameters of the final drift against fp32
};

double num(const json& j) { return j.is_number() ? j.get<double>() : NAN; }
json num_json(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json to_json(const RunResult& r) {
  json j = {{"metric", num_json(r.metric)}, {"drift", num_json(r.drift)},
            {"nonzero", r.nonzero}, {"vanished", r.vanished}};
  json l = json::array();
  for (double v : r.losses) l.push_back(num_json(v));
  j["losses"] = l;
  json t = json::object();
  for (const auto& [name, x] : r.tensors)
    t[name] = {{"op", x.op}, {"role", x.role}, {"total", x.total}, {"flushed", x.flushed},
               {"overflow", x.overflow}, {"gemm", x.gemm}};
  j["tensors"] = t;
  return j;
}

RunResult from_json(const json& j) {
  RunResult r;
  r.metric = num(j.at("metric"));
  r.drift = num(j.at("drift"));
  r.nonzero = j.at("nonzero").get<uint64_t>();
  r.vanished = j.at("vanished").get<uint64_t>();
  for (const auto& v : j.at("losses")) r.losses.push_back(num(v));
  for (const auto& [name, x] : j.at("tensors").items())
    r.tensors[name] = {x.at("op").get<std::string>(), x.at("role").get<std::string>(),
                       x.at("total").get<uint64_t>(), x.at("flushed").get<uint64_t>(),
                       x.at("overflow").get<uint64_t>(), x.value("gemm", std::string())};
  return r;
}

/// The shortest text that reads back to the same binary64 (empty for NaN), as every CSV of a
/// run writes numbers (tracer.hpp's append_number).
std::string num_str(double v) {
  std::string s;
  sim::append_number(s, v);
  return s;
}

/// A number for the console: 4 significant digits.
std::string short_num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

std::string pct(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", 100 * f);
  return b;
}

/// Train `c` and measure it. `evidence`: also train the fp32 reference alongside (drift) and
/// keep the traced totals.
RunResult train_one(sim::TrainConfig c, const std::string& metric, bool evidence) {
  const bool drift = metric == "drift" || evidence;
  if (drift) c.reference = "fp32";
  c.trace = evidence;
  RunResult r;
  double val = NAN, last_drift = NAN;
  sim::TrainOptions o;
  const auto cb = [&](const sim::StepRow& row, const sim::StepTrace* st,
                      const std::vector<sim::Param>&, const std::vector<std::vector<float>>&) {
    r.losses.push_back(row.loss);
    if (!std::isnan(row.val_loss)) val = row.val_loss;
    double d = 0;
    for (const sim::UpdateRow& u : row.updates) {
      d += u.drift;
      r.nonzero += u.nonzero;
      r.vanished += u.vanished;
    }
    last_drift = row.updates.empty() ? NAN : d / double(row.updates.size());
    if (!st) return;
    for (const sim::TraceRecord& t : st->records) {
      if (!t.dtype.is_low()) continue;
      TensorTotals& x = r.tensors[t.name];
      x.op = t.op;
      const bool update =
          t.kind == sim::TraceKind::update || t.kind == sim::TraceKind::optimizer_state;
      x.role = sim::role_name(t.is_grad() ? sim::Role::backward
                              : update    ? sim::Role::update
                                          : sim::Role::forward);
      x.total += t.events.total;
      x.flushed += t.events.flushed;
      x.overflow += t.events.overflow;
    }
    for (const sim::BlockRecord& b : st->blocks) {
      TensorTotals& x = r.tensors[b.name + " [" + b.gemm + "]"];
      x.op = b.op;
      x.gemm = b.gemm;
      const bool grad = b.kind == sim::TraceKind::activation_grad ||
                        b.kind == sim::TraceKind::weight_grad;
      x.role = sim::role_name(grad ? sim::Role::backward : sim::Role::forward);
      x.total += b.events.elements;
      x.flushed += b.events.flushed;
      x.overflow += b.events.saturated;
    }
  };
  const sim::TrainSummary s = sim::train(c, o, cb);
  if (!s.complete()) throw std::runtime_error("stopped");
  if (drift) r.drift = last_drift;
  r.metric = metric == "drift" ? last_drift : metric == "val_loss" ? val : s.final_loss;
  if (!evidence) r.tensors.clear(), r.nonzero = r.vanished = 0, r.drift = NAN;
  return r;
}

/// A bisection stopped by a signal between runs (a resume continues it).
struct Stopped {
  int signal;
};

/// A run to do: what to train, where its result lives.
struct RunSpec {
  std::string key;  ///< DIR/runs/KEY.json
  sim::TrainConfig config;
  bool evidence = false;
};

/// The runs of a bisection: each (candidate, seed) once, read back from DIR/runs when a
/// previous invocation finished it, counted against the budget.
class RunCache {
 public:
  RunCache(fs::path runs, std::string definition, std::string metric, int budget, int jobs)
      : dir_(std::move(runs)), def_(std::move(definition)), metric_(std::move(metric)),
        budget_(budget), jobs_(jobs) {}
  /// This process is shard `shard` of `count` (--shard): of a request's missing runs it trains
  /// those at places ≡ shard (mod count) and waits up to `wait_s` seconds for the others to
  /// appear in the runs folder, then trains the ones still missing itself (the same bits).
  void set_shard(int shard, int count, double wait_s) {
    shard_ = shard;
    shards_ = count;
    wait_s_ = wait_s;
  }

  std::string key(const std::string& what, uint64_t seed) const {
    return hex64(fnv1a(def_ + "\n" + what + "\nseed " + std::to_string(seed)));
  }
  /// Results of `specs`, running the missing ones (`jobs_` at a time); nullopt for each spec
  /// from the first that the budget cannot pay for on.
  std::vector<std::optional<RunResult>> get(const std::vector<RunSpec>& specs);
  int used() const { return int(used_.size()); }
  int ran() const { return ran_; }

 private:
  /// Train specs[i] for each i of `idx`, `jobs_` at a time, into out[i] and the runs folder.
  void train(const std::vector<RunSpec>& specs, const std::vector<size_t>& idx,
             std::vector<std::optional<RunResult>>& out);
  /// Read the runs of `idx` that other shards train as they appear; the indices of those
  /// still missing after the wait.
  std::vector<size_t> await(const std::vector<RunSpec>& specs, const std::vector<size_t>& idx,
                            std::vector<std::optional<RunResult>>& out) const;

  fs::path dir_;
  std::string def_, metric_;
  int budget_, jobs_, ran_ = 0;
  int shard_ = 0, shards_ = 1;
  double wait_s_ = 0;
  std::map<std::string, RunResult> used_;
};

std::vector<std::optional<RunResult>> RunCache::get(const std::vector<RunSpec>& specs) {
  std::vector<std::optional<RunResult>> out(specs.size());
  std::vector<size_t> todo;
  int n = used();
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string& k = specs[i].key;
    if (auto it = used_.find(k); it != used_.end()) {
      out[i] = it->second;
      continue;
    }
    if (n >= budget_) break;
    ++n;
    const fs::path f = dir_ / (k + ".json");
    if (fs::exists(f)) {
      out[i] = used_[k] = from_json(json::parse(sim::read_file(f.string())));
    } else {
      todo.push_back(i);
    }
  }
  // A missing run belongs to the shard of its place in this request: the request, like the
  // whole search, is the same in every shard.
  std::vector<size_t> mine, theirs;
  for (size_t i : todo) (int(i % size_t(shards_)) == shard_ ? mine : theirs).push_back(i);
  train(specs, mine, out);
  train(specs, await(specs, theirs, out), out);
  for (size_t i : todo) used_[specs[i].key] = *out[i];
  return out;
}

void RunCache::train(const std::vector<RunSpec>& specs, const std::vector<size_t>& idx,
                     std::vector<std::optional<RunResult>>& out) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::string error;
  const auto worker = [&] {
    for (size_t t; (t = next++) < idx.size();) {
      const RunSpec& s = specs[idx[t]];
      try {
        RunResult r = train_one(s.config, metric_, s.evidence);
        sim::write_file_atomic((dir_ / (s.key + ".json")).string(), to_json(r).dump() + "\n");
        std::lock_guard<std::mutex> g(mu);
        out[idx[t]] = r;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> g(mu);
        if (error.empty()) error = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < std::min<int>(jobs_, int(idx.size())); ++i) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (const int sig = sim::stop_signal()) throw Stopped{sig};
  if (!error.empty()) throw std::runtime_error(error);
  ran_ += int(idx.size());
}

std::vector<size_t> RunCache::await(const std::vector<RunSpec>& specs,
                                    const std::vector<size_t>& idx,
                                    std::vector<std::optional<RunResult>>& out) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s_);
  std::vector<size_t> missing;
  for (size_t i : idx) {
    const fs::path f = dir_ / (specs[i].key + ".json");
    while (!fs::exists(f) && std::chrono::steady_clock::now() < deadline) {
      if (const int sig = sim::stop_signal()) throw Stopped{sig};
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (fs::exists(f))
      out[i] = from_json(json::parse(sim::read_file(f.string())));
    else
      missing.push_back(i);
  }
  return missing;
}


/// The candidates tried, in order, with their runs' metrics.
struct Tried {
  std::string role;  ///< reference, original, candidate
  sim::PartSet set;
  std::vector<RunResult> runs;  ///< one per seed
  double mean = NAN, closed = NAN;
};

class Bisection {
 public:
  Bisection(const BisectOptions& o, const sim::TrainConfig& c, sim::TrainConfig ref,
            std::vector<sim::PrecisionPart> parts, RunCache& cache)
      : o_(o), c_(c), ref_config_(std::move(ref)), parts_(std::move(parts)), cache_(cache) {}

  /// The reference's and the original's mean metrics (nullopt: over the budget).
  bool measure_gap();
  /// Mean closed fraction of each set (nullopt: over the budget).
  std::vector<std::optional<double>> closed(const std::vector<sim::PartSet>& sets);
  /// What the search tests of each set: promoting, the share of the gap it closes; demoting
  /// (--direction demote: the set alone left in low precision, every other part promoted),
  /// the share it opens, 1 − what promoting the rest closes (the whole set: the original, 1).
  std::vector<std::optional<double>> share(const std::vector<sim::PartSet>& sets);
  /// The share of set `s` (as `share` gives it) from the runs tried; NaN when not run.
  double share_of(const sim::PartSet& s) const;
  bool demote() const { return o_.direction == "demote"; }
  sim::PartSet complement(const sim::PartSet& s) const;
  std::string names(const sim::PartSet& s) const;
  const Tried* find(const sim::PartSet& s) const;

  const BisectOptions& o_;
  const sim::TrainConfig& c_;
  sim::TrainConfig ref_config_;  ///< the reference run: fp32's, or --against's config
  std::vector<sim::PrecisionPart> parts_;
  RunCache& cache_;
  std::deque<Tried> tried_;  // pointers to its rows stay valid
  double ref_ = NAN, orig_ = NAN, gap_ = NAN;

 private:
  std::vector<RunSpec> specs(const std::string& what, const sim::TrainConfig& c, bool evidence);
  /// Evaluate `whats` (one config each) over every seed; the Tried rows of those paid for.
  std::vector<const Tried*> evaluate(const std::vector<std::pair<Tried, sim::TrainConfig>>& whats);
};

std::string Bisection::names(const sim::PartSet& s) const {
  std::string r;
  for (int i : s) r += (r.empty() ? "" : " + ") + parts_[size_t(i)].name;
  return r;
}

const Tried* Bisection::find(const sim::PartSet& s) const {
  for (const Tried& t : tried_)
    if (t.role == "candidate" && t.set == s) return &t;
  return nullptr;
}

std::vector<RunSpec> Bisection::specs(const std::string& what, const sim::TrainConfig& c,
                                      bool evidence) {
  std::vector<RunSpec> r;
  for (uint64_t seed : o_.seeds) {
    RunSpec s{cache_.key(what, seed), c, evidence};
    s.config.seed = seed;
    r.push_back(std::move(s));
  }
  return r;
}

std::vector<const Tried*> Bisection::evaluate(
    const std::vector<std::pair<Tried, sim::TrainConfig>>& whats) {
  std::vector<RunSpec> all;
  for (const auto& [t, c] : whats) {
    const std::string what = t.role == "candidate" ? "promote " + names(t.set) : t.role;
    for (RunSpec& s : specs(what, c, t.role == "original")) all.push_back(std::move(s));
  }
  const std::vector<std::optional<RunResult>> res = cache_.get(all);
  std::vector<const Tried*> out;
  const size_t k = o_.seeds.size();
  for (size_t i = 0; i < whats.size(); ++i) {
    Tried t = whats[i].first;
    double sum = 0;
    for (size_t j = 0; j < k; ++j) {
      if (!res[i * k + j]) return out;  // the budget ran out here
      t.runs.push_back(*res[i * k + j]);
      sum += res[i * k + j]->metric;
    }
    t.mean = sum / double(k);
    t.closed = (orig_ - t.mean) / gap_;
    const Tried* known = t.role == "candidate" ? find(t.set) : nullptr;
    if (!known) {
      tried_.push_back(std::move(t));
      known = &tried_.back();
    }
    out.push_back(known);
  }
  return out;
}

bool Bisection::measure_gap() {
  const std::vector<const Tried*> r =
      evaluate({{Tried{"reference", {}, {}}, ref_config_},
                {Tried{"original", {}, {}}, c_}});
  if (r.size() < 2) return false;
  ref_ = tried_[0].mean;
  orig_ = tried_[1].mean;
  gap_ = orig_ - ref_;
  for (Tried& t : tried_) t.closed = (orig_ - t.mean) / gap_;
  return true;
}

std::vector<std::optional<double>> Bisection::closed(const std::vector<sim::PartSet>& sets) {
  std::vector<std::pair<Tried, sim::TrainConfig>> whats;
  for (const sim::PartSet& s : sets) {
    std::vector<sim::PrecisionPart> ps;
    for (int i : s) ps.push_back(parts_[size_t(i)]);
    whats.push_back({Tried{"candidate", s, {}}, sim::promote(c_, ps)});
  }
  const std::vector<const Tried*> r = evaluate(whats);
  std::vector<std::optional<double>> out(sets.size());
  for (size_t i = 0; i < r.size(); ++i) out[i] = std::isnan(r[i]->closed) ? -INFINITY : r[i]->closed;
  return out;
}


/// The suffixes ops.cpp gives the tensors one op site rounds (`scoped(...)`).
bool site_tensor(const std::string& site, const std::string& name) {
  static const char* const suffixes[] = {"output",     "input",      "other",       "weight",
                                         "bias",       "grad_input", "grad_other",  "grad_target",
                                         "grad_output", "weight.grad", "bias.grad"};
  if (name.compare(0, site.size() + 1, site + ".") != 0) return false;
  const std::string rest = name.substr(site.size() + 1);
  return std::any_of(std::begin(suffixes), std::end(suffixes),
                     [&](const char* x) { return rest == x; });
}

/// Whether the block copy or fp8 quantization `name` is what operand copy `c` reads: the
/// operand's trace name, and for a block copy the GEMM (an fp8 operand's one quantization
/// serves both of its GEMMs).
bool copy_tensor(sim::GemmCopy c, const std::string& name, const TensorTotals& t) {
  const std::string op = sim::gemm_copy_operand(c);
  const std::string suffix = op == "X" ? ".input" : op == "W" ? ".weight" : ".grad_output";
  const std::string base = t.gemm.empty() ? name : name.substr(0, name.rfind(" ["));
  return t.op == "linear" && base.size() > suffix.size() &&
         base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         (t.gemm.empty() || t.gemm == sim::gemm_copy_gemm(c));
}

sim::PartSet Bisection::complement(const sim::PartSet& s) const {
  sim::PartSet r;
  for (int i = 0; i < int(parts_.size()); ++i)
    if (!std::binary_search(s.begin(), s.end(), i)) r.push_back(i);
  return r;
}

std::vector<std::optional<double>> Bisection::share(const std::vector<sim::PartSet>& sets) {
  if (!demote()) return closed(sets);
  std::vector<sim::PartSet> rest;
  for (const sim::PartSet& s : sets)
    if (s.size() < parts_.size()) rest.push_back(complement(s));
  const std::vector<std::optional<double>> c = closed(rest);
  std::vector<std::optional<double>> out;
  size_t j = 0;
  for (const sim::PartSet& s : sets) {
    if (s.size() == parts_.size()) {
      out.push_back(1.0);  // nothing promoted: the original run itself
    } else {
      const std::optional<double> v = c[j++];
      out.push_back(v ? std::optional<double>(1 - *v) : std::nullopt);
    }
  }
  return out;
}

double Bisection::share_of(const sim::PartSet& s) const {
  if (demote() && s.size() == parts_.size()) return 1.0;
  const Tried* t = find(demote() ? complement(s) : s);
  return !t ? NAN : demote() ? 1 - t->closed : t->closed;
}

/// Whether the traced tensor `name` (of op `op`) is rounded by part `q`. Block copies count
/// for operand parts only (the other parts' evidence is trace.csv's, as `halfway train`'s).
bool covers(const sim::PrecisionPart& q, const std::string& name, const TensorTotals& t) {
  if (!q.copies.empty())
    return std::any_of(q.copies.begin(), q.copies.end(),
                       [&](sim::GemmCopy c) { return copy_tensor(c, name, t); });
  if (!t.gemm.empty()) return false;
  for (const std::string& s : q.sites)
    if (site_tensor(s, name)) return true;
  if (!q.sites.empty()) return false;
  const std::string& op = t.op;
  for (sim::Role r : q.roles)
    if (t.role == sim::role_name(r)) return true;
  if (!q.roles.empty()) return false;
  for (const std::string& s : q.scopes)
    if (name.compare(0, s.size() + 1, s + ".") == 0) return true;
  if (!q.scopes.empty()) return false;
  const auto ends = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (!q.ops.empty()) {
    for (sim::OpKind k : q.ops)
      if (op == sim::op_name(k)) return true;
    return false;
  }
  if (!q.states.empty() || q.weights) {
    for (const std::string& st : q.states)
      if (ends("." + st)) return true;
    return q.weights && ends(".update");
  }
  if (q.inputs) return name == "input" || ends(".target");
  return true;  // a rounding direction, the accumulation, a role: every low rounding
}

/// The trace evidence of part `q` in the original run, one clause.
std::string evidence(const sim::PrecisionPart& q, const RunResult& orig) {
  uint64_t total = 0, flushed = 0, overflow = 0;
  for (const auto& [name, t] : orig.tensors)
    if (covers(q, name, t)) total += t.total, flushed += t.flushed, overflow += t.overflow;
  if (total == 0) return "`" + q.name + "` has no traced low-precision rounding";
  std::string s = "`" + q.name + "` flushed " + std::to_string(flushed) + " of " +
                  std::to_string(total) + " rounded values to zero (flushed fraction " +
                  short_num(double(flushed) / double(total)) + ")";
  if (overflow) s += " and overflowed " + std::to_string(overflow);
  return s;
}

/// "the fp32 reference's", or "the reference R.toml's" with --against R.toml.
std::string reference_words(const BisectOptions& o) {
  return o.against == "fp32" ? "the fp32 reference's" : "the reference " + o.against + "'s";
}

/// The console paragraph: the culprit in the config's words, each member alone, the trace
/// evidence and the runs used.
std::string paragraph(const Bisection& b, const sim::PartSet& culprit, double closed,
                      bool finished, const BisectOptions& o) {
  const char* verb = b.demote() ? "opens" : "closes";
  std::string s = b.demote() ? "halfway bisect: keeping only " : "halfway bisect: promoting ";
  for (size_t i = 0; i < culprit.size(); ++i)
    s += std::string(i == 0 ? "" : i + 1 == culprit.size() ? " and " : ", ") + "`" +
         b.parts_[size_t(culprit[i])].name + "`";
  if (b.demote()) {
    s += std::string(" in ") + o.config + "'s precision (every other part promoted to " +
         (o.against == "fp32" ? "fp32" : "the reference's precision") + ")";
  } else {
    s += o.against == "fp32" ? " to fp32 (" : " to the reference's precision (";
    for (size_t i = 0; i < culprit.size(); ++i)
      s += std::string(i ? "; " : "") + b.parts_[size_t(culprit[i])].setting;
    s += ")";
  }
  s += std::string(culprit.size() > 1 ? " together" : "") + " " + verb + " " + pct(closed) +
       " of the gap in " + o.metric + " (" + short_num(b.orig_) + " against " + reference_words(o) + " " +
       short_num(b.ref_) + ", gap " + short_num(b.gap_) +
       (o.seeds.size() > 1 ? ", the mean of " + std::to_string(o.seeds.size()) + " seeds" : "") + ")";
  if (culprit.size() > 1) {
    s += "; alone, ";
    for (size_t i = 0; i < culprit.size(); ++i) {
      const double v = b.share_of({culprit[i]});
      s += std::string(i ? ", " : "") + "`" + b.parts_[size_t(culprit[i])].name + "` " + verb +
           " " + (std::isnan(v) ? std::string("(not run)") : pct(v));
    }
  }
  const RunResult& orig = b.tried_[1].runs[0];
  s += ". In the original run (seed " + std::to_string(o.seeds[0]) + "), ";
  for (size_t i = 0; i < culprit.size(); ++i)
    s += (i ? "; " : "") + evidence(b.parts_[size_t(culprit[i])], orig);
  s += "; " + std::to_string(orig.vanished) + " of " + std::to_string(orig.nonzero) +
       " non-zero updates vanished; the weights drift " + short_num(orig.drift) +
       " from the fp32 reference's (relative, mean over the parameters, last step). ";
  s += std::to_string(b.cache_.used()) + " runs of a budget of " + std::to_string(o.budget) +
       " (" + std::to_string(b.cache_.ran()) + " run now)";
  if (!finished) s += "; the budget ran out before the search finished: the set is the smallest found";
  return s + ".\n";
}

std::string csv_text(const Bisection& b, const std::vector<uint64_t>& seeds) {
  std::string s = "run,role,promoted,parts,seed,metric,mean_metric,closed\n";
  int run = 0;
  for (const Tried& t : b.tried_)
    for (size_t j = 0; j < t.runs.size(); ++j) {
      std::string promoted = b.names(t.set);
      for (char& ch : promoted)
        if (ch == ',' || ch == '"') ch = ' ';
      s += std::to_string(run++) + "," + t.role + "," + promoted + "," +
           std::to_string(t.set.size()) + "," + std::to_string(seeds[j]) + "," +
           num_str(t.runs[j].metric) + "," + num_str(t.mean) + "," + num_str(t.closed) + "\n";
    }
  return s;
}

json answer_json(const Bisection& b, const sim::PartSet& culprit, double closed, bool finished,
                 const BisectOptions& o) {
  json parts = json::array();
  for (const auto& p : b.parts_) parts.push_back({{"name", p.name}, {"setting", p.setting}});
  // Promoting: the share each set closes; demoting: the share it opens alone.
  const std::string share = b.demote() ? "opened" : "closed";
  json members = json::array();
  for (int i : culprit)
    members.push_back({{"name", b.parts_[size_t(i)].name},
                       {"setting", b.parts_[size_t(i)].setting},
                       {share + "_alone", num_json(b.share_of({i}))}});
  json curves = json::object();
  curves["reference"] = to_json(b.tried_[0].runs[0])["losses"];
  curves["original"] = to_json(b.tried_[1].runs[0])["losses"];
  // The fixed run: the culprit promoted, or, demoting, every other part promoted.
  if (const Tried* t = b.find(b.demote() ? b.complement(culprit) : culprit))
    curves[b.demote() ? "culprit_only" : "fixed"] = to_json(t->runs[0])["losses"];
  return {{"config", o.config}, {"against", o.against}, {"metric", o.metric},
          {"direction", o.direction},
          {"granularity", o.granularity}, {"seeds", o.seeds}, {"threshold", kCloseTarget},
          {"reference_metric", num_json(b.ref_)}, {"original_metric", num_json(b.orig_)},
          {"gap", num_json(b.gap_)}, {"parts", parts}, {"culprit", members},
          {share, num_json(closed)}, {"finished", finished},
          {"runs_used", b.cache_.used()}, {"runs_now", b.cache_.ran()}, {"budget", o.budget},
          {"losses_seed_" + std::to_string(o.seeds[0]), curves},
          {"version", sim::sim_version()}};
}

BisectOptions parse_options(int argc, char** argv, bool& help) {
  CLI::App app{"Find which part of a precision policy explains its gap to fp32", "halfway bisect"};
  BisectOptions o;
  app.add_option("config", o.config, "the run's TOML config");
  app.add_option("--against", o.against, "the reference: fp32 (the default), or a config of "
                                         "the same run in another precision");
  app.add_option("--metric", o.metric, "final_loss (default), val_loss (text data), drift");
  app.add_option("--granularity", o.granularity, "op (default: op kinds, optimizer states, "
                                                 "weights), role (forward, backward, update), "
                                                 "layer (the model's modules by name), tensor "
                                                 "(single op sites by name) or operand (the "
                                                 "fp8/block recipe's GEMM operand copies)");
  app.add_option("--budget", o.budget, "the most training runs to use (default 64, at least 2)");
  app.add_option("--out", o.out, "output folder (default: the config's name + '.bisect')");
  app.add_option("--jobs,-j", o.jobs, "runs in parallel (the answer does not depend on it)")
      ->check(CLI::Range(1, 256));
  app.add_option("--seeds", o.seeds, "seeds to average the metric over (default: the config's)")
      ->delimiter(',');
  app.add_option("--min-gap", o.min_gap, "a gap at most this large counts as none (default "
                                         "1e-6 + 1e-3 x |the reference's metric|)");
  app.add_option("--direction", o.direction, "promote (default: the smallest set whose "
                                             "promotion closes 90% of the gap) or demote (the "
                                             "smallest set that, alone left in low precision, "
                                             "opens 90% of it)");
  app.add_flag("--plot", o.plot, "also draw bisect.png (Python with matplotlib)");
  app.add_option("--shard", o.shard, "this process is shard I of N bisecting into the same "
                                     "--out (a shared file system): it trains its share of each "
                                     "step's runs and reads the others'; shard 0 writes the "
                                     "answer; default from SLURM_ARRAY_TASK_ID/COUNT");
  app.add_option("--shard-wait", o.shard_wait, "seconds a shard waits for another shard's run "
                                               "before training it itself (default 3600)")
      ->check(CLI::Range(0.0, 1e7));
  o.python = std::getenv("HALFWAY_PYTHON") ? std::getenv("HALFWAY_PYTHON") : "/usr/bin/python3";
  app.add_option("--python", o.python, "Python for --plot (default $HALFWAY_PYTHON or "
                                       "/usr/bin/python3)");
  if ((help = parse_or_help(app, argc, argv))) return o;
  if (o.config.empty()) throw InputError("missing CONFIG.toml (usage: halfway bisect CONFIG.toml [--against fp32])");
  sim::parse_granularity(o.granularity);
  if (o.metric != "final_loss" && o.metric != "val_loss" && o.metric != "drift")
    throw InputError("unknown metric '" + o.metric + "' (metrics: final_loss val_loss drift)");
  if (o.plot && !program_exists(o.python))
    throw InputError("--plot: no program '" + o.python + "' (--python, $HALFWAY_PYTHON)");
  if (o.direction != "promote" && o.direction != "demote")
    throw InputError("unknown direction '" + o.direction + "' (directions: promote demote)");
  if (o.budget < 2)
    throw InputError("--budget must be at least 2 (the reference and the original run), got " +
                     std::to_string(o.budget));
  if (o.against != "fp32") {
    if (!fs::is_regular_file(o.against))
      throw InputError("--against must be fp32 or a config file, got '" + o.against + "'");
    if (o.metric == "drift")
      throw InputError("--metric drift is the distance to the fp32 reference trained alongside; "
                       "with --against " + o.against + " use final_loss or val_loss");
  }
  return o;
}

/// The first key (dotted) under which the tables `a` and `b` differ, or "": tables are
/// compared key by key, every other value (an array too) as a whole.
std::string first_difference(const json& a, const json& b, const std::string& at) {
  if (!a.is_object() || !b.is_object()) return a == b ? "" : at;
  for (const auto& [x, y] : {std::pair{&a, &b}, std::pair{&b, &a}})
    for (const auto& [k, v] : x->items()) {
      const std::string key = at.empty() ? k : at + "." + k;
      if (!y->contains(k)) return key;
      if (std::string d = first_difference(v, (*y)[k], key); !d.empty()) return d;
    }
  return "";
}

/// The first setting outside the precision in which configs `a` and `b` differ, as
/// "model.d_model", or "" when they are the same run: their [precision], [scaler] and [trace]
/// tables, the optimizer states' dtypes, run.reference and run.seed (a bisection sets the
/// seeds of both) are left out.
std::string differs_outside_precision(const sim::TrainConfig& a, const sim::TrainConfig& b) {
  const auto strip = [](const sim::TrainConfig& c) {
    json j = json::parse(c.config_json, nullptr, false);
    if (j.is_discarded()) throw InputError("--against: a config holds values JSON cannot "
                                           "compare (inf or nan)");
    for (const char* k : {"precision", "scaler", "trace"}) j.erase(k);
    for (const char* k : {"exp_avg_dtype", "exp_avg_sq_dtype", "momentum_buffer_dtype"})
      if (j.contains("optimizer")) j["optimizer"].erase(k);
    for (const char* k : {"reference", "seed"})
      if (j.contains("run")) j["run"].erase(k);
    for (const char* k : {"optimizer", "run"})  // a table left empty is one not written
      if (j.contains(k) && j[k].empty()) j.erase(k);
    return j;
  };
  return first_difference(strip(a), strip(b), "");
}

}  // namespace

int cmd_bisect(int argc, char** argv) {
  bool help = false;
  BisectOptions o = parse_options(argc, argv, help);
  if (help) return 0;
  const sim::TrainConfig c = sim::parse_config_file(o.config);
  if (o.metric == "val_loss" && (c.text_files.empty() || c.val_every == 0))
    throw InputError("--metric val_loss needs text data with validation ([data] text, val_every > 0)");
  if (o.seeds.empty()) o.seeds = {c.seed};
  if (o.out.empty()) {
    const fs::path p(o.config);
    o.out = (p.parent_path() / p.stem()).string() + ".bisect";
  }
  const sim::Granularity g = sim::parse_granularity(o.granularity);
  sim::TrainConfig ref = sim::reference_config(c);
  std::string def = sim::read_text_file(o.config) + "\nmetric " + o.metric + "\n";
  if (o.against != "fp32") {
    ref = sim::parse_config_file(o.against);
    if (const std::string k = differs_outside_precision(c, ref); !k.empty())
      throw InputError("--against " + o.against + ": the configs differ in '" + k +
                       "'; a reference is the same run in another precision ([precision], "
                       "[scaler], optimizer state dtypes)");
    ref.trace = false;
    ref.reference.clear();
    def += "against\n" + sim::read_text_file(o.against);
  }
  std::vector<sim::PrecisionPart> parts =
      sim::precision_parts(c, g, o.against == "fp32" ? nullptr : &ref);
  int shard = 0, shards = 1;
  resolve_shard(o.shard, shard, shards);
  const fs::path out(o.out), runs = out / "runs";
  fs::create_directories(runs);
  if (shard == 0) sim::unpublish_folder(o.out, {"bisect.csv", "bisect.json"});
  RunCache cache(runs, def, o.metric, o.budget, o.jobs);
  cache.set_shard(shard, shards, o.shard_wait);
  Bisection b(o, c, ref, parts, cache);
  sim::install_stop_handlers();
  try {
    if (!b.measure_gap()) throw InputError("--budget " + std::to_string(o.budget) + " cannot pay for the reference and the original runs of " + std::to_string(o.seeds.size()) + " seeds");
    const double limit = o.min_gap >= 0 ? o.min_gap : 1e-6 + 1e-3 * std::fabs(b.ref_);
    if (!(std::fabs(b.gap_) > limit))
      throw InputError("no gap: " + o.metric + " " + num_str(b.orig_) + " against " +
                       reference_words(o) + " " + num_str(b.ref_) + ", gap " + num_str(b.gap_) + " (at most " + num_str(limit) +
                       " counts as none); nothing to bisect");
    if (parts.empty())
      throw InputError("a gap of " + num_str(b.gap_) + " in " + o.metric + ", but no part of " +
                       o.config + "'s precision differs from " +
                       (o.against == "fp32" ? std::string("fp32") : o.against) +
                       " at granularity " + o.granularity);
    const int n = int(parts.size());
    sim::PartSet all(static_cast<size_t>(n), 0);
    for (int i = 0; i < n; ++i) all[size_t(i)] = i;
    const std::optional<double> f_all = b.closed({all})[0];
    sim::SearchResult res{all, f_all.has_value()};
    if (f_all && *f_all >= kCloseTarget)
      res = sim::ddmin(n, kCloseTarget, o.jobs,
                       [&](const std::vector<sim::PartSet>& s) { return b.share(s); });
    if (res.finished && res.culprit.size() > 1) {
      std::vector<sim::PartSet> singles;
      for (int i : res.culprit) singles.push_back({i});
      for (const auto& r : b.share(singles)) res.finished = res.finished && r.has_value();
    }
    const double closed = b.share_of(res.culprit);
    if (shard != 0) {  // every shard found the same answer; shard 0 writes it
      std::printf("halfway bisect: shard %d/%d done (%d runs of %d trained here); shard 0 "
                  "writes the answer into %s\n", shard, shards, cache.ran(), cache.used(),
                  o.out.c_str());
      return 0;
    }
    sim::AtomicFile csv((out / "bisect.csv").string()), js((out / "bisect.json").string());
    csv.out() << csv_text(b, o.seeds);
    js.out() << answer_json(b, res.culprit, closed, res.finished, o).dump(2) << "\n";
    csv.finish();
    js.finish();
    const json manifest = {{"tool", "halfway bisect"}, {"config", o.config},
                           {"complete", true}, {"version", sim::sim_version()},
                           {"git_revision", sim::git_revision()}};
    sim::publish_folder(o.out, {}, {[&] { csv.publish(); }, [&] { js.publish(); }},
                        manifest.dump(2) + "\n");
    std::fputs(paragraph(b, res.culprit, closed, res.finished, o).c_str(), stdout);
    if (f_all && *f_all < kCloseTarget)
      std::printf("halfway bisect: promoting every part closes only %s of the gap: the parts do "
                  "not explain it (seed noise, or rounding outside the parts)\n", pct(*f_all).c_str());
    const int drawn = o.plot ? draw_figures("halfway bisect", o.python, o.out) : 0;
    return res.finished && f_all && *f_all >= kCloseTarget ? drawn : 1;
  } catch (const Stopped& s) {
    std::fprintf(stderr, "halfway bisect: stopped by %s after %d runs; run again to continue "
                 "(finished runs are kept in %s)\n", sim::signal_name(s.signal).c_str(),
                 cache.used(), runs.string().c_str());
    return 128 + s.signal;
  }
}

}  // namespace halfway::cli
