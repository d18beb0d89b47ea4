"""halfway.analyze: the same files and columns as `halfway analyze` on an .npz of the same
arrays, whatever the chunk size; bad input is a ValueError.

usage: test_analyze.py HALFWAY_BINARY"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

pd = hwtest.require("pandas", "halfway.analyze's DataFrames")
import halfway  # noqa: E402
from halfway import analysis  # noqa: E402

hwtest.require_sim("_AnalysisRun")


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def arrays():
    g = np.random.default_rng(9)
    x = (g.standard_normal(70000) * np.exp2(g.integers(-30, 20, 70000))).astype(np.float32)
    x[::97] = 0
    x[5] = np.inf
    with np.errstate(over="ignore"):
            return {"w": x, "h": x[:5000].astype(np.float16), "d": x[:3000].astype(np.float64) / 3,
                "b": (x[:4000].view(np.uint32) >> 16).astype(np.uint16)}


def read(path):
    with open(path) as f:
        return f.read()


def check_old_column_names(new_dir, old_dir):
    """A folder written before `underflow` was renamed `flushed` reads like a new one."""
    os.makedirs(old_dir)
    old_names = {"trace.csv": ("zeros,flushed,", "zeros,underflow,"),
                 "scale_window.csv": ("values,flushed,flushed_fraction,",
                                      "values,underflow,underflow_fraction,")}
    for n in ("trace.csv", "scale_window.csv", "manifest.json"):
        text = read(os.path.join(new_dir, n))
        if n in old_names:
            new, old = old_names[n]
            head, rest = text.split("\n", 1)
            check(new in head, f"{n}: no {new!r} in {head!r}")
            text = head.replace(new, old) + "\n" + rest
        with open(os.path.join(old_dir, n), "w") as f:
            f.write(text)
    new, old = analysis.read_result(new_dir, False), analysis.read_result(old_dir, False)
    for part in ("trace", "scale_window"):
        check(getattr(old, part).equals(getattr(new, part)), f"old {part} reads differently")


def main():
    halfway_bin = sys.argv[1]
    a = arrays()
    with tempfile.TemporaryDirectory() as d:
        np.savez(os.path.join(d, "t.npz"), **a)
        r = subprocess.run([halfway_bin, "analyze", os.path.join(d, "t.npz"), "--out",
                            os.path.join(d, "cli"), "--formats", "fp16,bf16,e4m3,e5m2",
                            "--scales", "-10..30"], capture_output=True, text=True)
        check(r.returncode == 0, r.stderr)
        cli = {n: read(os.path.join(d, "cli", n)) for n in ("trace.csv", "scale_window.csv")}
        for chunk in (1, 977, 65536, 1 << 20):
            out = os.path.join(d, f"py{chunk}")
            old = analysis.CHUNK
            analysis.CHUNK = chunk
            try:
                res = halfway.analyze(a, ["fp16", "bf16", "e4m3", "e5m2"], (-10, 30),
                                      out_dir=out) if chunk > 1 else \
                    halfway.analyze({"h": a["h"]}, "fp16,bf16,e4m3,e5m2", "-10..30", out_dir=out)
            finally:
                analysis.CHUNK = old
            if chunk == 1:
                continue  # only that it runs value by value; compared below with the others
            for n, text in cli.items():
                check(read(os.path.join(out, n)) == text, f"{n} differs at chunk size {chunk}")
            check(list(res.trace.columns) == list(pd.read_csv(os.path.join(d, "cli", "trace.csv"))
                                                  .columns), "trace columns")
            check(len(res.trace) == 16, f"{len(res.trace)} rows")
        one = read(os.path.join(d, "py1", "trace.csv")).splitlines()
        full = read(os.path.join(d, "py977", "trace.csv")).splitlines()
        check(one == full[:1] + [r for r in full if r.split(",")[1] == "h"],
              "value-by-value feeding differs")
        check_old_column_names(os.path.join(d, "cli"), os.path.join(d, "old"))
        res = halfway.analyze({"x": a["w"]}, ["fp16"])
        check(res.out_dir is None and len(res.trace) == 1, "temporary folder result")
        row = res.trace.iloc[0]
        check(row["kind"] == "tensor" and row["dtype"] == "fp16", "row labels")
    for bad, what in [(({"x": np.arange(3)}, ["fp16"]), "int64"),
                      (({"x": a["w"]}, ["fp17"]), "unknown format"),
                      (({"x": a["w"]}, ["fp16", "fp16"]), "repeated format"),
                      (({"x,y": a["w"]}, ["fp16"]), "comma in a name"),
                      (({"x": a["w"]}, ["fp16"], (5, 1)), "scales")]:
        try:
            halfway.analyze(*bad)
        except ValueError:
            continue
        raise AssertionError(f"{what}: no ValueError")
    # flush_tolerance in the config's range [0, 1]; scales as integers, none truncated; each
    # refusal names its argument.
    x = {"x": a["w"][:10]}
    for kw, exc, word in [({"flush_tolerance": float("nan")}, ValueError, "flush_tolerance"),
                          ({"flush_tolerance": -1}, ValueError, "flush_tolerance"),
                          ({"flush_tolerance": 1.5}, ValueError, "flush_tolerance"),
                          ({"flush_tolerance": "0.1"}, TypeError, "flush_tolerance"),
                          ({"flush_tolerance": None}, TypeError, "flush_tolerance"),
                          ({"scales": (1.5, 2.5)}, ValueError, "scales"),
                          ({"scales": (0, 10 ** 30)}, ValueError, "scales"),
                          ({"scales": (True, 2)}, ValueError, "scales"),
                          ({"scales": (1, 2, 3)}, ValueError, "scales"),
                          ({"scales": None}, TypeError, "scales")]:
        try:
            halfway.analyze(x, ["fp16"], **kw)
        except exc as e:
            check(word in str(e), f"{kw}: {e!r} does not name {word}")
            continue
        raise AssertionError(f"{kw}: no {exc.__name__}")
    for tol in (0, 1, 0.25):
        check(halfway.analyze(x, ["fp16"], flush_tolerance=tol).manifest["flush_tolerance"] ==
              tol, f"flush_tolerance={tol}")
    check(halfway.analyze(x, ["fp16"], scales=(2.0, 3)).manifest["scales"] ==
          {"k_min": 2, "k_max": 3}, "integral float scales")
    print("ok")


if __name__ == "__main__":
    main()
