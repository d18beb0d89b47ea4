"""`halfway analyze`: counts against brute force (numpy's float16 cast, a bfloat16 round to
nearest even on the bit patterns), SNR and flushed norm against exact rational sums, the same
counts as `halfway train`'s tracer for tensors a run exported, bounded memory on a large array,
and bad input (one line, exit 2). Needs numpy.

usage: test_analyze.py HALFWAY_BINARY"""
import csv
import io
import math
import os
import struct
import subprocess
import sys
import tempfile
import warnings
import zipfile
from fractions import Fraction

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from simtest import Workdir, check, run  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import config  # noqa: E402

FORMATS = "fp16,bf16,e4m3,e5m2"


def wide(rng, n):
    """float32 values across fp16's and bf16's ranges, with zeros, subnormals, inf and NaN."""
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-40, 24, n))).astype(np.float32)
    x[rng.integers(0, n, n // 50)] = 0
    x[rng.integers(0, n, n // 200)] = np.inf
    x[rng.integers(0, n, n // 200)] = np.nan
    x[rng.integers(0, n, n // 100)] = np.float32(2.0 ** -149) * rng.integers(1, 1000, 1)[0]
    return x


def bf16_rne(x):
    """float32 -> the float32 values of their bfloat16 roundings (ties to even), by bit
    arithmetic; NaN stays NaN, overflow carries into the exponent and gives inf."""
    b = x.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    out = r.astype(np.uint32).view(np.float32).copy()
    out[np.isnan(x)] = np.nan
    return out


def brute_counts(x, q, min_normal):
    fin = np.isfinite(x)
    return {
        "total": x.size,
        "zeros": int(np.sum(q == 0)),
        "flushed": int(np.sum(fin & (x != 0) & (q == 0))),
        "subnormal": int(np.sum(np.isfinite(q) & (q != 0) & (np.abs(q) < min_normal))),
        "overflow": int(np.sum(fin & np.isinf(q))),
        "nan": int(np.sum(np.isnan(q))),
        "nonfinite_in": int(np.sum(~fin)),
    }


def brute_hist(x):
    v = np.abs(x[np.isfinite(x) & (x != 0)]).astype(np.float64)
    _, e = np.frexp(v)
    es, counts = np.unique(e - 1, return_counts=True)
    return ";".join(f"{a}:{b}" for a, b in zip(es, counts))


def exact_sums(x, q, fmax):
    """Σx², Σ(x-q)², Σx² of the flushed, over finite |x| <= fmax, as exact rationals."""
    s = n = f = Fraction(0)
    for a, b in zip(x.tolist(), q.tolist()):
        if not (abs(a) <= fmax):
            continue
        fa = Fraction(a)
        s += fa * fa
        d = fa - Fraction(b)
        n += d * d
        if b == 0 and a != 0:
            f += fa * fa
    return s, n, f


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def check_against_brute_force(halfway, w):
    rng = np.random.default_rng(5)
    with np.errstate(over="ignore"):
        b = wide(rng, 3000).astype(np.float16)
    arrays = {"a": wide(rng, 4000), "b": b,
              "c": wide(rng, 2000).astype(np.float64) * 1.000001,
              "d": (wide(rng, 2000).view(np.uint32) >> 16).astype(np.uint16)}
    np.savez(w.file("t.npz"), **arrays)
    r = run(halfway, "analyze", w.file("t.npz"), "--formats", FORMATS, "--out", w.file("out"))
    check(r.returncode == 0, f"analyze failed: {r.stderr}")
    rows = {(x["name"], x["dtype"]): x for x in read_rows(w.file("out/trace.csv"))}
    check(len(rows) == 4 * 4, f"expected 16 rows, got {len(rows)}")
    for name, a in arrays.items():
        if a.dtype == np.uint16:
            x = (a.astype(np.uint32) << 16).view(np.float32)
        else:
            with np.errstate(over="ignore"):
                x = a.astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            cases = {"fp16": (x.astype(np.float16).astype(np.float32), 2.0 ** -14, 65504.0),
                     "bf16": (bf16_rne(x), 2.0 ** -126, float(np.finfo(np.float32).max) *
                              (1 - 2.0 ** -8) / (1 - 2.0 ** -24))}
        for fmt, (q, min_normal, fmax) in cases.items():
            row = rows[(name, fmt)]
            for k, v in brute_counts(x, q, min_normal).items():
                check(int(row[k]) == v, f"{name} {fmt} {k}: analyze {row[k]}, brute force {v}")
            check(row["hist"] == brute_hist(x), f"{name} {fmt}: histograms differ")
            if fmt == "fp16":
                s, n, f = exact_sums(x, q, fmax)
                # Exact roundings (float16 input) have no error: an infinite SNR.
                snr = 10 * math.log10(float(s) / float(n)) if n else math.inf
                lost = math.sqrt(float(f) / float(s))
                check(float(row["snr_db"]) == snr, f"{name}: snr {row['snr_db']} != {snr!r}")
                check(float(row["flushed_l2_fraction"]) == lost,
                      f"{name}: flushed fraction {row['flushed_l2_fraction']} != {lost!r}")
    # Every tensor has its own safe-window rows per format, and the combined rows; trace.csv's
    # k_low and k_high are the first and last safe k of the tensor's rows.
    sw = read_rows(w.file("out/scale_window.csv"))
    check({x["name"] for x in sw} == {"", "a", "b", "c", "d"}, "scale_window.csv names")
    for (name, fmt), row in rows.items():
        safe = [int(x["k"]) for x in sw if x["name"] == name and x["dtype"] == fmt
                and x["safe"] == "1"]
        want = (str(min(safe)), str(max(safe))) if safe else ("", "")
        check((row["k_low"], row["k_high"]) == want, f"{name} {fmt}: window {want}")


def train_config(steps):
    return config("mlp", model={"layers": [6, 16, 2]}, data={"n": 64, "batch_size": 16},
                  optimizer={"kind": "sgd", "lr": 0.1}, scaler={"kind": "none"},
                  run={"steps": steps, "seed": 11}, trace={"every": 1}, output={"weights": True})


def check_against_train(halfway, w):
    """A run of S steps exports its fp32 master weights; a run of S + 1 steps with the same
    seed rounds exactly those into fp16 for the forward pass of step S. analyze on the export
    must give the tracer's counts and histograms for those roundings."""
    steps = 3
    for s in (steps, steps + 1):
        cfg = w.write(f"r{s}.toml", train_config(s))
        r = run(halfway, "train", cfg, "--out", w.file(f"r{s}"))
        check(r.returncode == 0, f"train failed: {r.stderr}")
    r = run(halfway, "analyze", w.file(f"r{steps}/weights.npz"), "--formats", "fp16",
            "--out", w.file("wa"))
    check(r.returncode == 0, f"analyze failed: {r.stderr}")
    mine = {x["name"]: x for x in read_rows(w.file("wa/trace.csv"))}
    traced = [x for x in read_rows(w.file(f"r{steps + 1}/trace.csv"))
              if int(x["step"]) == steps and x["kind"] == "weight" and x["dtype"] == "fp16"]
    check(len(traced) >= 2, f"the tracer recorded {len(traced)} weight casts")
    cols = ["total", "zeros", "flushed", "subnormal", "overflow", "nan", "inexact",
            "nonfinite_in", "min_exp", "max_exp", "max_abs", "hist"]
    for t in traced:
        # The tracer names the rounding of parameter P "P" or "P.<something>".
        match = [m for m in mine if t["name"] == m or t["name"].startswith(m + ".")]
        check(len(match) == 1, f"no exported tensor for traced '{t['name']}' ({sorted(mine)})")
        a = mine[match[0]]
        for c in cols:
            check(a[c] == t[c], f"{t['name']} {c}: analyze {a[c]!r}, train's tracer {t[c]!r}")


def peak_rss_mib(halfway, args):
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen([halfway, "analyze", *args], stdout=subprocess.DEVNULL, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        err.seek(0)
        check(os.waitstatus_to_exitcode(status) == 0, f"{args}: {err.read()!r}")
    return ru.ru_maxrss / 1024


def check_bounded_memory(halfway, w):
    """A 64 MiB array is read in chunks: the process grows by far less than the array's size
    over the same analysis of a 1 KiB array. (Differences: the peak of a child also counts
    what it shared with this process before exec.)"""
    n = 16 << 20
    g = np.random.default_rng(1)
    np.savez(w.file("big.npz"), big=g.standard_normal(n, dtype=np.float32))
    np.savez(w.file("small.npz"), big=g.standard_normal(256, dtype=np.float32))
    small = peak_rss_mib(halfway, [w.file("small.npz"), "--formats", "fp16,e4m3",
                                   "--out", w.file("smallout")])
    big = peak_rss_mib(halfway, [w.file("big.npz"), "--formats", "fp16,e4m3",
                                 "--out", w.file("bigout")])
    # AddressSanitizer's shadow memory and quarantine inflate memory use: no bound under it.
    with open(halfway, "rb") as f:
        asan = b"__asan_init" in f.read()
    check(asan or big - small < 16,
          f"peak RSS {big:.0f} MiB for a 64 MiB array, {small:.0f} for 1 KiB")
    rows = read_rows(w.file("bigout/trace.csv"))
    check(all(int(r["total"]) == n for r in rows), "big: totals")


def expect_error(halfway, args, what):
    r = run(halfway, "analyze", *args)
    check(r.returncode == 2, f"{what}: exit {r.returncode}, stderr {r.stderr!r}")
    lines = r.stderr.strip().splitlines()
    check(len(lines) == 1 and lines[0].startswith("halfway analyze: error: "),
          f"{what}: not one error line: {r.stderr!r}")
    return lines[0]


def data_npy(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def check_plot(halfway, w):
    """--plot runs the figures without a shell (any path works) and says how they failed;
    a missing --python is refused before the analysis."""
    np.savez(w.file("p.npz"), x=np.arange(10, dtype=np.float32))
    odd = w.file("o'x \"$(true)")
    m = expect_error(halfway, [w.file("p.npz"), "--out", odd, "--plot", "--python",
                               w.file("nonexistent")], "--python missing")
    check("--plot" in m and "nonexistent" in m, f"--python missing: {m}")
    check(not os.path.exists(odd), "--plot with a missing --python analysed first")
    script = w.write("segv.sh", "#!/bin/sh\nkill -SEGV $$\n")
    os.chmod(script, 0o755)
    for python, why in (("/bin/false", "exit status 1"), (script, "killed by SIGSEGV")):
        r = run(halfway, "analyze", w.file("p.npz"), "--formats", "fp16", "--out", odd,
                "--plot", "--python", python)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and why in lines[0] and "status 256" not
              in lines[0] and odd in lines[0], f"--python {python}: {r.returncode} {r.stderr!r}")
        check(os.path.exists(os.path.join(odd, "manifest.json")), "the analysis is not kept")


def check_bad_input(halfway, w):
    x = np.arange(1000, dtype=np.float32)
    np.savez(w.file("ok.npz"), x=x)
    data = open(w.file("ok.npz"), "rb").read()
    with open(w.file("trunc.npz"), "wb") as f:
        f.write(data[:len(data) // 2])
    corrupt = bytearray(data)
    corrupt[len(data) // 2] ^= 0xFF  # inside x's data: the CRC no longer matches
    with open(w.file("corrupt.npz"), "wb") as f:
        f.write(bytes(corrupt))
    np.savez(w.file("int.npz"), i=np.arange(10, dtype=np.int32))
    np.savez(w.file("again.npz"), x=x)
    with zipfile.ZipFile(w.file("hdr.npz"), "w") as z:
        z.writestr("x.npy", b"\x93NUMPY\x01\x00" + b"\x10\x00{'descr': '<f4'}\n")
    with open(w.file("notzip.npz"), "w") as f:
        f.write("hello")
    out = ["--out", w.file("bad")]
    expect_error(halfway, [w.file("trunc.npz")] + out, "truncated")
    m = expect_error(halfway, [w.file("corrupt.npz")] + out, "corrupt")
    check("CRC" in m, f"corrupt: {m}")
    m = expect_error(halfway, [w.file("int.npz")] + out, "int32")
    check("unsupported dtype" in m, f"int32: {m}")
    m = expect_error(halfway, [w.file("ok.npz"), w.file("again.npz")] + out, "collision")
    check("'x'" in m, f"collision: {m}")
    m = expect_error(halfway, [w.file("ok.npz"), "--formats", "fp16,fp17"] + out, "format")
    check("fp17" in m, f"format: {m}")
    expect_error(halfway, [w.file("hdr.npz")] + out, "header")
    expect_error(halfway, [w.file("notzip.npz")] + out, "not a zip")
    expect_error(halfway, [w.file("missing.npz")] + out, "missing")
    expect_error(halfway, [w.file("ok.npz"), "--scales", "5..1"] + out, "scales")
    with zipfile.ZipFile(w.file("dup.npz"), "w") as z, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile's "Duplicate name"
        z.writestr("x.npy", data_npy(x)), z.writestr("x.npy", data_npy(x))
    m = expect_error(halfway, [w.file("dup.npz")] + out, "duplicate member")
    check("two members have the same name" in m, f"duplicate member: {m}")
    # A central directory entry that declares 4 GiB - 1 bytes (a ZIP64 marker without the
    # ZIP64 record): libzip says "No such file", which is not what happened.
    big = bytearray(data)
    c = big.find(b"PK\x01\x02")
    struct.pack_into("<II", big, c + 20, 0xFFFFFFFF, 0xFFFFFFFF)
    with open(w.file("declared.npz"), "wb") as f:
        f.write(bytes(big))
    m = expect_error(halfway, [w.file("declared.npz")] + out, "declared size")
    check("declared size or offset lies beyond the data" in m, f"declared size: {m}")
    check(not os.path.exists(w.file("bad/trace.csv")), "a failed analysis left trace.csv")
    leftovers = [f for f in os.listdir(w.file("bad"))] if os.path.isdir(w.file("bad")) else []
    check(not [f for f in leftovers if ".tmp" in f], f"temporary files left: {leftovers}")


def main():
    halfway = sys.argv[1]
    w = Workdir("analyze")
    try:
        check_against_brute_force(halfway, w)
        check_against_train(halfway, w)
        check_bad_input(halfway, w)
        check_plot(halfway, w)
        check_bounded_memory(halfway, w)
    finally:
        w.cleanup()
    print("ok")


if __name__ == "__main__":
    main()
