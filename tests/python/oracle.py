"""An exact model of rounding into a floating-point format, written in plain Python from the
format tables (docs: numerics reference, section 1) and the semantics the project decided. It
shares no code with halfway: formats are given by their fields, values are decoded with
math.ldexp, and rounding works on exact rationals (fractions.Fraction) against the sorted
table of every finite value of the format, so a rounding decision is a comparison of rationals.

Encodings and flags are what halfway returns; flag bits as in SoftFloat.
"""

import bisect
import math
import struct
from fractions import Fraction

INEXACT, UNDERFLOW, OVERFLOW, INFINITE, INVALID = 0x01, 0x02, 0x04, 0x08, 0x10
HALF = Fraction(1, 2)
MODES = ("near_even", "near_maxMag", "minMag", "min", "max", "odd", "stochastic")

M32 = 0xFFFFFFFF


PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)


def philox4x32_10(ctr, key):
    """Philox4x32-10 (Salmon et al. 2011) of the counter words (x, y, z, w), x least
    significant, under the 64-bit key; plain Python integers."""
    x, y, z, w = ctr
    k0, k1 = key & M32, key >> 32
    for _ in range(10):
        p0, p1 = PHILOX_M[0] * x, PHILOX_M[1] * z
        x, y, z, w = (p1 >> 32) ^ y ^ k0, p1 & M32, (p0 >> 32) ^ w ^ k1, p0 & M32
        k0, k1 = (k0 + PHILOX_W[0]) & M32, (k1 + PHILOX_W[1]) & M32
    return x, y, z, w


def sr_bits(seed, index, subsequence=0):
    """The random bits of stochastic rounding number `index` of stream (seed, subsequence), as
    env.hpp specifies them: cuRAND's curand() after curand_init(seed, subsequence, index) for
    Philox4x32-10, i.e. word index mod 4 of the counter subsequence*2^64 + index//4."""
    c = index >> 2
    ctr = (c & M32, c >> 32, subsequence & M32, subsequence >> 32)
    return philox4x32_10(ctr, seed)[index & 3]


def sr_bits_array(seed, first, n, subsequence=0):
    """sr_bits(seed, i) for i in first .. first + n - 1 (first + n <= 2^34), with numpy."""
    import numpy as np
    m = np.uint64(M32)
    c0, c1 = first >> 2, (first + n + 3) >> 2
    x = np.arange(c0, c1, dtype=np.uint64) & m
    y = np.zeros_like(x)
    z = np.full_like(x, subsequence & M32)
    w = np.full_like(x, subsequence >> 32)
    k0, k1 = seed & M32, seed >> 32
    for _ in range(10):
        p0 = x * np.uint64(PHILOX_M[0])
        p1 = z * np.uint64(PHILOX_M[1])
        x, y, z, w = ((p1 >> np.uint64(32)) ^ y ^ np.uint64(k0), p1 & m,
                      (p0 >> np.uint64(32)) ^ w ^ np.uint64(k1), p0 & m)
        k0, k1 = (k0 + PHILOX_W[0]) & M32, (k1 + PHILOX_W[1]) & M32
    words = np.stack([x, y, z, w], axis=1).reshape(-1)
    start = first - 4 * c0
    return words[start:start + n]


class Fmt:
    """specials: 'ieee' (exponent all ones: inf/NaN), 'fn' (only S.1..1.1..1 is NaN),
    'fnuz' (only 1.0..0 is NaN, no -0), 'none'. overflow: 'inf', 'saturate', 'nan'."""

    def __init__(self, e, m, bias, specials, overflow, signed=True, has_zero=True, ftz=False,
                 daz=False):
        self.e, self.m, self.bias = e, m, bias
        self.specials, self.overflow = specials, overflow
        self.signed, self.has_zero, self.ftz, self.daz = signed, has_zero, ftz, daz
        self.nbits = int(signed) + e + m
        self.sign_bit = (1 << (e + m)) if signed else 0
        self.mag_mask = (1 << (e + m)) - 1
        self.emin = 1 - bias if has_zero else -bias  # exponent of the smallest normal
        self.normal = Fraction(2) ** self.emin  # smallest normal value
        self.has_inf = specials == "ieee"
        self.has_nan = specials != "none"
        # Every finite non-negative value with its magnitude encoding, in increasing order.
        self.table = []
        self.daz = False  # the table holds the values of the encodings
        for mag in range(self.mag_mask + 1):
            v = self.decode(mag)
            if not math.isnan(v) and not math.isinf(v):
                self.table.append((Fraction(v), mag))
        self.values = [v for v, _ in self.table]
        self.fvalues = [float(v) for v in self.values]  # exact: for a fast bisection
        assert all(a < b for a, b in zip(self.values, self.values[1:])), "table not monotone"
        self.daz = daz
        self.max_val, self.max_mag = self.table[-1]
        # The value one step beyond max (as if the exponent range went on): where rounding
        # decides between max and overflow. Its encoding's parity breaks ties.
        self.beyond_val = self.max_val + Fraction(2) ** ((self.max_mag >> m) - bias - m)
        self.beyond_mag = self.max_mag + 1
        if specials == "ieee":
            self.default_nan = self.sign_bit | self.inf_mag() | (1 << (m - 1))
        elif specials == "fn":
            self.default_nan = self.mag_mask
        elif specials == "fnuz":
            self.default_nan = 1 << (self.nbits - 1)
        else:
            self.default_nan = self.max_mag

    def inf_mag(self):
        return ((1 << self.e) - 1) << self.m

    def decode(self, enc):
        """Value of an encoding as a Python float (exact: every value fits in binary64)."""
        e, m = self.e, self.m
        neg = bool(enc & self.sign_bit)
        mag = enc & self.mag_mask
        field, frac = mag >> m, mag & ((1 << m) - 1)
        s = -1.0 if neg else 1.0
        if self.specials == "ieee" and field == (1 << e) - 1:
            return s * math.inf if frac == 0 else math.nan
        if self.specials == "fn" and mag == self.mag_mask:
            return math.nan
        if self.specials == "fnuz" and enc == self.sign_bit:
            return math.nan
        if self.has_zero and field == 0:
            if self.daz:
                return s * 0.0
            return s * math.ldexp(frac, 1 - self.bias - m)
        return s * math.ldexp((1 << m) + frac, field - self.bias - m)

    # -- packing helpers ---------------------------------------------------------------------

    def _sign(self, neg, mag):
        return mag | self.sign_bit if (neg and self.signed) else mag

    def _zero(self, neg):
        if self.specials == "fnuz" or not self.signed:
            return 0
        return self._sign(neg, 0)

    def _inf_operand(self, neg):
        """What an infinite value becomes."""
        if neg and not self.signed:
            return self.default_nan, INVALID
        if self.has_inf and self.overflow != "saturate":  # saturating: never inf (SATFINITE)
            return self._sign(neg, self.inf_mag()), 0
        if self.overflow == "saturate" or not self.has_nan:
            return self._sign(neg, self.max_mag), INVALID
        if self.specials == "fnuz":
            return self.default_nan, INVALID
        return self._sign(neg, self.mag_mask), INVALID

    def _overflow_value(self, neg):
        if self.overflow == "inf" and self.has_inf:
            return self._sign(neg, self.inf_mag())
        if self.overflow in ("inf", "nan") and self.specials == "fnuz":
            return self.default_nan
        if self.overflow in ("inf", "nan") and self.has_nan:
            return self._sign(neg, self.mag_mask)
        return self._sign(neg, self.max_mag)

    def nan_from(self, neg, frac, frac_bits, signalling):
        """A NaN input with the given fraction field (frac_bits wide)."""
        flags = INVALID if signalling else 0
        if self.specials == "ieee":
            top = frac >> (frac_bits - self.m) if frac_bits >= self.m else frac << (self.m - frac_bits)
            return self._sign(neg, self.inf_mag() | (1 << (self.m - 1)) | top), flags
        if self.specials == "fn":
            return self._sign(neg, self.mag_mask), flags
        if self.specials == "fnuz":
            return self.default_nan, flags
        return self.default_nan, flags | INVALID  # no NaN: +max, invalid

    # -- rounding ----------------------------------------------------------------------------

    @staticmethod
    def _up(mode, neg, kept_odd, t, rnd):
        """Round the magnitude up? t in (0, 1): position between the two neighbours."""
        if mode == "near_even":
            return t > HALF or (t == HALF and kept_odd)
        if mode == "near_maxMag":
            return t >= HALF
        if mode == "minMag":
            return False
        if mode == "min":
            return neg
        if mode == "max":
            return not neg
        if mode == "odd":
            return not kept_odd  # the neighbour with an odd encoding
        if mode == "stochastic":
            return math.floor(t * 2**32) + rnd >= 2**32
        raise ValueError(mode)

    def _tiny(self, neg, mag, mode, rnd, tininess):
        if not self.has_zero or mag >= self.normal:
            return False
        if tininess == "before" or mag < self.normal / 2:
            return True
        # After rounding: round to p bits with an unbounded exponent; tiny unless that
        # reaches 2^emin.
        q = self.normal / 2 ** (self.m + 1)
        k = math.floor(mag / q)
        t = mag / q - k
        r = k + (1 if t and self._up(mode, neg, k & 1, t, rnd) else 0)
        return r * q < self.normal

    def round_exact(self, neg, mag, mode, rnd=0, tininess="after"):
        """(encoding, flags) of the exact value (-1)^neg * mag, mag a non-negative Fraction."""
        if mag == 0:
            if not self.has_zero:
                return 0, UNDERFLOW | INEXACT
            return self._zero(neg), 0
        if neg and not self.signed:
            return self.default_nan, INVALID
        if not self.has_zero and mag < self.values[0]:
            return 0, UNDERFLOW | INEXACT  # e8m0: no zero, clamps to its smallest value
        # index of the largest value <= mag: bisect on floats, then settle exactly
        i = bisect.bisect_right(self.fvalues, float(mag)) - 1
        while i > 0 and self.values[i] > mag:
            i -= 1
        while i + 1 < len(self.values) and self.values[i + 1] <= mag:
            i += 1
        lo, lo_mag = self.table[i]
        tiny = self._tiny(neg, mag, mode, rnd, tininess)
        if lo == mag:
            if tiny and self.ftz:
                return self._zero(neg), UNDERFLOW | INEXACT
            return self._sign(neg, lo_mag), 0
        hi, hi_mag = self.table[i + 1] if i + 1 < len(self.table) else (self.beyond_val,
                                                                         self.beyond_mag)
        t = (mag - lo) / (hi - lo)
        up = self._up(mode, neg, lo_mag & 1, t, rnd)
        if tiny and self.ftz:
            return self._zero(neg), UNDERFLOW | INEXACT
        flags = INEXACT | (UNDERFLOW if tiny else 0)
        if mag >= self.beyond_val or (up and hi_mag == self.beyond_mag):
            # beyond max even after truncation, or rounded up past it: overflow
            to_inf = mode in ("near_even", "near_maxMag", "stochastic") or \
                (mode == "min" and neg) or (mode == "max" and not neg)
            res = self._overflow_value(neg) if to_inf else self._sign(neg, self.max_mag)
            return res, OVERFLOW | INEXACT
        r_mag = hi_mag if up else lo_mag
        if r_mag == 0:
            return self._zero(neg), flags
        return self._sign(neg, r_mag), flags

    def round_bits(self, b, mode, rnd=0, tininess="after", bits=32):
        """(encoding, flags) of a binary32 (bits=32) or binary64 (bits=64) input given by its
        bit pattern (a Python float cannot carry a signalling NaN: converting one quiets it)."""
        if bits == 32:
            s, ex, frac, fb, emax = b >> 31, (b >> 23) & 0xFF, b & 0x7FFFFF, 23, 0xFF
            x = struct.unpack("<f", struct.pack("<I", b))[0]
        else:
            s, ex, frac, fb, emax = b >> 63, (b >> 52) & 0x7FF, b & ((1 << 52) - 1), 52, 0x7FF
            x = struct.unpack("<d", struct.pack("<Q", b))[0]
        neg = bool(s)
        if ex == emax:
            if frac == 0:
                return self._inf_operand(neg)
            quiet = (frac >> (fb - 1)) & 1
            return self.nan_from(neg, frac, fb, signalling=not quiet)
        return self.round_exact(neg, abs(Fraction(x)), mode, rnd, tininess)

    def operand(self, enc):
        """An encoding as (neg, exact magnitude) or None for NaN/inf (with daz applied)."""
        v = self.decode(enc)
        if math.isnan(v) or math.isinf(v):
            return None
        return math.copysign(1.0, v) < 0, abs(Fraction(v))


def sqrt_fraction(x, bits=400):
    """A rational that compares with every dyadic rational of denominator up to 2^bits exactly
    as sqrt(x) does (x a non-negative dyadic Fraction): the root itself when it is exact, else
    the middle of the 2^-bits-wide step that holds it (no such dyadic lies inside the step)."""
    p, q = x.numerator, x.denominator
    n = p * q * (1 << (2 * bits))  # sqrt(x) = sqrt(n) / (q * 2^bits)
    r = math.isqrt(n)
    scale = q * (1 << bits)
    if r * r == n:
        return Fraction(r, scale)
    return Fraction(2 * r + 1, 2 * scale)
