/// \file mma_cases.hpp
/// Test matrices for the tensor-core checks and the search over block-FMA model parameters.
/// Host only. The cases are deterministic functions of (variant, seed), so a CPU can rebuild
/// exactly what the GPU multiplied and replay a matched model against the recorded hardware
/// fingerprints.
///
/// Families (Fasi, Higham, Mikaitis & Pranesh 2021 design their probes the same way):
///  - exact_int: small integers; every model gives the exact result, so a mismatch means the
///    fragment layout (not the arithmetic) is wrong. Checked before anything else.
///  - random_narrow / random_wide / same_sign: random finite inputs, exponents within a few or
///    many binades (alignment losses), same-sign sums (carries).
///  - alignment: an accumulator 2^16..2^39 times larger than n equal products of either sign:
///    how many bits below the largest term survive, and whether truncation is toward zero or
///    toward −inf.
///  - block_probe: +X and −X at two positions and a tiny S at a third; S is lost exactly when it
///    shares a block with ±X, which reveals how the K products are grouped.
///  - rounding: an accumulator with ulp 2 plus products 1, 0.5, 1.5 and a tiny tail: the final
///    rounding direction and tie-breaking.
///  - subnormal: subnormal inputs and accumulators; reported, but not required to match (the
///    models do not flush).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "halfway/hw/hash.hpp"
#include "halfway/names.hpp"
#include "halfway/hw/mma.hpp"

namespace halfway::hw::mma {

enum class Family : uint8_t {
  exact_int, random_narrow, random_wide, same_sign, alignment, block_probe, rounding, subnormal,
  count
};
inline constexpr int kFamilyCount = static_cast<int>(Family::count);

inline const char* family_name(Family f) {
  static const char* const names[] = {"exact_int", "random_narrow", "random_wide", "same_sign",
                                      "alignment", "block_probe", "rounding", "subnormal"};
  return names[static_cast<int>(f)];
}
/// Families a model must reproduce bit for bit to be called a match.
inline bool required_family(Family f) { return f != Family::subnormal; }

struct CaseSet {
  Variant variant = Variant::f16_f32;
  VariantInfo info{};
  std::vector<uint32_t> a;  ///< cases × 16 × K, row-major
  std::vector<uint32_t> b;  ///< cases × K × 8, b[k*8 + n]
  std::vector<uint32_t> c;  ///< cases × 16 × 8
  std::vector<Family> family;

  size_t cases() const { return family.size(); }
  const uint32_t* A(size_t q) const { return a.data() + q * kM * info.k; }
  const uint32_t* B(size_t q) const { return b.data() + q * info.k * kN; }
  const uint32_t* C(size_t q) const { return c.data() + q * kM * kN; }
  /// Column n of case q's B, contiguous (what the models take).
  void column(size_t q, int n, uint32_t* out) const {
    for (int k = 0; k < info.k; ++k) out[k] = B(q)[k * kN + n];
  }
};

namespace detail {

/// The encoding of v in f; throws if v is not exactly representable (a bug in a generator).
inline uint32_t exact(const Format& f, double v) {
  Env e;
  const uint32_t r = from_f64(f, v, e);
  if (e.flags) throw std::logic_error("mma case value not representable: " + std::to_string(v));
  return r;
}
/// v if exactly representable and normal (or zero) in f, else +0.
inline uint32_t exact_or_zero(const Format& f, double v) {
  Env e;
  const uint32_t r = from_f64(f, v, e);
  if (e.flags || is_subnormal(f, r)) return 0;
  return r;
}

class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream) : seed_(seed ^ (stream * 0xA0761D6478BD642Full)) {}
  uint64_t next() { return random64(seed_, n_++); }
  int uniform(int lo, int hi) { return lo + int(next() % uint64_t(hi - lo + 1)); }

 private:
  uint64_t seed_, n_ = 0;
};

/// A random normal value of f with unbiased exponent in [lo, hi] (clamped to f's normal range).
inline uint32_t random_normal(const Format& f, Rng& r, int lo, int hi, int sign = -1) {
  lo = std::max(lo, f.emin());
  hi = std::min(hi, f.emax() - 1);
  const int e = r.uniform(lo, hi);
  const uint64_t w = r.next();
  const uint32_t s = sign < 0 ? uint32_t(w & 1) : uint32_t(sign);
  const uint32_t frac = uint32_t(w >> 8) & f.frac_mask();
  return (s ? f.sign_bit() : 0u) | (uint32_t(e + f.bias) << f.frac_bits) | frac;
}

inline void push_case(CaseSet& cs, Family fam, const std::vector<uint32_t>& a,
                      const std::vector<uint32_t>& b, const std::vector<uint32_t>& c) {
  cs.a.insert(cs.a.end(), a.begin(), a.end());
  cs.b.insert(cs.b.end(), b.begin(), b.end());
  cs.c.insert(cs.c.end(), c.begin(), c.end());
  cs.family.push_back(fam);
}

/// A case's three tiles, A (kM x K), B (K x kN) and C (kM x kN), refilled by each family.
struct Tiles {
  std::vector<uint32_t> A, B, C;
  explicit Tiles(int K) : A(size_t(kM * K)), B(size_t(K * kN)), C(size_t(kM * kN)) {}
};

inline void fill_zero(Tiles& t) {
  std::fill(t.A.begin(), t.A.end(), 0u);
  std::fill(t.B.begin(), t.B.end(), 0u);
  std::fill(t.C.begin(), t.C.end(), 0u);
}

/// `count` cases of family `fam` whose elements are all drawn: in case q, every element of A
/// by `da(q)`, then of B by `db(q)`, then of C by `dc(q)` (in that order: they share a stream).
template <class DA, class DB, class DC>
void add_drawn(CaseSet& cs, Tiles& t, Family fam, int count, DA da, DB db, DC dc) {
  for (int q = 0; q < count; ++q) {
    for (auto& x : t.A) x = da(q);
    for (auto& x : t.B) x = db(q);
    for (auto& x : t.C) x = dc(q);
    push_case(cs, fam, t.A, t.B, t.C);
  }
}

/// exact_int: |sum| <= 32*9 + 8, exact in every accumulator.
inline void add_exact_int(CaseSet& cs, Tiles& t, uint64_t seed) {
  const Format fi = cs.info.in, fa = cs.info.acc;
  Rng r(seed, 1);
  add_drawn(
      cs, t, Family::exact_int, 8, [&](int) { return exact(fi, r.uniform(-3, 3)); },
      [&](int) { return exact(fi, r.uniform(-3, 3)); },
      [&](int) { return exact(fa, r.uniform(-8, 8)); });
}

/// random_narrow: random normal inputs in a few binades, one in 16 zero.
inline void add_random_narrow(CaseSet& cs, Tiles& t, uint64_t seed) {
  const Format fi = cs.info.in, fa = cs.info.acc;
  Rng r(seed, 2);
  auto input = [&](int) { return (r.next() % 16 == 0) ? 0u : random_normal(fi, r, -3, 3); };
  add_drawn(cs, t, Family::random_narrow, 256, input, input,
            [&](int) { return random_normal(fa, r, -2, 4); });
}

/// random_wide: many binades between products (alignment losses).
inline void add_random_wide(CaseSet& cs, Tiles& t, uint64_t seed) {
  const Format fi = cs.info.in, fa = cs.info.acc;
  const bool acc16 = fa.nbits() == 16;
  Rng r(seed, 3);
  const int lo = acc16 ? -6 : -10, hi = acc16 ? 4 : 10;
  auto input = [&](int) { return random_normal(fi, r, lo, hi); };
  add_drawn(cs, t, Family::random_wide, 256, input, input,
            [&](int) { return random_normal(fa, r, acc16 ? -6 : -12, acc16 ? 10 : 12); });
}

/// same_sign: all terms of one sign, carries out of the block sum.
inline void add_same_sign(CaseSet& cs, Tiles& t, uint64_t seed) {
  const Format fi = cs.info.in, fa = cs.info.acc;
  Rng r(seed, 4);
  add_drawn(
      cs, t, Family::same_sign, 64, [&](int q) { return random_normal(fi, r, -2, 2, q & 1); },
      [&](int) { return random_normal(fi, r, -2, 2, 0); },
      [&](int q) { return random_normal(fa, r, -2, 3, q & 1); });
}

/// alignment: C = ±2^(p + off), n_j equal products ±2^p, off in [16, 39].
inline void add_alignment(CaseSet& cs, Tiles& t) {
  const Format fi = cs.info.in, fa = cs.info.acc;
  const int K = cs.info.k;
  const bool acc16 = fa.nbits() == 16;
  auto& [A, B, C] = t;
  for (int q = 0; q < 64; ++q) {
    fill_zero(t);
    const int ea_lo = acc16 ? std::max(fi.emin(), -14) : std::max(fi.emin(), -4);
    const int eb = ea_lo + (q % 8);
    const bool cneg = q >= 32;
    for (int i = 0; i < kM; ++i) {
      const int ea = ea_lo + (i & 7);
      for (int k = 0; k < K; ++k) A[i * K + k] = exact(fi, std::ldexp(i < 8 ? 1.0 : -1.0, ea));
    }
    for (int j = 0; j < kN; ++j) {
      const int n = j * (K / 8) + 1;  // 1, 3, 5, ... (K=16) or 1, 5, 9, ... (K=32)
      for (int k = 0; k < K; ++k) B[k * kN + j] = k < n ? exact(fi, std::ldexp(1.0, eb)) : 0u;
    }
    for (int i = 0; i < kM; ++i)
      for (int j = 0; j < kN; ++j) {
        const int pexp = ea_lo + (i & 7) + eb;
        const int off = 16 + (i * 5 + j * 3 + q * 7) % 24;
        const int ec = std::min(pexp + off, fa.emax() - 1);
        C[i * kN + j] = exact(fa, std::ldexp(cneg ? -1.0 : 1.0, ec));
      }
    push_case(cs, Family::alignment, A, B, C);
  }
}

/// block_probe: rows (k1, k2 = k1 + d, k3) with +X, -X, S; B columns scale by 2^v.
inline void add_block_probe(CaseSet& cs, Tiles& t, uint64_t seed) {
  const Format fi = cs.info.in, fa = cs.info.acc;
  const int K = cs.info.k;
  auto& [A, B, C] = t;
  int eX, eS;
  switch (cs.variant) {
    case Variant::f16_f32: eX = 15; eS = -14; break;
    case Variant::f16_f16: eX = 12; eS = -10; break;
    case Variant::bf16_f32: eX = 40; eS = -40; break;
    case Variant::e4m3_f32: eX = 8; eS = -6; break;
    default: eX = 15; eS = -14; break;
  }
  static const int vj[kN] = {0, 1, -1, 2, -2, 3, -3, 0};
  std::vector<int> rows;  // k1, k2, k3 triples
  const int ds16[] = {1, 2, 4, 8}, ds32[] = {1, 8, 16};
  const int* ds = K == 16 ? ds16 : ds32;
  const int nd = K == 16 ? 4 : 3;
  for (int k1 = 0; k1 < K; ++k1)
    for (int di = 0; di < nd; ++di)
      for (int k3 = 0; k3 < K; ++k3) {
        const int k2 = (k1 + ds[di]) % K;
        if (k3 == k1 || k3 == k2) continue;
        rows.insert(rows.end(), {k1, k2, k3});
      }
  Rng r(seed, 6);
  const size_t nrows = rows.size() / 3;
  for (size_t base = 0; base < nrows; base += kM) {
    fill_zero(t);
    for (int i = 0; i < kM; ++i) {
      const size_t row = std::min(base + size_t(i), nrows - 1);
      const int k1 = rows[3 * row], k2 = rows[3 * row + 1], k3 = rows[3 * row + 2];
      const int fb = std::min(3, int(fi.frac_bits));  // fraction bits that fit every input
      const double frac = 1.0 + std::ldexp(double(r.next() % (1u << fb)), -fb);
      A[i * K + k1] = exact(fi, std::ldexp(1.0, eX));
      A[i * K + k2] = exact(fi, std::ldexp(-1.0, eX));
      A[i * K + k3] = exact(fi, std::ldexp((r.next() & 1) ? -frac : frac, eS));
    }
    for (int j = 0; j < kN; ++j)
      for (int k = 0; k < K; ++k) B[k * kN + j] = exact(fi, std::ldexp(j == 7 ? -1.0 : 1.0, vj[j]));
    for (int i = 0; i < kM; ++i)
      for (int j = 1; j < kN; j += 2) C[i * kN + j] = exact(fa, std::ldexp((i & 1) ? -1.0 : 1.0, eS + vj[j] - 1));
    push_case(cs, Family::block_probe, A, B, C);
  }
}

/// rounding: C = ±(2^p + 2j) (ulp 2) plus products in {0.5, 1, 1.5} and a tail ±2^-m.
inline void add_rounding(CaseSet& cs, Tiles& t) {
  const Format fi = cs.info.in, fa = cs.info.acc;
  const int K = cs.info.k;
  const bool acc16 = fa.nbits() == 16;
  auto& [A, B, C] = t;
  const int p = fa.precision();
  for (int q = 0; q < 64; ++q) {
    fill_zero(t);
    const int s = acc16 ? -(q >> 3) : (q >> 3);
    const double cs_ = (q & 1) ? -1.0 : 1.0, s0 = (q & 2) ? -1.0 : 1.0, s1 = (q & 4) ? -1.0 : 1.0;
    static const double p0[8] = {1.0, 1.0, 0.5, 1.5, 1.0, 0.0, 0.5, 1.5};
    for (int i = 0; i < kM; ++i) {
      A[i * K + 0] = exact(fi, std::ldexp(s0 * p0[i & 7], s));
      const int m = 1 + (i >> 1);  // tails 2^-1 .. 2^-8
      A[i * K + 1] = (i & 1) ? exact_or_zero(fi, std::ldexp(s1, s - m)) : 0u;
    }
    for (int j = 0; j < kN; ++j) {
      B[0 * kN + j] = exact(fi, 1.0);
      B[1 * kN + j] = exact(fi, 1.0);
    }
    for (int i = 0; i < kM; ++i)
      for (int j = 0; j < kN; ++j)
        C[i * kN + j] = exact(fa, std::ldexp(cs_ * (std::ldexp(1.0, p) + 2.0 * j), s));
    push_case(cs, Family::rounding, A, B, C);
  }
}

/// subnormal: subnormal inputs and accumulators.
inline void add_subnormal(CaseSet& cs, Tiles& t, uint64_t seed) {
  const Format fi = cs.info.in, fa = cs.info.acc;
  Rng r(seed, 8);
  auto input = [&](int) {
    const uint64_t w = r.next();
    return (w % 3 == 0) ? (uint32_t(w >> 8) & (fi.sign_bit() | fi.frac_mask()))  // subnormal or 0
                        : random_normal(fi, r, fi.emin(), fi.emin() + 4);
  };
  auto acc = [&](int) {
    const uint64_t w = r.next();
    return (w % 2 == 0) ? (uint32_t(w >> 8) & (fa.sign_bit() | fa.frac_mask()))
                        : random_normal(fa, r, fa.emin(), fa.emin() + 3);
  };
  add_drawn(cs, t, Family::subnormal, 32, input, [&](int) { return random_normal(fi, r, -3, 3); },
            acc);
}

}  // namespace detail

/// All test cases of one variant.
inline CaseSet make_cases(Variant v, uint64_t seed) {
  using namespace detail;
  CaseSet cs;
  cs.variant = v;
  cs.info = variant_info(v);
  Tiles t(cs.info.k);
  add_exact_int(cs, t, seed);
  add_random_narrow(cs, t, seed);
  add_random_wide(cs, t, seed);
  add_same_sign(cs, t, seed);
  add_alignment(cs, t);
  add_block_probe(cs, t, seed);
  add_rounding(cs, t);
  add_subnormal(cs, t, seed);
  return cs;
}

/// The exact result of an exact_int case output, by integer arithmetic (layout probe).
inline double exact_int_output(const CaseSet& cs, size_t q, int row, int col) {
  Env e;
  double s = to_f64(cs.info.acc, cs.C(q)[row * kN + col], e);
  for (int k = 0; k < cs.info.k; ++k)
    s += to_f64(cs.info.in, cs.A(q)[row * cs.info.k + k], e) * to_f64(cs.info.in, cs.B(q)[k * kN + col], e);
  return s;
}

/// Model output for case q, output (row, col).
inline uint32_t candidate_output(const Candidate& cand, const CaseSet& cs, size_t q, int row,
                                 int col) {
  uint32_t bcol[64];
  cs.column(q, col, bcol);
  return model_output(cand, cs.info, cs.A(q) + row * cs.info.k, bcol, cs.C(q)[row * kN + col]);
}

/// Global output index of (case, row, col): what fingerprints are keyed by.
inline uint64_t output_index(size_t q, int row, int col) {
  return uint64_t(q) * (kM * kN) + uint64_t(row) * kN + uint64_t(col);
}

/// Operand order of k-blocks of `blk` interleaved in chunks of `s` (mma_cases.hpp candidates).
inline void interleave_k(AccumulationModel& m, int k, int blk, int s) {
  const int nblocks = k / blk;
  int j = 0;
  for (int b = 0; b < nblocks; ++b)
    for (int i = 0; i < k; ++i)
      if ((i / s) % nblocks == b) m.order[j++] = uint8_t(i);
  m.period = uint8_t(k);
}
/// The chunk length of an interleaved order (0: index order).
inline int interleave_chunk(const AccumulationModel& m) {
  if (m.period <= 1) return 0;
  bool identity = true;
  for (int i = 0; i < m.period; ++i) identity = identity && m.order[i] == i;
  if (identity) return 0;
  int s = 1;
  while (s < m.period && m.order[s] == m.order[s - 1] + 1) ++s;
  return s;
}

/// The candidate models searched for a variant: block size, bits kept below the largest
/// exponent, rounding of each block's sum, truncation toward zero or −inf, alignment to the
/// largest normalised or unnormalised exponent (MMA-Sim's), a 13-bit block output for fp8
/// (e8m13, with at most 16 bits kept), block order, contiguous or interleaved k-blocks; for
/// fp16 accumulators also "sum in fp32, then round to fp16". Sequential fma and sequential
/// round-then-add in the accumulator format are included as baselines.
inline std::vector<Candidate> candidates(Variant v) {
  const VariantInfo vi = variant_info(v);
  std::vector<Candidate> out;
  const Format f32 = fmt_fp32();
  std::vector<int> blocks = {1, 2, 4, 8, 16};
  if (vi.k == 32) blocks.push_back(32);
  auto add_block_models = [&](const Format& acc, int kept_lo, int kept_hi, bool two_step,
                              Rounding out_r) {
    for (int blk : blocks)
      for (int kept = kept_lo; kept <= kept_hi; ++kept)
        for (Rounding r : {Rounding::minMag, Rounding::near_even})
          for (bool floor : {false, true})
            for (bool rev : {false, true})
              for (bool unnorm : {false, true})
                for (int step : {0, 13}) {
                  if (rev && blk >= vi.k) continue;
                  // A 13-bit block output (Hopper's fp8 FP22) only for fp8 inputs into fp32.
                  if (step && (vi.in.nbits() != 8 || acc.nbits() != 32 || kept > 16)) continue;
                  Candidate c;
                  c.model = AccumulationModel{AccumulationModel::Kind::block_fma, acc, r, blk, kept, floor};
                  c.model.unnormalized_alignment = unnorm;
                  c.model.step_frac_bits = uint8_t(step);
                  c.reverse = rev;
                  c.two_step = two_step;
                  c.out_rounding = out_r;
                  out.push_back(c);
                }
  };
  if (vi.acc.nbits() == 16) {
    add_block_models(vi.acc, 8, 32, false, Rounding::near_even);
    add_block_models(f32, 20, 32, true, Rounding::near_even);
    add_block_models(f32, 20, 32, true, Rounding::minMag);
  } else if (vi.in.nbits() == 8) {
    add_block_models(vi.acc, 8, 32, false, Rounding::near_even);
  } else {
    add_block_models(vi.acc, 20, 32, false, Rounding::near_even);
  }
  // Interleaved k-blocks (block < K): block j takes the chunks of s consecutive k whose chunk
  // index is j modulo the number of blocks, e.g. an fp8 k32 MMA run as two fp16 k16 HMMAs over
  // k in {0,1,4,5,...} and {2,3,6,7,...} (s = 2). In index order within the block model.
  for (int blk : blocks)
    for (int s : {1, 2, 4})
      if (blk >= 2 && blk < vi.k && s < blk)
        for (int kept = vi.in.nbits() == 8 ? 8 : (vi.acc.nbits() == 16 ? 8 : 20); kept <= 32; ++kept)
          for (Rounding r : {Rounding::minMag, Rounding::near_even})
            for (bool floor : {false, true}) {
              Candidate c;
              c.model = AccumulationModel{AccumulationModel::Kind::block_fma, vi.acc, r, blk, kept, floor};
              interleave_k(c.model, vi.k, blk, s);
              out.push_back(c);
            }
  for (auto kind : {AccumulationModel::Kind::sequential_fma, AccumulationModel::Kind::sequential}) {
    Candidate c;
    c.model = AccumulationModel{kind, vi.acc, Rounding::near_even, 1, 23};
    out.push_back(c);
  }
  return out;
}

/// The published parameter sets (numerics-reference.md §4) as candidates for a variant.
struct Preset {
  const char* name;
  Candidate cand;
};
inline std::vector<Preset> presets(Variant v) {
  const VariantInfo vi = variant_info(v);
  auto mk = [](AccumulationModel m) {
    Candidate c;
    c.model = m;
    return c;
  };
  std::vector<Preset> p;
  if (vi.in.nbits() == 8) {
    p.push_back({"h100_fp8_fp32", mk(accumulation::h100_fp8_fp32)});
    p.push_back({"mmasim_hopper_fp8", mk(accumulation::mmasim_hopper_fp8)});
  } else if (vi.acc.nbits() == 16) {
    p.push_back({"h100_fp16", mk(accumulation::h100_fp16)});
    p.push_back({"mmasim_hopper_fp16", mk(accumulation::mmasim_hopper_fp16)});
  } else {
    p.push_back({"v100_fp32", mk(accumulation::v100_fp32)});
    p.push_back({"a100_fp32", mk(accumulation::a100_fp32)});
    p.push_back({"h100_fp32", mk(accumulation::h100_fp32)});
    p.push_back({"mmasim_volta", mk(accumulation::mmasim_volta)});
    p.push_back({"mmasim_ampere", mk(accumulation::mmasim_ampere)});
    p.push_back({"mmasim_hopper", mk(accumulation::mmasim_hopper)});
  }
  p.push_back({"fp32_sequential",
               mk(AccumulationModel{AccumulationModel::Kind::sequential_fma, vi.acc,
                                    Rounding::near_even, 1, 23})});
  return p;
}

/// One-line description of a candidate ("block 16, 25 bits kept, minMag, toward zero").
inline std::string describe(const Candidate& c) {
  const AccumulationModel& m = c.model;
  if (m.kind == AccumulationModel::Kind::sequential_fma)
    return std::string("sequential fma in ") + (m.acc.nbits() == 16 ? "fp16" : "fp32");
  if (m.kind == AccumulationModel::Kind::sequential)
    return std::string("sequential multiply-then-add in ") + (m.acc.nbits() == 16 ? "fp16" : "fp32");
  std::string s = "block " + std::to_string(m.block) + ", " + std::to_string(m.kept_bits) +
                  " bits kept, " + rounding_name(m.rounding) +
                  (m.floor_alignment ? ", truncation toward -inf" : ", truncation toward zero");
  if (m.unnormalized_alignment) s += ", aligned to the unnormalised exponent";
  if (m.step_frac_bits) s += ", block output e8m" + std::to_string(m.step_frac_bits);
  s += std::string(", sum in ") + (m.acc.nbits() == 16 ? "fp16" : "fp32");
  if (c.reverse) s += ", blocks from high k";
  if (const int chunk = interleave_chunk(m)) s += ", k interleaved in chunks of " + std::to_string(chunk);
  if (c.two_step) s += std::string(", then ") + rounding_name(c.out_rounding) + " to fp16";
  return s;
}

}  // namespace halfway::hw::mma
