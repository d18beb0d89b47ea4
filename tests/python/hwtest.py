"""Shared helpers of the Python tests: skipping, checks, bit views, boundary inputs, a runner.

A test that needs an optional module (torch, nbclient) exits with SKIP (CTest's
SKIP_RETURN_CODE) after printing "skipped: ...", so that it never passes silently."""

import importlib
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
# A script-style test's checks: the failed ones printed and kept in `failures`; it ends with
# sys.exit(status(...)), 1 when there is one.
from checks import failures, quiet_check as check, status  # noqa: E402,F401

SKIP = 77


def require(module, purpose):
    """Import `module`, or print why the test is skipped and exit with SKIP."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        print(f"skipped: {purpose} needs '{module}', which is not importable ({e})")
        sys.exit(SKIP)


def check_raises(exc, needle, what, f, *args, **kwargs):
    """A check that f(*args, **kwargs) raises `exc` with `needle` in its message: "WHAT: no
    error" when it returns, "WHAT: MESSAGE" when the message lacks it (another exception
    propagates)."""
    try:
        f(*args, **kwargs)
    except exc as e:
        check(needle in str(e), f"{what}: {e}")
        return
    check(False, f"{what}: no error")


def require_sim(binding):
    """Print why and exit with SKIP when this build of the Python module has no simulator
    (sim/): its extension lacks `binding` (_Emulator, _AnalysisRun, ...)."""
    if not hasattr(importlib.import_module("halfway")._halfway, binding):
        print("skipped: this build of the Python module has no simulator (sim/)")
        sys.exit(SKIP)


def tensor_bits(t):
    """A float32 tensor's encodings as a uint32 array on the host (any device)."""
    return t.detach().cpu().contiguous().numpy().view(np.uint32).copy()


def same_runs(a, b):
    """Two runs' records (lists of lists of arrays) equal, array by array, bit for bit."""
    return len(a) == len(b) and all(len(x) == len(y) and all(np.array_equal(u, v)
                                                             for u, v in zip(x, y))
                                    for x, y in zip(a, b))


def f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits32(x):
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def bits64(x):
    return np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)


def is_nan32(b):
    return (b & 0x7FFFFFFF) > 0x7F800000


def is_snan32(b):
    return is_nan32(b) & ((b & 0x00400000) == 0)


def first_mismatches(x, got, want, k=5):
    """Text for the first k positions where got != want (uint arrays)."""
    bad = np.flatnonzero(got != want)
    lines = [f"{bad.size} mismatches of {got.size}"]
    for i in bad[:k]:
        xi = x.flat[i]
        lines.append(f"  input {float(xi)!r} (0x{int(np.asarray(xi).view(np.uint32 if x.dtype == np.float32 else np.uint64)):X})"
                     f": got 0x{int(got.flat[i]):X}, want 0x{int(want.flat[i]):X}")
    return "\n".join(lines)


def boundary_f32(enc_values16):
    """float32 inputs around every value of a 16-bit format whose encodings, widened to
    float32, are `enc_values16` (float32 array of all finite non-negative values in order):
    each value, the midpoints to its neighbour (ties) and one float32 ulp either side of them,
    plus the overflow threshold region, zeros, infinities and float32 subnormals. Both signs."""
    v = np.unique(enc_values16.astype(np.float64))
    v = v[np.isfinite(v) & (v >= 0)]
    mids = (v[:-1] + v[1:]) / 2  # exact in float64; exactly representable in float32 too
    step = v[-1] - v[-2]
    beyond = v[-1] + step  # as if the exponent range went on
    over = np.array([(v[-1] + beyond) / 2, beyond, 2 * beyond, 3.4028234663852886e38])
    base = np.concatenate([v, mids, over]).astype(np.float32)
    up = np.nextafter(base, np.float32(np.inf))
    down = np.nextafter(base, np.float32(0))
    tiny = f32(np.array([1, 2, 3, 0x7FFFFF, 0x800000, 0x400000], dtype=np.uint32))
    quarter = (v[1:3] / 4).astype(np.float32)  # below half the smallest subnormal
    allpos = np.concatenate([base, up, down, tiny, quarter, np.float32([0, np.inf])])
    allpos = np.unique(allpos[allpos >= 0])
    return np.concatenate([allpos, -allpos])


def random_bits_f32(n, seed):
    """Uniformly random float32 bit patterns: every class (NaN, inf, subnormal) appears."""
    rng = np.random.default_rng(seed)
    return f32(rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32))


def main():
    unittest.main(verbosity=2)
