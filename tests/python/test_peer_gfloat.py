"""gfloat (Graphcore's reference implementation of the OCP MX and IEEE P3109 format
definitions) as an oracle: its value tables and its rounding against halfway's.

Formats: OCP e4m3, e5m2, e2m3, e3m2, e2m1, e8m0, IEEE binary16 and bfloat16, and P3109's 8-bit
formats binary8p1..binary8p7 in the finite domain (halfway `eXmY:fnuz:bias=2^(X-1)`: one NaN at
0x80, no -0, no infinity). P3109's extended domain (+-inf at 0x7F/0xFF) is not a halfway format;
the test checks that halfway refuses it rather than taking it for another.

1. Every code of every format decodes to the same value (gfloat.decode_ndarray, halfway.decode).
2. Rounding: gfloat.round_ndarray against halfway.round under TiesToEven, TiesToAway,
   TowardZero, TowardNegative, TowardPositive (near_even, near_maxMag, minMag, min, max), with
   and without saturation, on every value of the format, the midpoints between neighbours,
   one float32 ulp either side of each, the overflow region, zeros, infinities, NaN and float32
   subnormals, both signs (hwtest.boundary_f32), four NaNs (quiet, signalling, both signs) and
   20,000 random values over 2^-40..2^40.
   Compared as float32 bits (any NaN equals any NaN).

Every difference must belong to a documented class (docs/conformance.md, "gfloat"), written
from the two libraries' definitions; the class counts are recorded. Negative control:
halfway's near_maxMag results in place of near_even must be reported as unexplained."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import check, status  # noqa: E402

gfloat = hwtest.require("gfloat", "the comparison with gfloat's format definitions")
import halfway  # noqa: E402
from gfloat import formats as F  # noqa: E402

R = gfloat.RoundMode
MODES = {R.TiesToEven: "near_even", R.TiesToAway: "near_maxMag", R.TowardZero: "minMag",
         R.TowardNegative: "min", R.TowardPositive: "max"}
NANLESS = ("e2m3", "e3m2", "e2m1")
# Recorded class counts over all modes and both saturation settings.
# NaN: 4 NaN inputs x 3 formats x 5 modes (saturating only); e8m0: 10 mode/saturation runs.
EXPECTED = {"nan into a format without NaN": 4 * 3 * 5, "e8m0 negative": 114830,
            "e8m0 below 2^-127": 64}


def formats():
    yield F.format_info_ocp_e4m3, "e4m3"
    yield F.format_info_ocp_e5m2, "e5m2"
    yield F.format_info_ocp_e2m3, "e2m3"
    yield F.format_info_ocp_e3m2, "e3m2"
    yield F.format_info_ocp_e2m1, "e2m1"
    yield F.format_info_ocp_e8m0, "e8m0"
    yield F.format_info_binary16, "fp16"
    yield F.format_info_bfloat16, "bf16"
    for p in range(1, 8):
        x = 8 - p
        yield (F.format_info_p3109(8, p, domain=gfloat.Domain.Finite),
               f"e{x}m{p - 1}:fnuz:bias={2 ** (x - 1)}")


def same(a, b):
    with np.errstate(over="ignore"):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def sample(values):
    rng = np.random.default_rng(2024)
    rnd = (rng.standard_normal(20000) * 2.0 ** rng.integers(-40, 40, 20000)).astype(np.float32)
    nans = hwtest.f32(np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF], np.uint32))
    with np.errstate(over="ignore"):
        return np.concatenate([hwtest.boundary_f32(values), rnd, nans])


def classify(name, x, want, got):
    """The class of each differing element, or None where no class explains it."""
    out = []
    smallest = np.float32(2.0 ** -127)
    for xi, w, g in zip(x, want, got):
        if name in NANLESS and np.isnan(xi) and np.isnan(w) and g == halfway.finfo(name).max:
            out.append("nan into a format without NaN")  # gfloat: NaN; halfway: +max
        elif name == "e8m0" and np.signbit(xi) and not np.isnan(xi) and np.isnan(g) and w <= 0:
            out.append("e8m0 negative")  # gfloat: a negative value; halfway: NaN (invalid)
        elif name == "e8m0" and 0 <= xi < smallest and g == smallest and w < smallest:
            out.append("e8m0 below 2^-127")  # gfloat: below the format; halfway: 2^-127
        else:
            out.append(None)
    return out


counts = {k: 0 for k in EXPECTED}
compared = 0
for fi, name in formats():
    n = 1 << fi.bits
    codes = np.arange(n, dtype=np.uint16 if n > 256 else np.uint8)
    gv = gfloat.decode_ndarray(fi, codes.astype(np.int64))
    check(np.all(same(gv, halfway.decode(codes, name))), f"{fi.name}: decode differs")
    x = sample(gv.astype(np.float32)[np.isfinite(gv) & (gv >= 0)])
    for mode, hm in MODES.items():
        for sat in (False, True):
            if name in NANLESS and not sat:
                continue  # gfloat refuses: a format without inf or NaN needs sat=True
            with np.errstate(over="ignore", invalid="ignore"):
                want = gfloat.round_ndarray(fi, x.astype(np.float64), mode, sat=sat)
            got = halfway.round(x, name, hm, saturate=sat)
            compared += x.size
            d = ~same(want, got)
            for i, c in zip(np.nonzero(d)[0], classify(name, x[d], want[d], got[d])):
                if c is None:
                    bits = int(x[i:i + 1].view(np.uint32)[0])
                    check(False, f"{fi.name} {hm} sat={sat}: x={x[i]!r} ({bits:#x}) "
                                 f"gfloat {want[i]!r} halfway {got[i]!r}")
                else:
                    counts[c] += 1
    # The negative control: ties rounded away must not pass as near_even.
    if name == "fp16":
        with np.errstate(over="ignore", invalid="ignore"):
            want = gfloat.round_ndarray(fi, x.astype(np.float64), R.TiesToEven)
        bad = ~same(want, halfway.round(x, name, "near_maxMag"))
        check(bad.sum() > 100 and all(c is None for c in classify(name, x[bad], want[bad],
                                                                    x[bad])),
              f"control: near_maxMag for near_even gave {bad.sum()} differences")
check(counts == EXPECTED, f"class counts {counts}, recorded {EXPECTED}")

# P3109's extended domain: no halfway format; refused, never read as another.
for p in range(1, 8):
    x = 8 - p
    try:
        halfway.Format(f"e{x}m{p - 1}:fnuz:inf:bias={2 ** (x - 1)}")
        check(False, f"binary8p{p} extended: halfway accepted fnuz with infinities")
    except ValueError:
        pass

sys.exit(status(f"ok: {compared} roundings of {len(list(formats()))} formats equal gfloat's, "
                 f"differences only in the documented classes {counts}"))
