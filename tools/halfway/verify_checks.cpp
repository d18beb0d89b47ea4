// `halfway verify`'s checks: the library's scalar routines and bulk kernels against the
// oracle of verify_oracle.hpp, case by case, block by block.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <tuple>

#include "format_util.hpp"
#include "halfway/names.hpp"
#include "verify_checks.hpp"
#include "verify_oracle.hpp"

namespace halfway::cli::verify_cmd {

namespace {

using verify::Answer;
using verify::FormatInfo;
using verify::Oracle;

constexpr size_t kBlock = 65536;

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    default: return "div";
  }
}

// ---------------------------------------------------------------------------------------------
// Printing

std::string value_text(const FormatInfo& F, uint32_t enc) {
  switch (F.kind(enc)) {
    case verify::Kind::qnan: return (enc & F.sign_bit) ? "-qnan" : "qnan";
    case verify::Kind::snan: return (enc & F.sign_bit) ? "-snan" : "snan";
    default: return fmt::format("{:.9g}", F.value(enc));
  }
}

/// "0 01111 0000000000 (3C00 = 1)"
std::string show(const FormatInfo& F, uint32_t enc) {
  return fmt::format("{} ({} = {})", fields(F.f, enc), hex(F.f, enc), value_text(F, enc));
}

const FormatInfo& f32_info() {
  static const FormatInfo info(formats::fp32);
  return info;
}

std::string counts_text(const EventCounts& c) {
  return fmt::format("total {} inexact {} zero {} flushed {} subnormal {} overflow {} nan {} "
                     "flags {}",
                     c.total, c.inexact, c.zero, c.flushed, c.subnormal, c.overflow, c.nan,
                     flags_name(c.flags));
}

// ---------------------------------------------------------------------------------------------
/// Per-thread buffers of one block.
struct Scratch {
  std::vector<uint32_t> in = std::vector<uint32_t>(kBlock), in2 = std::vector<uint32_t>(kBlock);
  std::vector<uint32_t> lib = std::vector<uint32_t>(kBlock), lib2 = std::vector<uint32_t>(kBlock);
  std::vector<uint32_t> ref = std::vector<uint32_t>(kBlock);
  std::vector<uint8_t> lib_fl = std::vector<uint8_t>(kBlock), ref_fl = std::vector<uint8_t>(kBlock);
  std::vector<float> f = std::vector<float>(kBlock), f2 = std::vector<float>(kBlock);
  std::vector<uint8_t> a8 = std::vector<uint8_t>(kBlock), b8 = std::vector<uint8_t>(kBlock),
                       o8 = std::vector<uint8_t>(kBlock);
  std::vector<uint16_t> a16 = std::vector<uint16_t>(kBlock), b16 = std::vector<uint16_t>(kBlock),
                        o16 = std::vector<uint16_t>(kBlock);
  std::vector<uint32_t> o32 = std::vector<uint32_t>(kBlock);
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

/// Compare library answers with the oracle's (flags too when `lib_fl` is given); report the
/// first few with `describe(i)`, the inputs of case i.
template <class Describe>
uint64_t compare(Check& c, const FormatInfo& out, Rounding r, size_t n, const uint32_t* lib,
                 const uint8_t* lib_fl, const uint32_t* ref, const uint8_t* ref_fl,
                 Describe&& describe) {
  uint64_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool ok = lib[i] == ref[i] && (!lib_fl || lib_fl[i] == ref_fl[i]);
    if (ok) continue;
    ++bad;
    c.note([&] {
      std::string s = fmt::format("{}: {}\n      ours   {}", rounding_name(r), describe(i),
                                  show(out, lib[i]));
      if (lib_fl) s += fmt::format("  flags {}", flags_name(lib_fl[i]));
      s += fmt::format("\n      oracle {}", show(out, ref[i]));
      if (lib_fl) s += fmt::format("  flags {}", flags_name(ref_fl[i]));
      return s;
    });
  }
  return bad;
}

uint64_t compare_counts(Check& c, Rounding r, const EventCounts& lib, const EventCounts& ref,
                        const std::string& where) {
  if (lib == ref) return 0;
  c.note([&] {
    return fmt::format("{}, event counts of {}:\n      ours   {}\n      oracle {}",
                       rounding_name(r), where, counts_text(lib), counts_text(ref));
  });
  return 1;
}

// --- Library calls through the bulk API, whose element type depends on the width ------------

void lib_round_f32(const Format& f, const float* in, uint32_t* out, size_t n,
                   const BulkOptions& o, EventCounts* c, Scratch& s) {
  if (f.nbits() <= 8) {
    round_f32(f, in, s.o8.data(), n, o, c);
    for (size_t i = 0; i < n; ++i) out[i] = s.o8[i];
  } else if (f.nbits() <= 16) {
    round_f32(f, in, s.o16.data(), n, o, c);
    for (size_t i = 0; i < n; ++i) out[i] = s.o16[i];
  } else {
    round_f32(f, in, out, n, o, c);
  }
}

void lib_decode(const Format& f, const uint32_t* in, float* out, size_t n, Scratch& s) {
  if (f.nbits() <= 8) {
    for (size_t i = 0; i < n; ++i) s.a8[i] = uint8_t(in[i]);
    decode_f32(f, s.a8.data(), out, n);
  } else if (f.nbits() <= 16) {
    for (size_t i = 0; i < n; ++i) s.a16[i] = uint16_t(in[i]);
    decode_f32(f, s.a16.data(), out, n);
  } else {
    decode_f32(f, in, out, n);
  }
}

/// Bulk a op b: a null `a` means every element's first operand is `a_fixed`.
void lib_binary(BinaryOp op, const Format& f, const uint32_t* a, uint32_t a_fixed,
                const uint32_t* b, uint32_t* out, size_t n, const BulkOptions& o, EventCounts* c,
                Scratch& s) {
  if (f.nbits() <= 8) {
    for (size_t i = 0; i < n; ++i) {
      s.a8[i] = uint8_t(a ? a[i] : a_fixed);
      s.b8[i] = uint8_t(b[i]);
    }
    binary(op, f, s.a8.data(), s.b8.data(), s.o8.data(), n, o, c);
    for (size_t i = 0; i < n; ++i) out[i] = s.o8[i];
  } else {
    for (size_t i = 0; i < n; ++i) {
      s.a16[i] = uint16_t(a ? a[i] : a_fixed);
      s.b16[i] = uint16_t(b[i]);
    }
    binary(op, f, s.a16.data(), s.b16.data(), s.o16.data(), n, o, c);
    for (size_t i = 0; i < n; ++i) out[i] = s.o16[i];
  }
}

uint32_t lib_scalar_binary(BinaryOp op, const Format& f, uint32_t a, uint32_t b, Env& e) {
  switch (op) {
    case BinaryOp::add: return add(f, a, b, e);
    case BinaryOp::sub: return sub(f, a, b, e);
    case BinaryOp::mul: return mul(f, a, b, e);
    default: return div(f, a, b, e);
  }
}

BulkOptions bulk_options(Rounding r, Tininess t) {
  BulkOptions o;
  o.rounding = r;
  o.tininess = t;
  return o;
}

/// Deliberate corruption for --inject-fault: one result, one flag and one count per check.
struct Fault {
  bool on = false;
  void result(uint64_t block, uint32_t* lib, size_t n) const {
    if (on && block == 0) lib[std::min<size_t>(n - 1, 1234)] ^= 1;
  }
  void flags(uint64_t block, uint8_t* fl, size_t n) const {
    if (on && block == 0) fl[std::min<size_t>(n - 1, 4321)] ^= flag::inexact;
  }
  void counts(uint64_t block, EventCounts& c) const {
    if (on && block == 0) c.inexact++;
  }
};

/// The scalar routines' results for n elements, lib(i, env) in direction r with tininess t, with
/// the planted fault (if any) applied, compared with the oracle's results already in s.ref.
template <class Lib, class Describe>
uint64_t check_scalar(Check& c, const Fault& fault, uint64_t block, const FormatInfo& target,
                      Rounding r, Tininess t, size_t n, Scratch& s, Lib lib, Describe describe) {
  for (size_t i = 0; i < n; ++i) {
    Env e{r};
    e.tininess = t;
    s.lib[i] = lib(i, e);
    s.lib_fl[i] = e.flags;
  }
  fault.result(block, s.lib.data(), n);
  fault.flags(block, s.lib_fl.data(), n);
  return compare(c, target, r, n, s.lib.data(), s.lib_fl.data(), s.ref.data(), s.ref_fl.data(),
                 describe);
}

// --- Input sets ---------------------------------------------------------------------------------

/// f32 inputs for the quick run: a stride through all bit patterns, plus, for every sign and
/// exponent, fractions at and next to each possible rounding boundary (ties at every bit).
std::vector<uint32_t> f32_sample() {
  std::vector<uint32_t> v;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 16381) v.push_back(uint32_t(b));
  for (uint32_t se = 0; se < 512; ++se) {
    const uint32_t top = (se >> 8) << 31 | (se & 0xFF) << 23;
    for (int t = 0; t < 23; ++t) {
      const uint32_t half = uint32_t(1) << t;
      const uint32_t odd_above = (t + 1 < 23) ? uint32_t(1) << (t + 1) : 0;
      for (uint32_t hi : {0u, odd_above, 0x7FFFFFu & ~((half << 1) - 1)}) {
        for (uint32_t lo : {half, half - 1, half + 1}) v.push_back(top | ((hi | lo) & 0x7FFFFF));
      }
    }
    v.push_back(top);
    v.push_back(top | 0x7FFFFF);
  }
  return v;
}

/// Pairs of 16-bit encodings for the quick run: random pairs, pairs of the same exponent (near
/// cancellation, ties), and pairs of nearby exponents. A fixed generator: the same run each time.
void pair_sample(const FormatInfo& F, size_t n, std::vector<uint32_t>& a, std::vector<uint32_t>& b) {
  uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&x]() {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return uint32_t(x >> 11);
  };
  const uint32_t mask = (uint32_t(1) << F.nbits) - 1;
  const uint32_t frac_mask = (uint32_t(1) << F.m) - 1;
  a.resize(n);
  b.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = next() & mask;
    uint32_t w = next() & mask;
    switch (i % 4) {
      case 1: w = (u & ~frac_mask) ^ (w & frac_mask) ^ (next() & 1 ? F.sign_bit : 0); break;
      case 2: {
        const uint32_t shift = (next() % 5) << F.m;
        w = ((u & F.mag_mask) + shift) & F.mag_mask;
        w |= (next() & F.sign_bit);
        w ^= next() & frac_mask;
        break;
      }
      default: break;
    }
    a[i] = u;
    b[i] = w & mask;
  }
}

// --- Check builders -------------------------------------------------------------------------

/// "scalar", or "bulk:" and the bulk kernel implementation.
std::string path_label(std::optional<detail::BulkPath> bulk) {
  return bulk ? std::string("bulk:") + detail::bulk_path_name(*bulk) : "scalar";
}

std::string modes_text(const std::vector<Rounding>& modes) {
  if (modes.size() == 1) return rounding_name(modes[0]);
  return fmt::format("{} modes", modes.size());
}

struct Builder {
  const Options& o;
  CheckList& list;
  Fault fault{o.inject};

  Check& add(std::string name, std::string path, uint64_t cases, uint64_t blocks) {
    auto c = std::make_unique<Check>();
    c->name = std::move(name);
    c->path = std::move(path);
    c->cases = cases;
    c->blocks = blocks;
    c->max_report = o.max_report;
    list.push_back(std::move(c));
    return *list.back();
  }

  std::vector<std::shared_ptr<Oracle>> oracles(const Format& f, const std::vector<Rounding>& modes) {
    std::vector<std::shared_ptr<Oracle>> v;
    for (Rounding r : modes) v.push_back(std::make_shared<Oracle>(f, r, o.tininess));
    return v;
  }

  /// per_mode cases under each of `modes`, in slices of kBlock cases: a check's block is one
  /// slice under one mode.
  struct Sliced {
    std::vector<std::shared_ptr<Oracle>> orc;
    uint64_t per_mode, slices;
    struct Block {
      const Oracle& oracle;
      Rounding r;
      const FormatInfo& F;
      uint64_t slice;
      size_t n;  ///< cases in this block
    };
    Block at(uint64_t block) const {
      const Oracle& oracle = *orc[block / slices];
      const uint64_t slice = block % slices;
      return {oracle, oracle.rounding(), oracle.target(), slice,
              size_t(std::min<uint64_t>(kBlock, per_mode - slice * kBlock))};
    }
  };

  /// A check named `name` over per_mode cases of f under each of `modes` (Sliced).
  std::pair<Check*, Sliced> add_sliced(std::string name, std::optional<detail::BulkPath> bulk,
                                       const Format& f, const std::vector<Rounding>& modes,
                                       uint64_t per_mode) {
    Sliced sl{oracles(f, modes), per_mode, (per_mode + kBlock - 1) / kBlock};
    Check& chk = add(std::move(name), path_label(bulk), per_mode * modes.size(),
                     sl.slices * modes.size());
    return {&chk, std::move(sl)};
  }

  /// f32 → f over a set of inputs: all 2^32 (`inputs` null) or a list. Bulk path: results of
  /// round_f32 with and without counts, the counts, and (quick run) quantize_f32.
  void f32_to(const Format& f, std::shared_ptr<const std::vector<uint32_t>> inputs,
              const std::vector<Rounding>& modes, std::optional<detail::BulkPath> bulk,
              const std::string& what) {
    auto [chk, sl] =
        add_sliced(fmt::format("f32 -> {}, {}, {}", format_name(f), what, modes_text(modes)), bulk,
                   f, modes, inputs ? inputs->size() : uint64_t(1) << 32);
    const Tininess tin = o.tininess;
    const bool quantize = inputs != nullptr;
    const Fault fault = this->fault;
    chk->run = [=](Check& c, uint64_t block) -> uint64_t {
      const auto [oracle, r, F, slice, n] = sl.at(block);
      Scratch& s = scratch();
      for (size_t i = 0; i < n; ++i) {
        s.in[i] = inputs ? (*inputs)[slice * kBlock + i] : uint32_t(slice * kBlock + i);
        s.f[i] = std::bit_cast<float>(s.in[i]);
      }
      EventCounts rc;  // the counts a bulk call must report, from the oracle
      oracle.from_f32(s.in.data(), n, s.ref.data(), s.ref_fl.data(), bulk ? &rc : nullptr);
      const auto describe = [&](size_t i) {
        return fmt::format("x = {}", show(f32_info(), s.in[i]));
      };
      uint64_t bad = 0;
      if (!bulk) {
        return check_scalar(
            c, fault, block, F, r, tin, n, s,
            [&](size_t i, Env& e) { return from_f32_bits(F.f, s.in[i], e); }, describe);
      }
      detail::set_bulk_path(*bulk);
      const BulkOptions bo = bulk_options(r, tin);
      EventCounts lc;
      lib_round_f32(F.f, s.f.data(), s.lib.data(), n, bo, &lc, s);
      lib_round_f32(F.f, s.f.data(), s.lib2.data(), n, bo, nullptr, s);
      fault.result(block, s.lib.data(), n);
      fault.counts(block, lc);
      bad += compare(c, F, r, n, s.lib.data(), nullptr, s.ref.data(), nullptr, describe);
      bad += compare(c, F, r, n, s.lib2.data(), nullptr, s.ref.data(), nullptr, describe);
      const std::string where = fmt::format("round_f32 on {} inputs from {}", n,
                                            fields(formats::fp32, s.in[0]));
      bad += compare_counts(c, r, lc, rc, where);
      if (quantize) {
        // quantize_f32 returns the f32 value of the rounded encoding.
        EventCounts qc;
        quantize_f32(F.f, s.f.data(), s.f2.data(), n, bo, &qc);
        for (size_t i = 0; i < n; ++i) {
          s.lib2[i] = std::bit_cast<uint32_t>(s.f2[i]);
          s.ref[i] = verify::to_f32(F, s.ref[i]).enc;
        }
        const FormatInfo& f32 = f32_info();
        bad += compare(c, f32, r, n, s.lib2.data(), nullptr, s.ref.data(), nullptr, [&](size_t i) {
          return fmt::format("quantize_f32 x = {}", show(f32, s.in[i]));
        });
        bad += compare_counts(c, r, qc, rc, "quantize_f32: " + where);
      }
      return bad;
    };
  }

  /// Every encoding of `from` → f32: the scalar to_f32 (value and flags) and decode_f32.
  void decode(const Format& from, const std::vector<detail::BulkPath>& paths) {
    const uint64_t count = uint64_t(1) << from.nbits();
    Check& chk = add(fmt::format("{} -> f32, all {} encodings", format_name(from), count),
                   "scalar+bulk", count, 1);
    auto src = std::make_shared<FormatInfo>(from);
    const Fault fault = this->fault;
    chk.run = [=](Check& c, uint64_t block) -> uint64_t {
      Scratch& s = scratch();
      const size_t n = size_t(count);
      for (size_t i = 0; i < n; ++i) {
        s.in[i] = uint32_t(i);
        const Answer a = verify::to_f32(*src, uint32_t(i));
        s.ref[i] = a.enc;
        s.ref_fl[i] = a.flags;
        Env e;
        s.lib[i] = to_f32_bits(from, uint32_t(i), e);
        s.lib_fl[i] = e.flags;
      }
      fault.result(block, s.lib.data(), n);
      fault.flags(block, s.lib_fl.data(), n);
      const FormatInfo& f32 = f32_info();
      uint64_t bad = compare(c, f32, Rounding::near_even, n, s.lib.data(), s.lib_fl.data(),
                             s.ref.data(), s.ref_fl.data(), [&](size_t i) {
                               return fmt::format("x = {}", show(*src, s.in[i]));
                             });
      for (const detail::BulkPath p : paths) {
        detail::set_bulk_path(p);
        lib_decode(from, s.in.data(), s.f.data(), n, s);
        for (size_t i = 0; i < n; ++i) s.lib2[i] = std::bit_cast<uint32_t>(s.f[i]);
        bad += compare(c, f32, Rounding::near_even, n, s.lib2.data(), nullptr, s.ref.data(),
                       nullptr, [&](size_t i) {
                         return fmt::format("decode_f32 ({}) x = {}", detail::bulk_path_name(p),
                                            show(*src, s.in[i]));
                       });
      }
      return bad;
    };
  }

  /// Every encoding of `from` through a scalar operation into `to`, every direction: lib(x, env)
  /// against ref(oracle, source format, inputs, n, results, flags).
  template <class Lib, class Ref>
  void unary_all(const std::string& title, const Format& from, const Format& to,
                 const std::vector<Rounding>& modes, Lib lib, Ref ref) {
    const uint64_t count = uint64_t(1) << from.nbits();
    Check& chk = add(title, "scalar", count * modes.size(), modes.size());
    auto orc = oracles(to, modes);
    auto src = std::make_shared<FormatInfo>(from);
    const Tininess tin = o.tininess;
    const Fault fault = this->fault;
    chk.run = [=](Check& c, uint64_t block) -> uint64_t {
      const Oracle& oracle = *orc[block];
      const Rounding r = oracle.rounding();
      Scratch& s = scratch();
      const size_t n = size_t(count);
      for (size_t i = 0; i < n; ++i) s.in[i] = uint32_t(i);
      ref(oracle, *src, s.in.data(), n, s.ref.data(), s.ref_fl.data());
      return check_scalar(
          c, fault, block, oracle.target(), r, tin, n, s,
          [&](size_t i, Env& e) { return lib(uint32_t(i), e); },
          [&](size_t i) { return fmt::format("x = {}", show(*src, s.in[i])); });
    };
  }

  /// Every encoding of `from` → `to` (scalar convert), every direction.
  void convert(const Format& from, const Format& to, const std::vector<Rounding>& modes) {
    unary_all(
        fmt::format("{} -> {}, all {} encodings, {}", format_name(from), format_name(to),
                    uint64_t(1) << from.nbits(), modes_text(modes)),
        from, to, modes,
        [from, to](uint32_t x, Env& e) { return halfway::convert(from, x, to, e); },
        [](const Oracle& oracle, const FormatInfo& src, auto in, size_t n, auto out, auto fl) {
          oracle.convert(src, in, n, out, fl);
        });
  }

  /// √ of every encoding (scalar), every direction.
  void sqrt_all(const Format& f, const std::vector<Rounding>& modes) {
    unary_all(
        fmt::format("sqrt {}, all {} encodings, {}", format_name(f), uint64_t(1) << f.nbits(),
                    modes_text(modes)),
        f, f, modes, [f](uint32_t x, Env& e) { return halfway::sqrt(f, x, e); },
        [](const Oracle& oracle, const FormatInfo&, auto in, size_t n, auto out, auto fl) {
          oracle.sqrt(in, n, out, fl);
        });
  }

  /// The oracle against itself: its short path (normal and subnormal results in the loops that
  /// run 2^32 times) must give what its general path gives, results, flags and event counts, on
  /// the sampled f32 inputs and on pairs (listed, or all pairs when `pairs` is null).
  void oracle_paths(const Format& f, std::shared_ptr<const std::vector<uint32_t>> inputs,
                    std::shared_ptr<const std::pair<std::vector<uint32_t>, std::vector<uint32_t>>> pairs,
                    const std::vector<Rounding>& modes) {
    const int nb = f.nbits();
    const bool with_pairs = nb <= 16;
    const uint64_t f32_slices = (inputs->size() + kBlock - 1) / kBlock;
    // All pairs only where there are pairs to check (nb <= 16): a shift by 2·nb = 64 for a
    // 32-bit format would be undefined.
    const uint64_t npairs = !with_pairs ? 0
                            : pairs     ? pairs->first.size()
                                        : uint64_t(1) << (2 * nb);
    const uint64_t pair_slices = with_pairs ? 4 * ((npairs + kBlock - 1) / kBlock) : 0;
    const uint64_t per_mode = f32_slices + pair_slices;
    Check& chk = add(fmt::format("oracle short path = general path, {}, {}", format_name(f),
                                 modes_text(modes)),
                     "oracle", (inputs->size() + (with_pairs ? 4 * npairs : 0)) * modes.size(),
                     per_mode * modes.size());
    std::vector<std::pair<std::shared_ptr<Oracle>, std::shared_ptr<Oracle>>> orc;
    for (Rounding r : modes)
      orc.emplace_back(std::make_shared<Oracle>(f, r, o.tininess, true),
                       std::make_shared<Oracle>(f, r, o.tininess, false));
    const Fault fault = this->fault;
    chk.run = [=](Check& c, uint64_t block) -> uint64_t {
      const Oracle& fast = *orc[block / per_mode].first;
      const Oracle& slow = *orc[block / per_mode].second;
      const Rounding r = fast.rounding();
      const FormatInfo& F = fast.target();
      const uint64_t j = block % per_mode;
      Scratch& s = scratch();
      EventCounts fc, sc;
      size_t n;
      std::function<std::string(size_t)> describe;
      if (j < f32_slices) {
        n = size_t(std::min<uint64_t>(kBlock, inputs->size() - j * kBlock));
        for (size_t i = 0; i < n; ++i) s.in[i] = (*inputs)[j * kBlock + i];
        fast.from_f32(s.in.data(), n, s.lib.data(), s.lib_fl.data(), &fc);
        slow.from_f32(s.in.data(), n, s.ref.data(), s.ref_fl.data(), &sc);
        describe = [&](size_t i) { return fmt::format("x = {}", show(f32_info(), s.in[i])); };
      } else {
        const uint64_t k = j - f32_slices, slices = pair_slices / 4;
        const BinaryOp op = BinaryOp(k / slices);
        const uint64_t first = (k % slices) * kBlock;
        n = size_t(std::min<uint64_t>(kBlock, npairs - first));
        for (size_t i = 0; i < n; ++i) {
          s.in[i] = pairs ? pairs->first[first + i] : uint32_t((first + i) >> nb);
          s.in2[i] = pairs ? pairs->second[first + i]
                           : uint32_t((first + i) & ((uint64_t(1) << nb) - 1));
        }
        fast.binary(op, s.in.data(), s.in2.data(), n, s.lib.data(), s.lib_fl.data(), &fc);
        slow.binary(op, s.in.data(), s.in2.data(), n, s.ref.data(), s.ref_fl.data(), &sc);
        describe = [&, op](size_t i) {
          return fmt::format("{} a = {}, b = {}", op_name(op), show(F, s.in[i]), show(F, s.in2[i]));
        };
      }
      fault.result(block, s.lib.data(), n);
      fault.counts(block, fc);
      return compare(c, F, r, n, s.lib.data(), s.lib_fl.data(), s.ref.data(), s.ref_fl.data(),
                     describe) +
             compare_counts(c, r, fc, sc, "short path vs general path");
    };
  }

  /// a op b over pairs: every pair (`pairs` null: a block is one row a, b = every encoding; for
  /// formats of at most 8 bits one block holds all pairs), or listed pairs.
  void binary_pairs(BinaryOp op, const Format& f, const std::vector<Rounding>& modes,
                    std::optional<detail::BulkPath> bulk,
                    std::shared_ptr<const std::pair<std::vector<uint32_t>, std::vector<uint32_t>>> pairs,
                    const std::string& what) {
    const int nb = f.nbits();
    auto [chk, sl] = add_sliced(
        fmt::format("{} {}, {}, {}", op_name(op), format_name(f), what, modes_text(modes)), bulk,
        f, modes, pairs ? pairs->first.size() : uint64_t(1) << (2 * nb));
    const Tininess tin = o.tininess;
    const Fault fault = this->fault;
    chk->run = [=](Check& c, uint64_t block) -> uint64_t {
      const auto [oracle, r, F, slice, n] = sl.at(block);
      Scratch& s = scratch();
      // Operands: listed pairs, or pair index k = slice·65536 + i → (k >> nb, k & mask); for a
      // 16-bit format that is one row a = slice per block.
      const bool row = !pairs && nb == 16;
      const uint32_t a_fixed = row ? uint32_t(slice) : 0;
      for (size_t i = 0; i < n; ++i) {
        const uint64_t k = slice * kBlock + i;
        if (pairs) {
          s.in[i] = pairs->first[k];
          s.in2[i] = pairs->second[k];
        } else {
          s.in[i] = row ? a_fixed : uint32_t(k >> nb);
          s.in2[i] = uint32_t(k & ((uint64_t(1) << nb) - 1));
        }
      }
      EventCounts rc;  // the counts a bulk call must report, from the oracle
      EventCounts* want = bulk ? &rc : nullptr;
      if (row) {
        oracle.binary_row(op, a_fixed, s.in2.data(), n, s.ref.data(), s.ref_fl.data(), want);
      } else {
        oracle.binary(op, s.in.data(), s.in2.data(), n, s.ref.data(), s.ref_fl.data(), want);
      }
      const auto describe = [&](size_t i) {
        return fmt::format("a = {}, b = {}", show(F, s.in[i]), show(F, s.in2[i]));
      };
      if (!bulk) {
        return check_scalar(
            c, fault, block, F, r, tin, n, s,
            [&](size_t i, Env& e) { return lib_scalar_binary(op, F.f, s.in[i], s.in2[i], e); },
            describe);
      }
      detail::set_bulk_path(*bulk);
      const BulkOptions bo = bulk_options(r, tin);
      EventCounts lc;
      lib_binary(op, F.f, row ? nullptr : s.in.data(), a_fixed, s.in2.data(), s.lib.data(), n,
                 bo, &lc, s);
      lib_binary(op, F.f, row ? nullptr : s.in.data(), a_fixed, s.in2.data(), s.lib2.data(), n,
                 bo, nullptr, s);
      fault.result(block, s.lib.data(), n);
      fault.counts(block, lc);
      uint64_t bad = compare(c, F, r, n, s.lib.data(), nullptr, s.ref.data(), nullptr, describe);
      bad += compare(c, F, r, n, s.lib2.data(), nullptr, s.ref.data(), nullptr, describe);
      bad += compare_counts(c, r, lc, rc,
                            fmt::format("binary on {} pairs from a = {}, b = {}", n,
                                        fields(F.f, s.in[0]), fields(F.f, s.in2[0])));
      return bad;
    };
  }
};

// --- Values written by hand from the specifications -------------------------------------------

/// One case with its expected answer, written from the format definitions, IEEE 754 and the
/// semantics the project fixed (references in the comments), not computed by any code here.
struct Known {
  const char* format;
  Rounding r;
  bool before;     ///< tininess before rounding
  const char* op;  ///< cvt (a: f32 bits), add sub mul div sqrt (target encodings)
  uint32_t a, b;
  uint32_t want;
  uint8_t flags;   ///< 01 inexact, 02 underflow, 04 overflow, 08 infinite, 10 invalid
};

constexpr Rounding RNE = Rounding::near_even, RNA = Rounding::near_maxMag, RTZ = Rounding::minMag,
                   RD = Rounding::min, RU = Rounding::max, RTO = Rounding::odd;

const Known kKnown[] = {
    {"fp16", RNE, false, "cvt", 0x3DCCCCCD, 0, 0x2E66, 0x01},  // 0.1f
    {"fp16", RNE, false, "cvt", 0x477FF000, 0, 0x7C00, 0x05},  // 65520 rounds to inf
    {"fp16", RNE, false, "cvt", 0x477FEFFF, 0, 0x7BFF, 0x01},  // just below 65520
    // Overflow is judged on the result rounded with an unbounded exponent: 65520 toward zero
    // (or to odd) is 65504, no overflow; 65536 overflows in every direction.
    {"fp16", RTZ, false, "cvt", 0x477FF000, 0, 0x7BFF, 0x01},
    {"fp16", RTO, false, "cvt", 0x477FF000, 0, 0x7BFF, 0x01},
    {"fp16", RU, false, "cvt", 0xC77FF000, 0, 0xFBFF, 0x01},
    {"fp16", RD, false, "cvt", 0xC77FF000, 0, 0xFC00, 0x05},   // -65520 down: -inf
    {"fp16", RTZ, false, "cvt", 0x47800000, 0, 0x7BFF, 0x05},  // 65536 toward zero: max
    {"fp16", RTO, false, "cvt", 0x47800000, 0, 0x7BFF, 0x05},  // odd never gives inf
    {"fp16", RU, false, "cvt", 0xC7800000, 0, 0xFBFF, 0x05},   // -65536 up: -max
    {"fp16", RNE, false, "cvt", 0x33800000, 0, 0x0001, 0x00},  // 2^-24, min subnormal
    {"fp16", RNE, false, "cvt", 0x33000000, 0, 0x0000, 0x03},  // 2^-25: tie to even 0
    {"fp16", RNA, false, "cvt", 0x33000000, 0, 0x0001, 0x03},  // 2^-25: tie away
    {"fp16", RNE, false, "cvt", 0x33400000, 0, 0x0001, 0x03},  // 0.75 * 2^-24
    // 2^-14 (1 - 2^-13): rounds to 2^-14 even with unbounded exponent: not tiny after rounding
    {"fp16", RNE, false, "cvt", 0x387FF800, 0, 0x0400, 0x01},
    {"fp16", RNE, true, "cvt", 0x387FF800, 0, 0x0400, 0x03},
    // 2^-14 (1 - 2^-11) has 11 significant bits: tiny after rounding, though it rounds to 2^-14
    {"fp16", RNE, false, "cvt", 0x387FE000, 0, 0x0400, 0x03},
    {"fp16", RNE, false, "cvt", 0x3F801000, 0, 0x3C00, 0x01},  // 1 + 2^-11: tie to even
    {"fp16", RNA, false, "cvt", 0x3F801000, 0, 0x3C01, 0x01},  // tie away
    {"fp16", RTO, false, "cvt", 0x3F801000, 0, 0x3C01, 0x01},  // odd
    {"fp16", RTZ, false, "cvt", 0x3F801000, 0, 0x3C00, 0x01},
    {"fp16", RNE, false, "cvt", 0x7FA00000, 0, 0x7F00, 0x10},  // sNaN: quieted, payload kept
    {"fp16", RNE, false, "cvt", 0xFFC00001, 0, 0xFE00, 0x00},  // -qNaN, low payload dropped
    {"e4m3", RNE, false, "cvt", 0x43E80000, 0, 0x7E, 0x01},    // 464: tie to 448 (OFP8)
    {"e4m3", RNE, false, "cvt", 0x43F00000, 0, 0x7F, 0x05},    // 480 overflows: NaN (NOSAT)
    {"e4m3:sat", RNE, false, "cvt", 0x43F00000, 0, 0x7E, 0x05},  // SATFINITE: 448
    {"e4m3", RNE, false, "cvt", 0xFF800000, 0, 0xFF, 0x10},    // -inf: no inf, invalid, NaN
    {"e5m2", RNE, false, "cvt", 0x47700000, 0, 0x7C, 0x05},    // 61440: tie up to inf
    {"e5m2", RNE, false, "cvt", 0x47600000, 0, 0x7B, 0x00},    // 57344 = max
    {"bf16", RNE, false, "cvt", 0x8683F7FF, 0, 0x8684, 0x01},  // TestFloat example
    {"bf16", RNE, false, "cvt", 0x00400000, 0, 0x0040, 0x00},  // 2^-127: exact subnormal
    {"e4m3fnuz", RNE, false, "cvt", 0x80000000, 0, 0x00, 0x00},  // no -0
    {"e2m1", RNE, false, "cvt", 0x7FC00000, 0, 0x7, 0x10},     // no NaN: +max, invalid
    {"e8m0", RNE, false, "cvt", 0x00000000, 0, 0x00, 0x03},    // no zero: 2^-127, inexact
    {"fp16", RNE, false, "add", 0x87FF, 0xE850, 0xE850, 0x01},  // TestFloat example
    {"fp16", RNE, false, "sub", 0x3C00, 0x3C00, 0x0000, 0x00},  // x - x = +0
    {"fp16", RD, false, "sub", 0x3C00, 0x3C00, 0x8000, 0x00},   // x - x = -0 rounding down
    {"fp16", RNE, false, "add", 0x7C00, 0xFC00, 0xFE00, 0x10},  // inf - inf: x86 default NaN
    {"fp16", RNE, false, "add", 0x3C00, 0x7D00, 0x7F00, 0x10},  // sNaN operand, quieted
    {"fp16", RNE, false, "add", 0xFE01, 0x7D00, 0xFE01, 0x10},  // first NaN operand wins
    {"fp16", RNE, false, "mul", 0x7BFF, 0x4000, 0x7C00, 0x05},  // 65504 * 2
    {"fp16", RTZ, false, "mul", 0x7BFF, 0x4000, 0x7BFF, 0x05},
    {"fp16", RNE, false, "div", 0x3C00, 0x4200, 0x3555, 0x01},  // 1/3
    {"fp16", RNE, false, "div", 0x3C00, 0x0000, 0x7C00, 0x08},  // 1/0
    {"fp16", RNE, false, "div", 0x0000, 0x0000, 0xFE00, 0x10},  // 0/0
    {"e4m3", RNE, false, "div", 0x38, 0x00, 0x7F, 0x08},        // 1/0 without inf: NaN
    {"fp16", RNE, false, "sqrt", 0x4000, 0, 0x3DA8, 0x01},      // sqrt(2) = 1.4140625
    {"fp16", RNE, false, "sqrt", 0xBC00, 0, 0xFE00, 0x10},      // sqrt(-1)
    {"fp16", RNE, false, "sqrt", 0x8000, 0, 0x8000, 0x00},      // sqrt(-0) = -0
    {"bf16", RNE, false, "add", 0x7F7F, 0x7F7F, 0x7F80, 0x05},  // max + max
    // 2^127 + 2^-133: not exact in binary64 either; the residual decides
    {"bf16", RNE, false, "add", 0x7F00, 0x0001, 0x7F00, 0x01},
    {"bf16", RU, false, "add", 0x7F00, 0x0001, 0x7F01, 0x01},
    {"bf16", RTO, false, "add", 0x7F00, 0x0001, 0x7F01, 0x01},
    {"bf16", RD, false, "sub", 0x7F00, 0x0001, 0x7EFF, 0x01},
    {"bf16", RD, false, "sub", 0x0080, 0x0001, 0x007F, 0x00},   // exact subnormal: no underflow
};

void known_values(CheckList& list, bool inject) {
  auto c = std::make_unique<Check>();
  c->name = fmt::format("values written from the specifications ({})", std::size(kKnown));
  c->path = "oracle+scalar";
  c->cases = 2 * std::size(kKnown);
  c->blocks = 1;
  c->run = [inject](Check& c, uint64_t) -> uint64_t {
    uint64_t bad = 0;
    for (const Known& k : kKnown) {
      const Format f = parse_format(k.format);
      const Oracle oracle(f, k.r, k.before ? Tininess::before_rounding : Tininess::after_rounding);
      const FormatInfo& F = oracle.target();
      uint32_t ref = 0;
      uint8_t ref_fl = 0;
      Env e{k.r};
      e.tininess = k.before ? Tininess::before_rounding : Tininess::after_rounding;
      uint32_t lib;
      const std::string op = k.op;
      if (op == "cvt") {
        oracle.from_f32(&k.a, 1, &ref, &ref_fl);
        lib = from_f32_bits(f, k.a, e);
      } else if (op == "sqrt") {
        oracle.sqrt(&k.a, 1, &ref, &ref_fl);
        lib = halfway::sqrt(f, k.a, e);
      } else {
        const BinaryOp bop = op == "add"   ? BinaryOp::add
                             : op == "sub" ? BinaryOp::sub
                             : op == "mul" ? BinaryOp::mul
                                           : BinaryOp::div;
        oracle.binary(bop, &k.a, &k.b, 1, &ref, &ref_fl);
        lib = lib_scalar_binary(bop, f, k.a, k.b, e);
      }
      if (inject && &k == &kKnown[0]) lib ^= 1;
      const auto inputs = [&] {
        return op == "cvt" ? fmt::format("x = {}", show(f32_info(), k.a))
                           : fmt::format("a = {}{}", show(F, k.a),
                                         op == "sqrt" ? "" : ", b = " + show(F, k.b));
      };
      for (const auto& [who, got, fl] : {std::tuple<const char*, uint32_t, uint8_t>{"oracle", ref, ref_fl},
                                         std::tuple<const char*, uint32_t, uint8_t>{"library", lib, e.flags}}) {
        if (got == k.want && fl == k.flags) continue;
        ++bad;
        c.note([&] {
          return fmt::format("{} {} {}{}: {}\n      {} {}  flags {}\n      expected {}  flags {}",
                             k.op, k.format, rounding_name(k.r),
                             k.before ? " (tininess before)" : "", inputs(), who, show(F, got),
                             flags_name(fl), show(F, k.want), flags_name(k.flags));
        });
      }
    }
    return bad;
  };
  list.push_back(std::move(c));
}

bool contains(const std::vector<Format>& v, const Format& f) {
  return std::find(v.begin(), v.end(), f) != v.end();
}

}  // namespace

CheckList build(const Options& o) {
  CheckList list;
  Builder b{o, list};
  const std::vector<Format> defaults = {formats::fp16, formats::bf16, formats::e4m3, formats::e5m2};
  std::vector<Format> sel;
  for (const Format& f : o.formats)
    if (!contains(sel, f)) sel.push_back(f);
  std::vector<Format> all = sel;
  for (const Format& f : defaults)
    if (!contains(all, f)) all.push_back(f);

  const auto sample = std::make_shared<const std::vector<uint32_t>>(f32_sample());
  const std::vector<Rounding> near_even = {Rounding::near_even};
  const std::vector<Rounding>& exhaustive_modes = o.modes_given ? o.modes : near_even;
  // Bulk implementations: the quick checks try every SIMD level this CPU runs (they must all
  // agree; the scalar reference is what the scalar checks already cover), the exhaustive ones
  // the best, which is what callers get.
  std::vector<detail::BulkPath> quick_paths = o.bulk_paths, exhaustive_paths = o.bulk_paths;
  if (o.bulk_paths.empty()) {
    for (int p = 0; p <= int(detail::bulk_path_supported()); ++p)
      if (detail::BulkPath(p) != detail::BulkPath::reference || p == int(detail::bulk_path_supported()))
        quick_paths.push_back(detail::BulkPath(p));
    exhaustive_paths = {detail::bulk_path_supported()};
  }

  if (o.has_op("convert")) {
    for (const Format& f : sel) {
      const std::string what = fmt::format("{} sampled inputs", sample->size());
      b.f32_to(f, sample, o.modes, std::nullopt, what);
      for (const auto p : quick_paths) b.f32_to(f, sample, o.modes, p, what);
      if (f.nbits() <= 16) b.decode(f, quick_paths);
    }
    for (const Format& from : all)
      for (const Format& to : all)
        if (from != to && from.nbits() <= 16 && (contains(sel, from) || contains(sel, to)))
          b.convert(from, to, o.modes);
  }
  // The oracle's own two paths agree (quick run only: it checks the oracle, not the library).
  for (const Format& f : sel) {
    std::shared_ptr<std::pair<std::vector<uint32_t>, std::vector<uint32_t>>> pairs;
    if (f.nbits() > 10 && f.nbits() <= 16) {
      pairs = std::make_shared<std::pair<std::vector<uint32_t>, std::vector<uint32_t>>>();
      pair_sample(FormatInfo(f), size_t(1) << 16, pairs->first, pairs->second);
    }
    b.oracle_paths(f, sample, pairs, o.modes);
  }
  if (o.has_op("sqrt"))
    for (const Format& f : sel)
      if (f.nbits() <= 16) b.sqrt_all(f, o.modes);
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
    if (!o.has_op(op_name(op))) continue;
    for (const Format& f : sel) {
      if (f.nbits() <= 10) {  // at most 2^20 pairs: all of them, every direction
        const std::string what = fmt::format("all {} pairs", uint64_t(1) << (2 * f.nbits()));
        b.binary_pairs(op, f, o.modes, std::nullopt, nullptr, what);
        for (const auto p : quick_paths) b.binary_pairs(op, f, o.modes, p, nullptr, what);
      } else if (f.nbits() <= 16) {
        auto pairs = std::make_shared<std::pair<std::vector<uint32_t>, std::vector<uint32_t>>>();
        pair_sample(FormatInfo(f), size_t(1) << 17, pairs->first, pairs->second);
        const std::string what = fmt::format("{} sampled pairs", pairs->first.size());
        b.binary_pairs(op, f, o.modes, std::nullopt, pairs, what);
        for (const auto p : quick_paths) b.binary_pairs(op, f, o.modes, p, pairs, what);
      }
    }
  }

  if (o.exhaustive) {
    if (o.has_op("convert")) {
      for (const Format& f : sel) {
        for (const auto p : exhaustive_paths) b.f32_to(f, nullptr, o.modes, p, "all 2^32 inputs");
        b.f32_to(f, nullptr, o.modes_given ? o.modes : near_even, std::nullopt, "all 2^32 inputs");
      }
    }
    for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
      if (!o.has_op(op_name(op))) continue;
      for (const Format& f : sel)
        if (f.nbits() > 10 && f.nbits() <= 16)
          for (const auto p : exhaustive_paths)
            b.binary_pairs(op, f, exhaustive_modes, p, nullptr,
                           fmt::format("all 2^{} pairs", 2 * f.nbits()));
    }
  }
  // The oracle's own spot check against values written by hand comes first.
  if (!list.empty()) {
    CheckList known;
    known_values(known, o.inject);
    list.insert(list.begin(), std::move(known.front()));
  }
  return list;
}

}  // namespace halfway::cli::verify_cmd
