"""halfway.add/sub/mul/div/fma/sqrt on encodings.

1. fp16, round to nearest even, against numpy's float16 arithmetic: numpy computes in float32
   and rounds once, which is correctly rounded for + - * / and sqrt (24 >= 2*11 + 2), so it is
   an independent oracle, bit for bit, NaN payloads included (except when both operands are
   NaN: numpy's compiled add and mul may return either one; halfway returns the first, as x86).
2. Every op in several formats, all rounding directions, against the exact model (oracle.py):
   the exact result as a rational (for sqrt, a rational that compares like the root), rounded
   by the model; encodings and per-element flags must match.
3. The flags/counts plumbing, broadcasting and special cases.
"""

import math
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
import oracle  # noqa: E402
from oracle import Fmt, Fraction  # noqa: E402

import halfway  # noqa: E402

NP_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


def fp16_specials():
    """Zeros, subnormals, normals near the edges, infinities, quiet and signalling NaNs."""
    v = [0x0000, 0x0001, 0x0002, 0x03FF, 0x0400, 0x0401, 0x3BFF, 0x3C00, 0x3C01, 0x4000, 0x7BFE,
         0x7BFF, 0x7C00, 0x7C01, 0x7D00, 0x7E00, 0x7E01, 0x7FFF, 0x5BFF, 0x1400]
    v = v + [x | 0x8000 for x in v]
    return np.array(v, dtype=np.uint16)


class NumpyFp16(hwtest.unittest.TestCase):
    def pairs(self):
        rng = np.random.default_rng(21)
        a = rng.integers(0, 1 << 16, 1 << 20, dtype=np.uint32).astype(np.uint16)
        b = rng.integers(0, 1 << 16, 1 << 20, dtype=np.uint32).astype(np.uint16)
        # close magnitudes (cancellation), and every pair of special values
        b[::3] = (a[::3] & 0xFC00) | (b[::3] & 0x03FF)
        s = fp16_specials()
        sa, sb = np.meshgrid(s, s)
        return np.concatenate([a, sa.ravel()]), np.concatenate([b, sb.ravel()])

    def compare(self, name, got, want, a, b=None):
        nan_a = (a & 0x7FFF) > 0x7C00
        both_nan = nan_a & ((b & 0x7FFF) > 0x7C00) if b is not None else np.zeros_like(nan_a)
        got_nan = (got & 0x7FFF) > 0x7C00
        want_nan = (want & 0x7FFF) > 0x7C00
        self.assertTrue(np.array_equal(got_nan, want_nan), f"{name}: NaN results differ")
        ok = (got == want) | both_nan
        bad = np.flatnonzero(~ok)
        self.assertEqual(bad.size, 0, f"{name}: {bad.size} differ, first: a=0x{int(a[bad[0]]):04X}"
                         + (f" b=0x{int(b[bad[0]]):04X}" if b is not None else "") +
                         f" got 0x{int(got[bad[0]]):04X} want 0x{int(want[bad[0]]):04X}"
                         if bad.size else "")

    def test_binary_ops(self):
        a, b = self.pairs()
        for name, op in NP_OPS.items():
            with self.subTest(op=name), np.errstate(all="ignore"):
                want = op(a.view(np.float16), b.view(np.float16)).view(np.uint16)
                got, counts = getattr(halfway, name)(a, b, "fp16", counts=True)
                self.assertEqual(got.dtype, np.uint16)
                self.compare(name, got, want, a, b)
                if name == "div":
                    continue
                # fp16 sums, differences and products are exact in float64: the counts follow
                with np.errstate(all="ignore"):
                    ex = op(a.view(np.float16).astype(np.float64),
                            b.view(np.float16).astype(np.float64))
                    r = got.view(np.float16).astype(np.float64)
                fin = np.isfinite(ex)
                rnan = np.isnan(r)
                self.assertEqual(
                    counts.as_dict(),
                    {"total": a.size, "inexact": int(((r != ex) & fin & ~rnan).sum()),
                     "zero": int((r == 0).sum()), "flushed": int(((r == 0) & (ex != 0)).sum()),
                     "subnormal": int(((r != 0) & (np.abs(r) < 2.0**-14)).sum()),
                     "overflow": int((np.isinf(r) & fin).sum()), "nan": int(rnan.sum()),
                     "flags": counts.flags}, name)

    def test_sqrt_every_encoding(self):
        a = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
        with np.errstate(all="ignore"):
            want = np.sqrt(a.view(np.float16)).view(np.uint16)
        self.compare("sqrt", halfway.sqrt(a, "fp16"), want, a)

    def test_flags_path_equals_bulk_path(self):
        a, b = self.pairs()
        a, b = a[-(1 << 18):], b[-(1 << 18):]  # every special pair and 2^18 - 1600 random ones
        c = np.roll(a, 7)
        for name in ("add", "sub", "mul", "div", "fma"):
            fn = getattr(halfway, name)
            args = (a, b, c) if name == "fma" else (a, b)
            for mode in ("near_even", "min", "stochastic"):
                with self.subTest(op=name, mode=mode):
                    plain, counts = fn(*args, "fp16", mode, seed=3, counts=True)
                    r, fl, counts2 = fn(*args, "fp16", mode, seed=3, flags=True, counts=True)
                    self.assertTrue(np.array_equal(plain, r))
                    self.assertEqual(counts, counts2)
                    self.assertEqual(counts.flags, int(np.bitwise_or.reduce(fl)))
                    self.assertEqual(counts.total, a.size)
                    self.assertEqual(counts.inexact, int(((fl & halfway.INEXACT) != 0).sum()) -
                                     int((((fl & halfway.INEXACT) != 0) &
                                          ((r & 0x7FFF) > 0x7C00)).sum()))
                    self.assertEqual(counts.overflow, int(((fl & halfway.OVERFLOW) != 0).sum()))


def exact(op, x):
    """Exact result of op on operands (neg, Fraction) as (neg, Fraction), or None when the
    result is zero (its sign follows separate rules, tested by hand)."""
    vals = [(-m if n else m) for n, m in x]
    if op == "add":
        r = vals[0] + vals[1]
    elif op == "sub":
        r = vals[0] - vals[1]
    elif op == "mul":
        r = vals[0] * vals[1]
    elif op == "div":
        if vals[1] == 0:
            return None
        r = vals[0] / vals[1]
    elif op == "fma":
        r = vals[0] * vals[1] + vals[2]
    else:
        if vals[0] < 0:
            return None
        r = oracle.sqrt_fraction(vals[0])
    if r == 0:
        return None
    return r < 0, abs(r)


ORACLE_FORMATS = {
    "fp16": Fmt(5, 10, 15, "ieee", "inf"),
    "bf16": Fmt(8, 7, 127, "ieee", "inf"),
    "e4m3": Fmt(4, 3, 7, "fn", "nan"),
    "e5m2": Fmt(5, 2, 15, "ieee", "inf"),
    "e4m3fnuz": Fmt(4, 3, 8, "fnuz", "nan"),
    "e2m1": Fmt(2, 1, 1, "none", "saturate"),
    "e3m2": Fmt(3, 2, 3, "none", "saturate"),
    "e8m0": Fmt(8, 0, 127, "fn", "nan", signed=False, has_zero=False),
}
ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "fma": 3, "sqrt": 1}
_FINITE = {}


def finite_encodings(fmt):
    # The cache keeps the format object alive with its list: keyed by id() alone, a later
    # temporary format could reuse a collected one's id and get its encodings.
    entry = _FINITE.get(id(fmt))
    if entry is None or entry[0] is not fmt:
        entry = _FINITE[id(fmt)] = (fmt, [e for e in range(1 << fmt.nbits)
                                          if fmt.operand(e) is not None])
    return entry[1]


class AgainstOracle(hwtest.unittest.TestCase):
    def run_op(self, name, fmt, op, mode, n, daz=False, **kw):
        rng = random.Random(f"{name}{op}{mode}")
        finite = finite_encodings(fmt)
        rows, exacts = [], []
        while len(rows) < n:
            ops = [rng.choice(finite) for _ in range(ARITY[op])]
            if op in ("add", "sub") and rng.random() < 0.3:  # near cancellation
                ops[1] = ops[0] ^ rng.choice([0, 1, 2, fmt.sign_bit])
                if fmt.operand(ops[1]) is None:
                    continue
            ex = exact(op, [fmt.operand(e) for e in ops])
            if ex is not None:
                rows.append(ops)
                exacts.append(ex)
        dtype = np.uint8 if fmt.nbits <= 8 else np.uint16
        cols = [np.array([r[k] for r in rows], dtype=dtype) for k in range(ARITY[op])]
        seed = 99 if mode == "stochastic" else None
        got, fl = getattr(halfway, op)(*cols, name, mode, seed=seed, offset=5, flags=True, **kw)
        bad = []
        for i, (neg, mag) in enumerate(exacts):
            rnd = oracle.sr_bits(99, 5 + i) if mode == "stochastic" else 0
            want = fmt.round_exact(neg, mag, mode, rnd)
            if (int(got[i]), int(fl[i])) != want:
                bad.append(f"  {[hex(r) for r in rows[i]]}: got 0x{int(got[i]):X} "
                           f"{halfway.flag_names(int(fl[i]))}, want 0x{want[0]:X} "
                           f"{halfway.flag_names(want[1])}")
        self.assertFalse(bad, f"{name} {op} {mode} {kw}: {len(bad)} of {n} differ\n" +
                         "\n".join(bad[:8]))

    def test_all_ops_formats_and_modes(self):
        for name, fmt in ORACLE_FORMATS.items():
            for op in ARITY:
                for mode in oracle.MODES:
                    with self.subTest(fmt=name, op=op, mode=mode):
                        self.run_op(name, fmt, op, mode, 150)

    def test_flush_to_zero(self):
        # subnormals=False: subnormal operands read as zero, tiny results flushed to zero.
        fmt = Fmt(5, 10, 15, "ieee", "inf", ftz=True, daz=True)
        for op in ARITY:
            for mode in ("near_even", "minMag", "max"):
                with self.subTest(op=op, mode=mode):
                    self.run_op("fp16", fmt, op, mode, 300, subnormals=False)

    def test_saturate(self):
        fmt = Fmt(5, 2, 15, "ieee", "saturate")
        for op in ("add", "mul", "fma"):
            with self.subTest(op=op):
                self.run_op("e5m2", fmt, op, "near_even", 400, saturate=True)


class StochasticProbability(hwtest.unittest.TestCase):
    """Stochastic rounding goes up with probability (distance to the lower neighbour) /
    spacing, to 2^-32: for a result whose 32 fraction bits below the kept ones are T, up
    exactly when T + random >= 2^32. One value at 2^20 stream positions, compared with that
    rule: a division or root that kept fewer than 32 bits past the rounding point would
    differ at thousands of positions."""

    def check(self, op, operands, lo, T):
        n = 1 << 20
        seed = 0x5EED
        rnd = oracle.sr_bits_array(seed, 0, n)
        self.assertEqual([int(v) for v in rnd[:4]], [oracle.sr_bits(seed, i) for i in range(4)])
        args = [np.full(n, v, dtype=np.uint32) for v in operands]
        got = getattr(halfway, op)(*args, "fp32", "stochastic", seed=seed)
        want = np.where(rnd + np.uint64(T) >= np.uint64(1 << 32), lo + 1, lo).astype(np.uint32)
        self.assertEqual(int((got != want).sum()), 0)

    def test_division(self):
        # 1/3 = 0x3EAAAAAA + 2/3 ulp: T = floor(2/3 * 2^32)
        self.check("div", (0x3F800000, 0x40400000), 0x3EAAAAAA, 0xAAAAAAAA)

    def test_square_root(self):
        r = math.isqrt(2 << 400)  # sqrt(2) * 2^200
        lo = r >> (200 - 23)  # 24-bit significand of sqrt(2), truncated
        T = (r >> (200 - 23 - 32)) & 0xFFFFFFFF
        bits = int(np.float32(lo / 2**23).view(np.uint32))
        self.check("sqrt", (0x40000000,), bits, T)


class SpecialCases(hwtest.unittest.TestCase):
    def check(self, fn, args, fmt, want, want_flags, mode="near_even"):
        got, fl = fn(*args, fmt, mode, flags=True)
        self.assertEqual((hex(int(got)), halfway.flag_names(int(fl))),
                         (hex(want), halfway.flag_names(want_flags)), f"{fn.__name__}{args}")

    def test_ieee_special_values(self):
        I, N, X, U, Z = (halfway.INVALID, halfway.INEXACT, halfway.OVERFLOW, halfway.UNDERFLOW,
                         halfway.INFINITE)
        h = "fp16"
        self.check(halfway.sub, (0x7C00, 0x7C00), h, 0xFE00, I)  # inf - inf
        self.check(halfway.mul, (0x7C00, 0x0000), h, 0xFE00, I)  # inf * 0
        self.check(halfway.div, (0x0000, 0x0000), h, 0xFE00, I)  # 0 / 0
        self.check(halfway.div, (0x3C00, 0x8000), h, 0xFC00, Z)  # 1 / -0
        self.check(halfway.sqrt, (0xBC00,), h, 0xFE00, I)  # sqrt(-1)
        self.check(halfway.sqrt, (0x8000,), h, 0x8000, 0)  # sqrt(-0) = -0
        self.check(halfway.add, (0x3C00, 0xBC00), h, 0x0000, 0)  # 1 + -1 = +0
        self.check(halfway.add, (0x3C00, 0xBC00), h, 0x8000, 0, "min")  # ... -0 rounding down
        self.check(halfway.add, (0x8000, 0x8000), h, 0x8000, 0)  # -0 + -0 = -0
        self.check(halfway.add, (0x7BFF, 0x7BFF), h, 0x7C00, X | N)  # overflow
        self.check(halfway.add, (0x7BFF, 0x7BFF), h, 0x7BFF, X | N, "minMag")
        self.check(halfway.mul, (0x0001, 0x3800), h, 0x0000, U | N)  # 2^-24 / 2: tie to 0
        self.check(halfway.mul, (0x0001, 0x3800), h, 0x0001, U | N, "max")
        self.check(halfway.fma, (0x7C00, 0x0000, 0x7E00), h, 0xFE00, I)  # inf*0 + qNaN
        self.check(halfway.add, (0x7C01, 0x3C00), h, 0x7E01, I)  # sNaN quieted
        self.check(halfway.mul, (0x3C00, 0xFE05), h, 0xFE05, 0)  # NaN payload kept

    def test_bf16_spot_values(self):
        # 1 + 2^-8 is a tie in bf16: nearest even gives 1.0, ties away 1 + 2^-7.
        one = int(halfway.encode(np.float32(1.0), "bf16"))
        small = int(halfway.encode(np.float32(2.0**-8), "bf16"))
        self.assertEqual(int(halfway.add(one, small, "bf16")), 0x3F80)
        self.assertEqual(int(halfway.add(one, small, "bf16", "near_maxMag")), 0x3F81)
        self.assertEqual(int(halfway.add(one, small, "bf16", "odd")), 0x3F81)


class Broadcasting(hwtest.unittest.TestCase):
    def test_shapes(self):
        a = halfway.encode(np.float32([[1, 2, 3], [4, 5, 6]]), "fp16")
        one = int(halfway.encode(np.float32(1.0), "fp16"))
        r = halfway.add(a, one, "fp16")
        self.assertEqual(r.shape, (2, 3))
        self.assertEqual(halfway.decode(r, "fp16").tolist(), [[2, 3, 4], [5, 6, 7]])
        col = halfway.encode(np.float32([[10], [20]]), "fp16")
        self.assertEqual(halfway.decode(halfway.mul(a, col, "fp16"), "fp16").tolist(),
                         [[10, 20, 30], [80, 100, 120]])
        r, fl = halfway.fma(a, a, one, "fp16", flags=True)
        self.assertEqual(fl.shape, (2, 3))
        self.assertEqual(halfway.decode(r, "fp16").tolist(), [[2, 5, 10], [17, 26, 37]])
        # a non-contiguous view
        self.assertEqual(halfway.decode(halfway.sqrt(a[:, ::2], "fp16"), "fp16").tolist(),
                         [[1.0, float(np.float16(math.sqrt(3)))],
                          [2.0, float(np.float16(math.sqrt(6)))]])
        with self.assertRaisesRegex(ValueError, "could not be broadcast"):
            halfway.add(a, np.zeros(4, np.uint16), "fp16")

    def test_scalars(self):
        r = halfway.add(0x3C00, 0x3C00, "fp16")
        self.assertIsInstance(r, np.uint16)
        self.assertEqual(int(r), 0x4000)
        r, fl = halfway.div(np.uint8(0x38), np.uint8(0), "e4m3", flags=True)
        self.assertEqual(int(fl), halfway.INFINITE)


if __name__ == "__main__":
    hwtest.main()
