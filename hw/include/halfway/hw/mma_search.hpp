/// \file mma_search.hpp
/// The search for block-FMA model parameters that reproduce recorded tensor-core outputs bit for
/// bit. Host only; multi-threaded over candidates. Used by the GPU campaign and, with outputs
/// produced by a known model, by the CPU tests that check the probes can tell models apart.
///
///     CaseSet cs = make_cases(Variant::f16_f32, seed);
///     std::vector<uint32_t> hw = ...;                 // D of every case, output_index order
///     SearchResult r = search(cs, hw, candidates(Variant::f16_f32));
///     // r.matched: every candidate with zero mismatches on the required families
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "halfway/hw/mma_cases.hpp"
#include "halfway/thread_pool.hpp"

namespace halfway::hw::mma {

struct Score {
  Candidate cand;
  uint64_t mismatches = 0;  ///< over the required families (a lower bound when `capped`)
  bool capped = false;
  uint64_t family[kFamilyCount] = {};  ///< per family (filled by score_full)
  uint64_t first_output = ~uint64_t(0);  ///< first mismatching output index (score_full)
};

struct SearchResult {
  std::vector<Score> matched;  ///< zero mismatches on every required family
  std::vector<Score> closest;  ///< the best non-matching candidates (up to 5)
  uint64_t candidates = 0;     ///< how many were tried
  uint64_t of = 0;             ///< how many there were
  bool complete = true;        ///< false when the time budget ran out
};

/// Mismatches of `cand` over every output, per family (no cap).
inline Score score_full(const CaseSet& cs, const std::vector<uint32_t>& hw, const Candidate& cand) {
  Score s;
  s.cand = cand;
  for (size_t q = 0; q < cs.cases(); ++q)
    for (int row = 0; row < kM; ++row)
      for (int col = 0; col < kN; ++col) {
        const uint64_t o = output_index(q, row, col);
        if (candidate_output(cand, cs, q, row, col) != hw[o]) {
          s.family[static_cast<int>(cs.family[q])]++;
          if (required_family(cs.family[q])) s.mismatches++;
          s.first_output = std::min(s.first_output, o);
        }
      }
  return s;
}

/// Try every candidate; a candidate is dropped from "matched" at its first mismatch and stops
/// being counted after `cap` mismatches. The most discriminating families are visited first.
inline SearchResult search(const CaseSet& cs, const std::vector<uint32_t>& hw,
                           const std::vector<Candidate>& cands, unsigned threads = 0,
                           double budget_s = 1e9, uint64_t cap = 64) {
  static const Family order[] = {Family::alignment,   Family::block_probe, Family::rounding,
                                 Family::random_wide, Family::same_sign,   Family::random_narrow,
                                 Family::exact_int};
  std::vector<size_t> case_order;
  for (Family f : order)
    for (size_t q = 0; q < cs.cases(); ++q)
      if (cs.family[q] == f) case_order.push_back(q);
  if (threads == 0) threads = unsigned(ThreadPool::hardware_threads());
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  std::atomic<bool> out_of_time{false};
  std::vector<Score> scores(cands.size());
  std::vector<char> done(cands.size(), 0);
  auto work = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= cands.size()) return;
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > budget_s) {
        out_of_time = true;
        return;
      }
      Score s;
      s.cand = cands[i];
      for (size_t q : case_order) {
        for (int row = 0; row < kM && !s.capped; ++row)
          for (int col = 0; col < kN; ++col)
            if (candidate_output(cands[i], cs, q, row, col) != hw[output_index(q, row, col)] &&
                ++s.mismatches >= cap) {
              s.capped = true;
              break;
            }
        if (s.capped) break;
      }
      scores[i] = s;
      done[i] = 1;
    }
  };
  ThreadPool::global().run(int(std::max(1u, threads)), [&](int) { work(); });

  SearchResult r;
  r.of = cands.size();
  r.complete = !out_of_time;
  std::vector<Score> rest;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (!done[i]) continue;
    r.candidates++;
    (scores[i].mismatches == 0 ? r.matched : rest).push_back(scores[i]);
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [](const Score& a, const Score& b) { return a.mismatches < b.mismatches; });
  if (rest.size() > 5) rest.resize(5);
  r.closest = rest;
  return r;
}

}  // namespace halfway::hw::mma
