"""out= of halfway.round, encode, decode, decode_blocks and quantize_blocks, numpy's convention:
the result is written into the caller's C-contiguous, writeable array of exactly the result's
dtype (float32; encode: the format's encoding dtype, uint8 / uint16 / uint32) and shape (the
input itself included, where the dtypes agree) and that array is returned, bit for bit the
values of the call without out=, for the bulk kernels (float32), the scalar path (float64,
flags) and stochastic rounding, and whatever memory out shares with the input; every other out
is a TypeError or ValueError naming `out`, and leaves the array as it was, as does any other
error of a call with out=."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import check, status  # noqa: E402

import halfway  # noqa: E402

def same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def filled(shape, dtype):
    """An out array whose every element differs from what a call writes (almost surely)."""
    return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else 0x4D, dtype)


def refused(exc, f, *a, name="out", **kw):
    out = kw["out"]
    before = out.copy() if isinstance(out, np.ndarray) else None
    try:
        f(*a, **kw)
    except exc as e:
        check(name in str(e), f"{f.__name__}: the message names {name}: {e}")
        if before is not None:
            check(same(before, out), f"{f.__name__}: out changed")
        return
    check(False, f"{f.__name__} accepted out={type(out).__name__} {getattr(out, 'shape', '')}")


def tuples_equal(want, got, out):
    """(result, flags?, counts?) of a call without out= and one with it."""
    return (len(want) == len(got) and got[0] is out and same(out, want[0]) and
            all(same(w, g) if isinstance(w, np.ndarray) else w.as_dict() == g.as_dict()
                for w, g in zip(want[1:], got[1:])))


def round_cases(x):
    cases = [((x, "bf16"), {}), ((x, "e4m3"), {"saturate": True}),
             ((x, "fp16"), {"rounding": "stochastic", "seed": 5}),
             ((x.astype(np.float64), "fp16"), {})]
    for args, kw in cases:
        want = halfway.round(*args, **kw)
        out = filled(x.shape, np.float32)
        got = halfway.round(*args, **kw, out=out)
        check(got is out and same(out, want), f"round{args[1:]} {kw}: out")
    want = halfway.round(x, "fp16", flags=True)
    out = np.empty_like(x)
    check(tuples_equal(want, halfway.round(x, "fp16", flags=True, out=out), out),
          "round(flags=True)")
    inplace = x.copy()
    check(halfway.round(inplace, "bf16", out=inplace) is inplace and
          same(inplace, halfway.round(x, "bf16")), "round in place")


def encode_cases(x):
    """8-, 16- and 32-bit formats, the bulk kernels and the scalar path, stochastic rounding,
    the flags / counts tuples."""
    cases = [("e4m3", {"saturate": True}), ("e2m1", {}), ("e5m2", {"rounding": "stochastic",
             "seed": 7, "offset": 3}), ("fp16", {}), ("bf16", {"rounding": "stochastic",
             "seed": 5}), ("tf32", {}), ("e4m3", {"flags": True}), ("fp16", {"counts": True}),
             ("bf16", {"flags": True, "counts": True, "rounding": "stochastic", "seed": 9})]
    for fmt, kw in cases:
        dtype = halfway.finfo(fmt).encoding_dtype
        for a in (x, x.astype(np.float64)):
            want = halfway.encode(a, fmt, **kw)
            out = filled(x.shape, dtype)
            got = halfway.encode(a, fmt, **kw, out=out)
            ok = (tuples_equal(want, got, out) if isinstance(want, tuple) else
                  got is out and same(out, want))
            check(ok, f"encode {fmt} {kw} from {a.dtype}: out")


def decode_cases(x):
    for fmt in ("e4m3", "e2m1", "fp16", "bf16", "tf32"):
        bits = halfway.encode(x, fmt)
        for b, kw in ((bits, {}), (bits, {"subnormals": False}), (bits.astype(np.int64), {})):
            want = halfway.decode(b, fmt, **kw)
            out = filled(x.shape, np.float32)
            check(halfway.decode(b, fmt, **kw, out=out) is out and same(out, want),
                  f"decode {fmt} {kw} from {b.dtype}: out")


def block_cases(x):
    for scheme, kw in (("mxfp4", {}), ("nvfp4", {"axis": 0}), ("fp8_rowwise", {}),
                       ("nvfp4:row_scaled", {})):
        want = halfway.quantize_blocks(x, scheme, **kw)
        out = filled(x.shape, np.float32)
        check(halfway.quantize_blocks(x, scheme, **kw, out=out) is out and same(out, want),
              f"quantize_blocks {scheme}")
        inplace = x.copy()
        halfway.quantize_blocks(inplace, scheme, **kw, out=inplace)
        check(same(inplace, want), f"quantize_blocks {scheme} in place")
        codes, scales, g = halfway.encode_blocks(x, scheme, **kw)
        want = halfway.decode_blocks(codes, scales, g, scheme)
        out = filled(x.shape, np.float32)
        check(halfway.decode_blocks(codes, scales, g, scheme, out=out) is out and
              same(out, want), f"decode_blocks {scheme}")
    padded = x[:60, :90].copy()
    out = np.empty_like(padded)
    halfway.quantize_blocks(padded, "mxfp8_e4m3", pad=True, out=out)
    check(same(out, halfway.quantize_blocks(padded, "mxfp8_e4m3", pad=True)), "pad=True, out")


def overlap_cases(x):
    """out sharing memory with the input other than element for element in place: the bits
    of a call on a copy (written in order, each of these would read results as input)."""
    v = x.ravel()
    n = v.size
    buf = np.append(v, np.float32(0))
    halfway.round(buf[:-1], "bf16", out=buf[1:])
    check(same(buf[1:], halfway.round(v, "bf16")), "round into its input shifted by one")
    a = v.copy()
    halfway.encode(a, "e4m3", out=a.view(np.uint8)[3 * n:])
    check(same(a.view(np.uint8)[3 * n:], halfway.encode(v, "e4m3")),
          "encode into the last quarter of its input's bytes")
    a = v.copy()
    halfway.encode(a, "fp32", out=a.view(np.uint32))
    check(same(a.view(np.uint32), halfway.encode(v, "fp32")), "encode fp32 into its input")
    codes = halfway.encode(v, "e4m3")
    b = np.zeros(4 * n, np.uint8)
    b[:n] = codes
    halfway.decode(b[:n], "e4m3", out=b.view(np.float32))
    check(same(b.view(np.float32), halfway.decode(codes, "e4m3")),
          "decode into memory that begins with its input")


def refusals(x):
    """Wrong type, dtype, shape, layout, writeability; a scalar input; other errors."""
    bits = halfway.encode(x, "fp16")
    codes, scales, g = halfway.encode_blocks(x, "mxfp4")
    calls = [(halfway.round, (x, "bf16"), np.float32, [np.float64, np.uint32]),
             (halfway.quantize_blocks, (x, "mxfp4"), np.float32, [np.float64]),
             (halfway.encode, (x, "e4m3"), np.uint8, [np.uint16, np.int8, np.float32]),
             (halfway.encode, (x, "fp16"), np.uint16, [np.uint8, np.int16, np.float16]),
             (halfway.encode, (x, "tf32"), np.uint32, [np.uint64, np.float32]),
             (halfway.decode, (bits, "fp16"), np.float32, [np.float64, np.uint16]),
             (halfway.decode_blocks, (codes, scales, g, "mxfp4"), np.float32, [np.float16])]
    rows, cols = x.shape
    for f, args, dtype, wrong in calls:
        refused(TypeError, f, *args, out=[0.0] * x.size)
        for w in wrong:
            refused(TypeError, f, *args, out=filled(x.shape, w))
        if np.dtype(dtype).itemsize > 1:  # the same values, swapped bytes
            refused(TypeError, f, *args, out=filled(x.shape, np.dtype(dtype).newbyteorder()))
        refused(ValueError, f, *args, out=filled((rows, cols + 1), dtype))
        refused(ValueError, f, *args, out=filled(x.size, dtype))
        refused(ValueError, f, *args, out=filled((cols, rows), dtype).T)
        ro = filled(x.shape, dtype)
        ro.flags.writeable = False
        refused(ValueError, f, *args, out=ro)
    refused(ValueError, halfway.round, 1.5, "fp16", out=filled((), np.float32))
    refused(ValueError, halfway.encode, 1.5, "fp16", out=filled((), np.uint16))
    refused(ValueError, halfway.decode, 0x3C00, "fp16", out=filled((), np.float32))
    bad = bits.astype(np.uint32)
    bad[5, 7] = 1 << 16
    refused(ValueError, halfway.decode, bad, "fp16", name="bits", out=filled(x.shape, np.float32))
    refused(ValueError, halfway.encode, x, "fp16", "stochastic", name="seed",
            out=filled(x.shape, np.uint16))
    refused(ValueError, halfway.decode_blocks, codes, scales[:, :1], g, "mxfp4", name="scales",
            out=filled(x.shape, np.float32))


def main():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 96)) * 2.0 ** rng.integers(-30, 30, (64, 96))).astype(np.float32)
    round_cases(x)
    encode_cases(x)
    decode_cases(x)
    block_cases(x)
    overlap_cases(x)
    refusals(x)
    return status("ok: out= writes and returns the caller's array")


if __name__ == "__main__":
    sys.exit(main())
