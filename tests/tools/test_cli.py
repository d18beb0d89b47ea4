#!/usr/bin/env python3
"""End-to-end tests of the `halfway` command line: info, round and the TestFloat filter.

numpy's float16 is the independent oracle for fp16 results: numpy computes float16 + - * / and
sqrt in float32 and rounds once, which is correctly rounded (p' = 24 >= 2*11 + 2), and converts
with its own code. Flags are checked against the Boost.Multiprecision oracle in the C++ tests;
here they are checked only where they follow from the values (overflow to inf, exact results).
Usage: test_cli.py PATH/TO/halfway
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import quiet_check as check, status  # noqa: E402

HALFWAY = sys.argv[1]


def run(args, stdin=None):
    p = subprocess.run([HALFWAY] + args, input=stdin, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def f16_cases(rng, n):
    """Random fp16 encodings plus every boundary class."""
    special = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x0401, 0x7BFF, 0xFBFF,
               0x7C00, 0xFC00, 0x7E00, 0x7C01, 0x3C00, 0xBC00, 0x3BFF, 0x3C01, 0x4000,
               0x5BFF, 0x1400, 0x0200, 0x7A00, 0x0800]
    a = np.concatenate([np.array(special, dtype=np.uint16),
                        rng.integers(0, 1 << 16, n, dtype=np.uint16)])
    b = np.concatenate([np.array(special[::-1], dtype=np.uint16),
                        rng.integers(0, 1 << 16, n, dtype=np.uint16)])
    # all pairs of the special values too
    sa, sb = np.meshgrid(np.array(special, dtype=np.uint16), np.array(special, dtype=np.uint16))
    return np.concatenate([a, sa.ravel()]), np.concatenate([b, sb.ravel()])


def same_f16(got, want):
    """Bit equality, except that any NaN matches any NaN (TestFloat's rule without -checkNaNs)."""
    gn = (got & 0x7FFF) > 0x7C00
    wn = (want & 0x7FFF) > 0x7C00
    return np.where(gn | wn, gn == wn, got == want)


def testfloat(function, cols, options=()):
    lines = "\n".join(" ".join(f"{int(v):04X}" for v in row) for row in zip(*cols)) + "\n"
    rc, out, err = run(["testfloat", function, *options], lines)
    check(rc == 0, f"{function}: exit {rc}: {err}")
    rows = [line.split() for line in out.splitlines()]
    check(len(rows) == len(cols[0]), f"{function}: {len(rows)} lines for {len(cols[0])} cases")
    return rows


def test_testfloat_arith(rng):
    a, b = f16_cases(rng, 20000)
    fa, fb = a.view(np.float16), b.view(np.float16)
    with np.errstate(all="ignore"):
        oracle = {"f16_add": fa + fb, "f16_sub": fa - fb, "f16_mul": fa * fb, "f16_div": fa / fb}
    for fn, want in oracle.items():
        rows = testfloat(fn, [a, b])
        got = np.array([int(r[2], 16) for r in rows], dtype=np.uint16)
        ok = same_f16(got, want.view(np.uint16))
        bad = np.flatnonzero(~ok)
        check(bad.size == 0, f"{fn}: {bad.size} mismatches, first "
              + (f"{a[bad[0]]:04X} {b[bad[0]]:04X} -> {got[bad[0]]:04X}, numpy "
                 f"{want.view(np.uint16)[bad[0]]:04X}" if bad.size else ""))
        # operands echoed at full width, flags as two hex digits
        check(all(len(r) == 4 and len(r[0]) == 4 and len(r[1]) == 4 and len(r[3]) == 2
                  for r in rows), f"{fn}: line format")
        # overflow to infinity from finite operands must raise overflow|inexact (0x05)
        fin = np.isfinite(fa) & np.isfinite(fb) & np.isinf(want)
        if fn != "f16_div":
            flags = np.array([int(r[3], 16) for r in rows])
            check(np.all(flags[fin] == 0x05), f"{fn}: overflow flags")


def test_testfloat_sqrt_and_convert(rng):
    a = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    fa = a.view(np.float16)
    with np.errstate(all="ignore"):
        want = np.sqrt(fa.astype(np.float32)).astype(np.float16)
    rows = testfloat("f16_sqrt", [a])
    got = np.array([int(r[1], 16) for r in rows], dtype=np.uint16)
    check(np.all(same_f16(got, want.view(np.uint16))), "f16_sqrt: all 2^16 inputs")

    rows = testfloat("f16_to_f32", [a])
    got = np.array([int(r[1], 16) for r in rows], dtype=np.uint32)
    want32 = fa.astype(np.float32).view(np.uint32)
    nan = np.isnan(fa)
    check(np.all(got[~nan] == want32[~nan]), "f16_to_f32: all 2^16 inputs")
    check(all(len(r[1]) == 8 for r in rows), "f16_to_f32: 8 hex digits")

    x = np.concatenate([rng.integers(0, 1 << 32, 50000, dtype=np.uint64).astype(np.uint32),
                        (np.arange(1 << 16, dtype=np.uint32) << 16) | 0x1000,
                        np.array([0x477FF000, 0x477FEFFF, 0x33000000, 0x33000001, 0x387FC000],
                                 dtype=np.uint32)])
    lines = "\n".join(f"{int(v):08X}" for v in x) + "\n"
    rc, out, err = run(["testfloat", "f32_to_f16"], lines)
    check(rc == 0, "f32_to_f16 exit")
    got = np.array([int(line.split()[1], 16) for line in out.splitlines()], dtype=np.uint16)
    with np.errstate(all="ignore"):
        want = x.view(np.float32).astype(np.float16).view(np.uint16)
    check(np.all(same_f16(got, want)), "f32_to_f16 against numpy")


def test_testfloat_compare(rng):
    a, b = f16_cases(rng, 5000)
    fa, fb = a.view(np.float16), b.view(np.float16)
    for fn, want in [("f16_eq", fa == fb), ("f16_le", fa <= fb), ("f16_lt", fa < fb),
                     ("f16_eq_signaling", fa == fb), ("f16_le_quiet", fa <= fb),
                     ("f16_lt_quiet", fa < fb)]:
        rows = testfloat(fn, [a, b])
        got = np.array([r[2] == "1" for r in rows])
        check(np.array_equal(got, want), f"{fn}: results")
        nan = np.isnan(fa) | np.isnan(fb)
        flags = np.array([int(r[3], 16) for r in rows])
        if fn in ("f16_le", "f16_lt", "f16_eq_signaling"):
            check(np.all((flags == 0x10) == nan), f"{fn}: invalid on every NaN")


def test_testfloat_fp8_and_options():
    # 464 is the e4m3 tie between 448 and 480: even 448; 480+ overflows: NaN, or 448 with -sat.
    rc, out, _ = run(["testfloat", "f32_to_e4m3"], "43E80000\n43F00000\n7F800000\n")
    check(out.split() == ["43E80000", "7E", "01", "43F00000", "7F", "05", "7F800000", "7F", "10"],
          f"f32_to_e4m3 nosat: {out!r}")
    rc, out, _ = run(["testfloat", "f32_to_e4m3", "-sat"], "43F00000\n")
    check(out.split() == ["43F00000", "7E", "05"], f"f32_to_e4m3 -sat: {out!r}")
    # e5m2: 61440 is a tie that goes up to 65536 = inf.
    rc, out, _ = run(["testfloat", "f32_to_e5m2"], "47700000\n")
    check(out.split() == ["47700000", "7C", "05"], f"f32_to_e5m2 61440: {out!r}")
    rc, out, _ = run(["testfloat", "f32_to_e5m2", "-sat"], "47700000\n")
    check(out.split() == ["47700000", "7B", "05"], f"f32_to_e5m2 -sat: {out!r}")
    # __NV_SATFINITE sends ±inf to ±max too (invalid: the format, saturating, delivers no inf);
    # without -sat e5m2 keeps its infinity, exactly.
    rc, out, _ = run(["testfloat", "f32_to_e5m2", "-sat"], "7F800000\nFF800000\n")
    check(out.split() == ["7F800000", "7B", "10", "FF800000", "FB", "10"],
          f"f32_to_e5m2 -sat inf: {out!r}")
    rc, out, _ = run(["testfloat", "f32_to_e5m2"], "7F800000\n")
    check(out.split() == ["7F800000", "7C", "00"], f"f32_to_e5m2 inf: {out!r}")
    # -rminMag: 1 + 2^-11 rounds down; -rmax rounds up.
    rc, out, _ = run(["testfloat", "f32_to_f16", "-rminMag"], "3F801000\n")
    check(out.split() == ["3F801000", "3C00", "01"], f"-rminMag: {out!r}")
    rc, out, _ = run(["testfloat", "f32_to_f16", "-rmax"], "3F801000\n")
    check(out.split() == ["3F801000", "3C01", "01"], f"-rmax: {out!r}")
    # roundToInt 1.5: near_even 2; -rodd truncates to 1, odd already; -exact flags.
    rc, out, _ = run(["testfloat", "f16_roundToInt"], "3E00\n")
    check(out.split() == ["3E00", "4000", "00"], f"roundToInt: {out!r}")
    rc, out, _ = run(["testfloat", "f16_roundToInt", "-rodd", "-exact"], "3E00\n")
    check(out.split() == ["3E00", "3C00", "01"], f"roundToInt -rodd -exact: {out!r}")
    # extra fields (expected result and flags from testfloat_gen) are ignored
    rc, out, _ = run(["testfloat", "f16_add"], "3C00 3C00 0000 1F\n")
    check(out.split() == ["3C00", "3C00", "4000", "00"], f"extra fields: {out!r}")
    # tininess: (1 - 2^-10) * 2^-14 (1 + 2^-10) = 2^-14 (1 - 2^-20) rounds to 2^-14 = 0x0400; it is
    # tiny before rounding but not after, so only -tininessbefore raises underflow.
    rc, out_a, _ = run(["testfloat", "f16_mul", "-tininessafter"], "3BFE 0401\n")
    rc, out_b, _ = run(["testfloat", "f16_mul", "-tininessbefore"], "3BFE 0401\n")
    check(out_a.split()[-2:] == ["0400", "01"] and out_b.split()[-2:] == ["0400", "03"],
          f"tininess after/before: {out_a!r} {out_b!r}")
    # f64 conversions, bf16
    rc, out, _ = run(["testfloat", "f64_to_f16"], "3FF0000000000000\n")
    check(out.split() == ["3FF0000000000000", "3C00", "00"], f"f64_to_f16: {out!r}")
    rc, out, _ = run(["testfloat", "f16_to_f64"], "3555\n")
    check(out.split() == ["3555", "3FD5540000000000", "00"], f"f16_to_f64: {out!r}")
    rc, out, _ = run(["testfloat", "bf16_to_f32"], "3F80\n")
    check(out.split() == ["3F80", "3F800000", "00"], f"bf16_to_f32: {out!r}")


def round_to_int_odd_oracle(h, exact):
    """f16_roundToInt under round-to-odd from the encoding's fields, in integers (SoftFloat 3e's
    f16_roundToInt with softfloat_round_odd): a NaN is quieted (sign and payload kept), invalid
    if it was signalling; inf, zeros and values >= 2^10 (already integers) are unchanged; any
    other value is truncated to an integer whose last bit is set when something was cut off
    (so -2^-24 -> -1.0), inexact raised only with -exact. Returns (results, flags)."""
    h = h.astype(np.int64)
    sign, e, f = h >> 15, (h >> 10) & 0x1F, h & 0x3FF
    nan = (e == 0x1F) & (f != 0)
    m = np.where(e == 0, f, f | 0x400)        # |value| = m * 2^q
    q = np.where(e == 0, -24, e - 25)
    cut = np.clip(-q, 0, 40)
    kept, rem = m >> cut, m & ((1 << cut) - 1)
    inexact = (e != 0x1F) & (rem != 0)
    kept = np.where(inexact, kept | 1, kept)  # the odd integer
    # kept <= 2^10 - 1 here: exact in fp16; encode it from its binade.
    k = np.floor(np.log2(np.maximum(kept, 1))).astype(np.int64)
    enc = ((k + 15) << 10) | ((kept << 10 >> k) & 0x3FF)
    enc = np.where(kept == 0, 0, enc) | (sign << 15)
    res = np.where(nan, h | 0x200, np.where(inexact, enc, h))
    flags = np.where(nan & ((f & 0x200) == 0), 0x10, 0)
    if exact:
        flags = flags | inexact.astype(np.int64)
    return res, flags


def test_testfloat_round_to_int_odd():
    """All 65536 fp16 encodings through f16_roundToInt -rodd, -exact and -notexact, against
    round_to_int_odd_oracle; and -rodd is not -rminMag: they differ on 38,912 encodings per
    exactness mode (the inexact ones whose truncation is even: 2 signs x 19,456)."""
    a = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    for mode in ("-exact", "-notexact"):
        rows = testfloat("f16_roundToInt", [a], ["-rodd", mode])
        check(all(len(r) == 3 and len(r[1]) == 4 and len(r[2]) == 2 for r in rows),
              f"roundToInt -rodd {mode}: line format")
        got = np.array([int(r[1], 16) for r in rows], dtype=np.int64)
        flags = np.array([int(r[2], 16) for r in rows], dtype=np.int64)
        want, want_flags = round_to_int_odd_oracle(a, mode == "-exact")
        bad = np.flatnonzero((got != want) | (flags != want_flags))
        check(bad.size == 0, f"roundToInt -rodd {mode}: {bad.size} of 65536 differ from the oracle"
              + (f", first {a[bad[0]]:04X} -> {got[bad[0]]:04X} {flags[bad[0]]:02X}, oracle "
                 f"{want[bad[0]]:04X} {want_flags[bad[0]]:02X}" if bad.size else ""))
        check(rows[0x87FF][1:] == ["BC00", "01" if mode == "-exact" else "00"],
              f"roundToInt -rodd {mode}: 87FF (-(2^-14 - 2^-24)) -> {rows[0x87FF][1:]}, want BC00 (-1)")
        check(rows[0x3900][1:] == ["3C00", "01" if mode == "-exact" else "00"],
              f"roundToInt -rodd {mode}: 0.625 -> {rows[0x3900][1:]}, want 3C00 (1)")
        check(rows[0x4100][1:] == ["4200", "01" if mode == "-exact" else "00"],
              f"roundToInt -rodd {mode}: 2.5 -> {rows[0x4100][1:]}, want 4200 (3)")
        rows_z = testfloat("f16_roundToInt", [a], ["-rminMag", mode])
        got_z = np.array([int(r[1], 16) for r in rows_z], dtype=np.int64)
        differ = int(np.count_nonzero(got != got_z))
        check(differ == 38912, f"roundToInt {mode}: -rodd and -rminMag differ on {differ} "
              "encodings, want 38912")


def test_bad_input():
    cases = [
        (["testfloat", "f16_foo"], ""),
        (["testfloat", "f16_add", "-rbogus"], ""),
        (["testfloat", "f16_add"], "3C00 XYZ\n"),
        (["testfloat", "f16_add"], "3C00\n"),
        (["testfloat", "f16_add"], "13C00 3C00\n"),
        (["testfloat", "f64_add"], ""),
        (["testfloat"], ""),
        (["round", "0.1", "--to", "fp12"], None),
        (["round", "0.1", "--to", "e9m30"], None),
        (["round", "0.1", "--rounding", "sideways"], None),
        (["round", "0.1x"], None),
        (["round", "0.1", "--to"], None),
        (["info", "e0m3"], None),
        (["info", "e5m2:bias=-200"], None),
        (["info", "--frobnicate"], None),
        (["nonsense"], None),
    ]
    for args, stdin in cases:
        rc, out, err = run(args, stdin)
        lines = err.strip().splitlines()
        check(rc == 2 and len(lines) == 1 and "error" in lines[0],
              f"{args}: exit {rc}, stderr {err!r}")
    rc, out, err = run(["testfloat", "f16_add"], "3C00 3C00\n3C00 3C00\nnot hex\n")
    check(rc == 2 and "line 3" in err, f"line number in error: {err!r}")


def test_round_and_info():
    rc, out, _ = run(["round", "0.1", "--to", "fp16"])
    want = int(np.float16(0.1).view(np.uint16))
    check(rc == 0 and f"0x{want:04X}  0 01011 1001100110" in out, f"round 0.1: {out}")
    check("0.0999755859375" in out and "inexact" in out, "round 0.1: exact value and flags")
    check("0x2E65" in out and "0x2E67" in out, "round 0.1: neighbours")
    # A decimal that double-rounds through binary64: 1 + 2^-11 + 2^-70 must round up in fp16
    # (via binary64 it would be the tie 1 + 2^-11 and round to even 1.0).
    v = "1.00048828125000000000084703294725430033573"
    rc, out, _ = run(["round", v, "--to", "fp16"])
    check("0x3C01" in out, f"decimal input is rounded once: {out}")
    rc, out, _ = run(["round", "65520"])
    check("0x7C00" in out and "overflow" in out, "round 65520 overflows")
    rc, out, _ = run(["round", "-0x1p-25", "--rounding", "rd"])
    check("0x8001" in out and "underflow" in out, "round -2^-25 down")
    rc, out, _ = run(["info", "--csv", "fp16", "bf16"])
    rows = [r.split(",") for r in out.strip().splitlines()]
    hdr = rows[0]
    fp16 = dict(zip(hdr, rows[1]))
    fi = np.finfo(np.float16)
    check(float(fp16["max"]) == float(fi.max), "info fp16 max")
    check(fp16["min_normal"] == "2^-14" and float(fi.tiny) == 2.0 ** -14, "info fp16 min normal")
    check(fp16["min_subnormal"] == "2^-24" and float(fi.smallest_subnormal) == 2.0 ** -24,
          "info fp16 min subnormal")
    check(fp16["eps"] == "2^-10" and float(fi.eps) == 2.0 ** -10, "info fp16 eps")
    check(fp16["inf_enc"] == "0x7C00" and fp16["bits"] == "16" and fp16["bias"] == "15",
          "info fp16 encodings")
    rc, out, _ = run(["info"])
    for name in ["fp16", "bf16", "tf32", "fp32", "e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz",
                 "e2m3", "e3m2", "e2m1", "e8m0"]:
        check(any(line.startswith(name + " ") for line in out.splitlines()), f"info lists {name}")


def main():
    rng = np.random.default_rng(20261130)
    test_testfloat_arith(rng)
    test_testfloat_sqrt_and_convert(rng)
    test_testfloat_compare(rng)
    test_testfloat_fp8_and_options()
    test_testfloat_round_to_int_odd()
    test_bad_input()
    test_round_and_info()
    return status("cli tests: ok")


if __name__ == "__main__":
    sys.exit(main())
