"""out= of halfway.round and halfway.quantize_blocks, numpy's convention: the result is written
into the caller's C-contiguous, writeable float32 array of the result's shape (the input itself
included) and that array is returned, bit for bit the values of the call without out=, for
the bulk kernels (float32), the scalar path (float64, flags) and stochastic rounding; every
other out is a TypeError or ValueError naming `out`, and leaves the array as it was."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import check, status  # noqa: E402

import halfway  # noqa: E402

def same(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def refused(exc, f, *a, **kw):
    out = kw["out"]
    before = out.copy() if isinstance(out, np.ndarray) else None
    try:
        f(*a, **kw)
    except exc as e:
        check("out" in str(e), f"{f.__name__}: the message names out: {e}")
        if before is not None:
            check(np.array_equal(before, out, equal_nan=True), f"{f.__name__}: out changed")
        return
    check(False, f"{f.__name__} accepted out={type(out).__name__} {getattr(out, 'shape', '')}")


def main():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 96)) * 2.0 ** rng.integers(-30, 30, (64, 96))).astype(np.float32)
    cases = [((x, "bf16"), {}), ((x, "e4m3"), {"saturate": True}),
             ((x, "fp16"), {"rounding": "stochastic", "seed": 5}),
             ((x.astype(np.float64), "fp16"), {})]
    for args, kw in cases:
        want = halfway.round(*args, **kw)
        out = np.full(x.shape, np.nan, np.float32)
        got = halfway.round(*args, **kw, out=out)
        check(got is out and same(out, want), f"round{args[1:]} {kw}: out")
    want, flags = halfway.round(x, "fp16", flags=True)
    out = np.empty_like(x)
    got, f2 = halfway.round(x, "fp16", flags=True, out=out)
    check(got is out and same(out, want) and np.array_equal(flags, f2), "round(flags=True)")
    inplace = x.copy()
    check(halfway.round(inplace, "bf16", out=inplace) is inplace and
          same(inplace, halfway.round(x, "bf16")), "round in place")
    for scheme, kw in (("mxfp4", {}), ("nvfp4", {"axis": 0}), ("fp8_rowwise", {})):
        want = halfway.quantize_blocks(x, scheme, **kw)
        out = np.zeros_like(x)
        check(halfway.quantize_blocks(x, scheme, **kw, out=out) is out and same(out, want),
              f"quantize_blocks {scheme}")
        inplace = x.copy()
        halfway.quantize_blocks(inplace, scheme, **kw, out=inplace)
        check(same(inplace, want), f"quantize_blocks {scheme} in place")
    padded = x[:60, :90].copy()
    out = np.empty_like(padded)
    halfway.quantize_blocks(padded, "mxfp8_e4m3", pad=True, out=out)
    check(same(out, halfway.quantize_blocks(padded, "mxfp8_e4m3", pad=True)), "pad=True, out")
    for f, args in ((halfway.round, (x, "bf16")), (halfway.quantize_blocks, (x, "mxfp4"))):
        refused(TypeError, f, *args, out=[0.0] * x.size)
        refused(TypeError, f, *args, out=np.zeros(x.shape, np.float64))
        refused(ValueError, f, *args, out=np.zeros((x.shape[0], x.shape[1] + 1), np.float32))
        refused(ValueError, f, *args, out=np.zeros((x.shape[1], x.shape[0]), np.float32).T)
        ro = np.zeros_like(x)
        ro.flags.writeable = False
        refused(ValueError, f, *args, out=ro)
    refused(ValueError, halfway.round, 1.5, "fp16", out=np.zeros((), np.float32))
    return status("ok: out= writes and returns the caller's array")


if __name__ == "__main__":
    sys.exit(main())
