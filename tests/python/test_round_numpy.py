"""halfway.round(a, "fp16") against numpy's float16 conversion, bit for bit.

numpy converts float32 -> float16 and float64 -> float16 in one correctly rounded step
(round to nearest even, overflow to inf). The inputs: every fp16 value, every midpoint between
neighbours (the ties) and one float32 ulp either side of each, the overflow threshold 65520,
zeros, infinities, float32 subnormals, random bit patterns (all classes) and random normal
data. NaN results: numpy keeps a quiet NaN's sign and top payload bits, as halfway does, but
passes a signalling NaN through unquieted where halfway quiets it (as x86 F16C does); for
those, halfway is checked against the quieting rule itself.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import bits32, bits64, f32, first_mismatches, is_nan32, is_snan32  # noqa: E402

import halfway  # noqa: E402


def numpy_fp16_roundtrip(x):
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(np.float32)


def all_fp16_values():
    return np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32)


def quieted_fp16_as_f32(b):
    """The float32 bits of fp16 NaN sign | 0x7E00 | top 10 fraction bits, widened."""
    h = ((b >> 16) & 0x8000) | 0x7E00 | ((b >> 13) & 0x3FF)
    return bits32(h.astype(np.uint16).view(np.float16).astype(np.float32))


class RoundFp16AgainstNumpy(hwtest.unittest.TestCase):
    def check_f32(self, x):
        got = bits32(halfway.round(x, "fp16"))
        want = bits32(numpy_fp16_roundtrip(x))
        b = bits32(x)
        snan = is_snan32(b)
        # signalling NaNs: halfway quiets them (x86), numpy does not
        want = np.where(snan, quieted_fp16_as_f32(b), want)
        self.assertTrue(np.array_equal(got, want), first_mismatches(x, got, want))
        # and the encodings agree with numpy's float16 bits (where numpy's NaN is quiet)
        enc = halfway.encode(x, "fp16")
        with np.errstate(over="ignore"):
            np_enc = x.astype(np.float16).view(np.uint16)
        ok = snan | (enc == np_enc)
        self.assertTrue(ok.all(), first_mismatches(x, enc, np_enc))
        return got

    def test_every_fp16_value_is_kept(self):
        v = all_fp16_values()
        x = np.concatenate([v, -v])
        got = self.check_f32(x)
        self.assertTrue(np.array_equal(got, bits32(x)))

    def test_ties_and_neighbours_of_every_value(self):
        x = hwtest.boundary_f32(all_fp16_values())
        self.assertGreater(x.size, 300000)
        self.check_f32(x)

    def test_overflow_threshold(self):
        x = np.float32([65504, 65519, 65519.996, 65520, 65520.004, 65535.996, 65536, 1e38,
                        np.inf, -65520, -65519.996])
        got = halfway.round(x, "fp16")
        self.assertEqual(got.tolist(), [65504, 65504, 65504, np.inf, np.inf, np.inf, np.inf,
                                        np.inf, np.inf, -np.inf, -65504])
        self.check_f32(x)

    def test_subnormals_and_underflow(self):
        tiny = 2.0 ** -24  # smallest fp16 subnormal
        x = np.float32([tiny / 2, np.nextafter(np.float32(tiny / 2), np.float32(1)), tiny * 1.5,
                        tiny * 2.5, 2.0**-14 - tiny / 2, 2.0**-14 - tiny * 0.75, 1e-45, -1e-45,
                        -tiny / 2, 0.0, -0.0])
        got = halfway.round(x, "fp16")
        self.assertEqual(bits32(got).tolist(),
                         bits32(np.float32([0, tiny, 2 * tiny, 2 * tiny, 2.0**-14, 2.0**-14 - tiny,
                                            0, -0.0, -0.0, 0, -0.0])).tolist())
        self.check_f32(x)

    def test_nans(self):
        b = np.array([0x7FC00000, 0xFFC00000, 0x7FC02000, 0xFFFFFFFF, 0x7F800001, 0xFF800001,
                      0x7FA00000, 0x7F802000], dtype=np.uint32)
        got = bits32(halfway.round(f32(b), "fp16"))
        # fp16 NaN = sign | 0x7E00 | top fraction bits, widened back to float32
        self.assertEqual([hex(v) for v in got],
                         [hex(v) for v in [0x7FC00000, 0xFFC00000, 0x7FC02000, 0xFFFFE000,
                                           0x7FC00000, 0xFFC00000, 0x7FE00000, 0x7FC02000]])
        self.check_f32(f32(b))

    def test_random_bit_patterns(self):
        x = hwtest.random_bits_f32(1 << 20, seed=1)
        self.assertGreater(int(is_nan32(bits32(x)).sum()), 1000)
        self.check_f32(x)

    def test_random_normal_data(self):
        rng = np.random.default_rng(2)
        for scale in (1.0, 1e-6, 1e4):
            self.check_f32((rng.standard_normal(1 << 18) * scale).astype(np.float32))

    def test_float64_rounds_in_one_step(self):
        # 1 + 2^-11 + 2^-40 is just above a tie: directly it rounds up; through float32 it
        # would first become the tie 1 + 2^-11 and then round to even (1.0).
        x = np.array([1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40), 65520 - 2**-30,
                      2**-25 + 2**-77], dtype=np.float64)
        got = halfway.round(x, "fp16")
        self.assertEqual(got.tolist(), [1 + 2**-10, -(1 + 2**-10), 65504.0, 2**-24])
        self.assertFalse(np.array_equal(got, halfway.round(x.astype(np.float32), "fp16")))

    def test_float64_against_numpy(self):
        rng = np.random.default_rng(3)
        bits = rng.integers(0, 2**64, 1 << 18, dtype=np.uint64)
        x64 = bits.view(np.float64)
        # random bit patterns are mostly far outside fp16's range: add values near it, and
        # float64 values just off every fp16 tie
        v = all_fp16_values().astype(np.float64)
        mids = (v[:-1] + v[1:]) / 2
        near = np.concatenate([x64, rng.standard_normal(1 << 16) * 100, v, mids,
                               mids * (1 + 2.0**-50), mids * (1 - 2.0**-50)])
        near = np.concatenate([near, -near])
        got = bits32(halfway.round(near, "fp16"))
        with np.errstate(over="ignore", invalid="ignore"):
            want = bits32(near.astype(np.float16).astype(np.float32))
        b = bits64(near)
        nan = (b & 0x7FFFFFFFFFFFFFFF) > 0x7FF0000000000000
        snan = nan & ((b & 0x0008000000000000) == 0)
        # signalling NaNs quieted (sign | 0x7E00 | top 10 fraction bits)
        h = (((b >> 48) & 0x8000) | 0x7E00 | ((b >> 42) & 0x3FF)).astype(np.uint16)
        want = np.where(snan, bits32(h.view(np.float16).astype(np.float32)), want)
        self.assertTrue(np.array_equal(got, want), first_mismatches(near, got, want))

    def test_counts_match_the_results(self):
        x = hwtest.random_bits_f32(1 << 18, seed=4)
        x = np.concatenate([x, (np.random.default_rng(5).standard_normal(1 << 16) * 1e-6)
                            .astype(np.float32)])
        r, c = halfway.round(x, "fp16", counts=True)
        ref = numpy_fp16_roundtrip(x)
        finite_in = np.isfinite(x)
        nan_out = np.isnan(ref)
        self.assertEqual(c.total, x.size)
        self.assertEqual(c.nan, int(nan_out.sum()))
        self.assertEqual(c.zero, int((ref == 0).sum()))
        self.assertEqual(c.flushed, int(((ref == 0) & (x != 0) & finite_in).sum()))
        self.assertEqual(c.overflow, int((np.isinf(ref) & finite_in).sum()))
        self.assertEqual(c.subnormal, int(((np.abs(ref) < 2.0**-14) & (ref != 0)).sum()))
        self.assertEqual(c.inexact, int(((ref != x) & ~nan_out & finite_in).sum()))
        self.assertEqual(c.flags & (halfway.UNDERFLOW | halfway.OVERFLOW | halfway.INEXACT),
                         halfway.UNDERFLOW | halfway.OVERFLOW | halfway.INEXACT)
        self.assertTrue(c.flags & halfway.INVALID)  # signalling NaNs were among the inputs


if __name__ == "__main__":
    hwtest.main()
