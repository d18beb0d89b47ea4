// The block-quantization reference of block_oracle.hpp. Compiled with -ffp-contract=off: the
// NVFP4 and fp8_block definitions are sequences of separately rounded fp32 operations.
#include "block_oracle.hpp"

#include <cfloat>
#include <cmath>
#include <limits>

#include "halfway/softfloat.hpp"

namespace block_oracle {

using halfway::BlockFamily;

namespace {

/// The largest finite value of a format, by decoding every encoding.
double largest(const halfway::Format& f) {
  double m = 0;
  for (uint32_t c = 0; c < (1u << f.nbits()); ++c) {
    halfway::Env env;
    const double v = halfway::to_f64(f, c, env);
    if (std::isfinite(v)) m = std::max(m, v);
  }
  return m;
}

/// The element indices of one block, in row-major order.
std::vector<size_t> block_indices(size_t br, size_t bc, size_t tr, size_t tc, size_t cols) {
  std::vector<size_t> idx;
  for (size_t r = br * tr; r < (br + 1) * tr; ++r)
    for (size_t c = bc * tc; c < (bc + 1) * tc; ++c) idx.push_back(r * cols + c);
  return idx;
}


/// The smallest k with 2^k ≥ v > 0, by a search over powers of two.
int ceil_log2(double v) {
  int k = std::ilogb(v) - 2;
  while (std::ldexp(1.0, k) < v) ++k;
  return k;
}

/// floor(log2 v) for v > 0: v = f · 2^e with f in [0.5, 1).
int floor_log2(double v) {
  int e;
  std::frexp(v, &e);
  return e - 1;
}

/// The MX exponent k of a finite amax > 0 before the clamp, from each rule's definition
/// (docs/blocks.md), in binary64, where every step here is exact.
int mx_exponent(const halfway::BlockScheme& s, double amax, double elem_max) {
  const int emax = std::ilogb(elem_max);
  switch (s.scale_rule) {
    case halfway::MxScaleRule::floor: return floor_log2(amax) - emax;
    case halfway::MxScaleRule::ceil: return ceil_log2(amax) - emax;
    case halfway::MxScaleRule::even: {
      // amax rounded to the element's m fraction bits, ties away from zero.
      const int m = s.element.frac_bits, e = floor_log2(amax);
      const double q = std::floor(std::ldexp(amax, m - e) + 0.5);  // in [2^m, 2^(m+1)]
      return floor_log2(std::ldexp(q, e - m)) - emax;
    }
    case halfway::MxScaleRule::rceil: {
      // fp32(amax · fp32(1 / elem_max)): the product of two fp32 values is exact in binary64
      // and its conversion to float is the one fp32 rounding (subnormal results too).
      const double rcp = double(float(1.0 / elem_max));
      const float d = float(amax * rcp);
      return d == 0.0f ? -1000 : ceil_log2(double(d));
    }
  }
  return 0;
}

struct Block {
  std::vector<size_t> idx;
  double amax = 0;
  bool finite = true;
};

/// The rounding environment of element i (its flat index r·cols + c): the call's direction, and
/// for stochastic rounding the random stream at offset + i.
halfway::Env element_env(const halfway::BlockOptions& o, size_t i) {
  halfway::Env e{o.rounding, o.seed};
  e.sr_subsequence = o.subsequence;
  e.sr_counter = o.offset + i;
  e.sr_random_bits = o.random_bits;
  e.sr_pack = o.pack_random_bits;
  return e;
}

void mx_block(const halfway::BlockScheme& s, const std::vector<float>& x, const Block& blk,
              const halfway::BlockOptions& o, Result& res, halfway::BlockEvents& ev, size_t b) {
  const double emax_val = largest(s.element);
  const int emax = std::ilogb(emax_val);
  if (!blk.finite) {
    res.scale_codes[b] = 0xFF;
    res.scales[b] = std::numeric_limits<float>::quiet_NaN();
    ev.nan_scales = 1;
    for (size_t i : blk.idx) res.decoded[i] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  int k = -127;
  if (blk.amax > 0) {
    k = mx_exponent(s, blk.amax, emax_val);
    if (k < -127 || k > 127) {
      ev.scales_clamped = 1;
      k = k < -127 ? -127 : 127;
    }
  }
  res.scale_codes[b] = uint8_t(k + 127);
  res.scales[b] = float(std::ldexp(1.0, k));
  for (size_t i : blk.idx) {
    const double v = std::ldexp(double(x[i]), -k);  // exact in binary64
    halfway::Env env = element_env(o, i);
    // Saturation: beyond the largest element, ±max in every direction.
    const double vc = std::fmax(-emax_val, std::fmin(emax_val, v));
    const uint32_t code = halfway::from_f64(s.element, std::isnan(v) ? v : vc, env);
    res.codes[i] = uint8_t(code);
    double value = halfway::to_f64(s.element, code, env);
    // MXINT8: the element is the integer value · 64 in int8 two's complement (no −0).
    if (s.twos_complement) {
      res.codes[i] = uint8_t(int8_t(std::lround(value * 64.0)));
      value = double(int8_t(res.codes[i])) / 64.0;
    }
    ev.saturated += std::fabs(v) > emax_val;
    ev.flushed += x[i] != 0.0f && value == 0.0;
    res.decoded[i] = float(value * std::ldexp(1.0, k));  // exact product, one rounding
  }
}

/// TE's NVFP4 reference, step by step in fp32.
void nvfp4_block(const halfway::BlockScheme& s, const std::vector<float>& x, const Block& blk,
                 float g, const halfway::BlockOptions& o, size_t cols, Result& res,
                 halfway::BlockEvents& ev, size_t b) {
  const float fmax = FLT_MAX;
  const float gd = 1.0f / g;
  const float mult = g * (1.0f / 6.0f);
  float ds = float(blk.amax) * mult;
  if (ds > fmax) ds = fmax;
  bool clamped = ds > 448.0f;
  // Harmless: e4m3's rounding of the unclamped scale is 448 too (at most the midpoint 464 to
  // the next step, 480, which ties to 448's even significand).
  ev.scales_clamped_harmless = clamped && ds <= 464.0f;
  if (ds > 448.0f) ds = 448.0f;
  halfway::Env env;
  const uint32_t sc = halfway::from_f32(halfway::formats::e4m3, ds, env);
  const float sv = halfway::to_f32(halfway::formats::e4m3, sc, env);
  if (sv == 0.0f && blk.amax != 0) clamped = true;
  ev.scales_clamped = clamped;
  float enc = 1.0f / (sv * gd);
  if (enc > fmax) enc = fmax;
  res.scale_codes[b] = uint8_t(sc);
  res.scales[b] = sv;
  for (size_t i : blk.idx) {
    float y = x[i] * enc;
    const bool over = std::fabs(y) > 6.0f;
    if (y > 6.0f) y = 6.0f;
    if (y < -6.0f) y = -6.0f;
    uint8_t code;
    if (o.rounding != halfway::Rounding::near_even) {
      halfway::Env e = element_env(o, i);
      code = y == 0.0f ? 0 : uint8_t(halfway::from_f32(halfway::formats::e2m1, y, e));
    } else {
      code = te_e2m1_code(y);
    }
    res.codes[i] = code;
    halfway::Env d;
    const float value = halfway::to_f32(halfway::formats::e2m1, code, d);
    ev.saturated += over && sv != 0.0f;
    ev.flushed += x[i] != 0.0f && (value == 0.0f || sv == 0.0f);
    res.decoded[i] = value * (sv * gd);
  }
  (void)s;
  (void)cols;
}

void fp8_block(const halfway::BlockScheme& s, const std::vector<float>& x, const Block& blk,
               const halfway::BlockOptions& o, Result& res, halfway::BlockEvents& ev,
               size_t b) {
  const float a = float(blk.amax);
  float sv = 1.0f;
  if (a != 0.0f && o.pow2_scales) {
    float q = 448.0f / a;
    if (std::isinf(q)) {
      q = FLT_MAX;
      ev.scales_clamped = 1;
    }
    int e;
    std::frexp(q, &e);
    sv = std::ldexp(1.0f, -(e - 1));
  } else if (a != 0.0f) {
    sv = a / 448.0f;
    if (sv == 0.0f) {
      sv = std::numeric_limits<float>::denorm_min();
      ev.scales_clamped = 1;
    }
  }
  res.scales[b] = sv;
  for (size_t i : blk.idx) {
    const float y = x[i] / sv;
    halfway::Env env = element_env(o, i);
    const uint32_t code = halfway::from_f32(s.element, std::fmax(-448.0f, std::fmin(448.0f, y)), env);
    res.codes[i] = uint8_t(code);
    const float value = halfway::to_f32(s.element, code, env);
    ev.saturated += std::fabs(y) > 448.0f;
    ev.flushed += x[i] != 0.0f && value == 0.0f;
    res.decoded[i] = value * sv;
  }
}

/// torchao's float8 rowwise: scale = elem_max / max(amax, 1e-12) in binary64, rounded to
/// fp32 (pow2: 2^floor(log2) of that, by frexp); elements fp32(x · scale), clamped, cast to
/// nearest even; decoded fp32(q / scale).
void fp8_rowwise(const halfway::BlockScheme& s, const std::vector<float>& x, const Block& blk,
                 const halfway::BlockOptions& o, Result& res, halfway::BlockEvents& ev,
                 size_t b) {
  const double m = largest(s.element);
  float q = float(m / std::max(blk.amax, 1e-12));
  ev.scales_clamped = blk.amax != 0 && blk.amax < 1e-12;
  if (o.pow2_scales) {
    int e;
    std::frexp(q, &e);
    q = std::ldexp(1.0f, e - 1);
  }
  res.scales[b] = q;
  for (size_t i : blk.idx) {
    const float y = x[i] * q;
    halfway::Env env = element_env(o, i);
    const float yc = std::fmax(-float(m), std::fmin(float(m), y));
    const uint32_t code = halfway::from_f32(s.element, yc, env);
    res.codes[i] = uint8_t(code);
    const float value = halfway::to_f32(s.element, code, env);
    ev.saturated += std::fabs(y) > float(m);
    ev.flushed += x[i] != 0.0f && value == 0.0f;
    res.decoded[i] = value / q;
  }
}

/// Four Over Six (fouroversix's reference, rule mse): both candidate scales of the block, each
/// element through TE's e2m1 threshold table, the squared errors summed in binary64 in the
/// block's row-major order, the scale of 4 kept when its error is smaller.
void four_over_six(const std::vector<float>& x, const Block& blk, float a_all, Result& res,
                   halfway::BlockEvents& ev, size_t b) {
  halfway::Env env;
  const float hp = a_all == 0.0f ? 0.0f : (float(blk.amax) * 256.0f) / a_all;
  float sv[2];
  uint32_t sc[2];
  double err[2] = {0, 0};
  const float factor[2] = {1.0f, 1.5f};
  for (int k = 0; k < 2; ++k) {
    sc[k] = halfway::from_f32(halfway::formats::e4m3, hp * factor[k], env);
    sv[k] = halfway::to_f32(halfway::formats::e4m3, sc[k], env);
  }
  auto element = [&](float v, float s, bool& over) -> uint8_t {
    over = false;
    if (s == 0.0f || v == 0.0f) return 0;
    const float y = ((v * 6.0f) * 256.0f) / (a_all * s);
    over = std::fabs(y) > 6.0f;
    return te_e2m1_code(std::fmax(-6.0f, std::fmin(6.0f, y)));
  };
  auto value = [&](uint8_t code, float s) {
    return ((halfway::to_f32(halfway::formats::e2m1, code, env) * s) * a_all) / 1536.0f;
  };
  bool over;
  for (int k = 0; k < 2; ++k)
    for (size_t i : blk.idx) {
      const double d = double(value(element(x[i], sv[k], over), sv[k])) - double(x[i]);
      err[k] += d * d;
    }
  const int pick = err[1] < err[0] ? 1 : 0;
  res.scale_codes[b] = uint8_t(sc[pick]);
  res.scales[b] = sv[pick];
  ev.scales_clamped = sv[pick] == 0.0f && blk.amax != 0;
  for (size_t i : blk.idx) {
    const uint8_t q = element(x[i], sv[pick], over);
    res.codes[i] = q;
    ev.saturated += over;
    ev.flushed += x[i] != 0.0f && (q & 7) == 0;
    res.decoded[i] = value(q, sv[pick]);
  }
}

}  // namespace

uint8_t te_e2m1_code(float y) {
  // Transformer Engine's cast_to_fp4x2: magnitude intervals, ties to the even neighbour; a
  // negative value keeps the sign bit, an exact −0.0 compares equal to 0.0 and gets code 0.
  static const float lo[8] = {0.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  static const bool lo_closed[8] = {true, false, true, false, true, false, true, false};
  const float m = std::fabs(y);
  uint8_t code = 0;
  for (uint8_t k = 0; k < 8; ++k)
    if (m > lo[k] || (lo_closed[k] && m == lo[k])) code = k;
  if (y < 0.0f) code |= 8;
  return code;
}

Result encode(const halfway::BlockScheme& s, const std::vector<float>& x0, size_t rows,
              size_t cols, const halfway::BlockOptions& o) {
  std::vector<float> x = x0;
  if (o.rht) hadamard(x, rows, cols, o.axis);
  const auto [tr, tc] = halfway::block_tile(s, o.axis, rows, cols);
  const size_t sr = rows / tr, sc = cols / tc, nb = sr * sc;
  Result res;
  res.codes.assign(rows * cols, 0);
  res.scales.assign(nb, 0.0f);
  if (!s.fp32_scales()) res.scale_codes.assign(nb, 0);
  res.decoded.assign(rows * cols, 0.0f);
  res.block_events.assign(nb, {});
  std::vector<Block> blocks(nb);
  double gamax = 0;
  for (size_t b = 0; b < nb; ++b) {
    blocks[b].idx = block_indices(b / sc, b % sc, tr, tc, cols);
    for (size_t i : blocks[b].idx) {
      if (!std::isfinite(x[i])) blocks[b].finite = false;
      blocks[b].amax = std::max(blocks[b].amax, std::fabs(double(x[i])));
    }
    gamax = std::max(gamax, blocks[b].amax);
  }
  // A given global amax (BlockOptions::global_amax) replaces the tensor's or the lines'.
  if (!o.global_amax.empty() && !s.row_scaled) gamax = o.global_amax[0];
  // TE's global encode scale from an amax, in fp32.
  auto te_global = [](double a) {
    float g = 2688.0f / float(a);
    if (g > FLT_MAX) g = FLT_MAX;
    if (g == 0.0f) g = 1.0f;
    return g;
  };
  float g = 0;
  if (s.family == BlockFamily::nvfp4_4over6) res.global_scale = float(gamax);
  if (s.family == BlockFamily::nvfp4 && !s.row_scaled) {
    g = te_global(gamax);
    res.global_scale = g;
  }
  // Row-scaled: each line's amax, walked element by element along the line (a row for blocks
  // along the last axis, a column for blocks down the first), not from the blocks.
  const bool by_row = o.axis == halfway::BlockAxis::last;
  if (s.row_scaled) {
    const size_t lines = by_row ? rows : cols, len = by_row ? cols : rows;
    for (size_t l = 0; l < lines; ++l) {
      double a = 0;
      for (size_t k = 0; k < len; ++k)
        a = std::max(a, std::fabs(double(x[by_row ? l * cols + k : k * cols + l])));
      if (!o.global_amax.empty()) a = o.global_amax[l];
      res.global_scales.push_back(te_global(a));
    }
  }
  for (size_t b = 0; b < nb; ++b) {
    halfway::BlockEvents& ev = res.block_events[b];
    ev.elements = blocks[b].idx.size();
    ev.blocks = 1;
    // A row-scaled block's line: that of its first element (every element shares it).
    const size_t first = blocks[b].idx.front();
    const float gb = s.row_scaled ? res.global_scales[by_row ? first / cols : first % cols] : g;
    switch (s.family) {
      case BlockFamily::mx: mx_block(s, x, blocks[b], o, res, ev, b); break;
      case BlockFamily::nvfp4: nvfp4_block(s, x, blocks[b], gb, o, cols, res, ev, b); break;
      case BlockFamily::fp8_rowwise: fp8_rowwise(s, x, blocks[b], o, res, ev, b); break;
      case BlockFamily::nvfp4_4over6: four_over_six(x, blocks[b], float(gamax), res, ev, b); break;
      default: fp8_block(s, x, blocks[b], o, res, ev, b); break;
    }
    res.events += ev;
  }
  return res;
}

/// Sylvester's construction of the 16×16 Hadamard matrix, rows multiplied by TE's signs and
/// the whole by 1/4.
static std::vector<std::vector<float>> rht_matrix() {
  std::vector<std::vector<float>> h{{1.0f}};
  while (h.size() < 16) {
    const size_t n = h.size();
    std::vector<std::vector<float>> g(2 * n, std::vector<float>(2 * n));
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) {
        g[i][j] = g[i][j + n] = g[i + n][j] = h[i][j];
        g[i + n][j + n] = -h[i][j];
      }
    h = g;
  }
  for (size_t k = 0; k < 16; ++k)
    for (size_t j = 0; j < 16; ++j) h[k][j] *= halfway::detail::kRhtSigns[k] * 0.25f;
  return h;
}

void hadamard(std::vector<float>& x, size_t rows, size_t cols, halfway::BlockAxis axis) {
  static const auto m = rht_matrix();
  const size_t nb = axis == halfway::BlockAxis::last ? rows * (cols / 16) : (rows / 16) * cols;
  for (size_t b = 0; b < nb; ++b) {
    size_t idx[16];
    for (size_t k = 0; k < 16; ++k) {
      if (axis == halfway::BlockAxis::last)
        idx[k] = (b / (cols / 16)) * cols + (b % (cols / 16)) * 16 + k;
      else
        idx[k] = ((b / cols) * 16 + k) * cols + b % cols;
    }
    float out[16];
    for (size_t j = 0; j < 16; ++j) {
      float acc = x[idx[0]] * m[0][j];
      for (size_t k = 1; k < 16; ++k) acc += x[idx[k]] * m[k][j];
      out[j] = acc;
    }
    for (size_t k = 0; k < 16; ++k) x[idx[k]] = out[k];
  }
}

}  // namespace block_oracle
