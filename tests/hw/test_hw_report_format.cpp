// The GPU campaign's report entries, written by the same code the GPU programs use, from results
// computed on the CPU (a CPU loop doing what the kernels do, with NVIDIA's host code or known
// models standing in for the hardware), must replay cleanly; and the replay must catch a report
// that has been tampered with. This ties the writer (report_json.hpp, mma_report.hpp) to the
// reader (replay.hpp) before any GPU has produced a report.
#include <catch2/catch.hpp>

#include <functional>

#include "halfway/hw/mma_report.hpp"
#include "halfway/hw/replay.hpp"
#include "halfway/hw/report_json.hpp"

using namespace halfway;
using namespace halfway::hw;
using nlohmann::json;

namespace {

using HwFn = std::function<uint32_t(uint32_t, uint32_t, uint32_t)>;

/// What check_kernel and run_check do, on the CPU, for inputs 0..n-1.
CheckRecord cpu_check(Op op, const std::string& source, uint64_t domain, uint64_t n, uint64_t seed,
                      const HwFn& hwf) {
  const OpInfo info = op_info(op);
  std::vector<std::array<uint32_t, 3>> hard;
  if (source == "hard_cases") hard = fma_hard_cases(info.in);
  auto operands = [&](uint64_t idx, uint32_t& a, uint32_t& b, uint32_t& c) {
    a = b = c = 0;
    if (source == "exhaustive") domain_operands(op, idx, a, b);
    else if (source == "random") fma_operands(info.in, seed, idx, a, b, c);
    else a = hard[idx][0], b = hard[idx][1], c = hard[idx][2];
  };
  CheckRecord r;
  r.op = op;
  r.source = source;
  r.domain = source == "hard_cases" ? hard.size() : domain;
  r.seed = seed;
  for (uint64_t idx = 0; idx < n; ++idx) {
    uint32_t a, b, c;
    operands(idx, a, b, c);
    const uint32_t hw = hwf(a, b, c) & info.out.enc_mask();
    const uint32_t ref = reference(op, a, b, c);
    r.st.total++;
    r.st.hw_hash += hash_term(idx, hw);
    r.st.ref_hash += hash_term(idx, ref);
    if (idx % kReplayStride == 0) {
      r.replay_hw_hash += hash_term(idx, hw);
      r.replay_ref_hash += hash_term(idx, ref);
    }
    if (hw != ref) {
      r.st.mismatches++;
      const bool sub = any_subnormal_operand(op, a, b, c);
      r.st.cls[int(classify(info.out, hw, ref, sub, sub ? reference_daz(op, a, b, c) : ref))].add(idx, hw);
    }
  }
  for (int k = 0; k < kDiffCount; ++k) {
    if (!r.st.cls[k].count) continue;
    ClassExample& e = r.example[k];
    e.index = r.st.cls[k].first_index;
    operands(e.index, e.a, e.b, e.c);
    e.hw = hwf(e.a, e.b, e.c) & info.out.enc_mask();
    e.ref = reference(op, e.a, e.b, e.c);
  }
  return r;
}

// Stand-in hardware: the library, except that every NaN result is 0x7FFF (fp16/bf16) and
// every 997th input's result is one encoding higher.
HwFn canonical_nan_and_noise(Op op) {
  return [op](uint32_t a, uint32_t b, uint32_t c) {
    const Format out = op_info(op).out;
    const uint32_t r = reference(op, a, b, c);
    if (is_nan_enc(out, r)) return 0x7FFFu;
    if ((a * 2654435761u + b * 40503u + c) % 997 == 0 && (r & out.mag_mask()) < out.max_mag()) return r + 1;
    return r;
  };
}

json replayable(const std::vector<std::string>& entries, const char* key) {
  std::string doc = "{\"parts\": {\"p\": {\"status\": \"complete\", \"" + std::string(key) + "\": [";
  for (size_t i = 0; i < entries.size(); ++i) doc += (i ? ", " : "") + entries[i];
  return json::parse(doc + "]}}}");
}

ReplayLog run(const json& j) {
  ReplayLog log;
  replay_report(j, false, log);
  return log;
}

/// What a GPU program reports for one tensor-core variant, for hardware that computes as
/// `model` on the cases of `seed`: the search (`provisional` sees its first report) and the
/// report of its one entry, the seed added.
struct VariantReport {
  mma::VariantRun run;
  json report;
};

VariantReport variant_report(mma::Variant variant, uint64_t seed,
                             const AccumulationModel& model,
                             const std::function<void(const std::string&)>& provisional) {
  using namespace halfway::hw::mma;
  const CaseSet cs = make_cases(variant, seed);
  Candidate truth;
  truth.model = model;
  std::vector<uint32_t> hw(cs.cases() * kM * kN);
  for (size_t q = 0; q < cs.cases(); ++q)
    for (int r = 0; r < kM; ++r)
      for (int c = 0; c < kN; ++c) hw[output_index(q, r, c)] = candidate_output(truth, cs, q, r, c);
  VariantRun run = analyze_variant(cs, hw, true, 2, 1e9, provisional);
  std::string entry = run.json;
  entry.insert(entry.size() - 1, ", \"seed\": " + std::to_string(seed));
  return {run, replayable({entry}, "variants")};
}

}  // namespace

TEST_CASE("elementwise check entries replay, and tampering is caught", "[hw][replay]") {
  std::vector<std::string> entries;
  // A partial exhaustive check (the first 2^20 f32 inputs: zeros, subnormals, small normals),
  // a complete small one, random and hard-case fma.
  entries.push_back(check_json(cpu_check(Op::f32_to_f16_rn, "exhaustive", uint64_t(1) << 32, 1 << 20, 0,
                                         canonical_nan_and_noise(Op::f32_to_f16_rn))));
  entries.push_back(check_json(cpu_check(Op::e5m2_to_f16, "exhaustive", 256, 256, 0,
                                         canonical_nan_and_noise(Op::e5m2_to_f16))));
  entries.push_back(check_json(cpu_check(Op::f16_fma, "random", 1000000, 50000, 77,
                                         canonical_nan_and_noise(Op::f16_fma))));
  entries.push_back(check_json(cpu_check(Op::bf16_fma, "hard_cases", 0, 20000, 0,
                                         canonical_nan_and_noise(Op::bf16_fma))));
  const json good = replayable(entries, "checks");
  ReplayLog log = run(good);
  for (const auto& f : log.failures) FAIL_CHECK(f);
  CHECK(log.replayed == 4);
  // The stand-in differs from the library: the entries must say so.
  for (const auto& c : good["parts"]["p"]["checks"]) CHECK(c["mismatches"].get<uint64_t>() > 0);

  json bad = good;
  bad["parts"]["p"]["checks"][0]["replay_ref_hash"] = "0x0000000000000001";
  CHECK(!run(bad).failures.empty());
  bad = good;
  auto& cls = bad["parts"]["p"]["checks"][2]["classes"][0];
  cls["count"] = cls["count"].get<uint64_t>() + 1;
  CHECK(!run(bad).failures.empty());
  bad = good;
  auto& ex = bad["parts"]["p"]["checks"][1]["classes"][0]["example"];
  ex["hw"] = ex["ref"];
  CHECK(!run(bad).failures.empty());
  bad = good;
  bad["parts"]["p"]["checks"][3]["seed"] = 1;  // irrelevant for hard cases: still fine
  CHECK(run(bad).failures.empty());
  bad["parts"]["p"]["checks"][2]["seed"] = 78;  // the random triples are a different set
  CHECK(!run(bad).failures.empty());
}

TEST_CASE("math entries rebuild the hardware's results", "[hw][replay]") {
  std::vector<std::string> entries;
  for (const bool bf : {false, true}) {
    const Format fmt = bf ? fmt_bf16() : fmt_fp16();
    const MathFn f = bf ? MathFn::log2 : MathFn::exp;
    std::vector<uint32_t> hw(65536);
    Env env;
    for (uint32_t x = 0; x < 65536; ++x) {
      const MathRef r = math_reference(f, fmt, x);
      hw[x] = is_nan_enc(fmt, r.enc) ? 0x7FFFu : r.enc;
      if (x % 11 == 0 && !is_nan_enc(fmt, r.enc) && !is_inf_enc(fmt, r.enc)) hw[x] = next_up(fmt, r.enc, env);
    }
    const MathStats s = analyze_math(f, fmt, hw.data());
    CHECK(s.correctly_rounded < 65536);
    CHECK(s.nan_uniform);
    CHECK(s.max_ulp > 0.5);
    entries.push_back(math_json(f, fmt, bf ? "bf16" : "fp16", s));
  }
  const json good = replayable(entries, "math");
  ReplayLog log = run(good);
  for (const auto& f : log.failures) FAIL_CHECK(f);
  CHECK(log.replayed == 2);
  json bad = good;
  bad["parts"]["p"]["math"][0]["exceptions"].erase(0);
  CHECK(!run(bad).failures.empty());
  bad = good;
  bad["parts"]["p"]["math"][1]["ulp_histogram"][1] = 0;
  CHECK(!run(bad).failures.empty());
}

TEST_CASE("tensor-core entries replay the matched model against the fingerprints", "[hw][replay]") {
  using namespace halfway::hw::mma;
  const uint64_t seed = 31;
  std::string provisional;
  const auto [run_, good] = variant_report(
      Variant::bf16_f32, seed,
      AccumulationModel{AccumulationModel::Kind::block_fma, formats::fp32, Rounding::minMag, 16, 26, true},
      [&](const std::string& p) { provisional = p; });
  CHECK(run_.layout_ok);
  CHECK(run_.complete);
  CHECK(run_.matched >= 1);
  CHECK(!provisional.empty());
  const json& v = good["parts"]["p"]["variants"][0];
  CHECK(v["search"]["matched"][0]["model"]["kept_bits"] == 26);
  CHECK(v["search"]["matched"][0]["model"]["floor_alignment"] == true);
  ReplayLog log = run(good);
  for (const auto& f : log.failures) FAIL_CHECK(f);
  CHECK(log.replayed == 1);
  json bad = good;
  bad["parts"]["p"]["variants"][0]["families"][1]["hw_hash"] = "0x0000000000000002";
  CHECK(!run(bad).failures.empty());
  bad = good;
  bad["parts"]["p"]["variants"][0]["seed"] = seed + 1;  // other probe cases
  CHECK(!run(bad).failures.empty());
}

TEST_CASE("an interleaved k order survives the report and its replay", "[hw][replay]") {
  using namespace halfway::hw::mma;
  AccumulationModel model{AccumulationModel::Kind::block_fma, formats::fp32, Rounding::minMag, 8, 24};
  interleave_k(model, 16, 8, 2);
  const auto [run_, good] = variant_report(Variant::f16_f32, 17, model, nullptr);
  REQUIRE(run_.matched >= 1);
  const json& m = good["parts"]["p"]["variants"][0]["search"]["matched"][0]["model"];
  CHECK(m["k_interleave"] == 2);
  CHECK(m["block"] == 8);
  ReplayLog log = run(good);
  for (const auto& f : log.failures) FAIL_CHECK(f);
  CHECK(log.replayed == 1);
  json bad = good;  // read as contiguous blocks, the matched model no longer reproduces it
  bad["parts"]["p"]["variants"][0]["search"]["matched"][0]["model"]["k_interleave"] = 0;
  CHECK(!run(bad).failures.empty());
}
