/// \file report_json.hpp
/// JSON entries of the elementwise checks and the math-function checks of the GPU campaign.
/// Host only. The GPU programs fill these records from their kernels' counters; the CPU tests
/// fill them from CPU runs to check that what is written is what the replay reads.
#pragma once

#include <string>

#include "halfway/hw/describe.hpp"
#include "halfway/hw/diff.hpp"
#include "halfway/hw/json_out.hpp"
#include "halfway/hw/math_ref.hpp"
#include "halfway/hw/ops.hpp"

namespace halfway::hw {

struct ClassExample {
  uint64_t index = 0;
  uint32_t a = 0, b = 0, c = 0, hw = 0, ref = 0;
};

/// One elementwise check: `source` is "exhaustive" (domain index = operands, ops.hpp),
/// "random" (fma_operands with `seed`) or "hard_cases" (fma_hard_cases, index = position).
struct CheckRecord {
  Op op = Op::count;
  std::string source;
  uint64_t domain = 0;  ///< inputs the check was to cover
  uint64_t seed = 0;
  CheckStats st;        ///< st.total = inputs covered (0 .. total-1 in index order)
  uint64_t replay_hw_hash = 0, replay_ref_hash = 0;  ///< over indices multiple of kReplayStride
  double seconds = 0;
  ClassExample example[kDiffCount];
};

inline std::string check_json(const CheckRecord& r) {
  const OpInfo info = op_info(r.op);
  std::string classes;
  for (int k = 0; k < kDiffCount; ++k) {
    const DiffStats& ds = r.st.cls[k];
    if (ds.count == 0) continue;
    const ClassExample& e = r.example[k];
    classes += strf(
        "%s{\"class\": \"%s\", \"count\": %llu, \"description\": %s, \"hw_and\": \"%s\", "
        "\"hw_or\": \"%s\", \"example\": {\"index\": %llu, \"a\": \"%s\", \"b\": \"%s\", "
        "\"c\": \"%s\", \"hw\": \"%s\", \"ref\": \"%s\"}}",
        classes.empty() ? "" : ", ", diff_id(static_cast<Diff>(k)), (unsigned long long)ds.count,
        Report::quote(describe(static_cast<Diff>(k), info, ds)).c_str(),
        hex_enc(info.out, ds.hw_and).c_str(), hex_enc(info.out, ds.hw_or).c_str(),
        (unsigned long long)e.index, hex_enc(info.in, e.a).c_str(), hex_enc(info.in, e.b).c_str(),
        hex_enc(info.in, e.c).c_str(), hex_enc(info.out, e.hw).c_str(), hex_enc(info.out, e.ref).c_str());
  }
  return strf("{\"op\": \"%s\", \"source\": \"%s\", \"domain\": %llu, \"covered\": %llu, "
              "\"complete\": %s, \"seed\": %llu, \"mismatches\": %llu, \"hw_hash\": %s, "
              "\"ref_hash\": %s, \"replay_stride\": %llu, \"replay_hw_hash\": %s, "
              "\"replay_ref_hash\": %s, \"seconds\": %.3f, \"classes\": [",
              info.name, r.source.c_str(), (unsigned long long)r.domain,
              (unsigned long long)r.st.total, r.st.total == r.domain ? "true" : "false",
              (unsigned long long)r.seed, (unsigned long long)r.st.mismatches,
              hex64(r.st.hw_hash).c_str(), hex64(r.st.ref_hash).c_str(),
              (unsigned long long)kReplayStride, hex64(r.replay_hw_hash).c_str(),
              hex64(r.replay_ref_hash).c_str(), r.seconds) +
         classes + "]}";
}

/// At most this many (input, hardware result) exceptions are written per math function; with
/// more, the replay cannot rebuild the hardware's results and says so.
inline constexpr size_t kMaxMathExceptions = 8192;

inline std::string math_json(MathFn f, const Format& fmt, const char* format_name, const MathStats& s) {
  std::string ex;
  for (size_t i = 0; i < s.exceptions.size() && i < kMaxMathExceptions; ++i)
    ex += strf("%s[\"%s\", \"%s\"]", i ? ", " : "", hex_enc(fmt, s.exceptions[i].first).c_str(),
               hex_enc(fmt, s.exceptions[i].second).c_str());
  std::string hist;
  for (int b = 0; b < MathStats::kBuckets; ++b)
    hist += strf("%s%llu", b ? ", " : "", (unsigned long long)s.hist[b]);
  return strf("{\"fn\": \"%s\", \"format\": \"%s\", \"inputs\": %llu, \"correctly_rounded\": %llu, "
              "\"unresolved\": %llu, \"special_mismatch\": %llu, \"ulp_histogram\": [%s], "
              "\"ulp_buckets\": [\"0\", \"1\", \"2\", \"3-4\", \"5-8\", \"9-16\", \">16\"], "
              "\"max_ulp_error\": %.17g, \"max_ulp_input\": \"%s\", \"nan_uniform\": %s, "
              "\"nan_encoding\": \"%s\", \"hw_hash\": %s, \"exception_count\": %zu, "
              "\"exceptions_complete\": %s, \"exceptions\": [",
              math_fn_name(f), format_name, (unsigned long long)s.inputs,
              (unsigned long long)s.correctly_rounded, (unsigned long long)s.unresolved,
              (unsigned long long)s.special_mismatch, hist.c_str(), s.max_ulp,
              hex_enc(fmt, s.max_ulp_input).c_str(), s.nan_uniform ? "true" : "false",
              hex_enc(fmt, s.nan_encoding).c_str(), hex64(s.hw_hash).c_str(), s.exceptions.size(),
              s.exceptions.size() <= kMaxMathExceptions ? "true" : "false") +
         ex + "]}";
}

}  // namespace halfway::hw
