#include "amx_tiles.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include "halfway/hw/hash.hpp"
#include "halfway/hw/ops.hpp"
#include "halfway/names.hpp"
#include "halfway/thread_pool.hpp"

namespace halfway::hw {

static_assert(sizeof(AmxTile) == 4100, "AmxTile is the record without its 12 padding bytes");

const char* amx_family_name(int family) {
  static const char* const names[kAmxFamilies] = {
      "ordinary", "wide_alignment", "tiny_products", "overflow_range", "cancellation",
      "sparse",   "specials",       "subnormals",    "one_product",    "two_products_large_c"};
  return family >= 0 && family < kAmxFamilies ? names[family] : "unknown";
}

namespace {

std::string file_error(const std::string& path, const std::string& what) {
  return "'" + path + "': " + what;
}

}  // namespace

std::vector<AmxTile> read_amx_tiles(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw InputError(file_error(path, std::string("cannot open (") + std::strerror(errno) + ")"));
  std::vector<AmxTile> tiles;
  unsigned char rec[kAmxRecordBytes];
  size_t got = 0;
  for (;;) {
    got = std::fread(rec, 1, sizeof rec, f);
    if (got != sizeof rec) break;
    if (tiles.size() == kAmxMaxRecords) {
      std::fclose(f);
      throw InputError(file_error(path, "more than " + std::to_string(kAmxMaxRecords) +
                                            " records (1 GiB); split it"));
    }
    AmxTile t;
    std::memcpy(&t, rec, sizeof t);
    if (t.family >= uint32_t(kAmxFamilies)) {
      std::fclose(f);
      throw InputError(file_error(path, "record " + std::to_string(tiles.size()) +
                                            ": case family " + std::to_string(t.family) +
                                            " is not 0..9"));
    }
    tiles.push_back(t);
  }
  const bool error = std::ferror(f) != 0;
  std::fclose(f);
  if (error) throw InputError(file_error(path, "read error"));
  if (got != 0)
    throw InputError(file_error(path, "size is not a whole number of " +
                                          std::to_string(kAmxRecordBytes) + "-byte records"));
  if (tiles.empty()) throw InputError(file_error(path, "holds no record"));
  return tiles;
}

void write_amx_tiles(const std::string& path, const std::vector<AmxTile>& tiles) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error(file_error(tmp, std::string("cannot create (") + std::strerror(errno) + ")"));
  bool ok = true;
  unsigned char rec[kAmxRecordBytes] = {};
  for (const AmxTile& t : tiles) {
    std::memcpy(rec, &t, sizeof t);
    ok = ok && std::fwrite(rec, 1, sizeof rec, f) == sizeof rec;
  }
  ok = std::fflush(f) == 0 && ok;
  ok = ::fsync(fileno(f)) == 0 && ok;
  const int err = errno;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : err;
    std::remove(tmp.c_str());
    throw std::runtime_error(file_error(path, std::string("write failed (") + std::strerror(e) + ")"));
  }
}

// ---- generated cases ------------------------------------------------------------------------

namespace {

/// Draws of one tile: word j of the stream (kAmxSeed, tile index · 2^12 + j).
struct Draw {
  uint64_t base;
  uint64_t j = 0;
  uint64_t next() { return random64(kAmxSeed, base + j++); }
  int between(int lo, int hi) { return lo + int(next() % uint64_t(hi - lo + 1)); }
};

/// A finite element of `in` with unbiased exponent in [lo, hi] (clamped to the normal range).
uint32_t element(const Format& in, Draw& r, int lo, int hi) {
  const int emin = 1 - in.bias, emax = int(in.exp_field_max()) - 1 - in.bias;
  lo = std::clamp(lo, emin, emax);
  hi = std::clamp(hi, lo, emax);
  const uint64_t w = r.next();
  return detail::compose(in, uint32_t(w & 1), uint32_t(r.between(lo, hi) + in.bias),
                 uint32_t(w >> 8) & in.frac_mask());
}

/// An fp32 accumulator with exponent in [lo, hi].
uint32_t acc_value(Draw& r, int lo, int hi) { return element(fmt_fp32(), r, lo, hi); }

/// One special element or accumulator of `f`: ±0, ±inf, quiet and signalling NaNs with
/// payloads, a subnormal, ±max, ±min normal.
uint32_t special(const Format& f, Draw& r) {
  const uint64_t w = r.next();
  const uint32_t s = (w & 1) ? f.sign_bit() : 0u, quiet = uint32_t(1) << (f.frac_bits - 1);
  const uint32_t frac = uint32_t(w >> 8) & f.frac_mask();
  switch ((w >> 4) % 7) {
    case 0: return s;
    case 1: return s | f.inf_mag();
    case 2: return s | f.inf_mag() | quiet | (frac & (quiet - 1));
    case 3: return s | f.inf_mag() | ((frac & (quiet - 1)) ? (frac & (quiet - 1)) : 1u);
    case 4: return s | (frac ? frac : 1u);
    case 5: return s | f.max_mag();
    default: return s | (uint32_t(1) << f.frac_bits);
  }
}

uint32_t subnormal(const Format& f, Draw& r) {
  const uint64_t w = r.next();
  const uint32_t frac = uint32_t(w >> 8) & f.frac_mask();
  return ((w & 1) ? f.sign_bit() : 0u) | (frac ? frac : 1u);
}

void fill_family(const Format& in, int fam, Draw& r, AmxTile& t) {
  const int emin = 1 - in.bias, emax = int(in.exp_field_max()) - 1 - in.bias;
  for (int m = 0; m < 16; ++m)
    for (int e = 0; e < 32; ++e) {
      uint32_t a, b;
      switch (fam) {
        case 0: a = element(in, r, -7, 8), b = element(in, r, -7, 8); break;
        case 1: a = element(in, r, -37, 42), b = element(in, r, -37, 42); break;
        // Products around fp32's smallest normal (2^-132..2^-120): chains that start and stay
        // tiny, so that FTZ (and its tininess rule) shows in the outputs.
        case 2: a = element(in, r, emin, emin + 4), b = element(in, r, -6, 2); break;
        case 3: a = element(in, r, emax - 12, emax), b = element(in, r, 40, emax); break;
        case 5:
          a = (r.next() % 8) ? 0u : element(in, r, -7, 8), b = element(in, r, -7, 8);
          break;
        case 6:
          a = (r.next() % 6) ? element(in, r, -7, 8) : special(in, r);
          b = (r.next() % 6) ? element(in, r, -7, 8) : special(in, r);
          break;
        case 7:
          a = (r.next() % 2) ? subnormal(in, r) : element(in, r, emin, emin + 6);
          b = (r.next() % 2) ? subnormal(in, r) : element(in, r, -4, 20);
          break;
        default: a = element(in, r, -7, 8), b = element(in, r, -7, 8); break;
      }
      t.a[m][e] = uint16_t(a);
      t.b[m][e] = uint16_t(b);
    }
  if (fam == 4)  // each pair's second product is minus the first, up to an ulp
    for (int m = 0; m < 16; ++m)
      for (int k = 0; k < 16; ++k) {
        t.a[m][2 * k + 1] = uint16_t((t.a[m][2 * k] ^ in.sign_bit()) + (r.next() % 3 == 0));
        t.b[k][2 * m + 1] = t.b[k][2 * m];
      }
  if (fam == 8 || fam == 9)  // one or two non-zero elements in each row of A
    for (int m = 0; m < 16; ++m) {
      const int i0 = r.between(0, 31), i1 = r.between(0, 31);
      for (int e = 0; e < 32; ++e)
        if (e != i0 && (fam == 8 || e != i1)) t.a[m][e] = 0;
    }
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      uint32_t c;
      switch (fam) {
        case 1: c = acc_value(r, -27, 32); break;
        case 2: c = (r.next() % 2) ? 0u : acc_value(r, -126, -100); break;
        case 3: c = acc_value(r, 110, 127); break;
        case 6: c = (r.next() % 6) ? acc_value(r, -9, 14) : special(fmt_fp32(), r); break;
        case 7: c = (r.next() % 2) ? subnormal(fmt_fp32(), r) : acc_value(r, -126, -110); break;
        case 9: c = acc_value(r, 20, 40); break;
        default: c = acc_value(r, -9, 14); break;
      }
      t.c[m][n] = c;
    }
}

}  // namespace

std::vector<AmxTile> amx_tile_cases(const Format& in, size_t count) {
  std::vector<AmxTile> tiles(count);
  for (size_t i = 0; i < count; ++i) {
    AmxTile& t = tiles[i];
    std::memset(&t, 0, sizeof t);
    t.family = uint32_t(i % kAmxFamilies);
    Draw r{uint64_t(i) << 12};
    fill_family(in, int(t.family), r, t);
  }
  return tiles;
}

// ---- comparison and search ------------------------------------------------------------------

uint32_t amx_tile_output(const AccumulationModel& model, const Format& in, const AmxTile& t,
                         int m, int n) {
  uint32_t a[32], b[32];
  for (int k = 0; k < 16; ++k)
    for (int j = 0; j < 2; ++j) {
      a[2 * k + j] = t.a[m][2 * k + j];
      b[2 * k + j] = t.b[k][2 * n + j];
    }
  Env env;
  return dot(model, in, a, b, 32, t.c[m][n], env);
}

namespace {

bool any_subnormal_input(const Format& in, const AmxTile& t, int m, int n) {
  bool s = is_subnormal(fmt_fp32(), t.c[m][n]);
  for (int k = 0; k < 16; ++k)
    for (int j = 0; j < 2; ++j)
      s = s || is_subnormal(in, t.a[m][2 * k + j]) || is_subnormal(in, t.b[k][2 * n + j]);
  return s;
}

/// The reference on subnormal-flushed inputs (for the DAZ class).
uint32_t output_flushed(const AccumulationModel& model, const Format& in, AmxTile t, int m, int n) {
  for (int k = 0; k < 16; ++k)
    for (int j = 0; j < 2; ++j) {
      t.a[m][2 * k + j] = uint16_t(flush_subnormal(in, t.a[m][2 * k + j]));
      t.b[k][2 * n + j] = uint16_t(flush_subnormal(in, t.b[k][2 * n + j]));
    }
  t.c[m][n] = flush_subnormal(fmt_fp32(), t.c[m][n]);
  return amx_tile_output(model, in, t, m, n);
}

}  // namespace

DotReport compare_tiles(const std::string& backend, const AccumulationModel& model,
                        const Format& in, const std::vector<AmxTile>& tiles, unsigned threads) {
  const auto t0 = std::chrono::steady_clock::now();
  const Format f32 = fmt_fp32();
  struct Partial {
    CheckStats doc, ieee;  // against `model`; against IEEE fp32 fmas from C in index order
    uint64_t family[kAmxFamilies] = {};
  };
  const AccumulationModel ieee = accumulation::fp32_sequential;
  std::vector<Partial> parts(size_t(chunk_parts(tiles.size(), 8, int(threads))));
  parallel_chunks_by_part(tiles.size(), 8, int(threads), [&](int part, uint64_t t0i, uint64_t t1i) {
    Partial& p = parts[size_t(part)];
    for (uint64_t ti = t0i; ti < t1i; ++ti) {
      const AmxTile& t = tiles[ti];
      for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 16; ++n) {
          const uint64_t idx = ti * kAmxOutputs + uint64_t(m * 16 + n);
          const uint32_t hw = t.d[m][n], ref = amx_tile_output(model, in, t, m, n);
          p.doc.total++;
          p.doc.hw_hash += hash_term(idx, hw);
          p.doc.ref_hash += hash_term(idx, ref);
          // A difference from `ref_model`'s output `r`, classified (DAZ against flushed inputs).
          const auto differs = [&](CheckStats& st, const AccumulationModel& ref_model, uint32_t r) {
            st.mismatches++;
            const bool sub = any_subnormal_input(in, t, m, n);
            const uint32_t daz = sub ? output_flushed(ref_model, in, t, m, n) : r;
            st.cls[static_cast<int>(classify(f32, hw, r, sub, daz))].add(idx, hw);
          };
          const uint32_t iref = amx_tile_output(ieee, in, t, m, n);
          if (hw != iref) differs(p.ieee, ieee, iref);
          if (hw == ref) continue;
          differs(p.doc, model, ref);
          p.family[t.family]++;
        }
    }
  });
  Partial all;
  for (const Partial& p : parts) {
    all.doc.merge(p.doc);
    all.ieee.merge(p.ieee);
    for (int f = 0; f < kAmxFamilies; ++f) all.family[f] += p.family[f];
  }
  DotReport r;
  r.backend = backend;
  r.total = all.doc.total;
  r.mismatches = all.doc.mismatches;
  r.hw_hash = all.doc.hw_hash;
  r.ref_hash = all.doc.ref_hash;
  OpInfo info;
  info.name = backend.c_str();
  info.arity = 3;
  info.in = f32;
  info.out = f32;
  const auto reports = [&](const CheckStats& st, const AccumulationModel& ref_model) {
    return class_reports(st, info, [&](Example& e) {
      const AmxTile& t = tiles[e.index / kAmxOutputs];
      const int m = int(e.index % kAmxOutputs) / 16, n = int(e.index % 16);
      e.a = t.a[m][0] | (uint32_t(t.a[m][1]) << 16);  // the first element pair of the row
      e.b = t.b[0][2 * n] | (uint32_t(t.b[0][2 * n + 1]) << 16);
      e.c = t.c[m][n];
      e.hw = t.d[m][n];
      e.ref = amx_tile_output(ref_model, in, t, m, n);
    });
  };
  r.classes = reports(all.doc, model);
  r.ieee_mismatches = all.ieee.mismatches;
  r.ieee_classes = reports(all.ieee, ieee);
  r.family_mismatches.assign(all.family, all.family + kAmxFamilies);
  r.family_name = amx_family_name;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

DotSearchResult search_tiles(const Format& in, const std::vector<AmxTile>& tiles,
                             size_t max_tiles, unsigned threads) {
  const size_t nt = std::min(max_tiles, tiles.size());
  const auto cands = dot_candidates();
  std::vector<uint64_t> miss(cands.size(), 0);
  parallel_chunks(cands.size(), 1, [&](uint64_t k0, uint64_t k1) {
    for (uint64_t k = k0; k < k1; ++k) {
      uint64_t mm = 0;
      for (size_t ti = 0; ti < nt; ++ti)
        for (int m = 0; m < 16; ++m)
          for (int n = 0; n < 16; ++n)
            mm += amx_tile_output(cands[k], in, tiles[ti], m, n) != tiles[ti].d[m][n];
      miss[k] = mm;
    }
  }, int(threads));
  return rank_candidates(cands, miss, nt * kAmxOutputs);
}

}  // namespace halfway::hw
