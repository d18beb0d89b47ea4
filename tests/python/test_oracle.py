"""halfway.encode/round/decode against an exact, independent model (oracle.py) in every preset
format and several custom ones, under all seven rounding directions (stochastic rounding
included: its random bits are recomputed from their specification), both tininess modes,
saturation and flush-to-zero, from float32 and from float64. Encodings and the per-element
IEEE flags must match exactly.

The formats' fields below are copied from the format table of the numerics reference, not
from halfway's parser, so a wrong preset would be caught too.
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

# name given to halfway -> the format's fields, written out independently
FORMATS = {
    "fp16": Fmt(5, 10, 15, "ieee", "inf"),
    "bf16": Fmt(8, 7, 127, "ieee", "inf"),
    "e4m3": Fmt(4, 3, 7, "fn", "nan"),
    "e5m2": Fmt(5, 2, 15, "ieee", "inf"),
    "e4m3fnuz": Fmt(4, 3, 8, "fnuz", "nan"),
    "e5m2fnuz": Fmt(5, 2, 16, "fnuz", "nan"),
    "e2m3": Fmt(2, 3, 1, "none", "saturate"),
    "e3m2": Fmt(3, 2, 3, "none", "saturate"),
    "e2m1": Fmt(2, 1, 1, "none", "saturate"),
    "e8m0": Fmt(8, 0, 127, "fn", "nan", signed=False, has_zero=False),
    "e4m3:sat": Fmt(4, 3, 7, "fn", "saturate"),
    "e5m2:sat": Fmt(5, 2, 15, "ieee", "saturate"),
    "fp16:ftz": Fmt(5, 10, 15, "ieee", "inf", ftz=True),
    "e5m10:bias=14": Fmt(5, 10, 14, "ieee", "inf"),
    "e3m4": Fmt(3, 4, 3, "ieee", "inf"),
    "e3m3:fnuz": Fmt(3, 3, 4, "fnuz", "nan"),
    "e2m2:nospecials": Fmt(2, 2, 1, "none", "saturate"),
    "e3m0": Fmt(3, 0, 3, "none", "saturate"),
}
TF32 = Fmt(8, 10, 127, "ieee", "inf")  # 2^19 encodings: decoded exhaustively, rounded sampled

SEED, OFFSET = 0x0123456789ABCDEF, 1000


def candidates(fmt, rng, sample=300):
    """Exact inputs (Python floats) around the values of `fmt`: the values, the ties between
    neighbours, just off the ties, quarter points, the overflow threshold, the tininess
    boundary, values below the smallest subnormal, zeros and infinities; both signs."""
    table = fmt.values + [fmt.beyond_val]
    idx = list(range(len(table) - 1))
    if len(idx) > sample:
        idx = sorted(set(idx[:20] + idx[-20:] + rng.sample(idx, sample)))
    xs = set()
    for i in idx:
        lo, hi = table[i], table[i + 1]
        step = hi - lo
        mid = lo + step / 2
        for v in (lo, mid, mid + step * Fraction(1, 2**30), mid - step * Fraction(1, 2**30),
                  lo + step / 4, lo + 3 * step / 4, lo + step * Fraction(1, 2**40)):
            xs.add(float(v))
    if fmt.has_zero and len(fmt.values) > 1:
        s = fmt.values[1]  # smallest positive value
        for v in (s / 2, s / 4, s / 2 * (1 + Fraction(1, 2**30)), s / 2 * (1 - Fraction(1, 2**30))):
            xs.add(float(v))
        normal = Fraction(2) ** fmt.emin
        q = Fraction(2) ** (fmt.emin - fmt.m - 2)  # after-rounding tininess boundary
        for v in (normal - q, normal - q * (1 - Fraction(1, 2**20)), normal - q * (1 + Fraction(1, 2**20))):
            if v > 0:
                xs.add(float(v))
    xs.update([0.0, 2.0**-149, 2.0**-1074, 3.4028234663852886e38, 1e300, math.inf, 1.0, 3.0])
    xs = sorted(xs)
    return xs + [-x for x in xs]


def nan_inputs():
    f32 = hwtest.f32(np.array([0x7FC00000, 0xFFC00001, 0x7F800001, 0xFFA5A5A5], dtype=np.uint32))
    f64 = np.array([0x7FF8000000000000, 0xFFF4000000000001, 0x7FF0000000000001],
                   dtype=np.uint64).view(np.float64)
    return f32, f64


class Oracle(hwtest.unittest.TestCase):
    def check(self, name, fmt, x, mode, tininess="after", **kw):
        bits = 64 if x.dtype == np.float64 else 32
        seed = SEED if mode == "stochastic" else None
        enc, fl = halfway.encode(x, name, mode, seed=seed, offset=OFFSET, tininess=tininess,
                                 flags=True, **kw)
        vals = halfway.round(x, name, mode, seed=seed, offset=OFFSET, tininess=tininess, **kw)
        self.assertEqual(enc.dtype, np.uint8 if fmt.nbits <= 8 else
                         np.uint16 if fmt.nbits <= 16 else np.uint32)
        bad = []
        xbits = x.view(np.uint64 if bits == 64 else np.uint32).tolist()
        for i, xi in enumerate(x.tolist()):
            rnd = oracle.sr_bits(SEED, OFFSET + i) if mode == "stochastic" else 0
            want_enc, want_fl = fmt.round_bits(xbits[i], mode, rnd, tininess, bits)
            want_val = fmt.decode(want_enc)
            got_val = float(vals[i])
            val_ok = (math.isnan(want_val) and math.isnan(got_val)) or (
                got_val == want_val and math.copysign(1, got_val) == math.copysign(1, want_val))
            if int(enc[i]) != want_enc or int(fl[i]) != want_fl or not val_ok:
                bad.append(f"  {xi!r}: got 0x{int(enc[i]):X} flags {halfway.flag_names(int(fl[i]))}"
                           f" value {got_val!r}; want 0x{want_enc:X} flags "
                           f"{halfway.flag_names(want_fl)} value {want_val!r}")
        self.assertFalse(bad, f"{name} {mode} tininess {tininess} {kw} from float{bits}: "
                              f"{len(bad)} of {x.size} differ\n" + "\n".join(bad[:8]))

    def run_format(self, name, fmt, modes=oracle.MODES, tininess=("after",), sample=300, **kw):
        rng = random.Random(name)
        xs = candidates(fmt, rng, sample)
        x64 = np.array(xs, dtype=np.float64)
        with np.errstate(over="ignore"):  # 1e300 becomes inf in float32, as intended
            x32 = np.unique(np.concatenate([
                x64.astype(np.float32),
                np.nextafter(x64.astype(np.float32), np.float32(np.inf)),
                np.nextafter(x64.astype(np.float32), np.float32(-np.inf))]))
        n32, n64 = nan_inputs()
        x32 = np.concatenate([x32, n32])
        x64 = np.concatenate([x64, n64])
        for mode in modes:
            for t in tininess:
                with self.subTest(fmt=name, mode=mode, tininess=t):
                    self.check(name, fmt, x32, mode, t, **kw)
                    self.check(name, fmt, x64, mode, t, **kw)

    def test_presets_and_custom_formats(self):
        for name, fmt in FORMATS.items():
            sample = 150 if fmt.nbits > 8 else 10**9
            self.run_format(name, fmt, sample=sample)

    def test_tininess_before_rounding(self):
        for name in ("fp16", "e4m3", "fp16:ftz", "e2m1"):
            self.run_format(name, FORMATS[name], tininess=("before",), sample=100)

    def test_keyword_overrides(self):
        # saturate=True and subnormals=False change the format as ':sat' and ':ftz:daz' do.
        self.run_format("e5m2", Fmt(5, 2, 15, "ieee", "saturate"), sample=10**9, saturate=True)
        self.run_format("e4m3", Fmt(4, 3, 7, "fn", "nan", ftz=True), sample=10**9,
                        subnormals=False)
        self.run_format("bf16", Fmt(8, 7, 127, "ieee", "saturate", ftz=True), sample=100,
                        modes=("near_even", "minMag", "max"), saturate=True, subnormals=False)

    def test_tf32(self):
        self.run_format("tf32", TF32, sample=200, modes=("near_even", "min", "stochastic"))

    def test_decode_every_encoding(self):
        formats = dict(FORMATS, tf32=TF32)
        for name, fmt in formats.items():
            with self.subTest(fmt=name):
                enc = np.arange(1 << fmt.nbits, dtype=np.uint32)
                got = halfway.decode(enc.astype(np.uint8 if fmt.nbits <= 8 else
                                                np.uint16 if fmt.nbits <= 16 else np.uint32), name)
                self.assertEqual(got.dtype, np.float32)
                want = np.array([fmt.decode(e) for e in range(1 << fmt.nbits)], dtype=np.float64)
                nan = np.isnan(want)
                self.assertTrue(np.array_equal(np.isnan(got), nan))
                same = (got.astype(np.float64) == want) & (np.signbit(got) == np.signbit(want))
                self.assertTrue((same | nan).all(), f"{name}: first bad encoding "
                                f"0x{int(np.flatnonzero(~(same | nan))[0]) if (~(same | nan)).any() else 0:X}")

    def test_decode_daz(self):
        fmt = Fmt(5, 10, 15, "ieee", "inf", daz=True)
        enc = np.arange(1 << 16, dtype=np.uint16)
        got = halfway.decode(enc, "fp16", subnormals=False)
        want = np.array([fmt.decode(e) for e in range(1 << 16)])
        nan = np.isnan(want)
        self.assertTrue(((got == want) & (np.signbit(got) == np.signbit(want)) | nan).all())

    def test_packed_draws(self):
        # pack_random_bits: element i (stream position OFFSET + i) reads field (OFFSET + i) mod
        # k of draw (OFFSET + i) div k, k = 32 // random_bits, field 0 the draw's top bits;
        # against this module's own Philox and rounding, for bulk calls that start inside a
        # draw (OFFSET + 1) and random_bits whose fields leave bits of a draw unused (5, 12).
        rng = random.Random("packed")
        for name, bits in (("fp16", 8), ("e2m1", 8), ("e4m3", 5), ("bf16", 12), ("fp16", 16)):
            fmt = FORMATS[name]
            x = np.array(candidates(fmt, rng, 200), dtype=np.float32)
            k = 32 // bits
            for offset in (OFFSET, OFFSET + 1):
                with self.subTest(fmt=name, random_bits=bits, offset=offset):
                    vals = halfway.round(x, name, "stochastic", seed=SEED, offset=offset,
                                         random_bits=bits, pack_random_bits=True)
                    unpacked = halfway.round(x, name, "stochastic", seed=SEED, offset=offset,
                                             random_bits=bits)
                    bad = []
                    for i, xb in enumerate(x.view(np.uint32).tolist()):
                        e = offset + i
                        draw = oracle.sr_bits(SEED, e // k)
                        rnd = (draw << (bits * (e % k))) & 0xFFFFFFFF
                        rnd &= (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF
                        want = fmt.decode(fmt.round_bits(xb, "stochastic", rnd)[0])
                        got = float(vals[i])
                        if not (got == want or (math.isnan(got) and math.isnan(want))):
                            bad.append(f"  {float(x[i])!r}: got {got!r} want {want!r}")
                    self.assertFalse(bad, "\n".join(bad[:8]))
                    # The flag takes effect: other draws than the unpacked mapping's.
                    self.assertFalse(np.array_equal(vals, unpacked, equal_nan=True))

    def test_stochastic_streams(self):
        x = np.random.default_rng(7).standard_normal(5000).astype(np.float32)
        a = halfway.round(x, "e4m3", "stochastic", seed=5)
        self.assertTrue(np.array_equal(a, halfway.round(x, "e4m3", "stochastic", seed=5)))
        # element i uses stream position offset + i: a split array gives the same results
        b = np.concatenate([halfway.round(x[:1234], "e4m3", "sr", seed=5),
                            halfway.round(x[1234:], "e4m3", "sr", seed=5, offset=1234)])
        self.assertTrue(np.array_equal(a, b))
        self.assertFalse(np.array_equal(a, halfway.round(x, "e4m3", "stochastic", seed=6)))


if __name__ == "__main__":
    hwtest.main()
