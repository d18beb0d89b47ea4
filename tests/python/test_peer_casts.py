"""The peers as oracles: ml_dtypes's, numpy's and PyTorch's casts from float32 into fp8, fp6,
fp4, e8m0, bf16 and fp16 against halfway.encode (near_even), encoding for encoding.

Every difference must belong to a documented class (docs/conformance.md, "Peers as oracles"):
a set of inputs given by their float32 bits, on which the peer gives what its own rule says and
halfway what its rule says, both written here from the two libraries' documentation, not from
either's code. A difference outside every class, a class whose inputs do not all follow both
rules, or a class count other than the one recorded fails.

    python3 test_peer_casts.py                 structured sample of every float32 class
    python3 test_peer_casts.py --exhaustive T  all 2^32 float32 inputs for target T (minutes)
"""

import os
import sys
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import boundary_f32, f32, is_nan32  # noqa: E402

import halfway  # noqa: E402

ml_dtypes = hwtest.require("ml_dtypes", "the comparison with ml_dtypes's casts")
torch = hwtest.require("torch", "the comparison with PyTorch's float8 casts")

U32 = np.uint32


def _sign(b):
    return (b >> U32(31)).astype(np.uint32)


def _frac(b):
    return b & U32(0x7FFFFF)


def _is_sub32(b):
    return ((b & U32(0x7F800000)) == 0) & (_frac(b) != 0)


def _is_zero32(b):
    return (b & U32(0x7FFFFFFF)) == 0


# --- Each side's documented rule on a class of inputs --------------------------------------

def quieted_nan(e, m):
    """halfway's NaN from a float32 NaN into an IEEE format with e exponent and m fraction bits
    (docs/semantics.md): sign kept, quiet bit set, the top m-1 payload bits kept."""
    def rule(b):
        top = (b >> U32(23 - m)) & U32((1 << (m - 1)) - 1)
        return (_sign(b) << U32(e + m)) | U32(((1 << e) - 1) << m) | U32(1 << (m - 1)) | top
    return rule


def canonical_nan(e, m):
    """A quiet NaN with the input's sign and no payload (ml_dtypes, Eigen's bfloat16)."""
    def rule(b):
        return (_sign(b) << U32(e + m)) | U32(((1 << e) - 1) << m) | U32(1 << (m - 1))
    return rule


def nan_bits_set(e, m):
    """The all-ones NaN with the input's sign (PyTorch's e5m2: 0x7F | sign)."""
    def rule(b):
        return (_sign(b) << U32(e + m)) | U32((1 << (e + m)) - 1)
    return rule


def opposite_zero(nbits):
    """A zero of the opposite sign (ml_dtypes's fp6/fp4 result for a NaN: -0 for +NaN)."""
    def rule(b):
        return (U32(1) - _sign(b)) << U32(nbits - 1)
    return rule


def constant(v):
    return lambda b: np.full(b.shape, v, dtype=np.uint32)


def e8m0_ties_up(b):
    """ml_dtypes's and PyTorch's e8m0 result on a tie m * 2^k, m = 1.5: the larger neighbour,
    2^(k+1) (0xFF, their NaN, above 2^127)."""
    return np.minimum(((b >> U32(23)) & U32(0xFF)) + U32(1), U32(0xFF))


def e8m0_ties_even(b):
    """halfway's: the neighbour with the even exponent field (docs/semantics.md), which on
    the ties of `e8m0_tie` is the input's own exponent field (0 for 1.5 * 2^-127)."""
    return (b >> U32(23)) & U32(0xFF)


def torch_e8m0_of_magnitude(b):
    """PyTorch's e8m0 of -x: its e8m0 of |x| (the sign bit is ignored)."""
    return _torch("float8_e8m0fnu")(f32(b & U32(0x7FFFFFFF))).astype(np.uint32)


def e8m0_torch_subnormal(b):
    """PyTorch's e8m0 of a float32 subnormal: its guard/round/sticky logic reads fraction bit
    22 as the guard of an implicit bit 0, so fractions above 0x400000 give 0x01 (2^-126)."""
    return np.where(_frac(b) > U32(0x400000), U32(1), U32(0))


def e8m0_nearest_subnormal(b):
    """halfway's e8m0 of a float32 subnormal M * 2^-149: 2^-127 (0x00) up to the tie at
    M = 0x600000 (tie included, even), 2^-126 (0x01) above; negatives are NaN."""
    return np.where(_sign(b) == 1, U32(0xFF),
                    np.where(_frac(b) > U32(0x600000), U32(1), U32(0)))


# --- Input classes ------------------------------------------------------------------------

def nan_in(b):
    return is_nan32(b)


def e8m0_tie(b):
    """Positive x = 1.5 * 2^k exactly (a float32 normal with fraction 0x400000, or the
    subnormal 0x00600000), whose exponent field would round to even downwards."""
    e = (b >> U32(23)) & U32(0xFF)
    pos = _sign(b) == 0
    normal_tie = (_frac(b) == U32(0x400000)) & (e > 0) & (e < 255) & (e % 2 == 0)
    return pos & (normal_tie | (b == U32(0x00600000)))


class Class:
    """A documented difference: the inputs `where(b)`, the peer's result `peer(b)` and
    halfway's `ours(b)` on them, and why."""

    def __init__(self, name, where, peer, ours, why):
        self.name, self.where, self.peer, self.ours, self.why = name, where, peer, ours, why


def _neg_nonzero(b):
    return (_sign(b) == 1) & ~_is_zero32(b) & ~is_nan32(b)


E8M0_TIES = Class("e8m0 tie", e8m0_tie, e8m0_ties_up, e8m0_ties_even,
                  "1.5*2^k rounds to the larger power (peer) or to the even exponent field "
                  "(halfway); at 1.5*2^127 the peer overflows to NaN 0xFF")

ML_CLASSES = {
    "e5m2": [Class("NaN payload", nan_in, canonical_nan(5, 2), quieted_nan(5, 2),
                   "ml_dtypes returns the quiet NaN with the input's sign and no payload; "
                   "halfway keeps the top payload bit")],
    "bf16": [Class("NaN payload", nan_in, canonical_nan(8, 7), quieted_nan(8, 7),
                   "ml_dtypes (Eigen's bfloat16) returns 0x7FC0|sign; halfway keeps the top "
                   "6 payload bits")],
    "e2m3": [Class("NaN into a format without NaN", nan_in, opposite_zero(6), constant(0x1F),
                   "ml_dtypes gives a zero of the opposite sign (-0 for +NaN); halfway gives "
                   "+max with invalid")],
    "e3m2": [Class("NaN into a format without NaN", nan_in, opposite_zero(6), constant(0x1F),
                   "ml_dtypes gives a zero of the opposite sign (-0 for +NaN); halfway gives "
                   "+max with invalid")],
    "e2m1": [Class("NaN into a format without NaN", nan_in, opposite_zero(4), constant(0x7),
                   "ml_dtypes gives a zero of the opposite sign (-0 for +NaN); halfway gives "
                   "+max with invalid")],
    "e8m0": [E8M0_TIES,
             Class("zero", _is_zero32, constant(0xFF), constant(0x00),
                   "ml_dtypes gives NaN for ±0 (no zero in e8m0); halfway clamps to 2^-127 with "
                   "underflow, as for every positive value below it")],
}

def e4m3_overflow(b):
    """|x| above 464, the tie between e4m3's max 448 and 480 (which is past it), or ±inf."""
    mag = b & U32(0x7FFFFFFF)
    return (mag > U32(0x43E80000)) & (mag <= U32(0x7F800000))


TORCH_CLASSES = {
    "e4m3": [Class("overflow saturates", e4m3_overflow,
                   lambda b: (_sign(b) << U32(7)) | U32(0x7E),
                   lambda b: (_sign(b) << U32(7)) | U32(0x7F),
                   "PyTorch's float8_e4m3fn cast saturates finite overflow and ±inf to ±448; "
                   "halfway's e4m3 gives NaN, its e4m3:sat gives ±448 (no difference)")],
    "e5m2": [Class("NaN payload", nan_in, nan_bits_set(5, 2), quieted_nan(5, 2),
                   "PyTorch returns 0x7F|sign for every NaN; halfway keeps the top payload bit")],
    "e8m0": [E8M0_TIES,
             Class("negative", _neg_nonzero, torch_e8m0_of_magnitude, constant(0xFF),
                   "PyTorch ignores the sign bit and converts |x|; halfway: negative values "
                   "are invalid (NaN 0xFF)"),
             Class("subnormal", _is_sub32, e8m0_torch_subnormal, e8m0_nearest_subnormal,
                   "PyTorch rounds float32 subnormals from their fraction's bit 22, so "
                   "0x00400001..0x005FFFFF (nearer 2^-127) give 2^-126; halfway rounds the "
                   "value, negatives are NaN")],
}


def _ml(name):
    dtype = getattr(ml_dtypes, name)
    view = np.uint16 if name == "bfloat16" else np.uint8

    def cast(x):
        with np.errstate(all="ignore"):
            return x.astype(dtype).view(view)
    return cast


def _numpy_fp16(x):
    with np.errstate(all="ignore"):
        return x.astype(np.float16).view(np.uint16)


def _torch(name):
    dtype = getattr(torch, name)

    def cast(x):
        return torch.from_numpy(x).to(dtype).view(torch.uint8).numpy()
    return cast


class Target:
    def __init__(self, peer, dtype, fmt, cast, classes, nbits, name=None):
        self.peer, self.dtype, self.fmt, self.cast = peer, dtype, fmt, cast
        self.classes, self.nbits = classes, nbits
        self.name = name or f"{peer}:{dtype}"


def targets():
    ml = [("float8_e4m3fn", "e4m3", 8), ("float8_e5m2", "e5m2", 8),
          ("float8_e4m3fnuz", "e4m3fnuz", 8), ("float8_e5m2fnuz", "e5m2fnuz", 8),
          ("float6_e2m3fn", "e2m3", 6), ("float6_e3m2fn", "e3m2", 6),
          ("float4_e2m1fn", "e2m1", 4), ("float8_e8m0fnu", "e8m0", 8), ("bfloat16", "bf16", 16)]
    out = [Target("ml_dtypes", d, f, _ml(d), ML_CLASSES.get(f, []), n) for d, f, n in ml]
    out.append(Target("numpy", "float16", "fp16", _numpy_fp16, NUMPY_CLASSES, 16))
    for d, f in [("float8_e4m3fn", "e4m3"), ("float8_e5m2", "e5m2"),
                 ("float8_e4m3fnuz", "e4m3fnuz"), ("float8_e5m2fnuz", "e5m2fnuz"),
                 ("float8_e8m0fnu", "e8m0")]:
        if hasattr(torch, d):
            out.append(Target("torch", d, f, _torch(d), TORCH_CLASSES.get(f, []), 8))
    # PyTorch's saturating e4m3 is halfway's e4m3:sat exactly.
    out.append(Target("torch", "float8_e4m3fn", "e4m3:sat", _torch("float8_e4m3fn"), [], 8,
                      "torch:float8_e4m3fn=e4m3:sat"))
    return out


NUMPY_CLASSES = [Class("signalling NaN", lambda b: is_nan32(b) & ((b & U32(0x400000)) == 0),
                       lambda b: np.where(((b >> U32(13)) & U32(0x3FF)) == 0,
                                          (_sign(b) << U32(15)) | U32(0x7C01),
                                          (_sign(b) << U32(15)) | U32(0x7C00) | ((b >> U32(13)) & U32(0x3FF))),
                       quieted_nan(5, 10),
                       "numpy passes a signalling NaN through unquieted (payload 0 becomes 1); "
                       "halfway quiets it, as x86 F16C does")]


# --- The comparison ----------------------------------------------------------------------

def compare(target, x, got):
    """Differences between halfway's encodings `got` and the peer's, by class.

    Returns (counts, problems): counts maps each class name to its number of differing inputs;
    problems lists the inputs that break a class's rules or fall outside every class."""
    b = x.view(np.uint32)
    want = target.cast(x).astype(np.uint32)
    got = got.astype(np.uint32)
    diff = got != want
    claimed = np.zeros(b.shape, dtype=bool)
    counts, problems = {}, []
    for c in target.classes:
        sel = c.where(b) & ~claimed
        claimed |= sel
        bs = b[sel]
        for side, have, rule in (("peer", want[sel], c.peer), ("halfway", got[sel], c.ours)):
            bad = np.flatnonzero(have != rule(bs).astype(np.uint32))
            for i in bad[:3]:
                problems.append(f"{target.name} class '{c.name}': input 0x{int(bs[i]):08X}: "
                                f"{side} gives 0x{int(have[i]):X}, its rule 0x{int(rule(bs[i:i+1])[0]):X}")
            if bad.size > 3:
                problems.append(f"  ... {bad.size} inputs of class '{c.name}' break the {side} rule")
        counts[c.name] = int(diff[sel].sum())
    rest = np.flatnonzero(diff & ~claimed)
    for i in rest[:5]:
        problems.append(f"{target.name}: unexplained difference at input 0x{int(b[i]):08X} "
                        f"({float(x[i])!r}): halfway 0x{int(got[i]):X}, peer 0x{int(want[i]):X}")
    if rest.size:
        problems.append(f"{target.name}: {rest.size} unexplained differences")
    return counts, problems


# --- The structured sample ---------------------------------------------------------------

def exponent_sweep(seed=23, randoms=48):
    """Every float32 exponent field (0: subnormals and zero, 255: inf and NaN payloads), both
    signs, with random fractions and the boundary fractions of every target's rounding
    position (fraction bits 0, 1, 2, 3, 7, 10: the last kept bit, the tie bit, one either
    side) and of NaN payloads (quiet bit, top and bottom payload bits)."""
    frac = {0, 1, 2, 3, 0x7FFFFF, 0x7FFFFE, 0x400000, 0x3FFFFF, 0x400001, 0x200000, 0x600000,
            0x5FFFFF, 0x600001, 0x100000}
    for m in (0, 1, 2, 3, 7, 10):
        tie = 1 << (22 - m)
        for f in (tie, tie - 1, tie + 1, 3 * tie, 3 * tie - 1, 3 * tie + 1, 2 * tie if m else 0):
            if 0 <= f <= 0x7FFFFF:
                frac.add(f)
    rng = np.random.default_rng(seed)
    fr = np.concatenate([np.array(sorted(frac), dtype=np.uint32),
                         rng.integers(0, 1 << 23, randoms, dtype=np.uint32)])
    e = np.arange(512, dtype=np.uint32)  # sign and exponent field
    return f32(((e[:, None] << U32(23)) | fr[None, :]).reshape(-1))


def format_values(target):
    """Every finite non-negative value of the target format, from the peer's own decoding."""
    codes = np.arange(1 << target.nbits, dtype=np.uint16 if target.nbits == 16 else np.uint8)
    if target.peer == "torch":
        v = torch.from_numpy(codes).view(getattr(torch, target.dtype)).float().numpy()
    elif target.peer == "numpy":
        v = codes.view(np.float16).astype(np.float32)
    else:
        v = codes.view(getattr(ml_dtypes, target.dtype)).astype(np.float32)
    return v[np.isfinite(v) & (v >= 0)]


def sample(target):
    """The exponent sweep, and around every value of the format: the value, the midpoints to
    its neighbours and one float32 ulp either side (hwtest.boundary_f32), both signs."""
    with np.errstate(over="ignore"):
        x = np.concatenate([exponent_sweep(), boundary_f32(format_values(target))])
    return np.unique(x.view(np.uint32)).view(np.float32)


# Differences per class in the default sample (`sample`), measured and explained in
# docs/conformance.md; a change of either library's behaviour changes a count and fails.
SAMPLE_COUNTS = {
    "ml_dtypes:float8_e5m2": {"NaN payload": 56},
    "ml_dtypes:float6_e2m3fn": {"NaN into a format without NaN": 176},
    "ml_dtypes:float6_e3m2fn": {"NaN into a format without NaN": 176},
    "ml_dtypes:float4_e2m1fn": {"NaN into a format without NaN": 176},
    "ml_dtypes:float8_e8m0fnu": {"e8m0 tie": 128, "zero": 2},
    "ml_dtypes:bfloat16": {"NaN payload": 146},
    "numpy:float16": {"signalling NaN": 126},
    "torch:float8_e4m3fn": {"overflow saturates": 21208},
    "torch:float8_e5m2": {"NaN payload": 120},
    "torch:float8_e8m0fnu": {"e8m0 tie": 128, "negative": 22669, "subnormal": 16},
}

# The same for all 2^32 float32 inputs (label `exhaustive`), counted from each class's
# definition: NaNs per sign 2^23 - 1, of them 2^22 - 1 signalling; e4m3 overflow from 0x43E80001
# to inf; e8m0 negatives minus those whose magnitude is 0xFF (NaN) in PyTorch too.
_NANS = 2 * (2**23 - 1)
EXHAUSTIVE_COUNTS = {
    "ml_dtypes:float8_e5m2": {"NaN payload": 2**23},
    "ml_dtypes:float6_e2m3fn": {"NaN into a format without NaN": _NANS},
    "ml_dtypes:float6_e3m2fn": {"NaN into a format without NaN": _NANS},
    "ml_dtypes:float4_e2m1fn": {"NaN into a format without NaN": _NANS},
    "ml_dtypes:float8_e8m0fnu": {"e8m0 tie": 128, "zero": 2},
    "ml_dtypes:bfloat16": {"NaN payload": 2 * (2**23 - 2**17)},
    "numpy:float16": {"signalling NaN": 2 * (2**22 - 1)},
    "torch:float8_e4m3fn": {"overflow saturates": 2 * (0x7F800000 - 0x43E80000)},
    "torch:float8_e5m2": {"NaN payload": 2 * (2**22 - 1)},
    "torch:float8_e8m0fnu": {"e8m0 tie": 128,
                             "negative": 2**31 - 2**23 - (0x7F800000 - 0x7F400000 + 1),
                             "subnormal": 0x600000 - 0x400001},
}


def run_target(target, x):
    return compare(target, x, halfway.encode(x, target.fmt))


class PeerCasts(unittest.TestCase):
    def test_every_difference_is_classified(self):
        for t in targets():
            with self.subTest(target=t.name):
                x = sample(t)
                counts, problems = run_target(t, x)
                print(f"{t.name}: {x.size} inputs, differences {counts}")
                self.assertEqual(problems, [], "\n".join(problems))
                self.assertEqual(counts, SAMPLE_COUNTS.get(t.name, {}))

    def test_negative_control_ties_away(self):
        """halfway pretending that ties go away from zero must be caught on every format."""
        for t in targets():
            with self.subTest(target=t.name):
                x = sample(t)
                _, problems = compare(t, x, halfway.encode(x, t.fmt, "near_maxMag"))
                self.assertNotEqual(problems, [])

    def test_negative_control_nan_sign(self):
        """halfway dropping the sign of negative NaNs must be caught where NaNs keep it."""
        for t in targets():
            if t.fmt in ("e2m3", "e3m2", "e2m1", "e8m0", "e4m3fnuz", "e5m2fnuz"):
                continue
            with self.subTest(target=t.name):
                x = sample(t)
                got = halfway.encode(x, t.fmt)
                nan = is_nan32(x.view(np.uint32))
                got = np.where(nan, got & ((1 << (t.nbits - 1)) - 1), got).astype(got.dtype)
                _, problems = compare(t, x, got)
                self.assertNotEqual(problems, [])


def exhaustive(name):
    t = {t.name: t for t in targets()}.get(name)
    if t is None:
        print(f"unknown target {name!r}; one of {', '.join(t.name for t in targets())}",
              file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    t0 = time.time()
    total, problems = {}, []
    chunk = 1 << 24
    for start in range(0, 1 << 32, chunk):
        x = f32(np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32))
        counts, p = run_target(t, x)
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
        problems.extend(p[:max(0, 10 - len(problems))])
    print(f"{t.name}: 2^32 float32 inputs, differences {total}, {time.time() - t0:.0f} s")
    for line in problems:
        print(line)
    if problems or total != EXHAUSTIVE_COUNTS.get(t.name, {}):
        print(f"expected {EXHAUSTIVE_COUNTS.get(t.name, {})}")
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--exhaustive":
        sys.exit(exhaustive(sys.argv[2]))
    hwtest.main()
