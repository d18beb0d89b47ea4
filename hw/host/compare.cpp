#include "compare.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>

#include "halfway/hw/hash.hpp"
#include "halfway/thread_pool.hpp"

namespace halfway::hw {

namespace {

constexpr uint64_t kSampleSize = uint64_t(1) << 22;

// Second operands for the arithmetic sample: specials of the format, neighbours of the first
// operand (cancellation, alignment) and random encodings.
uint32_t special_operand(const Format& f, int j, uint32_t a, uint64_t r) {
  const uint32_t s = f.sign_bit(), one_field = uint32_t(f.bias) << f.frac_bits;
  const uint32_t min_normal = uint32_t(1) << f.frac_bits, quiet = uint32_t(1) << (f.frac_bits - 1);
  const uint32_t mag = a & f.mag_mask();
  const uint32_t rnd = static_cast<uint32_t>(r) & f.enc_mask();
  switch (j) {
    case 0: return 0;
    case 1: return s;
    case 2: return 1;
    case 3: return s | 1;
    case 4: return min_normal - 1;
    case 5: return min_normal;
    case 6: return s | min_normal;
    case 7: return one_field;
    case 8: return s | one_field;
    case 9: return f.max_mag();
    case 10: return s | f.max_mag();
    case 11: return f.inf_mag();
    case 12: return s | f.inf_mag();
    case 13: return f.inf_mag() | quiet;                   // quiet NaN
    case 14: return f.inf_mag() | 1;                       // signalling NaN
    case 15: return s | f.inf_mag() | quiet | (quiet - 1);  // negative NaN, full payload
    case 16: return a;
    case 17: return a ^ s;  // exact cancellation
    case 18: return (mag + 1 <= f.mag_mask() ? (a & s) | (mag + 1) : a);
    case 19: return (a ^ s) & ~uint32_t(1);
    case 20: return (a ^ s) | 1;
    case 21: return a ^ 1;
    case 22: return (a & s) | (mag >> 1);
    case 23: return one_field + min_normal;            // 2
    case 24: return one_field - min_normal;            // 0.5
    case 25: return a & ~f.frac_mask();                // same binade, fraction 0
    default: {
      // Same or neighbouring exponent as a, random fraction and sign: alignment and
      // near-cancellation.
      const uint32_t field = (mag >> f.frac_bits);
      const int shift = int((r >> 20) % 5) - 2;
      int nf = int(field) + shift;
      if (nf < 0) nf = 0;
      if (nf > int(f.exp_field_max())) nf = int(f.exp_field_max());
      return (rnd & (s | f.frac_mask())) | (uint32_t(nf) << f.frac_bits);
    }
  }
}

}  // namespace

uint64_t sample_count(Op op) {
  if (op_info(op).arity == 3) return kSampleSize;
  const uint64_t d = domain_size(op);
  return d <= (uint64_t(1) << 16) ? d : std::min(d, kSampleSize);
}

uint64_t sample_index(Op op, uint64_t k) {
  const uint64_t d = domain_size(op);
  if (d <= (uint64_t(1) << 16)) return k;
  const OpInfo info = op_info(op);
  const uint64_t r = random64(kSampleSeed + static_cast<uint64_t>(op), k);
  if (info.arity == 2) {
    const int n = info.in.nbits();
    const uint32_t a = static_cast<uint32_t>(k & ((uint64_t(1) << n) - 1));
    const int j = static_cast<int>((k >> n) & 63);
    const uint32_t b = j < 32 ? static_cast<uint32_t>(r) & info.in.enc_mask()
                              : special_operand(info.in, j - 32, a, r) & info.in.enc_mask();
    return (uint64_t(a) << n) | b;
  }
  // f32 operand: 512 sign/exponent combinations x 8192 fractions.
  const uint32_t se = static_cast<uint32_t>(k & 0x1FF);
  const uint32_t j = static_cast<uint32_t>((k >> 9) & 0x1FFF);
  uint32_t frac;
  if (j < 4096) {
    frac = static_cast<uint32_t>(r) & 0x7FFFFF;
  } else {
    // Dropped-bit counts of fp16 (13), bf16 (16), e4m3 (20), e5m2 (21) normals; low bits just
    // below, at and above the half-way point, and all ones.
    static constexpr int kDropped[4] = {13, 16, 20, 21};
    const uint32_t j2 = j - 4096;
    const int dbits = kDropped[j2 & 3];
    const uint32_t half = uint32_t(1) << (dbits - 1);
    const uint32_t lows[6] = {0, 1, half - 1, half, half + 1, (uint32_t(1) << dbits) - 1};
    const uint32_t low = lows[(j2 >> 2) % 6];
    frac = ((static_cast<uint32_t>(r >> 8) << dbits) | low) & 0x7FFFFF;
  }
  return (uint64_t(se) << 23) | frac;
}

OpReport compare_op(const Backend& backend, Op op, Coverage coverage, unsigned threads) {
  const auto ops = backend.ops();
  if (std::find(ops.begin(), ops.end(), op) == ops.end())
    throw std::invalid_argument(std::string("backend ") + backend.name() + " does not implement " +
                                op_info(op).name);
  const OpInfo info = op_info(op);
  const bool random = info.arity == 3;
  const bool full = !random && (coverage == Coverage::exhaustive || domain_size(op) <= (uint64_t(1) << 16));
  const uint64_t n = random ? (coverage == Coverage::exhaustive ? uint64_t(1) << 30 : sample_count(op))
                            : (full ? domain_size(op) : sample_count(op));
  // Operands of input index idx (random: triple idx of the kSampleSeed stream).
  auto operands = [&](uint64_t idx, uint32_t& a, uint32_t& b, uint32_t& c) {
    c = 0;
    if (random) fma_operands(info.in, kSampleSeed, idx, a, b, c);
    else domain_operands(op, idx, a, b);
  };
  constexpr uint64_t kChunk = uint64_t(1) << 16;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<CheckStats> partial(size_t(chunk_parts(n, kChunk, int(threads))));
  parallel_chunks_by_part(n, kChunk, int(threads), [&](int t, uint64_t begin, uint64_t end) {
    thread_local std::vector<uint32_t> a, b, c3, out;
    thread_local std::vector<uint64_t> idx;
    const uint64_t m = end - begin;
    for (auto* v : {&a, &b, &c3, &out}) v->resize(m);
    idx.resize(m);
    CheckStats& st = partial[size_t(t)];
    for (uint64_t i = 0; i < m; ++i) {
      idx[i] = (full || random) ? begin + i : sample_index(op, begin + i);
      operands(idx[i], a[i], b[i], c3[i]);
    }
    backend.run(op, a.data(), b.data(), c3.data(), out.data(), m);
    for (uint64_t i = 0; i < m; ++i) {
      const uint32_t hw = out[i] & info.out.enc_mask();
      const uint32_t ref = reference(op, a[i], b[i], c3[i]);
      st.total++;
      st.hw_hash += hash_term(idx[i], hw);
      st.ref_hash += hash_term(idx[i], ref);
      if (hw != ref) {
        st.mismatches++;
        const bool sub = any_subnormal_operand(op, a[i], b[i], c3[i]);
        const uint32_t ref_daz = sub ? reference_daz(op, a[i], b[i], c3[i]) : ref;
        st.cls[static_cast<int>(classify(info.out, hw, ref, sub, ref_daz))].add(idx[i], hw);
      }
    }
  });
  CheckStats all;
  for (const auto& p : partial) all.merge(p);

  OpReport r;
  r.op = op;
  r.backend = backend.name();
  r.exhaustive = full;
  r.random = random;
  r.total = all.total;
  r.mismatches = all.mismatches;
  r.hw_hash = all.hw_hash;
  r.ref_hash = all.ref_hash;
  r.classes = class_reports(all, info, [&](Example& e) {
    operands(e.index, e.a, e.b, e.c);
    backend.run(op, &e.a, &e.b, &e.c, &e.hw, 1);
    e.hw &= info.out.enc_mask();
    e.ref = reference(op, e.a, e.b, e.c);
  });
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::vector<ClassReport> class_reports(const CheckStats& st, const OpInfo& info,
                                       const std::function<void(Example&)>& complete) {
  std::vector<ClassReport> out;
  for (int d = 0; d < kDiffCount; ++d) {
    const DiffStats& s = st.cls[d];
    if (s.count == 0) continue;
    ClassReport c;
    c.diff = static_cast<Diff>(d);
    c.count = s.count;
    c.hw_and = s.hw_and;
    c.hw_or = s.hw_or;
    c.description = describe(c.diff, info, s);
    c.example.index = s.first_index;
    complete(c.example);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace halfway::hw
