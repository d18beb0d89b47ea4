#include "dot.hpp"

#include "halfway/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "amx_tiles.hpp"
#include "backend.hpp"
#include "halfway/hw/dot_cases.hpp"

namespace halfway::hw {

const DotInstruction* avx512bf16_dot_instruction();
const DotInstruction* amx_bf16_instruction();
const DotInstruction* amx_fp16_instruction();

std::string DotInstruction::absent_reason() const {
  if (disabled_by_env(name())) return "disabled by HALFWAY_HW_DISABLE";
  return missing();
}

const std::vector<const DotInstruction*>& all_dot_instructions() {
  static const std::vector<const DotInstruction*> list = {
      avx512bf16_dot_instruction(), amx_bf16_instruction(), amx_fp16_instruction()};
  return list;
}

const DotInstruction* find_dot_instruction(std::string_view name) {
  for (const DotInstruction* d : all_dot_instructions())
    if (name == d->name()) return d;
  return nullptr;
}

namespace {

/// IEEE fp32 fmas in index order, nothing flushed: the baseline the differences are described
/// against.
constexpr AccumulationModel kIeee = accumulation::fp32_sequential;
constexpr uint64_t kDotChunk = uint64_t(1) << 14;

/// Runs cases [0, n) through the instruction in chunks on the thread pool's parts;
/// `visit(part, index, a, b, c, hw)` sees every case on part `part` (dot_parts(n, threads)).
template <class Visit>
void for_each_case(const DotInstruction& d, uint64_t n, unsigned threads, Visit&& visit) {
  const Format in = d.input();
  parallel_chunks_by_part(n, kDotChunk, int(threads), [&](int t, uint64_t begin, uint64_t end) {
    thread_local std::vector<uint32_t> a, b, c, out;
    const uint64_t m = end - begin;
    for (auto* v : {&a, &b, &c, &out}) v->resize(m);
    for (uint64_t i = 0; i < m; ++i) dot_operands(in, kDotSeed, begin + i, a[i], b[i], c[i]);
    d.run(a.data(), b.data(), c.data(), out.data(), m);
    for (uint64_t i = 0; i < m; ++i) visit(unsigned(t), begin + i, a[i], b[i], c[i], out[i]);
  });
}

bool any_subnormal(const Format& in, uint32_t a, uint32_t b, uint32_t c) {
  const Format f32 = fmt_fp32();
  return is_subnormal(in, a & 0xFFFF) || is_subnormal(in, a >> 16) ||
         is_subnormal(in, b & 0xFFFF) || is_subnormal(in, b >> 16) || is_subnormal(f32, c);
}
uint32_t flush2(const Format& in, uint32_t x) {
  return flush_subnormal(in, x & 0xFFFF) | (flush_subnormal(in, x >> 16) << 16);
}

std::vector<ClassReport> dot_class_reports(const CheckStats& st, const DotInstruction& d,
                                           const AccumulationModel& ref_model) {
  OpInfo info;
  info.name = d.name();
  info.arity = 3;
  info.in = d.input();
  info.out = fmt_fp32();
  info.in_name = d.input().frac_bits == 7 ? "bf16/fp32" : "fp16/fp32";
  info.out_name = "fp32";
  return hw::class_reports(st, info, [&](Example& e) {
    dot_operands(d.input(), kDotSeed, e.index, e.a, e.b, e.c);
    d.run(&e.a, &e.b, &e.c, &e.hw, 1);
    e.ref = dot_lane(ref_model, d.input(), e.a, e.b, e.c);
  });
}

}  // namespace

DotReport compare_dot(const DotInstruction& d, uint64_t n, unsigned threads) {
  if (d.full_tiles()) {
    std::vector<AmxTile> tiles = amx_tile_cases(d.input(), size_t((n + kAmxOutputs - 1) / kAmxOutputs));
    d.run_tiles(tiles.data(), tiles.size());
    return compare_tiles(d.name(), d.documented(), d.input(), tiles, threads);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const AccumulationModel model = d.documented();
  const Format in = d.input(), f32 = fmt_fp32();
  struct Partial {
    CheckStats doc, ieee;
    uint64_t family[kDotFamilies] = {};
  };
  std::vector<Partial> parts(size_t(chunk_parts(n, kDotChunk, int(threads))));
  for_each_case(d, n, threads, [&](unsigned t, uint64_t idx, uint32_t a, uint32_t b, uint32_t c,
                                   uint32_t hw) {
    Partial& p = parts[t];
    const uint32_t ref = dot_lane(model, in, a, b, c);
    p.doc.total++;
    p.doc.hw_hash += hash_term(idx, hw);
    p.doc.ref_hash += hash_term(idx, ref);
    if (hw != ref) {
      p.doc.mismatches++;
      p.family[idx % kDotFamilies]++;
      p.doc.cls[static_cast<int>(classify(f32, hw, ref, false, ref))].add(idx, hw);
    }
    const uint32_t ieee = dot_lane(kIeee, in, a, b, c);
    if (hw != ieee) {
      p.ieee.mismatches++;
      const bool sub = any_subnormal(in, a, b, c);
      const uint32_t ieee_daz =
          sub ? dot_lane(kIeee, in, flush2(in, a), flush2(in, b), flush_subnormal(f32, c)) : ieee;
      p.ieee.cls[static_cast<int>(classify(f32, hw, ieee, sub, ieee_daz))].add(idx, hw);
    }
  });
  Partial all;
  for (const Partial& p : parts) {
    all.doc.merge(p.doc);
    all.ieee.merge(p.ieee);
    for (int f = 0; f < kDotFamilies; ++f) all.family[f] += p.family[f];
  }
  DotReport r;
  r.backend = d.name();
  r.total = all.doc.total;
  r.mismatches = all.doc.mismatches;
  r.hw_hash = all.doc.hw_hash;
  r.ref_hash = all.doc.ref_hash;
  r.classes = dot_class_reports(all.doc, d, model);
  r.ieee_mismatches = all.ieee.mismatches;
  r.ieee_classes = dot_class_reports(all.ieee, d, kIeee);
  r.family_mismatches.assign(all.family, all.family + kDotFamilies);
  r.family_name = dot_family_name;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::vector<AccumulationModel> dot_candidates() {
  using K = AccumulationModel::Kind;
  std::vector<AccumulationModel> out;
  struct Shape {
    K kind;
    int kept;
  };
  const Shape shapes[] = {{K::sequential_fma, 23}, {K::sequential, 23}, {K::block_fma, 24},
                          {K::block_fma, 48}};
  for (const Shape& sh : shapes)
    for (bool odd_first : {false, true}) {
      // One rounding of the exact sum does not depend on the order.
      if (sh.kind == K::block_fma && odd_first) continue;
      for (bool daz : {false, true})
        for (int ftz : {0, 1, 2})  // off, after rounding, before rounding
          for (Rounding r : {Rounding::near_even, Rounding::minMag})
            for (bool nan_first : {false, true}) {
              if (nan_first && sh.kind != K::sequential_fma) continue;
            AccumulationModel m;
            m.kind = sh.kind;
            m.acc = fmt_fp32();
            m.rounding = r;
            m.block = sh.kind == K::block_fma ? 2 : 1;
            m.kept_bits = sh.kept;
            if (odd_first) {
              m.period = 2;
              m.order[0] = 1;
              m.order[1] = 0;
            }
            m.daz = daz;
            m.ftz = ftz != 0;
            m.tininess = ftz == 2 ? Tininess::before_rounding : Tininess::after_rounding;
            m.nan_accumulator_first = nan_first;
            out.push_back(m);
          }
    }
  // Interleaved chains from +0 per AMX instruction (K = 32), then added to C.
  for (int chains : {1, 2, 4})
    for (bool daz : {false, true})
      for (bool ftz : {false, true})
        for (Rounding r : {Rounding::near_even, Rounding::minMag})
          for (bool nan_first : {false, true}) {
            AccumulationModel m;
            m.kind = K::split_fma;
            m.acc = fmt_fp32();
            m.rounding = r;
            m.block = 32;
            m.chains = uint8_t(chains);
            m.daz = daz;
            m.ftz = ftz;
            m.tininess = Tininess::after_rounding;
            m.nan_accumulator_first = nan_first;
            out.push_back(m);
          }
  return out;
}

std::string describe_dot_model(const AccumulationModel& m) {
  using K = AccumulationModel::Kind;
  std::string s = m.kind == K::sequential_fma ? "sequential fma"
                  : m.kind == K::sequential   ? "sequential multiply-then-add"
                  : m.kind == K::split_fma
                      ? std::to_string(m.chains) + " fma chain" + (m.chains == 1 ? "" : "s") +
                            " from +0 per " + std::to_string(m.block) +
                            " products (element i in chain i mod " + std::to_string(m.chains) +
                            "), then summed and added to C"
                      : "exact sum, " + std::to_string(m.kept_bits) + " bits kept, one rounding";
  if (m.kind == K::sequential_fma || m.kind == K::sequential)
    s += (m.period == 2 && m.order[0] == 1) ? ", odd element first" : ", even element first";
  s += m.daz ? ", DAZ" : ", no DAZ";
  s += !m.ftz ? ", no FTZ"
              : (m.tininess == Tininess::after_rounding ? ", FTZ (after rounding)"
                                                        : ", FTZ (before rounding)");
  s += m.rounding == Rounding::near_even ? ", near_even" : ", minMag";
  if (m.kind == K::sequential_fma || m.kind == K::split_fma)
    s += m.nan_accumulator_first ? ", NaN accumulator over inf*0" : ", inf*0 gives the default NaN";
  return s;
}

bool same_dot_model(const AccumulationModel& x, const AccumulationModel& y) {
  const int px = x.period <= 1 ? 0 : x.period, py = y.period <= 1 ? 0 : y.period;
  if (x.kind != y.kind || x.acc != y.acc || x.rounding != y.rounding || px != py ||
      x.daz != y.daz || x.ftz != y.ftz || (x.ftz && x.tininess != y.tininess) ||
      x.nan_accumulator_first != y.nan_accumulator_first)
    return false;
  if (x.kind == AccumulationModel::Kind::block_fma &&
      (x.block != y.block || x.kept_bits != y.kept_bits || x.floor_alignment != y.floor_alignment))
    return false;
  if (x.kind == AccumulationModel::Kind::split_fma && (x.block != y.block || x.chains != y.chains))
    return false;
  for (int j = 0; j < px; ++j)
    if (x.order[j] != y.order[j]) return false;
  return true;
}

DotSearchResult search_dot(const DotInstruction& d, uint64_t n, unsigned threads) {
  if (d.full_tiles()) {
    std::vector<AmxTile> tiles = amx_tile_cases(d.input(), size_t((n + kAmxOutputs - 1) / kAmxOutputs));
    d.run_tiles(tiles.data(), tiles.size());
    return search_tiles(d.input(), tiles, tiles.size(), threads);
  }
  std::vector<uint32_t> a(n), b(n), c(n), hw(n);
  for_each_case(d, n, threads, [&](unsigned, uint64_t i, uint32_t x, uint32_t y, uint32_t z,
                                   uint32_t out) {
    a[i] = x;
    b[i] = y;
    c[i] = z;
    hw[i] = out;
  });
  const auto cands = dot_candidates();
  std::vector<uint64_t> miss(cands.size(), 0);
  // One candidate model per chunk: each count is written by the part that ran it.
  parallel_chunks(cands.size(), 1, [&](uint64_t k0, uint64_t k1) {
    for (uint64_t k = k0; k < k1; ++k) {
      uint64_t m = 0;
      for (uint64_t i = 0; i < n; ++i) m += dot_lane(cands[k], d.input(), a[i], b[i], c[i]) != hw[i];
      miss[k] = m;
    }
  }, int(threads));
  return rank_candidates(cands, miss, n);
}

DotSearchResult rank_candidates(const std::vector<AccumulationModel>& candidates,
                                const std::vector<uint64_t>& mismatches, uint64_t cases) {
  DotSearchResult r;
  r.cases = cases;
  for (size_t k = 0; k < candidates.size(); ++k) {
    if (mismatches[k] == 0) r.matched.push_back(candidates[k]);
    else r.others.emplace_back(candidates[k], mismatches[k]);
  }
  std::stable_sort(r.others.begin(), r.others.end(),
                   [](const auto& x, const auto& y) { return x.second < y.second; });
  return r;
}

}  // namespace halfway::hw
