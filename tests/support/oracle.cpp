// The exact oracle: see oracle.hpp for the method. Nothing here includes softfloat.hpp.
#include "oracle.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace oracle {

using boost::multiprecision::msb;
using halfway::Overflow;
using halfway::Specials;
namespace flag = halfway::flag;

namespace {

[[noreturn]] void broken(const char* what) { throw std::logic_error(std::string("oracle: ") + what); }

uint64_t low_mask(int bits) { return bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1; }

int msb64(uint64_t x) { return 63 - __builtin_clzll(x); }

uint64_t with_sign(const Fmt& f, bool neg, uint64_t mag) {
  return (neg && f.is_signed) ? (mag | f.sign_bit()) : mag;
}

/// ±0 as the format can hold it: fnuz and unsigned formats have only +0.
uint64_t signed_zero(const Fmt& f, bool neg) {
  const bool has_neg_zero = f.is_signed && f.specials != Specials::fnuz;
  return (neg && has_neg_zero) ? f.sign_bit() : 0;
}

uint64_t inf_field(const Fmt& f) { return low_mask(f.exp_bits) << f.frac_bits; }

/// The NaN an invalid operation delivers (library convention, see docs/conformance.md).
uint64_t default_nan(const Fmt& f) {
  switch (f.specials) {
    case Specials::ieee: return f.sign_bit() | inf_field(f) | (uint64_t(1) << (f.frac_bits - 1));
    case Specials::fn: return f.mag_mask();
    case Specials::fnuz: return uint64_t(1) << (f.nbits() - 1);
    default: return f.max_enc;
  }
}

/// The NaN-with-sign used where overflow or an infinity becomes NaN in a format without inf.
uint64_t nan_with_sign(const Fmt& f, bool neg) {
  if (f.specials == Specials::fnuz) return uint64_t(1) << (f.nbits() - 1);
  return with_sign(f, neg, f.mag_mask());
}

/// Magnitude encoding of M·2^q with an exponent field that may lie beyond the format (fields
/// above the largest, or below 0 on the unbounded grid). M·2^q must be on the format's grid.
int64_t encode_unbounded(const Fmt& f, uint64_t M, int q, bool allow_subnormal) {
  if (M == 0) return 0;
  const int m = f.frac_bits;
  const int k = msb64(M) + q;
  if (allow_subnormal && f.has_zero && k < f.emin()) {
    const int sh = q - (f.emin() - m);
    if (sh < 0) broken("subnormal candidate off the grid");
    return int64_t(M << sh);
  }
  const int sh = m - msb64(M);
  uint64_t norm;
  if (sh >= 0) {
    norm = M << sh;
  } else {
    if (M & low_mask(-sh)) broken("normal candidate off the grid");
    norm = M >> -sh;
  }
  const int64_t field = int64_t(k) + f.bias;
  return field * (int64_t(1) << m) + int64_t(norm - (uint64_t(1) << m));
}

/// floor(log2 |v|) by comparison with powers of two.
int ilog2_rational(const cpp_int& num, const cpp_int& den, int e) {
  const int k0 = int(msb(num)) - int(msb(den)) + e;
  const int sh = e - k0;
  const bool ge = sh >= 0 ? (num << sh) >= den : num >= (den << -sh);
  return ge ? k0 : k0 - 1;
}

int ilog2(const Exact& x) {
  const int kx = ilog2_rational(x.num, x.den, x.e);
  if (!x.is_sqrt) return kx;
  return kx >> 1;  // floor(kx / 2): 2^kx <= X < 2^(kx+1)  =>  floor(log2 sqrt X) = floor(kx/2)
}

uint64_t to_u64(const cpp_int& v) {
  if (v < 0 || (v != 0 && msb(v) >= 64)) broken("floor does not fit 64 bits");
  return static_cast<uint64_t>(v);
}

int cmp(const cpp_int& a, const cpp_int& b) { return a < b ? -1 : (a == b ? 0 : 1); }

/// floor(|v|·2^s), the remainder against 1/2, and the first 32 bits of the fraction.
Scaled scaled(const Exact& x, int s) {
  Scaled r;
  if (!x.is_sqrt) {
    const int sh = x.e + s;
    if (x.den == 1) {
      if (sh >= 0) {
        r.m = to_u64(x.num << sh);
        return r;
      }
      const unsigned n = unsigned(-sh);
      const cpp_int q = x.num >> n;
      const cpp_int rem = x.num - (q << n);
      r.m = to_u64(q);
      r.exact = rem == 0;
      if (!r.exact) {
        r.half = cmp(rem << 1, cpp_int(1) << n);
        r.t = static_cast<uint32_t>((rem << 32) >> n);
      }
      return r;
    }
    const cpp_int N = sh >= 0 ? cpp_int(x.num << sh) : x.num;
    const cpp_int D = sh >= 0 ? x.den : cpp_int(x.den << -sh);
    cpp_int q, rem;
    boost::multiprecision::divide_qr(N, D, q, rem);
    r.m = to_u64(q);
    r.exact = rem == 0;
    if (!r.exact) {
      r.half = cmp(rem << 1, D);
      r.t = static_cast<uint32_t>((rem << 32) / D);
    }
    return r;
  }
  // sqrt(X)·2^s = sqrt(X·4^s) with X·4^s = N / D.
  const int sh = x.e + 2 * s;
  const cpp_int N = sh >= 0 ? cpp_int(x.num << sh) : x.num;
  const cpp_int D = sh >= 0 ? x.den : cpp_int(x.den << -sh);
  cpp_int q, rem;
  boost::multiprecision::divide_qr(N, D, q, rem);
  const cpp_int M = boost::multiprecision::sqrt(q);  // floor(sqrt(floor(Y))) = floor(sqrt(Y))
  r.m = to_u64(M);
  r.exact = rem == 0 && M * M == q;
  if (!r.exact) {
    // sqrt(Y) against M + 1/2, squared: 4·N against (2M+1)^2·D.
    const cpp_int two_m1 = 2 * M + 1;
    r.half = cmp(4 * N, two_m1 * two_m1 * D);
    const cpp_int hi = boost::multiprecision::sqrt(cpp_int((N << 64) / D));
    r.t = static_cast<uint32_t>(hi - (M << 32));
  }
  return r;
}

/// Whether to take the upper candidate. `lo_odd`: parity of the lower candidate's encoding (the
/// upper one's encoding is the next integer, so its parity is the opposite).
bool decide(Rounding r, bool neg, bool lo_odd, const Scaled& s, uint32_t rnd) {
  if (s.exact) return false;
  switch (r) {
    case Rounding::near_even: return s.half > 0 || (s.half == 0 && lo_odd);
    case Rounding::near_maxMag: return s.half >= 0;
    case Rounding::minMag: return false;
    case Rounding::min: return neg;
    case Rounding::max: return !neg;
    case Rounding::odd: return !lo_odd;
    case Rounding::stochastic: return uint64_t(s.t) + uint64_t(rnd) >= (uint64_t(1) << 32);
  }
  broken("unknown rounding");
}

Exact nan_of(const Decoded& n, bool any_snan) {
  Exact r;
  r.kind = Kind::nan;
  r.neg = n.neg;
  r.payload = n.payload;
  if (any_snan) r.flags |= flag::invalid;
  return r;
}

Exact invalid() {
  Exact r;
  r.kind = Kind::nan;
  r.default_nan = true;
  r.flags = flag::invalid;
  return r;
}

Exact inf_of(bool neg) {
  Exact r;
  r.kind = Kind::inf;
  r.neg = neg;
  return r;
}

Exact zero_of(bool neg) {
  Exact r;
  r.kind = Kind::zero;
  r.neg = neg;
  return r;
}

Exact zero_by_rounding() {
  Exact r;
  r.kind = Kind::zero;
  r.zero_sign_by_rounding = true;
  return r;
}

Exact finite_of(bool neg, cpp_int num, cpp_int den, int e) {
  Exact r;
  r.kind = Kind::finite;
  r.neg = neg;
  r.num = std::move(num);
  r.den = std::move(den);
  r.e = e;
  return r;
}

bool is_snan(const Decoded& d) { return d.kind == Kind::nan && d.signaling; }

/// Exact sum of two finite non-zero dyadic values (sig·2^exp each, with signs).
Exact sum(bool na, const cpp_int& a, int ea, bool nb, const cpp_int& b, int eb) {
  const int e0 = std::min(ea, eb);
  cpp_int A = a << (ea - e0), B = b << (eb - e0);
  if (na) A = -A;
  if (nb) B = -B;
  cpp_int S = A + B;
  if (S == 0) return zero_by_rounding();
  const bool neg = S < 0;
  if (neg) S = -S;
  return finite_of(neg, std::move(S), 1, e0);
}

}  // namespace

// -------------------------------------------------------------------------------------------
// Formats

Fmt::Fmt(const halfway::Format& f)
    : exp_bits(f.exp_bits), frac_bits(f.frac_bits), bias(f.bias), specials(f.specials),
      overflow(f.overflow), ftz(f.ftz), daz(f.daz), is_signed(f.is_signed), has_zero(f.has_zero) {
  find_max();
}

Fmt::Fmt(int e, int m) : exp_bits(e), frac_bits(m), bias((1 << (e - 1)) - 1) { find_max(); }

void Fmt::find_max() {
  // Scan down from the all-ones magnitude until the definition says "finite"; a binade whose
  // smallest encoding is not finite either (IEEE's all-ones exponent) is skipped whole.
  uint64_t enc = mag_mask();
  while (decode(*this, enc).kind != Kind::finite) {
    const uint64_t binade_start = (enc >> frac_bits) << frac_bits;
    if (enc == 0) broken("format without a finite value");
    enc = (binade_start != enc && decode(*this, binade_start).kind != Kind::finite && binade_start > 0)
              ? binade_start - 1
              : enc - 1;
  }
  max_enc = enc;
}

Decoded decode(const Fmt& f, uint64_t enc) {
  Decoded d;
  const int m = f.frac_bits;
  enc &= low_mask(f.nbits());
  const uint64_t mag = enc & f.mag_mask();
  d.neg = f.is_signed && (enc >> (f.exp_bits + m)) & 1;
  const uint64_t field = mag >> m;
  const uint64_t frac = mag & low_mask(m);
  switch (f.specials) {
    case Specials::ieee:
      if (field == low_mask(f.exp_bits)) {
        if (frac == 0) {
          d.kind = Kind::inf;
        } else {
          d.kind = Kind::nan;
          d.signaling = ((frac >> (m - 1)) & 1) == 0;
          d.payload = m >= 2 ? (frac & low_mask(m - 1)) << (64 - (m - 1)) : 0;
        }
        return d;
      }
      break;
    case Specials::fn:
      if (mag == f.mag_mask()) {
        d.kind = Kind::nan;
        return d;
      }
      break;
    case Specials::fnuz:
      if (enc == f.sign_bit()) {  // "−0" is the single NaN
        d.kind = Kind::nan;
        d.neg = false;
        return d;
      }
      break;
    case Specials::none: break;
  }
  if (f.has_zero && field == 0) {
    if (frac == 0 || f.daz) {
      d.kind = Kind::zero;
      return d;
    }
    d.kind = Kind::finite;
    d.sig = frac;
    d.exp = f.emin() - m;
    return d;
  }
  d.kind = Kind::finite;
  d.sig = (uint64_t(1) << m) | frac;
  d.exp = int(field) - f.bias - m;
  return d;
}

// -------------------------------------------------------------------------------------------
// Exact operations

Exact value_of(const Decoded& a) {
  switch (a.kind) {
    case Kind::nan: return nan_of(a, a.signaling);
    case Kind::inf: return inf_of(a.neg);
    case Kind::zero: return zero_of(a.neg);
    default: return finite_of(a.neg, a.sig, 1, a.exp);
  }
}

Exact add(const Decoded& a, const Decoded& b) {
  if (a.kind == Kind::nan || b.kind == Kind::nan)
    return nan_of(a.kind == Kind::nan ? a : b, is_snan(a) || is_snan(b));
  if (a.kind == Kind::inf || b.kind == Kind::inf) {
    if (a.kind == Kind::inf && b.kind == Kind::inf && a.neg != b.neg) return invalid();
    return inf_of(a.kind == Kind::inf ? a.neg : b.neg);
  }
  if (a.kind == Kind::zero && b.kind == Kind::zero)
    return a.neg == b.neg ? zero_of(a.neg) : zero_by_rounding();
  if (a.kind == Kind::zero) return value_of(b);
  if (b.kind == Kind::zero) return value_of(a);
  return sum(a.neg, a.sig, a.exp, b.neg, b.sig, b.exp);
}

Exact sub(const Decoded& a, const Decoded& b) {
  if (a.kind == Kind::nan || b.kind == Kind::nan) return add(a, b);  // NaN keeps its sign
  Decoded nb = b;
  nb.neg = !nb.neg;
  return add(a, nb);
}

Exact mul(const Decoded& a, const Decoded& b) {
  if (a.kind == Kind::nan || b.kind == Kind::nan)
    return nan_of(a.kind == Kind::nan ? a : b, is_snan(a) || is_snan(b));
  const bool neg = a.neg != b.neg;
  if (a.kind == Kind::inf || b.kind == Kind::inf) {
    if (a.kind == Kind::zero || b.kind == Kind::zero) return invalid();
    return inf_of(neg);
  }
  if (a.kind == Kind::zero || b.kind == Kind::zero) return zero_of(neg);
  return finite_of(neg, cpp_int(a.sig) * b.sig, 1, a.exp + b.exp);
}

Exact div(const Decoded& a, const Decoded& b) {
  if (a.kind == Kind::nan || b.kind == Kind::nan)
    return nan_of(a.kind == Kind::nan ? a : b, is_snan(a) || is_snan(b));
  const bool neg = a.neg != b.neg;
  if (a.kind == Kind::inf) return b.kind == Kind::inf ? invalid() : inf_of(neg);
  if (b.kind == Kind::inf) return zero_of(neg);
  if (b.kind == Kind::zero) {
    if (a.kind == Kind::zero) return invalid();
    Exact r = inf_of(neg);
    r.from_division_by_zero = true;
    r.flags = flag::infinite;
    return r;
  }
  if (a.kind == Kind::zero) return zero_of(neg);
  return finite_of(neg, a.sig, b.sig, a.exp - b.exp);
}

Exact sqrt(const Decoded& a) {
  if (a.kind == Kind::nan) return nan_of(a, a.signaling);
  if (a.kind == Kind::zero) return zero_of(a.neg);  // sqrt(−0) = −0
  if (a.neg) return invalid();
  if (a.kind == Kind::inf) return inf_of(false);
  Exact r = finite_of(false, a.sig, 1, a.exp);
  r.is_sqrt = true;
  return r;
}

Exact fma(const Decoded& a, const Decoded& b, const Decoded& c) {
  const bool any_snan = is_snan(a) || is_snan(b) || is_snan(c);
  if (a.kind == Kind::nan || b.kind == Kind::nan)
    return nan_of(a.kind == Kind::nan ? a : b, any_snan);
  const bool pneg = a.neg != b.neg;
  if (a.kind == Kind::inf || b.kind == Kind::inf) {
    // 0·∞ is invalid whatever c is (IEEE leaves a quiet-NaN c implementation-defined; this
    // signals, as SoftFloat does).
    if (a.kind == Kind::zero || b.kind == Kind::zero) return invalid();
    if (c.kind == Kind::nan) return nan_of(c, any_snan);
    if (c.kind == Kind::inf && c.neg != pneg) return invalid();
    return inf_of(pneg);
  }
  if (c.kind == Kind::nan) return nan_of(c, any_snan);
  if (c.kind == Kind::inf) return inf_of(c.neg);
  if (a.kind == Kind::zero || b.kind == Kind::zero) {
    if (c.kind == Kind::zero) return pneg == c.neg ? zero_of(pneg) : zero_by_rounding();
    return value_of(c);
  }
  const cpp_int p = cpp_int(a.sig) * b.sig;
  if (c.kind == Kind::zero) return finite_of(pneg, p, 1, a.exp + b.exp);
  return sum(pneg, p, a.exp + b.exp, c.neg, c.sig, c.exp);
}

// -------------------------------------------------------------------------------------------
// Rounding into a format

Rounder::Rounder(const Fmt& f, const Exact& x) : f_(f), x_(x) {
  if (x.kind != Kind::finite) return;
  const int m = f.frac_bits;
  const int emin = f.emin();
  k_ = ilog2(x);
  tiny_before_ = k_ < emin;
  if (!f.has_zero && k_ < emin) {
    clamp_ = true;
    return;
  }
  qb_ = (f.has_zero ? std::max(k_, emin) : k_) - m;
  b_ = scaled(x, -qb_);
  if (b_.m >= (uint64_t(2) << m)) broken("binade search failed");
  lo_enc_ = encode_unbounded(f, b_.m, qb_, true);
  if (k_ < emin) {
    u_ = scaled(x, m - k_);
    if (u_.m < (uint64_t(1) << m) || u_.m >= (uint64_t(2) << m)) broken("unbounded binade");
    // Parity on the unbounded grid: the last significand digit (IEEE's "even least significant
    // digit"). With m = 0 every significand is the single digit 1, so every value counts as odd
    // there (ties round up, round-to-odd truncates); on the format's own grid the encoding's
    // last bit decides instead (see docs/conformance.md, "formats without fraction bits").
    lo_u_odd_ = u_.m & 1;
  }
}

Result Rounder::round(Rounding r, Tininess tininess, uint32_t rnd) const {
  const Fmt& f = f_;
  const Exact& x = x_;
  Result res;
  res.flags = x.flags;
  switch (x.kind) {
    case Kind::nan:
      if (x.default_nan) {
        res.enc = default_nan(f);
        res.flags |= flag::invalid;
        return res;
      }
      switch (f.specials) {
        case Specials::ieee: {
          const int m = f.frac_bits;
          const uint64_t quiet = uint64_t(1) << (m - 1);
          const uint64_t pay = m >= 2 ? x.payload >> (64 - (m - 1)) : 0;
          res.enc = with_sign(f, x.neg, inf_field(f) | quiet | pay);
          return res;
        }
        case Specials::fn: res.enc = with_sign(f, x.neg, f.mag_mask()); return res;
        case Specials::fnuz: res.enc = uint64_t(1) << (f.nbits() - 1); return res;
        case Specials::none:
          res.enc = f.max_enc;  // no NaN to deliver: +max, invalid
          res.flags |= flag::invalid;
          return res;
      }
      broken("specials");
    case Kind::inf:
      if (x.neg && !f.is_signed) {
        res.enc = default_nan(f);
        res.flags |= flag::invalid;
        return res;
      }
      if (f.specials == Specials::ieee && f.overflow != Overflow::saturate) {
        res.enc = with_sign(f, x.neg, inf_field(f));
        return res;
      }
      // Saturating formats never deliver infinity (__NV_SATFINITE), like formats without it.
      if (x.from_division_by_zero) {
        // Division by zero in a format without infinity: its overflow value, no invalid.
        res.enc = f.overflow == Overflow::nan ? nan_with_sign(f, x.neg)
                                              : with_sign(f, x.neg, f.max_enc);
        return res;
      }
      // An infinite operand has no representation: invalid, and ±max or NaN.
      res.flags |= flag::invalid;
      res.enc = (f.overflow == Overflow::saturate || f.specials == Specials::none)
                    ? with_sign(f, x.neg, f.max_enc)
                    : nan_with_sign(f, x.neg);
      return res;
    case Kind::zero: {
      if (!f.has_zero) {
        res.enc = 0;
        res.flags |= flag::underflow | flag::inexact;
        return res;
      }
      const bool neg = x.zero_sign_by_rounding ? r == Rounding::min : x.neg;
      res.enc = signed_zero(f, neg);
      return res;
    }
    case Kind::finite: break;
  }
  if (x.neg && !f.is_signed) {
    res.enc = default_nan(f);
    res.flags |= flag::invalid;
    return res;
  }
  if (clamp_) {
    res.enc = 0;
    res.flags |= flag::underflow | flag::inexact;
    return res;
  }
  const int m = f.frac_bits;
  const int emin = f.emin();
  const bool up = decide(r, x.neg, lo_enc_ & 1, b_, rnd);
  const uint64_t enc = uint64_t(lo_enc_) + up;
  const bool inexact = !b_.exact;
  if (enc > f.max_enc) {
    // Only reachable from the normal range, where both grids coincide: the result rounded with
    // an unbounded exponent range exceeds the largest finite value.
    res.flags |= flag::overflow | flag::inexact;
    const bool to_inf = r == Rounding::near_even || r == Rounding::near_maxMag ||
                        r == Rounding::stochastic || (r == Rounding::min && x.neg) ||
                        (r == Rounding::max && !x.neg);
    if (!to_inf || f.overflow == Overflow::saturate)
      res.enc = with_sign(f, x.neg, f.max_enc);
    else if (f.overflow == Overflow::infinity)
      res.enc = with_sign(f, x.neg, inf_field(f));
    else
      res.enc = nan_with_sign(f, x.neg);
    return res;
  }
  bool tiny = false;
  if (k_ < emin) {
    if (tininess == Tininess::before_rounding) {
      tiny = true;
    } else {
      const uint64_t ru = u_.m + decide(r, x.neg, lo_u_odd_, u_, rnd);
      const int need = emin - k_ + m;  // ru·2^(k−m) >= 2^emin  <=>  ru >= 2^need
      tiny = need > 63 || ru < (uint64_t(1) << need);
    }
  }
  if (tiny && f.ftz) {
    res.enc = signed_zero(f, x.neg);
    res.flags |= flag::underflow | flag::inexact;
    return res;
  }
  if (inexact) res.flags |= flag::inexact;
  if (tiny && inexact) res.flags |= flag::underflow;
  if (enc == 0) {
    res.enc = signed_zero(f, x.neg);
    return res;
  }
  // Self-check: the chosen encoding decodes to the chosen grid value.
  const Decoded d = decode(f, enc);
  const uint64_t chosen = b_.m + up;
  if (d.kind != Kind::finite ||
      (d.exp >= qb_ ? (d.sig << (d.exp - qb_)) != chosen : (chosen << (qb_ - d.exp)) != d.sig))
    broken("encoding does not decode to the rounded value");
  res.enc = with_sign(f, x.neg, enc);
  return res;
}

Result deliver(const Fmt& f, const Exact& x, Rounding r, Tininess t, uint32_t rnd) {
  return Rounder(f, x).round(r, t, rnd);
}

Result round_to_int(const Fmt& f, uint64_t enc, Rounding r, bool exact, uint32_t rnd) {
  const Decoded a = decode(f, enc);
  if (a.kind != Kind::finite) return deliver(f, value_of(a), r, Tininess::after_rounding, rnd);
  const Exact x = finite_of(a.neg, a.sig, 1, a.exp);
  if (a.exp >= 0) return deliver(f, x, r, Tininess::after_rounding, rnd);  // already an integer
  const Scaled s = scaled(x, 0);  // integers: the grid of spacing 1
  const uint64_t n = s.m + decide(r, a.neg, s.m & 1, s, rnd);
  uint8_t flags = (exact && !s.exact) ? flag::inexact : 0;
  const Exact integer = n == 0 ? zero_of(a.neg) : finite_of(a.neg, n, 1, 0);
  Result res = deliver(f, integer, r, Tininess::after_rounding, rnd);
  res.flags |= flags;
  return res;
}

// -------------------------------------------------------------------------------------------
// Comparisons, min/max

Compare compare(const Fmt& f, uint64_t a_enc, uint64_t b_enc) {
  const Decoded a = decode(f, a_enc), b = decode(f, b_enc);
  Compare c;
  c.any_snan = is_snan(a) || is_snan(b);
  if (a.kind == Kind::nan || b.kind == Kind::nan) {
    c.unordered = true;
    return c;
  }
  auto rank = [](const Decoded& d) { return d.kind == Kind::inf ? (d.neg ? -2 : 2) : 0; };
  if (a.kind == Kind::inf || b.kind == Kind::inf) {
    const int ra = rank(a), rb = rank(b);
    if (ra != 0 && rb != 0) {
      c.order = ra < rb ? -1 : ra > rb ? 1 : 0;
    } else {
      c.order = ra != 0 ? (ra < 0 ? -1 : 1) : (rb < 0 ? 1 : -1);
    }
    return c;
  }
  const Exact d = sum(a.neg, a.kind == Kind::zero ? cpp_int(0) : cpp_int(a.sig), a.exp, !b.neg,
                      b.kind == Kind::zero ? cpp_int(0) : cpp_int(b.sig), b.exp);
  c.order = d.kind == Kind::zero ? 0 : (d.neg ? -1 : 1);
  return c;
}

bool minmax_ok(const Fmt& f, uint64_t a_enc, uint64_t b_enc, bool want_max, bool number,
               uint64_t got, uint8_t got_flags, std::string* why) {
  const uint64_t mask = low_mask(f.nbits());
  a_enc &= mask;
  b_enc &= mask;
  const Decoded a = decode(f, a_enc), b = decode(f, b_enc);
  const bool an = a.kind == Kind::nan, bn = b.kind == Kind::nan;
  const uint8_t want_flags = (is_snan(a) || is_snan(b)) ? flag::invalid : 0;
  if (got_flags != want_flags) {
    *why = "flags";
    return false;
  }
  if (an || bn) {
    uint64_t want;
    if (number && !(an && bn)) {
      want = an ? b_enc : a_enc;  // minimumNumber/maximumNumber: the number operand
    } else {
      Exact n = nan_of(an ? a : b, false);
      want = deliver(f, n, Rounding::near_even, Tininess::after_rounding, 0).enc;
    }
    if (got != want) *why = "NaN operand rule";
    return got == want;
  }
  const Compare c = compare(f, a_enc, b_enc);
  int order = c.order;
  // −0 < +0 (IEEE 754-2019 minimum/maximum); daz inputs count as zeros of their sign.
  if (order == 0 && a.kind == Kind::zero && b.kind == Kind::zero) order = a.neg == b.neg ? 0 : (a.neg ? -1 : 1);
  if (order == 0) {
    if (got != a_enc && got != b_enc) *why = "not an operand";
    return got == a_enc || got == b_enc;
  }
  const bool pick_a = want_max ? order > 0 : order < 0;
  const uint64_t want = pick_a ? a_enc : b_enc;
  if (got != want) *why = "wrong operand";
  return got == want;
}

// -------------------------------------------------------------------------------------------
// Helpers

std::string show(const Fmt& f, uint64_t enc) {
  std::string s;
  const int total = f.nbits();
  for (int i = total - 1; i >= 0; --i) {
    s += ((enc >> i) & 1) ? '1' : '0';
    if ((f.is_signed && i == total - 1) || i == f.frac_bits) s += ' ';
  }
  return s;
}

double to_double(const Fmt& f, uint64_t enc) {
  const Decoded d = decode(f, enc);
  switch (d.kind) {
    case Kind::zero: return d.neg ? -0.0 : 0.0;
    case Kind::inf: return d.neg ? -HUGE_VAL : HUGE_VAL;
    case Kind::nan: return std::nan("");
    default: return std::ldexp(d.neg ? -double(d.sig) : double(d.sig), d.exp);
  }
}

uint64_t encode_exact(const Fmt& f, bool neg, uint64_t sig, int exp) {
  const Exact x = finite_of(neg, sig, 1, exp);
  const Result r = deliver(f, x, Rounding::near_even, Tininess::after_rounding, 0);
  if (r.flags != 0) broken("encode_exact: value not representable");
  return r.enc;
}

}  // namespace oracle

namespace oracle {

bool power_of_two(const Fmt& f, int k, uint64_t* enc) {
  const int m = f.frac_bits;
  if (f.has_zero && k < f.emin()) {
    if (k < f.emin() - m) return false;
    *enc = uint64_t(1) << (k - (f.emin() - m));
    return true;
  }
  if (k < f.emin()) return false;
  const int64_t field = int64_t(k) + f.bias;
  const uint64_t e = uint64_t(field) << m;
  if (e > f.max_enc) return false;
  *enc = e;
  return true;
}

std::vector<uint64_t> boundary_encodings(const Fmt& f) {
  std::vector<uint64_t> mags;
  const int m = f.frac_bits;
  auto add = [&](int64_t v) {
    if (v >= 0 && uint64_t(v) <= f.mag_mask()) mags.push_back(uint64_t(v));
  };
  for (int i = 0; i <= 3; ++i) add(i);
  const int64_t min_normal = f.has_zero ? int64_t(1) << m : 0;
  for (int d = -3; d <= 3; ++d) add(min_normal + d);
  const Decoded mx = decode(f, f.max_enc);
  const int emax = msb64(mx.sig) + mx.exp;
  for (int k = f.emin() - m - 1; k <= emax + 1; ++k) {
    uint64_t e;
    if (power_of_two(f, k, &e)) {
      add(int64_t(e) - 1);
      add(int64_t(e));
      add(int64_t(e) + 1);
    }
  }
  for (int64_t v = int64_t(f.max_enc) - 3; v <= int64_t(f.max_enc) + 2; ++v) add(v);
  // Everything above max: infinity and NaNs (quiet and signalling, with and without payload).
  if (f.specials == halfway::Specials::ieee) {
    const uint64_t inf = low_mask(f.exp_bits) << m;
    add(int64_t(inf));
    add(int64_t(inf | 1));
    add(int64_t(inf | (uint64_t(1) << (m - 1))));
    add(int64_t(inf | (uint64_t(1) << (m - 1)) | 1));
    add(int64_t(f.mag_mask()));
    if (m >= 2) add(int64_t(inf | (uint64_t(1) << (m - 2))));
  } else {
    for (uint64_t v = f.max_enc + 1; v <= f.mag_mask(); ++v) add(int64_t(v));
  }
  std::vector<uint64_t> out;
  for (uint64_t v : mags) {
    out.push_back(v);
    if (f.is_signed) out.push_back(v | f.sign_bit());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<double> boundary_values(const Fmt& f) {
  std::vector<double> v;
  auto near = [&](double x) {
    v.push_back(x);
    v.push_back(std::nextafter(x, 0.0));
    v.push_back(std::nextafter(x, HUGE_VAL));
  };
  std::vector<uint64_t> encs;
  if (f.nbits() <= 8) {
    for (uint64_t e = 0; e <= f.max_enc; ++e) encs.push_back(e);
  } else {
    for (uint64_t e : boundary_encodings(f))
      if (!(e & f.sign_bit()) && e <= f.max_enc) encs.push_back(e);
  }
  for (uint64_t e : encs) {
    const double x = to_double(f, e);
    near(x);
    if (e < f.max_enc) near((x + to_double(f, e + 1)) / 2);  // the tie between neighbours
  }
  // Overflow: the next value on the grid of an unbounded exponent, and the tie before it.
  const Decoded mx = decode(f, f.max_enc);
  near(std::ldexp(double(mx.sig) + 0.5, mx.exp));
  near(std::ldexp(double(mx.sig) + 1, mx.exp));
  near(std::ldexp(double(mx.sig) + 1.5, mx.exp));
  near(std::ldexp(double(mx.sig) * 4, mx.exp));
  // Below the smallest value.
  const double tiny = f.has_zero ? to_double(f, 1) : to_double(f, 0);
  for (double s : {0.125, 0.25, 0.5, 0.75, 1.5}) near(tiny * s);
  near(1e300);
  near(std::ldexp(1.0, -1074));
  near(std::ldexp(1.0, -1022));
  near(1.0);
  v.push_back(0.0);
  v.push_back(HUGE_VAL);
  v.push_back(std::nan(""));
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  return v;
}

}  // namespace oracle
