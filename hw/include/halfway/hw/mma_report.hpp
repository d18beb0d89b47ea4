/// \file mma_report.hpp
/// The analysis of one MMA variant's hardware outputs and its JSON: layout probe, per-family
/// fingerprints, the published parameter sets, the search. Host only; halfway_gpu_mma calls it
/// with the tensor cores' outputs, and the CPU tests call it with outputs of a known model to
/// check that the report says what the replay expects.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "halfway/hw/describe.hpp"
#include "halfway/hw/json_out.hpp"
#include "halfway/hw/mma_search.hpp"

namespace halfway::hw::mma {

inline std::string candidate_json(const Candidate& c) {
  const AccumulationModel& m = c.model;
  const char* kind = m.kind == AccumulationModel::Kind::block_fma        ? "block_fma"
                     : m.kind == AccumulationModel::Kind::sequential_fma ? "sequential_fma"
                                                                          : "sequential";
  return strf("{\"kind\": \"%s\", \"acc\": \"%s\", \"rounding\": \"%s\", \"block\": %d, "
              "\"kept_bits\": %d, \"floor_alignment\": %s, \"unnormalized_alignment\": %s, "
              "\"step_frac_bits\": %d, \"reverse\": %s, \"two_step\": %s, "
              "\"out_rounding\": \"%s\", \"k_interleave\": %d, \"description\": %s}",
              kind, m.acc.nbits() == 16 ? "fp16" : "fp32", rounding_name(m.rounding), m.block,
              m.kept_bits, m.floor_alignment ? "true" : "false",
              m.unnormalized_alignment ? "true" : "false", int(m.step_frac_bits),
              c.reverse ? "true" : "false",
              c.two_step ? "true" : "false", rounding_name(c.out_rounding), interleave_chunk(m),
              Report::quote(describe(c)).c_str());
}

inline std::string score_json(const CaseSet& cs, const std::vector<uint32_t>& hw, const Score& s,
                       const char* name) {
  std::string fam;
  for (int f = 0; f < kFamilyCount; ++f)
    fam += strf("%s\"%s\": %llu", f ? ", " : "", family_name(static_cast<Family>(f)),
                (unsigned long long)s.family[f]);
  std::string first = "null";
  if (s.first_output != ~uint64_t(0)) {
    const size_t q = s.first_output / (kM * kN);
    const int row = int(s.first_output % (kM * kN)) / kN, col = int(s.first_output % kN);
    std::string av, bv;
    uint32_t bcol[64];
    cs.column(q, col, bcol);
    for (int k = 0; k < cs.info.k; ++k) {
      av += strf("%s\"%s\"", k ? ", " : "", hex_enc(cs.info.in, cs.A(q)[row * cs.info.k + k]).c_str());
      bv += strf("%s\"%s\"", k ? ", " : "", hex_enc(cs.info.in, bcol[k]).c_str());
    }
    first = strf("{\"output\": %llu, \"family\": \"%s\", \"a\": [%s], \"b\": [%s], \"c\": \"%s\", "
                 "\"hw\": \"%s\", \"model\": \"%s\"}",
                 (unsigned long long)s.first_output, family_name(cs.family[q]), av.c_str(),
                 bv.c_str(), hex_enc(cs.info.acc, cs.C(q)[row * kN + col]).c_str(),
                 hex_enc(cs.info.acc, hw[s.first_output]).c_str(),
                 hex_enc(cs.info.acc, candidate_output(s.cand, cs, q, row, col)).c_str());
  }
  return strf("{%s\"model\": %s, \"mismatches\": %llu, \"family_mismatches\": {%s}, "
              "\"first_mismatch\": %s}",
              name ? strf("\"name\": \"%s\", ", name).c_str() : "", candidate_json(s.cand).c_str(),
              (unsigned long long)s.mismatches, fam.c_str(), first.c_str());
}


struct VariantRun {
  std::string json;      ///< the variant's complete report entry
  bool layout_ok = false;
  bool complete = true;  ///< false when the search ran out of time
  size_t matched = 0;
};

/// Analyse hardware outputs `hw` (output_index order) of case set `cs`. `provisional` receives
/// the entry without the search, before the search starts (to be saved in case of a timeout).
inline VariantRun analyze_variant(const CaseSet& cs, const std::vector<uint32_t>& hw, bool repeatable,
                                  unsigned threads, double budget_s,
                                  const std::function<void(const std::string&)>& provisional) {
  VariantRun run;
  const VariantInfo& vi = cs.info;
  const size_t n = cs.cases(), outs = n * kM * kN;
  // Layout probe: small integers, exact under every model.
  std::string layout_failure = "null";
  uint64_t layout_bad = 0;
  for (size_t q = 0; q < n; ++q) {
    if (cs.family[q] != Family::exact_int) continue;
    for (int r = 0; r < kM; ++r)
      for (int c = 0; c < kN; ++c) {
        Env e;
        const uint32_t want = from_f64(vi.acc, exact_int_output(cs, q, r, c), e);
        const uint32_t got = hw[output_index(q, r, c)];
        // Values, not encodings: the probe is about where elements go, not the sign of zero.
        const bool both_zero = ((got | want) & vi.acc.mag_mask()) == 0;
        if (got != want && !both_zero && layout_bad++ == 0)
          layout_failure = strf("{\"case\": %zu, \"row\": %d, \"col\": %d, \"want\": \"%s\", \"got\": \"%s\"}",
                                q, r, c, hex_enc(vi.acc, want).c_str(), hex_enc(vi.acc, got).c_str());
      }
  }
  run.layout_ok = layout_bad == 0;
  std::string fams;
  for (int f = 0; f < kFamilyCount; ++f) {
    uint64_t h = 0, cases = 0;
    for (size_t q = 0; q < n; ++q) {
      if (static_cast<int>(cs.family[q]) != f) continue;
      cases++;
      for (int r = 0; r < kM; ++r)
        for (int c = 0; c < kN; ++c) h += hash_term(output_index(q, r, c), hw[output_index(q, r, c)]);
    }
    fams += strf("%s{\"family\": \"%s\", \"cases\": %llu, \"hw_hash\": %s}", f ? ", " : "",
                 family_name(static_cast<Family>(f)), (unsigned long long)cases, hex64(h).c_str());
  }
  const std::string head =
      strf("{\"variant\": \"%s\", \"cases\": %zu, \"outputs\": %zu, \"repeatable\": %s, "
           "\"layout_ok\": %s, \"layout_mismatches\": %llu, \"layout_failure\": %s, "
           "\"families\": [%s]",
           vi.name, n, outs, repeatable ? "true" : "false", run.layout_ok ? "true" : "false",
           (unsigned long long)layout_bad, layout_failure.c_str(), fams.c_str());
  if (!run.layout_ok) {
    // A wrong fragment layout makes every model comparison meaningless: report and stop here.
    run.json = head + ", \"search\": null, \"presets\": []}";
    return run;
  }
  std::string pres;
  for (const auto& p : presets(cs.variant)) {
    const Score s = score_full(cs, hw, p.cand);
    pres += (pres.empty() ? "" : ", ") + score_json(cs, hw, s, p.name);
  }
  if (provisional) provisional(head + ", \"search\": null, \"presets\": [" + pres + "]}");
  const auto cands = candidates(cs.variant);
  const SearchResult r = search(cs, hw, cands, threads, budget_s);
  std::string matched, closest;
  size_t listed = 0;
  for (const auto& m : r.matched) {
    if (listed++ >= 24) break;
    matched += (matched.empty() ? "" : ", ") + score_json(cs, hw, score_full(cs, hw, m.cand), nullptr);
  }
  for (const auto& m : r.closest)
    closest += (closest.empty() ? "" : ", ") + score_json(cs, hw, score_full(cs, hw, m.cand), nullptr);
  run.complete = r.complete;
  run.matched = r.matched.size();
  run.json = head + ", \"search\": " +
             strf("{\"candidates\": %llu, \"tried\": %llu, \"complete\": %s, \"matched_count\": %zu, ",
                  (unsigned long long)r.of, (unsigned long long)r.candidates,
                  r.complete ? "true" : "false", r.matched.size()) +
             "\"matched\": [" + matched + "], \"closest\": [" + closest + "]}, \"presets\": [" + pres + "]}";
  return run;
}

}  // namespace halfway::hw::mma
