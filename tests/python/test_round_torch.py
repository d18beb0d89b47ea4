"""halfway.round(a, "bf16") against PyTorch's bfloat16 round trip, bit for bit.

PyTorch's .to(torch.bfloat16) on the CPU rounds to nearest even with subnormals kept (it is
not the AVX512-BF16 instruction, which flushes them). Inputs: every bf16 value, every tie
between neighbours and one float32 ulp either side, the overflow threshold, zeros,
infinities, float32 subnormals, random bit patterns and random normal data. NaN results:
PyTorch returns one canonical NaN (0xFFFF, or 0x7FC0 on its scalar path) whatever the input;
halfway keeps sign and top payload bits, quieted (x86 semantics), so NaN results are checked
for being NaN against PyTorch and bit for bit against that rule.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import bits32, f32, first_mismatches, is_nan32  # noqa: E402

torch = hwtest.require("torch", "the cross-check against PyTorch's bfloat16")
import halfway  # noqa: E402

torch.set_num_threads(1)


def torch_bf16_roundtrip(x):
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16).float().numpy()


def all_bf16_values():
    return f32(np.arange(0, 0x7F80, dtype=np.uint32) << 16)


class RoundBf16AgainstTorch(hwtest.unittest.TestCase):
    def check(self, x):
        b = bits32(x)
        got = bits32(halfway.round(x, "bf16"))
        want = bits32(torch_bf16_roundtrip(x))
        nan_in = is_nan32(b)
        self.assertTrue(np.array_equal(is_nan32(got), is_nan32(want)),
                        "NaN results differ from PyTorch's")
        # NaN results: sign | 0x7FC0 | top 7 fraction bits (x86 quieting)
        quieted = (b & 0xFFFF0000) | 0x00400000
        want = np.where(nan_in, quieted, want)
        self.assertTrue(np.array_equal(got, want), first_mismatches(x, got, want))
        enc = halfway.encode(x, "bf16")
        self.assertEqual(enc.dtype, np.uint16)
        self.assertTrue(np.array_equal(enc.astype(np.uint32) << 16, got))

    def test_every_bf16_value_is_kept(self):
        v = all_bf16_values()
        x = np.concatenate([v, -v])
        self.check(x)
        self.assertTrue(np.array_equal(bits32(halfway.round(x, "bf16")), bits32(x)))

    def test_ties_and_neighbours_of_every_value(self):
        x = hwtest.boundary_f32(all_bf16_values())
        self.assertGreater(x.size, 300000)
        self.check(x)

    def test_overflow_threshold_and_subnormals(self):
        mx = float(f32(0x7F7F0000))  # 3.3895e38
        thr = float(f32(0x7F7F8000))  # tie between max and 2^128: goes to inf (max is odd)
        x = np.float32([mx, np.nextafter(np.float32(thr), np.float32(0)), thr, np.inf,
                        float(f32(0x00400000)), float(f32(0x00008000)), float(f32(0x00018000)),
                        float(f32(0x00008001))])
        got = bits32(halfway.round(x, "bf16"))
        self.assertEqual([hex(v) for v in got],
                         [hex(v) for v in [0x7F7F0000, 0x7F7F0000, 0x7F800000, 0x7F800000,
                                           0x00400000, 0x00000000, 0x00020000, 0x00010000]])
        self.check(x)

    def test_random_bit_patterns(self):
        x = hwtest.random_bits_f32(1 << 20, seed=11)
        self.check(x)

    def test_random_normal_data(self):
        rng = np.random.default_rng(12)
        for scale in (1.0, 1e-30, 1e30):
            self.check((rng.standard_normal(1 << 18) * scale).astype(np.float32))

    def test_float64_rounds_in_one_step(self):
        # PyTorch converts float64 -> bfloat16 through float32 (two roundings), so it is no
        # oracle here; the exact expectations are written out.
        x = np.array([1 + 2**-8 + 2**-40, 1 + 2**-8, -(1 + 3 * 2**-8 - 2**-45)])
        self.assertEqual(halfway.round(x, "bf16").tolist(), [1 + 2**-7, 1.0, -(1 + 2**-7)])
        self.assertEqual(halfway.round(x.astype(np.float32), "bf16").tolist(),
                         [1.0, 1.0, -(1 + 2**-6)])


if __name__ == "__main__":
    hwtest.main()
