"""Block schemes in `halfway analyze` and `halfway.analyze`: blocks.csv and blocks_detail.csv
against an oracle written from docs/blocks.md in numpy (test_blocks.py's transcriptions of
the schemes; the counts, the scales and the harmless/real split from their definitions; the
sums in the documented order with Python floats), for 2-d, 3-d and padded arrays on both
axes; a negative control (a planted fault in the files fails the checker); the CLI and the
Python function give the same bytes at any chunk size; bad input is one line and exit 2 (a
ValueError or TypeError in Python).

usage: test_analyze_blocks.py HALFWAY_BINARY"""
import csv
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

hwtest.require("pandas", "halfway.analyze's DataFrames")
import halfway  # noqa: E402
from test_blocks import (F32, MX, blocks_view, element_value, round_table,  # noqa: E402
                         table, te_fp4_codes)

hwtest.require_sim("_AnalysisRun")

SCHEMES = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "nvfp4",
           "nvfp4_2d", "fp8_block", "fp8_block_2d", "nvfp4:row_scaled"]


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


# ---------------------------------------------------------------------------------------------
# The oracle: one scheme on one padded matrix, block by block, from docs/blocks.md.

def mx_blocks(b, scheme):
    """MX, floor rule: k = floor(log2 amax) - emax_elem, clamped to [-127, 127]."""
    elem = MX[scheme]
    emax_val = table(elem)[1][-1]
    emax = int(np.floor(np.log2(emax_val)))
    amax = np.abs(b).max(axis=-1)
    _, e = np.frexp(amax)
    k0 = e - 1 - emax
    k = np.where(amax == 0, -127, np.clip(k0, -127, 127))
    clamped = (amax > 0) & ((k0 < -127) | (k0 > 127))
    pre = b / np.ldexp(1.0, k)[..., None]  # exact in binary64
    codes = round_table(pre, elem)
    q = (element_value(codes, elem) * np.ldexp(1.0, k)[..., None]).astype(F32)
    scale = np.ldexp(1.0, k).astype(F32)
    sat = (np.abs(pre) > emax_val).sum(axis=-1)
    return q, scale, sat, clamped, np.zeros_like(clamped)


def nvfp4_blocks(b, global_amax):
    """TE's NVFP4 reference in float32 (docs/blocks.md steps 1-5); harmless: d above 448.
    global_amax: the tensor's, or (row-scaled) an array of each block's line's amax."""
    vec_max = np.abs(b).max(axis=-1).astype(F32)
    with np.errstate(divide="ignore", over="ignore"):
        g = F32(F32(448.0) * F32(6.0)) / np.asarray(global_amax, dtype=F32)
    g = np.minimum(g, np.finfo(F32).max)
    g = np.where(g == 0, F32(1.0), g).astype(F32)
    gd = F32(1.0) / g
    mult = g * (F32(1.0) / F32(6.0))
    d = np.minimum(vec_max * mult, np.finfo(F32).max)
    ds = np.minimum(d, F32(448.0))
    scode = round_table(ds.astype(np.float64), "e4m3")
    sval = element_value(scode, "e4m3").astype(F32)
    with np.errstate(divide="ignore", over="ignore"):  # (a zero line: gd = 1 / fp32 max)
        enc = np.minimum(F32(1.0) / (sval * gd), np.finfo(F32).max)
    with np.errstate(over="ignore", invalid="ignore"):
        y = (b * enc[..., None]).astype(F32)
    sat = ((np.abs(y) > 6) & (sval != 0)[..., None]).sum(axis=-1)
    codes = te_fp4_codes(np.clip(y, F32(-6), F32(6)))
    dec = (sval * (F32(1.0) / g)).astype(F32)
    q = (element_value(codes, "e2m1").astype(F32) * dec[..., None]).astype(F32)
    harmless = d > 448
    real = (vec_max > 0) & (sval == 0)
    return q, sval, sat, real, harmless


def fp8_blocks(b):
    amax = np.abs(b).max(axis=-1).astype(F32)
    s = (amax / F32(448.0)).astype(F32)
    real = (amax > 0) & (s == 0)
    s = np.where(s == 0, np.finfo(np.float32).smallest_subnormal, s)
    s = np.where(amax == 0, F32(1.0), s).astype(F32)
    pre = (b / s[..., None]).astype(F32)
    codes = round_table(pre.astype(np.float64), "e4m3")
    q = (element_value(codes, "e4m3").astype(F32) * s[..., None]).astype(F32)
    sat = (np.abs(pre) > 448).sum(axis=-1)
    return q, s, sat, real, np.zeros_like(real)


def oracle_matrix(x, scheme, axis, global_amax):
    """Per block, in row-major block order: amax, scale, flushed, saturated, harmless, real,
    signal, noise (the last two summed in the block's row-major element order). Row-scaled
    NVFP4 takes each line's amax of this matrix in place of global_amax (the tensor's): its
    rows for axis -1, its columns for axis 0."""
    nv = scheme.startswith("nvfp4")
    k = 16 if nv else 128 if scheme.startswith("fp8") else 32
    two_d = scheme.endswith("_2d")
    r, c = x.shape
    tr, tc = (k, k) if two_d else (1, k) if axis == -1 else (k, 1)
    pr, pc = -(-r // tr) * tr, -(-c // tc) * tc
    xp = np.zeros((pr, pc), dtype=F32)
    xp[:r, :c] = x
    b = blocks_view(xp, k, 0 if axis == 0 else -1, two_d)
    if scheme.endswith(":row_scaled"):  # blocks_view's [block rows, block cols]: a line each
        line = np.abs(xp).max(axis=1 if axis == -1 else 0)
        global_amax = line[:, None] if axis == -1 else line[None, :]
    if nv:
        q, scale, sat, real, harmless = nvfp4_blocks(b, global_amax)
    elif scheme.startswith("fp8"):
        q, scale, sat, real, harmless = fp8_blocks(b)
    else:
        q, scale, sat, real, harmless = mx_blocks(b.astype(np.float64), scheme)
    rows = []
    for i in range(b.shape[0]):
        for j in range(b.shape[1]):
            # The block's elements in its row-major order: blocks_view keeps it for 1×k and
            # k×k; k×1 blocks (axis 0) list their rows top to bottom, which is that order too.
            xs, qs = b[i, j], q[i, j]
            sig, noi = sums([(xs.tolist(), qs.tolist())])
            rows.append(dict(amax=float(np.abs(xs).max()), scale=float(scale[i, j]),
                             flushed=int(((xs != 0) & (qs == 0)).sum()),
                             saturated=int(sat[i, j]), harmless=bool(harmless[i, j]),
                             real=bool(real[i, j]), signal=sig, noise=noi,
                             elements=xs.size, xs=xs.tolist(), qs=qs.tolist()))
    return rows


def sums(blocks):
    """Σx² and Σ(x-q)² as binary64 sums running element by element over the blocks given
    (each a pair of lists: the values and their decoded values), in that order."""
    sig = noi = 0.0
    for xs, qs in blocks:
        for v, w in zip(xs, qs):
            sig += v * v
            noi += (v - w) * (v - w)
    return sig, noi


def views(shape, axis):
    """The matrices of docs/analyze.md's view of a C-order array for blocks along `axis`."""
    a = axis % len(shape)
    if a == len(shape) - 1:
        return lambda x: [x.reshape(-1, shape[-1])], -1
    before = int(np.prod(shape[:a], dtype=np.int64))
    after = int(np.prod(shape[a + 1:], dtype=np.int64))
    return lambda x: list(x.reshape(before, shape[a], after)), 0


def oracle(x, scheme, axis):
    split, block_axis = views(x.shape, axis)
    gamax = float(np.abs(x).max()) if x.size else 0.0
    rows, mats = [], split(x)
    for m, mat in enumerate(mats):
        for r in oracle_matrix(mat, scheme, block_axis, gamax):
            r["matrix"] = m
            rows.append(r)
    return rows


# ---------------------------------------------------------------------------------------------
# The checker: blocks.csv and blocks_detail.csv against the oracle.

def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def snr(sig, noi):
    if not sig > 0 or not math.isfinite(noi):
        return ""
    return "inf" if noi == 0 else 10 * math.log10(sig / noi)


def same_float(field, want):
    if want == "":
        return field == ""
    if want == "inf":
        return field == "inf"
    return float(field) == want


def check_folder(folder, arrays, schemes, axis):
    blocks = read_csv(os.path.join(folder, "blocks.csv"))
    detail = read_csv(os.path.join(folder, "blocks_detail.csv"))
    check(len(blocks) == len(arrays) * len(schemes), f"{len(blocks)} rows in blocks.csv")
    di = 0
    for name, x in arrays.items():
        for s in schemes:
            row = next(r for r in blocks if r["name"] == name and r["scheme"] == s)
            want = oracle(x, s, axis)
            what = f"{name} {s} axis {axis}"
            hist = {}
            for w in want:
                if w["scale"] != 0 and math.isfinite(w["scale"]):
                    e = math.frexp(w["scale"])[1] - 1
                    hist[e] = hist.get(e, 0) + 1
            exps = [e for e, n in hist.items() for _ in range(n)]
            counts = {
                "elements": sum(w["elements"] for w in want), "blocks": len(want),
                "flushed": sum(w["flushed"] for w in want),
                "saturated": sum(w["saturated"] for w in want),
                "scales_clamped": sum(w["harmless"] or w["real"] for w in want),
                "scales_clamped_harmless": sum(w["harmless"] for w in want),
                "scales_clamped_real": sum(w["real"] for w in want),
                "nan_scales": 0, "zero_scales": sum(w["scale"] == 0 for w in want),
                "clipped_blocks": sum(w["saturated"] > 0 for w in want),
                "values": x.size,
            }
            for k, v in counts.items():
                check(int(row[k]) == v, f"{what}: {k} {row[k]}, want {v}")
            check(row["scale_hist"] == ";".join(f"{e}:{n}" for e, n in sorted(hist.items())),
                  f"{what}: scale_hist {row['scale_hist']}, want {sorted(hist.items())}")
            if exps:
                mean = sum(exps) / len(exps)
                std = math.sqrt(sum((e - mean) ** 2 for e in exps) / len(exps))
                check(abs(float(row["scale_exp_mean"]) - mean) <= 1e-12 * max(1, abs(mean)),
                      f"{what}: scale_exp_mean {row['scale_exp_mean']}, want {mean}")
                check(abs(float(row["scale_exp_std"]) - std) <= 1e-12 * max(1, std),
                      f"{what}: scale_exp_std {row['scale_exp_std']}, want {std}")
            check(float(row["clipped_fraction"]) == counts["clipped_blocks"] / len(want),
                  f"{what}: clipped_fraction")
            # Signal and noise: the binary64 running sums, block after block, each block's
            # elements in order; the oracle's per-block lists keep that order.
            sig, noi = sums((w["xs"], w["qs"]) for w in want)
            check(float(row["signal"]) == sig, f"{what}: signal {row['signal']}, want {sig}")
            check(float(row["noise"]) == noi, f"{what}: noise {row['noise']}, want {noi}")
            check(same_float(row["snr_db"], snr(sig, noi)), f"{what}: snr_db {row['snr_db']}")
            # One detail row per block, in order.
            for w in want:
                d = detail[di]
                di += 1
                check(d["name"] == name and d["scheme"] == s, f"{what}: detail row {di} is "
                      f"{d['name']} {d['scheme']}")
                for k, v in (("flushed", w["flushed"]), ("saturated", w["saturated"]),
                             ("scale_clamped_harmless", int(w["harmless"])),
                             ("scale_clamped_real", int(w["real"])), ("matrix", w["matrix"])):
                    check(int(d[k]) == v, f"{what}: detail row {di} {k} {d[k]}, want {v}")
                for k in ("amax", "scale", "signal", "noise"):
                    check(float(d[k]) == w[k], f"{what}: detail row {di} {k} {d[k]}, want {w[k]}")
                check(same_float(d["snr_db"], snr(w["signal"], w["noise"])),
                      f"{what}: detail row {di} snr_db")
    check(di == len(detail), f"{len(detail) - di} extra rows in blocks_detail.csv")


# ---------------------------------------------------------------------------------------------

def test_arrays():
    g = np.random.default_rng(3)

    def mixed(shape, lo, hi, row_spread=0):
        n = int(np.prod(shape))
        v = (np.exp2(g.uniform(lo, hi, n)) * g.choice([-1, 1], n)).astype(F32)
        v[g.integers(0, n, n // 40)] = 0
        v = v.reshape(shape)
        if row_spread:  # rows far apart: NVFP4's zero scales, MX's clamped exponents
            v = (v * np.exp2(np.linspace(-row_spread, 0, shape[0]))[:, None]).astype(F32)
        return v

    # An amax whose NVFP4 block scale d lands above 448 by fp32 rounding: a harmless clamp.
    top = next(a for a in (F32(1.0) + F32(2.0 ** -23) * F32(i) for i in range(1000))
               if nvfp4_blocks(np.array([[a]], dtype=F32), a)[4].any())
    t = mixed((16, 64), -4, -1)
    t[3, 5] = top
    return {
        "w": mixed((64, 256), -8, 4, row_spread=150),
        "top": t,
        "a": mixed((2, 48, 40), -20, 2),  # 3-d; 40 and 48 do not divide into 32 or 128
        "b": mixed((70,), -3, 3),         # 1-d, padded
    }


def run_cli(binary, args):
    return subprocess.run([binary, "analyze", *args], capture_output=True, text=True)


def main():
    binary = sys.argv[1]
    arrays = test_arrays()
    with tempfile.TemporaryDirectory() as tmp:
        npz = os.path.join(tmp, "x.npz")
        np.savez(npz, **arrays)
        formats = "bf16," + ",".join(SCHEMES)
        saw = {"harmless": 0, "real": 0, "saturated": 0, "zero": 0}
        for axis in (-1, 0):
            out = os.path.join(tmp, f"cli{axis}")
            p = run_cli(binary, [npz, "--formats", formats, "--axis", str(axis), "--per-block",
                                 "--out", out])
            check(p.returncode == 0, f"analyze failed: {p.stderr}")
            check_folder(out, arrays, SCHEMES, axis)
            for r in read_csv(os.path.join(out, "blocks.csv")):
                saw["harmless"] += int(r["scales_clamped_harmless"])
                saw["real"] += int(r["scales_clamped_real"])
                saw["saturated"] += int(r["saturated"])
                saw["zero"] += int(r["zero_scales"])
            # The same bytes in chunks of one block, and from halfway.analyze.
            tiny = os.path.join(tmp, f"tiny{axis}")
            p = run_cli(binary, [npz, "--formats", formats, "--axis", str(axis), "--per-block",
                                 "--block-chunk", "1", "--out", tiny])
            check(p.returncode == 0, f"analyze --block-chunk 1 failed: {p.stderr}")
            py = os.path.join(tmp, f"py{axis}")
            res = halfway.analyze(arrays, formats, out_dir=py, axis=axis, per_block=True,
                                  block_chunk=7)
            check(len(res.blocks) == len(arrays) * len(SCHEMES), "halfway.analyze: blocks rows")
            check(len(res.blocks_detail) == len(read_csv(os.path.join(out, "blocks_detail.csv"))),
                  "halfway.analyze: blocks_detail rows")
            for name in ("blocks.csv", "blocks_detail.csv", "trace.csv"):
                ref = open(os.path.join(out, name), "rb").read()
                check(open(os.path.join(tiny, name), "rb").read() == ref,
                      f"{name} differs with --block-chunk 1 (axis {axis})")
                check(open(os.path.join(py, name), "rb").read() == ref,
                      f"{name} differs from halfway.analyze's (axis {axis})")
        for k, n in saw.items():  # the cases reach every kind of event they check
            check(n > 0, f"no {k} in the cases")
        print("blocks.csv and blocks_detail.csv equal the oracle;", saw)

        # A negative control: each planted fault in the files fails the checker.
        out = os.path.join(tmp, "cli-1")
        for fname, col, delta in (("blocks.csv", "saturated", 1),
                                  ("blocks.csv", "scales_clamped_harmless", 1),
                                  ("blocks_detail.csv", "flushed", 1),
                                  ("blocks.csv", "noise", 0)):
            bad = os.path.join(tmp, "bad")
            os.makedirs(bad, exist_ok=True)
            for n in ("blocks.csv", "blocks_detail.csv"):
                rows = read_csv(os.path.join(out, n))
                if n == fname:
                    r = rows[len(rows) // 2]
                    r[col] = (repr(float(r[col]) * (1 + 2.0 ** -40) + 1e-300) if col == "noise"
                              else str(int(r[col]) + delta))
                with open(os.path.join(bad, n), "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
                    w.writeheader()
                    w.writerows(rows)
            try:
                check_folder(bad, arrays, SCHEMES, -1)
            except AssertionError as e:
                print(f"negative control ({fname} {col}): caught: {e}")
            else:
                raise AssertionError(f"a planted fault in {fname} {col} was not caught")

        # Bad input: one line, exit 2, the output folder untouched.
        out = os.path.join(tmp, "bad-out")
        for args, want in (
                (["--formats", "mxfp5"], "mxfp5"),
                (["--formats", "nvfp4,nvfp4"], "given twice"),
                (["--formats", "nvfp4", "--axis", "2"], "axis 2 is out of range"),
                (["--formats", "nvfp4", "--axis", "x"], "--axis"),
                (["--formats", "nvfp4", "--per-block", "--max-rows", "10"], "more than 10 rows"),
                (["--formats", "nvfp4", "--per-block", "--max-rows", "0"], "at least 1"),
                (["--formats", "nvfp4", "--per-block", "--max-rows", "-3"], "--max-rows"),
                (["--formats", "nvfp4", "--max-rows", "30"], "give --per-block"),
                (["--formats", "nvfp4", "--block-chunk", "0"], "at least 1"),
                (["--formats", "fp16", "--per-block"], "apply to block schemes")):
            p = run_cli(binary, [npz, *args, "--out", out])
            check(p.returncode == 2, f"{args}: exit {p.returncode}, {p.stderr}")
            lines = p.stderr.strip().splitlines()
            check(len(lines) == 1 and want in lines[0], f"{args}: {p.stderr!r}")
            check(not os.path.exists(os.path.join(out, "manifest.json")), f"{args}: wrote {out}")
        # The limit is the number of rows: exactly enough is accepted.
        n_rows = sum(len(oracle(x, "nvfp4", -1)) for x in arrays.values())
        p = run_cli(binary, [npz, "--formats", "nvfp4", "--per-block", "--max-rows",
                             str(n_rows), "--out", out])
        check(p.returncode == 0, f"--max-rows {n_rows}: {p.stderr}")
        check(len(read_csv(os.path.join(out, "blocks_detail.csv"))) == n_rows, "rows")
        p = run_cli(binary, [npz, "--formats", "nvfp4", "--per-block", "--max-rows",
                             str(n_rows - 1), "--out", out])
        check(p.returncode == 2, f"--max-rows {n_rows - 1}: exit {p.returncode}")

        try:
            halfway.analyze(arrays, "fp16", per_block=True)
        except ValueError as e:
            check("per_block" in str(e), f"per_block without a block scheme: {e}")
        else:
            raise AssertionError("per_block without a block scheme was accepted")
        for kw, exc in ((dict(axis="x"), TypeError), (dict(axis=True), TypeError),
                        (dict(axis=5), ValueError), (dict(per_block=1), TypeError),
                        (dict(per_block=True, max_rows=0), ValueError),
                        (dict(block_chunk=0), ValueError), (dict(max_rows=1.5), TypeError),
                        (dict(per_block=True, max_rows=3), ValueError)):
            try:
                halfway.analyze(arrays, "nvfp4", **kw)
            except exc as e:
                arg = next(iter(kw)) if len(kw) == 1 else "max_rows"
                check(arg in str(e) or "axis" in str(e) or "rows" in str(e), f"{kw}: {e}")
            else:
                raise AssertionError(f"halfway.analyze({kw}) did not raise {exc.__name__}")
        check_figures(os.path.join(tmp, "cli-1"))
        check_bounded_memory(binary, tmp)
    print("ok")
    return 0


# Run in a fresh interpreter: a child's peak RSS counts what it shared with its parent before
# exec, and this process (numpy, pandas, matplotlib) is larger than the analysis.
_MEASURE = """import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read()
_, status, ru = os.wait4(p.pid, 0)
print(os.waitstatus_to_exitcode(status), ru.ru_maxrss, err.decode(errors="replace")[:300])
"""


def peak_rss_mib(binary, args):
    out = subprocess.run([sys.executable, "-c", _MEASURE, binary, "analyze", *args],
                         capture_output=True, text=True, check=True).stdout.split(" ", 2)
    check(out[0] == "0", f"{args}: exit {out[0]}: {out[2]!r}")
    return int(out[1]) / 1024


def check_bounded_memory(binary, tmp):
    """A 64 MiB array (4096 x 4096 float32) quantized by block schemes down its columns: the
    process grows by far less than the array over the same analysis of a 1 KiB array."""
    g = np.random.default_rng(1)
    np.savez(os.path.join(tmp, "big.npz"), big=g.standard_normal((4096, 4096), dtype=F32))
    np.savez(os.path.join(tmp, "small.npz"), big=g.standard_normal((16, 16), dtype=F32))
    args = ["--formats", "nvfp4,mxfp4,fp8_block_2d", "--axis", "0"]
    small = peak_rss_mib(binary, [os.path.join(tmp, "small.npz"), *args, "--out",
                                  os.path.join(tmp, "smallout")])
    t0 = time.monotonic()
    big = peak_rss_mib(binary, [os.path.join(tmp, "big.npz"), *args, "--out",
                                os.path.join(tmp, "bigout")])
    seconds = time.monotonic() - t0
    with open(binary, "rb") as f:
        asan = b"__asan_init" in f.read()
    check(asan or big - small < 16, f"peak RSS {big:.0f} MiB for a 64 MiB array, "
          f"{small:.0f} for 1 KiB")
    # The negative control: one call for the whole array is seen (some 200 MiB more).
    whole = peak_rss_mib(binary, [os.path.join(tmp, "big.npz"), *args, "--block-chunk",
                                  str(4096 * 4096), "--out", os.path.join(tmp, "wholeout")])
    check(asan or whole - small > 64, f"peak RSS {whole:.0f} MiB in one call: not seen")
    rows = read_csv(os.path.join(tmp, "bigout", "blocks.csv"))
    check([int(r["values"]) for r in rows] == [4096 * 4096] * 3, "big: values")
    print(f"bounded memory: peak RSS {big:.1f} MiB for a 64 MiB array (three schemes, "
          f"{seconds:.1f} s), {small:.1f} MiB for 1 KiB, {whole:.1f} MiB in one call")


def check_figures(folder):
    """block_snr.png and block_scales.png draw what blocks.csv holds: every label and bar
    recomputed here from the file with the csv module (not the figures' code)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("figures not checked: no matplotlib")
        return
    from halfway import figures
    from halfway.analysis import read_result
    rows = read_csv(os.path.join(folder, "blocks.csv"))
    b = read_result(folder, True).blocks
    drawn = figures.block_snr(b, os.path.join(folder, "block_snr.png"), 0)
    want = {}
    for r in rows:
        v = r["snr_db"]
        want[(r["name"], r["scheme"])] = "-" if v == "" else "inf" if v == "inf" else \
            "%.1f" % float(v)
    check(drawn["labels"] == want, f"block_snr.png labels {drawn['labels']}, want {want}")
    check(drawn["schemes"] == SCHEMES, f"block_snr.png schemes {drawn['schemes']}")
    drawn = figures.block_scales(b, os.path.join(folder, "block_scales.png"), 0)
    check([p["scheme"] for p in drawn["panels"]] == SCHEMES, "block_scales.png panels")
    for panel in drawn["panels"]:
        bars = {}
        for r in rows:
            if r["scheme"] == panel["scheme"] and r["scale_hist"]:
                for item in r["scale_hist"].split(";"):
                    e, c = item.split(":")
                    bars[int(e)] = bars.get(int(e), 0) + int(c)
        n = sum(bars.values())
        check(panel["bars"] == bars, f"block_scales.png {panel['scheme']}: bars")
        check(panel["blocks"] == n, f"block_scales.png {panel['scheme']}: {panel['blocks']}")
        check(panel["mean"] == "%.2f" % (sum(e * c for e, c in bars.items()) / n),
              f"block_scales.png {panel['scheme']}: mean {panel['mean']}")
    # Without element formats, draw() draws these two only.
    small = os.path.join(folder, "small")
    halfway.analyze({"x": np.float32(np.arange(64).reshape(2, 32))}, "nvfp4,mxfp4",
                    out_dir=small)
    paths = figures.draw(small)
    check([os.path.basename(p) for p in paths] == ["block_snr.png", "block_scales.png"],
          f"draw: {paths}")
    print("figures: block_snr.png and block_scales.png equal blocks.csv")


if __name__ == "__main__":
    sys.exit(main())
