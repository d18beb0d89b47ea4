/// \file replay.hpp
/// Replays a GPU campaign report (results/gpu/report.json) on the CPU. Host only; needs
/// nlohmann/json. What can be recomputed without the GPU is recomputed and compared:
///  - elementwise checks: the counts add up; the reference fingerprint over the replay slice
///    (every kReplayStride-th input; with `full`, over every input covered) equals the one the
///    device computed, so the device-compiled reference is the host library; every example's
///    reference and class follow from its operands; a check without mismatches has equal
///    hardware and reference fingerprints;
///  - math functions: the hardware's 65,536 results are rebuilt from the correctly rounded
///    reference plus the recorded exceptions; their fingerprint, histogram, maximum ulp error
///    and counts must be what the report says;
///  - tensor cores: the probe cases are rebuilt from the seed and every listed model (matched
///    ones and the published presets) is evaluated; on each family where the report says the
///    model has no mismatch, its fingerprint must equal the hardware's, elsewhere it must differ.
///
///     ReplayLog log;
///     replay_report(nlohmann::json::parse(text), /*full=*/false, log);
///     if (!log.failures.empty()) ...
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "halfway/hw/describe.hpp"
#include "halfway/hw/fma_cases.hpp"
#include "halfway/hw/hash.hpp"
#include "halfway/thread_pool.hpp"
#include "halfway/hw/math_ref.hpp"
#include "halfway/hw/mma_cases.hpp"
#include "halfway/hw/ops.hpp"

namespace halfway::hw {

struct ReplayLog {
  std::vector<std::string> failures;
  std::vector<std::string> notes;
  int replayed = 0;  ///< entries replayed
  void fail(const std::string& where, const std::string& what) { failures.push_back(where + ": " + what); }
};

namespace replay_detail {

using nlohmann::json;

inline uint64_t hex(const json& j) { return std::stoull(j.get<std::string>(), nullptr, 16); }

inline bool find_op(const std::string& name, Op& op) {
  for (int o = 0; o < kOpCount; ++o)
    if (name == op_info(static_cast<Op>(o)).name) {
      op = static_cast<Op>(o);
      return true;
    }
  return false;
}

inline Diff find_diff(const std::string& id) {
  for (int d = 0; d < kDiffCount; ++d)
    if (id == diff_id(static_cast<Diff>(d))) return static_cast<Diff>(d);
  return Diff::count;
}

/// Operands of input `idx` of a check.
struct Operands {
  Op op;
  std::string source;
  uint64_t seed;
  const std::vector<std::array<uint32_t, 3>>* hard;
  void operator()(uint64_t idx, uint32_t& a, uint32_t& b, uint32_t& c) const {
    a = b = c = 0;
    if (source == "exhaustive") domain_operands(op, idx, a, b);
    else if (source == "random") fma_operands(op_info(op).in, seed, idx, a, b, c);
    else {
      a = (*hard)[idx][0];
      b = (*hard)[idx][1];
      c = (*hard)[idx][2];
    }
  }
};

/// Sum of hash_term(idx, reference) over idx = 0, step, 2·step, ... < n, on all threads.
inline uint64_t ref_fingerprint(const Operands& ops, uint64_t n, uint64_t step) {
  const uint64_t count = n == 0 ? 0 : (n - 1) / step + 1;
  // Integer sums commute: the total does not depend on which thread hashed which chunk.
  std::atomic<uint64_t> total{0};
  parallel_chunks(count, uint64_t(1) << 16, [&](uint64_t c0, uint64_t c1) {
    uint64_t h = 0;
    for (uint64_t k = c0; k < c1; ++k) {
      const uint64_t idx = k * step;
      uint32_t a, b, c;
      ops(idx, a, b, c);
      h += hash_term(idx, reference(ops.op, a, b, c));
    }
    total.fetch_add(h, std::memory_order_relaxed);
  });
  return total.load();
}

}  // namespace replay_detail

/// Elementwise checks (the "checks" array of an elementwise part).
inline void replay_checks(const nlohmann::json& checks, bool full, ReplayLog& log) {
  using namespace replay_detail;
  std::vector<std::array<uint32_t, 3>> hard16, hard_b16;
  for (const json& c : checks) {
    const std::string name = c.value("op", std::string("?"));
    const std::string source = c.value("source", std::string("?"));
    const std::string where = name + " (" + source + ")";
    if (c.contains("skipped")) {
      log.notes.push_back(where + ": not run on the GPU (" + c["skipped"].get<std::string>() + ")");
      continue;
    }
    Op op;
    if (!find_op(name, op)) {
      log.fail(where, "unknown operation");
      continue;
    }
    const OpInfo info = op_info(op);
    const std::vector<std::array<uint32_t, 3>>* hard = nullptr;
    if (source == "hard_cases") {
      auto& v = info.in == fmt_fp16() ? hard16 : hard_b16;
      if (v.empty()) v = fma_hard_cases(info.in);
      hard = &v;
    } else if (source != "exhaustive" && source != "random") {
      log.fail(where, "unknown source");
      continue;
    }
    const Operands ops{op, source, c.value("seed", uint64_t(0)), hard};
    const uint64_t covered = c.at("covered").get<uint64_t>();
    const uint64_t mismatches = c.at("mismatches").get<uint64_t>();
    if (hard && c.at("domain").get<uint64_t>() != hard->size())
      log.fail(where, "the hard-case list has " + std::to_string(hard->size()) + " cases here, the report " +
                          c.at("domain").dump());
    uint64_t sum = 0;
    for (const json& cl : c.at("classes")) {
      sum += cl.at("count").get<uint64_t>();
      const Diff d = find_diff(cl.at("class").get<std::string>());
      const json& e = cl.at("example");
      uint32_t a, b, cc;
      ops(e.at("index").get<uint64_t>(), a, b, cc);
      const uint32_t ea = uint32_t(hex(e.at("a"))), eb = uint32_t(hex(e.at("b"))), ec = uint32_t(hex(e.at("c")));
      const uint32_t ehw = uint32_t(hex(e.at("hw"))), eref = uint32_t(hex(e.at("ref")));
      const std::string ew = where + " class " + cl.at("class").get<std::string>();
      if (ea != a || (info.arity > 1 && eb != b) || (info.arity > 2 && ec != cc))
        log.fail(ew, "example operands do not match its index");
      const uint32_t ref = reference(op, a, b, cc);
      if (ref != eref) log.fail(ew, "example reference " + hex_enc(info.out, eref) + ", the library gives " + hex_enc(info.out, ref));
      const bool sub = any_subnormal_operand(op, a, b, cc);
      if (ehw == ref) log.fail(ew, "the example's hardware result equals the reference");
      else if (d == Diff::count || classify(info.out, ehw, ref, sub, sub ? reference_daz(op, a, b, cc) : ref) != d)
        log.fail(ew, "the example is not of its class");
    }
    if (sum != mismatches) log.fail(where, "class counts add up to " + std::to_string(sum) + ", not " + std::to_string(mismatches));
    if (mismatches > covered) log.fail(where, "more mismatches than inputs");
    if (mismatches == 0 && (c.at("hw_hash") != c.at("ref_hash") || c.at("replay_hw_hash") != c.at("replay_ref_hash")))
      log.fail(where, "no mismatches but different fingerprints");
    if (mismatches > 0 && c.at("hw_hash") == c.at("ref_hash"))
      log.fail(where, "mismatches but equal fingerprints");
    const uint64_t stride = c.at("replay_stride").get<uint64_t>();
    if (stride != kReplayStride) log.fail(where, "replay stride " + std::to_string(stride));
    const uint64_t rp = ref_fingerprint(ops, covered, kReplayStride);
    if (rp != hex(c.at("replay_ref_hash")))
      log.fail(where, "reference fingerprint of the replay slice differs from the device's");
    if (full && ref_fingerprint(ops, covered, 1) != hex(c.at("ref_hash")))
      log.fail(where, "reference fingerprint over all inputs differs from the device's");
    log.replayed++;
  }
}

/// Math-function checks (the "math" array).
inline void replay_math(const nlohmann::json& math, ReplayLog& log) {
  using namespace replay_detail;
  for (const json& m : math) {
    const std::string where = "h" + m.value("fn", std::string("?")) + " " + m.value("format", std::string("?"));
    if (m.contains("skipped")) {
      log.notes.push_back(where + ": not run on the GPU");
      continue;
    }
    int fi = -1;
    for (int f = 0; f < kMathFnCount; ++f)
      if (m.at("fn").get<std::string>() == math_fn_name(static_cast<MathFn>(f))) fi = f;
    const std::string fname = m.at("format").get<std::string>();
    if (fi < 0 || (fname != "fp16" && fname != "bf16")) {
      log.fail(where, "unknown function or format");
      continue;
    }
    const MathFn f = static_cast<MathFn>(fi);
    const Format fmt = fname == "fp16" ? fmt_fp16() : fmt_bf16();
    if (!m.at("exceptions_complete").get<bool>()) {
      log.notes.push_back(where + ": too many exceptions recorded to rebuild the results");
      continue;
    }
    const bool nan_uniform = m.at("nan_uniform").get<bool>();
    const uint32_t nan_enc = uint32_t(hex(m.at("nan_encoding")));
    std::vector<uint32_t> hw(65536);
    for (uint32_t x = 0; x < 65536; ++x)
      hw[x] = math_replay_model(math_reference(f, fmt, x), fmt, nan_uniform, nan_enc);
    for (const json& e : m.at("exceptions")) hw[uint32_t(hex(e.at(0)))] = uint32_t(hex(e.at(1)));
    const MathStats s = analyze_math(f, fmt, hw.data());
    if (s.hw_hash != hex(m.at("hw_hash"))) log.fail(where, "rebuilt results have a different fingerprint");
    if (s.correctly_rounded != m.at("correctly_rounded").get<uint64_t>()) log.fail(where, "correctly rounded count differs");
    if (s.special_mismatch != m.at("special_mismatch").get<uint64_t>()) log.fail(where, "special mismatch count differs");
    if (s.unresolved != m.at("unresolved").get<uint64_t>()) log.fail(where, "unresolved count differs");
    // The ulp error is measured against a binary64 evaluation of f, whose last bits may differ
    // between C libraries: equal to 1e-9 relative (the encodings above are compared exactly).
    const double want_ulp = m.at("max_ulp_error").get<double>();
    if (std::fabs(s.max_ulp - want_ulp) > 1e-9 * std::max(1.0, want_ulp))
      log.fail(where, "max ulp error differs");
    for (int b = 0; b < MathStats::kBuckets; ++b)
      if (s.hist[b] != m.at("ulp_histogram").at(b).get<uint64_t>()) log.fail(where, "histogram differs");
    if (s.exceptions.size() != m.at("exception_count").get<uint64_t>()) log.fail(where, "exception count differs");
    log.replayed++;
  }
}

namespace replay_detail {
inline Rounding rounding_of(const std::string& s) {
  if (s == "minMag") return Rounding::minMag;
  if (s == "min") return Rounding::min;
  if (s == "max") return Rounding::max;
  return Rounding::near_even;
}
/// A candidate from its JSON (mma_report.hpp, candidate_json); `k`: the variant's K, for an
/// interleaved k order.
inline mma::Candidate candidate_of(const json& j, int k) {
  mma::Candidate c;
  const std::string kind = j.at("kind").get<std::string>();
  c.model.kind = kind == "block_fma"        ? AccumulationModel::Kind::block_fma
                 : kind == "sequential_fma" ? AccumulationModel::Kind::sequential_fma
                                            : AccumulationModel::Kind::sequential;
  c.model.acc = j.at("acc").get<std::string>() == "fp16" ? fmt_fp16() : fmt_fp32();
  c.model.rounding = rounding_of(j.at("rounding").get<std::string>());
  c.model.block = j.at("block").get<int>();
  c.model.kept_bits = j.at("kept_bits").get<int>();
  c.model.floor_alignment = j.at("floor_alignment").get<bool>();
  // Reports from before MMA-Sim's parameters were searched have neither key.
  c.model.unnormalized_alignment = j.value("unnormalized_alignment", false);
  c.model.step_frac_bits = uint8_t(j.value("step_frac_bits", 0));
  c.reverse = j.at("reverse").get<bool>();
  c.two_step = j.at("two_step").get<bool>();
  c.out_rounding = rounding_of(j.at("out_rounding").get<std::string>());
  if (const int chunk = j.value("k_interleave", 0); chunk > 0)
    mma::interleave_k(c.model, k, c.model.block, chunk);
  return c;
}
}  // namespace replay_detail

/// Tensor-core variants (the "variants" array of the mma part). `max_models` bounds how many
/// matched models are replayed per variant (the presets always are).
inline void replay_mma(const nlohmann::json& variants, ReplayLog& log, size_t max_models = 3) {
  using namespace replay_detail;
  using namespace mma;
  for (const json& v : variants) {
    const std::string name = v.value("variant", std::string("?"));
    if (v.contains("skipped")) {
      log.notes.push_back(name + ": not run on the GPU");
      continue;
    }
    int vi = -1;
    for (int k = 0; k < kVariantCount; ++k)
      if (name == variant_info(static_cast<Variant>(k)).name) vi = k;
    if (vi < 0) {
      log.fail(name, "unknown variant");
      continue;
    }
    if (!v.at("layout_ok").get<bool>()) {
      log.notes.push_back(name + ": the layout probe failed on the GPU; nothing to replay");
      continue;
    }
    const CaseSet cs = make_cases(static_cast<Variant>(vi), v.at("seed").get<uint64_t>());
    if (cs.cases() != v.at("cases").get<size_t>()) {
      log.fail(name, "the probe cases rebuilt here are not the ones the GPU ran");
      continue;
    }
    uint64_t hw_hash[kFamilyCount] = {};
    for (const json& f : v.at("families")) {
      for (int k = 0; k < kFamilyCount; ++k)
        if (f.at("family").get<std::string>() == family_name(static_cast<Family>(k))) hw_hash[k] = hex(f.at("hw_hash"));
    }
    auto check_model = [&](const json& entry, const std::string& label) {
      const Candidate cand = candidate_of(entry.at("model"), cs.info.k);
      uint64_t h[kFamilyCount] = {};
      for (size_t q = 0; q < cs.cases(); ++q)
        for (int r = 0; r < kM; ++r)
          for (int c = 0; c < kN; ++c)
            h[static_cast<int>(cs.family[q])] += hash_term(output_index(q, r, c), candidate_output(cand, cs, q, r, c));
      for (int k = 0; k < kFamilyCount; ++k) {
        const char* fam = family_name(static_cast<Family>(k));
        const uint64_t mism = entry.at("family_mismatches").at(fam).get<uint64_t>();
        if ((mism == 0) != (h[k] == hw_hash[k]))
          log.fail(name + " " + label + " " + fam,
                   mism == 0 ? "the model's fingerprint differs from the hardware's"
                             : "the report counts mismatches but the fingerprints agree");
      }
    };
    if (v.contains("presets"))
      for (const json& p : v.at("presets")) check_model(p, p.value("name", std::string("preset")));
    if (v.contains("search") && !v.at("search").is_null()) {
      size_t n = 0;
      for (const json& m : v.at("search").at("matched")) {
        if (n++ >= max_models) break;
        check_model(m, "matched model " + m.at("model").at("description").get<std::string>());
      }
    }
    log.replayed++;
  }
}

/// The whole merged report: every part that is present.
inline void replay_report(const nlohmann::json& r, bool full, ReplayLog& log) {
  if (!r.contains("parts") || !r.at("parts").is_object()) {
    log.fail("report", "no \"parts\" object");
    return;
  }
  for (const auto& [name, part] : r.at("parts").items()) {
    if (!part.is_object()) continue;
    if (part.contains("checks")) replay_checks(part.at("checks"), full, log);
    if (part.contains("math")) replay_math(part.at("math"), log);
    if (part.contains("variants")) replay_mma(part.at("variants"), log);
    if (part.value("status", std::string()) != "complete")
      log.notes.push_back("part " + name + " status: " + part.value("status", std::string("missing")));
  }
  if (r.contains("summary") && r.at("summary").contains("checks")) {
    // The summary the campaign script wrote must agree with the details.
    for (const auto& [key, value] : r.at("summary").at("checks").items()) {
      bool found = false;
      for (const auto& [pname, part] : r.at("parts").items())
        if (part.is_object() && part.contains("checks"))
          for (const auto& c : part.at("checks"))
            if (c.value("op", std::string()) + "/" + c.value("source", std::string()) == key) {
              found = true;
              if (c.contains("mismatches") && value.contains("mismatches") &&
                  c.at("mismatches") != value.at("mismatches"))
                log.fail("summary " + key, "mismatch count differs from the check's");
            }
      if (!found) log.fail("summary " + key, "no such check in the parts");
    }
  }
}

}  // namespace halfway::hw
