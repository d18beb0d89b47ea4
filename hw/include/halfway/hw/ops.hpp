/// \file ops.hpp
/// The elementwise operations that hardware backends are checked on, with the library's
/// reference for each. Shared by the CPU backends (`halfway hw-report`), the CUDA suite and the
/// tests that replay a GPU report, so an operation has one name and one reference everywhere.
/// Everything here is `__host__ __device__`.
///
///     using namespace halfway::hw;
///     const OpInfo i = op_info(Op::f32_to_f16_rn);          // "f32_to_f16_rn", f32 -> fp16
///     uint32_t ref = reference(Op::f32_to_f16_rn, 0x3DCCCCCDu, 0, 0);  // 0x2E66
#pragma once

#include "halfway/config.hpp"
#include "halfway/env.hpp"
#include "halfway/format.hpp"
#include "halfway/hw/hash.hpp"
#include "halfway/softfloat.hpp"

namespace halfway::hw {

// Formats built in functions rather than read from namespace-scope constants, so that device
// code never refers to a host variable.
HALFWAY_INLINE Format fmt_fp32() { return Format{8, 23, 127, Specials::ieee, Overflow::infinity}; }
HALFWAY_INLINE Format fmt_fp16() { return Format{5, 10, 15, Specials::ieee, Overflow::infinity}; }
HALFWAY_INLINE Format fmt_bf16() { return Format{8, 7, 127, Specials::ieee, Overflow::infinity}; }
/// OCP e4m3fn. `sat`: overflow gives ±448 (__NV_SATFINITE); otherwise NaN (__NV_NOSAT).
HALFWAY_INLINE Format fmt_e4m3(bool sat) {
  return Format{4, 3, 7, Specials::fn, sat ? Overflow::saturate : Overflow::nan};
}
/// OCP e5m2. `sat`: overflow gives ±57344 (__NV_SATFINITE); otherwise ±inf (__NV_NOSAT).
HALFWAY_INLINE Format fmt_e5m2(bool sat) {
  return Format{5, 2, 15, Specials::ieee, sat ? Overflow::saturate : Overflow::infinity};
}

enum class Op : uint8_t {
  // f32 -> 16/8-bit conversions (domain: all 2^32 f32 encodings)
  f32_to_f16_rn, f32_to_f16_rz, f32_to_f16_rd, f32_to_f16_ru,
  f32_to_bf16_rn, f32_to_bf16_rz, f32_to_bf16_rd, f32_to_bf16_ru,
  f32_to_e4m3_satfinite, f32_to_e4m3_nosat, f32_to_e5m2_satfinite, f32_to_e5m2_nosat,
  // widening conversions (domain: every encoding)
  f16_to_f32, bf16_to_f32, e4m3_to_f16, e5m2_to_f16,
  // arithmetic, round to nearest even (domain: all 2^32 operand pairs)
  f16_add, f16_sub, f16_mul, f16_div,
  bf16_add, bf16_sub, bf16_mul, bf16_div,
  // fused multiply-add (domain: random triples, see fma_operands)
  f16_fma, bf16_fma,
  count
};
inline constexpr int kOpCount = static_cast<int>(Op::count);

struct OpInfo {
  const char* name = "";
  int arity = 1;
  Format in{};               ///< operand format
  Format out{};              ///< result format
  Rounding rounding = Rounding::near_even;
  const char* in_name = "";  ///< short names for messages ("fp32 subnormal inputs ...")
  const char* out_name = "";
};

HALFWAY_INLINE OpInfo op_info(Op op) {
  const Rounding rn = Rounding::near_even, rz = Rounding::minMag, rd = Rounding::min,
                 ru = Rounding::max;
  const Format f32 = fmt_fp32(), f16 = fmt_fp16(), b16 = fmt_bf16();
  switch (op) {
    case Op::f32_to_f16_rn: return {"f32_to_f16_rn", 1, f32, f16, rn, "fp32", "fp16"};
    case Op::f32_to_f16_rz: return {"f32_to_f16_rz", 1, f32, f16, rz, "fp32", "fp16"};
    case Op::f32_to_f16_rd: return {"f32_to_f16_rd", 1, f32, f16, rd, "fp32", "fp16"};
    case Op::f32_to_f16_ru: return {"f32_to_f16_ru", 1, f32, f16, ru, "fp32", "fp16"};
    case Op::f32_to_bf16_rn: return {"f32_to_bf16_rn", 1, f32, b16, rn, "fp32", "bf16"};
    case Op::f32_to_bf16_rz: return {"f32_to_bf16_rz", 1, f32, b16, rz, "fp32", "bf16"};
    case Op::f32_to_bf16_rd: return {"f32_to_bf16_rd", 1, f32, b16, rd, "fp32", "bf16"};
    case Op::f32_to_bf16_ru: return {"f32_to_bf16_ru", 1, f32, b16, ru, "fp32", "bf16"};
    case Op::f32_to_e4m3_satfinite:
      return {"f32_to_e4m3_satfinite", 1, f32, fmt_e4m3(true), rn, "fp32", "e4m3"};
    case Op::f32_to_e4m3_nosat:
      return {"f32_to_e4m3_nosat", 1, f32, fmt_e4m3(false), rn, "fp32", "e4m3"};
    case Op::f32_to_e5m2_satfinite:
      return {"f32_to_e5m2_satfinite", 1, f32, fmt_e5m2(true), rn, "fp32", "e5m2"};
    case Op::f32_to_e5m2_nosat:
      return {"f32_to_e5m2_nosat", 1, f32, fmt_e5m2(false), rn, "fp32", "e5m2"};
    case Op::f16_to_f32: return {"f16_to_f32", 1, f16, f32, rn, "fp16", "fp32"};
    case Op::bf16_to_f32: return {"bf16_to_f32", 1, b16, f32, rn, "bf16", "fp32"};
    case Op::e4m3_to_f16: return {"e4m3_to_f16", 1, fmt_e4m3(false), f16, rn, "e4m3", "fp16"};
    case Op::e5m2_to_f16: return {"e5m2_to_f16", 1, fmt_e5m2(false), f16, rn, "e5m2", "fp16"};
    case Op::f16_add: return {"f16_add", 2, f16, f16, rn, "fp16", "fp16"};
    case Op::f16_sub: return {"f16_sub", 2, f16, f16, rn, "fp16", "fp16"};
    case Op::f16_mul: return {"f16_mul", 2, f16, f16, rn, "fp16", "fp16"};
    case Op::f16_div: return {"f16_div", 2, f16, f16, rn, "fp16", "fp16"};
    case Op::bf16_add: return {"bf16_add", 2, b16, b16, rn, "bf16", "bf16"};
    case Op::bf16_sub: return {"bf16_sub", 2, b16, b16, rn, "bf16", "bf16"};
    case Op::bf16_mul: return {"bf16_mul", 2, b16, b16, rn, "bf16", "bf16"};
    case Op::bf16_div: return {"bf16_div", 2, b16, b16, rn, "bf16", "bf16"};
    case Op::f16_fma: return {"f16_fma", 3, f16, f16, rn, "fp16", "fp16"};
    case Op::bf16_fma: return {"bf16_fma", 3, b16, b16, rn, "bf16", "bf16"};
    default: return {};
  }
}

/// The library's result for `op` on operand encodings a, b, c (unused ones ignored).
HALFWAY_INLINE uint32_t reference(Op op, uint32_t a, uint32_t b, uint32_t c) {
  const OpInfo i = op_info(op);
  Env env{i.rounding};
  switch (op) {
    case Op::f32_to_f16_rn: case Op::f32_to_f16_rz: case Op::f32_to_f16_rd:
    case Op::f32_to_f16_ru: case Op::f32_to_bf16_rn: case Op::f32_to_bf16_rz:
    case Op::f32_to_bf16_rd: case Op::f32_to_bf16_ru: case Op::f32_to_e4m3_satfinite:
    case Op::f32_to_e4m3_nosat: case Op::f32_to_e5m2_satfinite: case Op::f32_to_e5m2_nosat:
      return from_f32_bits(i.out, a, env);
    case Op::f16_to_f32: case Op::bf16_to_f32: case Op::e4m3_to_f16: case Op::e5m2_to_f16:
      return convert(i.in, a, i.out, env);
    case Op::f16_add: case Op::bf16_add: return add(i.out, a, b, env);
    case Op::f16_sub: case Op::bf16_sub: return sub(i.out, a, b, env);
    case Op::f16_mul: case Op::bf16_mul: return mul(i.out, a, b, env);
    case Op::f16_div: case Op::bf16_div: return div(i.out, a, b, env);
    case Op::f16_fma: case Op::bf16_fma: return fma(i.out, a, b, c, env);
    default: return 0;
  }
}

/// Number of inputs that an exhaustive check of `op` covers (fma: none, it is sampled).
HALFWAY_INLINE uint64_t domain_size(Op op) {
  const OpInfo i = op_info(op);
  if (i.arity == 3) return 0;
  if (i.arity == 2) return uint64_t(1) << (2 * i.in.nbits());
  return uint64_t(1) << i.in.nbits();
}

/// Operands of input number `index` of an exhaustive check: the encoding itself for one
/// operand, a = index >> n, b = index & (2^n - 1) for two n-bit operands.
HALFWAY_INLINE void domain_operands(Op op, uint64_t index, uint32_t& a, uint32_t& b) {
  const OpInfo i = op_info(op);
  if (i.arity == 2) {
    const int n = i.in.nbits();
    a = static_cast<uint32_t>(index >> n);
    b = static_cast<uint32_t>(index & ((uint64_t(1) << n) - 1));
  } else {
    a = static_cast<uint32_t>(index);
    b = 0;
  }
}

/// Is `enc` a non-zero subnormal of `f`?
HALFWAY_INLINE bool is_subnormal(const Format& f, uint32_t enc) {
  const uint32_t mag = enc & f.mag_mask();
  return f.has_zero && mag != 0 && (mag >> f.frac_bits) == 0;
}
/// ±0 in place of a subnormal (what "denormals are zero" hardware reads).
HALFWAY_INLINE uint32_t flush_subnormal(const Format& f, uint32_t enc) {
  return is_subnormal(f, enc) ? (enc & f.sign_bit()) : enc;
}

/// The reference computed as if subnormal operands were zero.
HALFWAY_INLINE uint32_t reference_daz(Op op, uint32_t a, uint32_t b, uint32_t c) {
  const Format in = op_info(op).in;
  return reference(op, flush_subnormal(in, a), flush_subnormal(in, b), flush_subnormal(in, c));
}

HALFWAY_INLINE bool any_subnormal_operand(Op op, uint32_t a, uint32_t b, uint32_t c) {
  const OpInfo i = op_info(op);
  return is_subnormal(i.in, a) || (i.arity > 1 && is_subnormal(i.in, b)) ||
         (i.arity > 2 && is_subnormal(i.in, c));
}

namespace detail {
/// A finite encoding of `f` with the given sign, biased exponent field and fraction.
HALFWAY_INLINE uint32_t compose(const Format& f, uint32_t sign, uint32_t field, uint32_t frac) {
  return (sign ? f.sign_bit() : 0u) | (field << f.frac_bits) | (frac & f.frac_mask());
}
}  // namespace detail

/// Operands of random fma triple number `index` of stream `seed`, for a 16-bit IEEE format `f`
/// (fp16 or bf16). Four families, chosen by the random word: uniform encodings (NaNs and
/// infinities included); near-cancellation (c = −round(a·b) moved by a few ulps); products near
/// and below the subnormal threshold; short significands, which make exact ties frequent.
HALFWAY_INLINE void fma_operands(const Format& f, uint64_t seed, uint64_t index, uint32_t& a,
                            uint32_t& b, uint32_t& c) {
  const uint64_t r = random64(seed, index);
  const uint64_t s = random64(seed ^ 0x5851F42D4C957F2Dull, index);
  const uint32_t mask = f.enc_mask();
  const uint32_t emax_field = f.exp_field_max() - 1;  // largest finite exponent field
  const int bias = f.bias;
  switch (r & 3) {
    case 0:  // uniform bit patterns
      a = static_cast<uint32_t>(r >> 16) & mask;
      b = static_cast<uint32_t>(r >> 32) & mask;
      c = static_cast<uint32_t>(r >> 48) & mask;
      return;
    case 1: {  // c close to -(a*b): cancellation, the exactness of the product matters
      const uint32_t ea = 1 + static_cast<uint32_t>((r >> 8) % emax_field);
      uint32_t eb = 1 + static_cast<uint32_t>((r >> 16) % emax_field);
      // Keep the product inside the finite range most of the time.
      const int prod_field = int(ea) + int(eb) - bias;
      if (prod_field > int(emax_field) || prod_field < 1) eb = static_cast<uint32_t>(bias);
      a = detail::compose(f, (r >> 24) & 1, ea, static_cast<uint32_t>(s));
      b = detail::compose(f, (r >> 25) & 1, eb, static_cast<uint32_t>(s >> 16));
      Env env;
      const uint32_t p = mul(f, a, b, env);
      const int delta = int((r >> 26) & 7) - 3;  // -3..+4 ulps (in the encoding's order)
      uint32_t mag = p & f.mag_mask();
      mag = static_cast<uint32_t>(int(mag) + delta) & f.mag_mask();
      if ((mag >> f.frac_bits) > emax_field) mag = p & f.mag_mask();  // keep c finite
      c = ((p & f.sign_bit()) ^ f.sign_bit()) | mag;
      return;
    }
    case 2: {  // products around and below the smallest normal: subnormal and tiny results
      const int target = 1 - int((r >> 8) % (f.frac_bits + 4));  // product exponent field
      const uint32_t ea = 1 + static_cast<uint32_t>((r >> 16) % emax_field);
      int eb = target + bias - int(ea);
      if (eb < 1) eb = 1;
      if (eb > int(emax_field)) eb = int(emax_field);
      a = detail::compose(f, (r >> 24) & 1, ea, static_cast<uint32_t>(s));
      b = detail::compose(f, (r >> 25) & 1, static_cast<uint32_t>(eb), static_cast<uint32_t>(s >> 16));
      // c: zero, or a subnormal / small normal of either sign.
      const uint32_t cf = static_cast<uint32_t>((r >> 28) & 3);
      c = cf == 0 ? 0u
                  : detail::compose(f, (r >> 30) & 1, cf == 3 ? 1u : 0u,
                                    static_cast<uint32_t>(s >> 32));
      return;
    }
    default: {  // short significands: products with few bits, sums landing on midpoints
      const uint32_t ea = 1 + static_cast<uint32_t>((r >> 8) % emax_field);
      uint32_t eb = 1 + static_cast<uint32_t>((r >> 16) % emax_field);
      const int prod_field = int(ea) + int(eb) - bias;
      if (prod_field > int(emax_field) - 1 || prod_field < 2) eb = static_cast<uint32_t>(bias);
      const int top = f.frac_bits >= 3 ? f.frac_bits - 3 : 0;
      a = detail::compose(f, (r >> 24) & 1, ea, static_cast<uint32_t>(s) << top);
      b = detail::compose(f, (r >> 25) & 1, eb, static_cast<uint32_t>(s >> 8) << top);
      // c within a few binades of the product, with a random fraction.
      const int pf = int(ea) + int(eb) - bias;
      int ec = pf + int((r >> 28) & 15) - 7;
      if (ec < 0) ec = 0;
      if (ec > int(emax_field)) ec = int(emax_field);
      c = detail::compose(f, (r >> 32) & 1, static_cast<uint32_t>(ec), static_cast<uint32_t>(s >> 24));
      return;
    }
  }
}

}  // namespace halfway::hw
