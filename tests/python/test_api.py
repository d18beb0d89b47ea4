"""The Python API around the numbers: finfo against numpy.finfo and the format table, the
encode/decode round trip, errors, dtypes, shapes, scalars, keyword options and counts."""

import os
import pickle
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

import halfway  # noqa: E402

NUMPY_FIELDS = ("bits", "eps", "epsneg", "iexp", "machep", "max", "maxexp", "min", "minexp",
                "negep", "nexp", "nmant", "precision", "resolution", "smallest_normal",
                "smallest_subnormal", "tiny")


class Finfo(hwtest.unittest.TestCase):
    def against_numpy(self, name, dtype):
        ours, theirs = halfway.finfo(name), np.finfo(dtype)
        for field in NUMPY_FIELDS:
            with self.subTest(fmt=name, field=field):
                a, b = getattr(ours, field), getattr(theirs, field)
                if isinstance(b, np.floating):
                    # numpy's values are of its dtype; ours are float32: compare exact values
                    self.assertIsInstance(a, np.float32)
                    self.assertEqual(float(a), float(b))
                else:
                    self.assertEqual(a, b)
        self.assertEqual(ours.dtype, np.dtype(np.float32))

    def test_fp16_field_by_field(self):
        self.against_numpy("fp16", np.float16)

    def test_fp32_field_by_field(self):
        self.against_numpy("fp32", np.float32)

    def test_format_table(self):
        # numerics reference, section 1: max finite, min normal, min subnormal, special encodings
        table = {
            "fp16": (65504.0, 2.0**-14, 2.0**-24, 0x7C00, 0xFE00, 0x7BFF),
            "bf16": (3.3895313892515355e38, 2.0**-126, 2.0**-133, 0x7F80, 0xFFC0, 0x7F7F),
            "tf32": ((2 - 2.0**-10) * 2.0**127, 2.0**-126, 2.0**-136, 0x3FC00, 0x7FE00, 0x3FBFF),
            "e4m3": (448.0, 2.0**-6, 2.0**-9, None, 0x7F, 0x7E),
            "e5m2": (57344.0, 2.0**-14, 2.0**-16, 0x7C, 0xFE, 0x7B),
            "e4m3fnuz": (240.0, 2.0**-7, 2.0**-10, None, 0x80, 0x7F),
            "e5m2fnuz": (57344.0, 2.0**-15, 2.0**-17, None, 0x80, 0x7F),
            "e2m3": (7.5, 1.0, 0.125, None, None, 0x1F),
            "e3m2": (28.0, 0.25, 0.0625, None, None, 0x1F),
            "e2m1": (6.0, 1.0, 0.5, None, None, 0x7),
            "e8m0": (2.0**127, 2.0**-127, None, None, 0xFF, 0xFE),
        }
        for name, (mx, normal, sub, inf, nan, max_bits) in table.items():
            with self.subTest(fmt=name):
                fi = halfway.finfo(name)
                self.assertEqual(float(fi.max), mx)
                self.assertEqual(float(fi.smallest_normal), normal)
                self.assertEqual(float(fi.tiny), normal)
                if sub is None:
                    self.assertIsNone(fi.smallest_subnormal)
                else:
                    self.assertEqual(float(fi.smallest_subnormal), sub)
                self.assertEqual(fi.inf_bits, inf)
                self.assertEqual(fi.nan_bits, nan)
                self.assertEqual(fi.max_bits, max_bits)
                self.assertEqual(float(halfway.decode(fi.max_bits, name)), mx)
                self.assertEqual(float(halfway.decode(fi.min_bits, name)), float(fi.min))
        e8 = halfway.finfo("e8m0")
        self.assertEqual((e8.signed, e8.has_zero, e8.zero_bits, float(e8.min)),
                         (False, False, None, 2.0**-127))
        self.assertEqual(halfway.finfo("e4m3fnuz").neg_zero_bits, None)
        self.assertEqual(halfway.finfo("fp16").neg_zero_bits, 0x8000)
        self.assertEqual(halfway.finfo("e4m3").one_bits, 0x38)
        self.assertEqual(halfway.finfo("e4m3").encoding_dtype, np.dtype(np.uint8))
        self.assertEqual(halfway.finfo("tf32").encoding_dtype, np.dtype(np.uint32))
        self.assertIn("Machine parameters for fp16", str(halfway.finfo("fp16")))
        self.assertIn("e4m3", repr(halfway.finfo("e4m3")))


class EncodeDecode(hwtest.unittest.TestCase):
    def test_roundtrip_every_encoding(self):
        for name in halfway.formats():
            fi = halfway.finfo(name)
            if fi.bits > 19:
                continue
            with self.subTest(fmt=name):
                enc = np.arange(1 << fi.bits, dtype=np.uint32).astype(fi.encoding_dtype)
                val = halfway.decode(enc, name)
                back = halfway.encode(val, name)
                nan = np.isnan(val)
                self.assertTrue(np.array_equal(back[~nan], enc[~nan]))
                self.assertTrue(np.isnan(halfway.decode(back[nan], name)).all())
                # quiet NaNs of IEEE formats come back with the same bits
                if fi.specials == "ieee":
                    quiet_bit = 1 << (fi.nmant - 1)
                    q = nan & ((enc & quiet_bit) != 0)
                    self.assertTrue(np.array_equal(back[q], enc[q]))
                # and round() is decode(encode())
                self.assertTrue(np.array_equal(hwtest.bits32(halfway.round(val, name))[~nan],
                                               hwtest.bits32(val)[~nan]))

    def test_round_is_decode_of_encode(self):
        x = hwtest.random_bits_f32(1 << 16, seed=31)
        for name in ("fp16", "bf16", "e4m3", "e5m2", "e2m1", "e8m0", "e5m10:bias=14"):
            for mode in ("near_even", "max", "stochastic"):
                with self.subTest(fmt=name, mode=mode):
                    r = halfway.round(x, name, mode, seed=1)
                    d = halfway.decode(halfway.encode(x, name, mode, seed=1), name)
                    self.assertTrue(np.array_equal(hwtest.bits32(r), hwtest.bits32(d)))

    def test_dtypes(self):
        self.assertEqual(halfway.encode(np.float32([1]), "e4m3").dtype, np.uint8)
        self.assertEqual(halfway.encode(np.float32([1]), "fp16").dtype, np.uint16)
        self.assertEqual(halfway.encode(np.float32([1]), "tf32").dtype, np.uint32)
        self.assertEqual(halfway.encode(np.float32([1]), "fp32").dtype, np.uint32)
        self.assertEqual(halfway.round(np.float64([1]), "e4m3").dtype, np.float32)
        # any integer dtype with values in range decodes; big-endian floats are accepted
        self.assertEqual(halfway.decode(np.array([0x3C00], np.int64), "fp16").tolist(), [1.0])
        self.assertEqual(halfway.decode([0x38, 0x7E], "e4m3").tolist(), [1.0, 448.0])
        self.assertEqual(halfway.round(np.array([0.1], ">f4"), "fp16").tolist(),
                         halfway.round(np.float32([0.1]), "fp16").tolist())

    def test_shapes_and_scalars(self):
        x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
        self.assertEqual(halfway.round(x, "bf16").shape, (2, 3, 4))
        self.assertEqual(halfway.round(x[:, ::2, 1:], "bf16").tolist(),
                         halfway.round(np.ascontiguousarray(x[:, ::2, 1:]), "bf16").tolist())
        self.assertEqual(halfway.round(np.float32([]), "fp16").shape, (0,))
        r = halfway.round(0.1, "fp16")
        self.assertIsInstance(r, np.float32)
        self.assertEqual(float(r), 0.0999755859375)
        self.assertIsInstance(halfway.encode(np.float32(1.0), "e4m3"), np.uint8)
        self.assertIsInstance(halfway.round(np.array(0.1, np.float32), "fp16"), np.ndarray)
        self.assertEqual(halfway.round([1, 2.5, 1e9], "fp16").tolist(), [1.0, 2.5, np.inf])


class Options(hwtest.unittest.TestCase):
    def test_saturate_and_subnormals(self):
        x = np.float32([70000, -1e6, 1e-6, -3e-8])
        self.assertEqual(halfway.round(x, "fp16").tolist(),
                         [np.inf, -np.inf, float(np.float16(1e-6)), -2.0**-24])
        self.assertEqual(halfway.round(x, "fp16", saturate=True).tolist(),
                         [65504, -65504, float(np.float16(1e-6)), -2.0**-24])
        # SATFINITE: infinite inputs saturate too (0x7B/0xFB in e5m2), and raise invalid.
        inf = np.float32([np.inf, -np.inf])
        self.assertEqual(halfway.encode(inf, "e5m2", saturate=True).tolist(), [0x7B, 0xFB])
        self.assertEqual(halfway.encode(inf, "e5m2").tolist(), [0x7C, 0xFC])
        r = halfway.round(x, "fp16", subnormals=False)
        self.assertEqual(r.tolist(), [np.inf, -np.inf, 0.0, 0.0])
        self.assertTrue(np.signbit(r[3]))
        # the keywords only strengthen what the format says
        self.assertEqual(halfway.round(x, "e4m3:sat", saturate=False)[0], 448)
        self.assertEqual(halfway.round(x, "fp16:ftz")[2], 0)

    def test_rounding_names(self):
        x = np.float32([1 + 2**-11 + 2**-20, -(1 + 2**-11 + 2**-20)])
        for mode, want in [("near_even", [1 + 2**-10, -(1 + 2**-10)]),
                           ("rtz", [1.0, -1.0]), ("minMag", [1.0, -1.0]),
                           ("rd", [1.0, -(1 + 2**-10)]), ("ru", [1 + 2**-10, -1.0]),
                           ("rto", [1 + 2**-10, -(1 + 2**-10)])]:
            self.assertEqual(halfway.round(x, "fp16", mode).tolist(), want, mode)
        self.assertEqual(len(halfway.roundings), 7)

    def test_counts(self):
        x = np.float32([1.0, 0.1, 1e-6, 1e-9, -1e-9, 70000, np.inf, np.nan, 0.0, 3e-5])
        r, c = halfway.round(x, "fp16", counts=True)
        self.assertEqual(c.as_dict(), {"total": 10, "inexact": 6, "zero": 3, "flushed": 2,
                                       "subnormal": 2, "overflow": 1, "nan": 1,
                                       "flags": halfway.INEXACT | halfway.UNDERFLOW |
                                       halfway.OVERFLOW})
        self.assertEqual(c.flag_names, "overflow|underflow|inexact")
        r2, fl, c2 = halfway.round(x, "fp16", flags=True, counts=True)
        self.assertEqual(c, c2)
        self.assertEqual(fl.tolist(), [0, 1, 3, 3, 3, 5, 0, 0, 0, 3])
        self.assertEqual((c + c).total, 20)
        self.assertIn("flushed=2", repr(c))
        # float64 input counts the same way
        self.assertEqual(halfway.round(x.astype(np.float64), "fp16", counts=True)[1], c)

    def test_format_objects(self):
        f = halfway.Format("e4m3:sat")
        self.assertEqual((f.name, f.exp_bits, f.frac_bits, f.bias, f.nbits, f.overflow),
                         ("e4m3:sat", 4, 3, 7, 8, "saturate"))
        self.assertEqual(halfway.format("e4m3fn"), halfway.Format("e4m3"))
        self.assertEqual(pickle.loads(pickle.dumps(f)), f)
        self.assertEqual(halfway.round([500.0], f).tolist(), [448.0])
        self.assertEqual(len({halfway.Format("fp16"), halfway.Format("half")}), 1)
        self.assertIn("fp16", halfway.formats())


class Examples(hwtest.unittest.TestCase):
    def test_docstring_and_docs_examples(self):
        import doctest
        failed, tried = doctest.testmod(halfway)[:2]
        self.assertEqual(failed, 0)
        self.assertGreater(tried, 0)
        md = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                          "python.md")
        failed, tried = doctest.testfile(md, module_relative=False)[:2]
        self.assertEqual(failed, 0)
        self.assertGreater(tried, 5)


class Errors(hwtest.unittest.TestCase):
    def test_value_errors(self):
        cases = [
            (lambda: halfway.round([1.0], "fp12"), r"^unknown format 'fp12'"),
            (lambda: halfway.finfo("fp12"), r"^unknown format 'fp12'"),
            (lambda: halfway.round([1.0], "e9m2"), r"impossible format"),
            (lambda: halfway.round([1.0], "fp16", "nearest"), r"^unknown rounding 'nearest'"),
            (lambda: halfway.round([1.0], "fp16", "stochastic"), r"needs seed"),
            (lambda: halfway.round([1.0], "fp16", "sr", seed=-1), r"seed must be an integer"),
            (lambda: halfway.round([1.0], "fp16", tininess="never"), r"unknown tininess"),
            (lambda: halfway.decode([0x10000], "fp16"), r"bits\[0\] = 65536 is not an encoding"),
            (lambda: halfway.decode(np.int8(-1), "e4m3"), r"bits = -1 is not an encoding"),
            (lambda: halfway.decode(np.uint8(16), "e2m1"), r"16 is not an encoding of e2m1"),
            (lambda: halfway.add([1], [1, 2, 3, 0x1FFFF], "fp16"), r"b\[3\] = 131071"),
        ]
        for fn, pattern in cases:
            with self.subTest(pattern=pattern):
                with self.assertRaisesRegex(ValueError, pattern):
                    fn()

    def test_type_errors(self):
        cases = [
            (lambda: halfway.round(np.arange(3), "fp16"), r"expected float32 or float64 values, got int64"),
            (lambda: halfway.round(np.float16([1]), "fp16"), r"got float16"),
            (lambda: halfway.round(np.complex64([1]), "fp16"), r"got complex64"),
            (lambda: halfway.encode(np.array([True]), "fp16"), r"got bool"),
            (lambda: halfway.decode(np.float32([1.0]), "fp16"), r"expected integer encodings"),
            (lambda: halfway.add(np.float32([1.0]), 1, "fp16"), r"expected integer encodings"),
            (lambda: halfway.round([1.0], 16), r"format must be a name"),
            (lambda: halfway.round([1.0], "fp16", "sr", seed=1.5), r"seed must be an integer"),
        ]
        for fn, pattern in cases:
            with self.subTest(pattern=pattern):
                with self.assertRaisesRegex(TypeError, pattern):
                    fn()


if __name__ == "__main__":
    hwtest.main()
