"""Every experiment end to end in a tiny version: `halfway run --all` on a copy of experiments/
with every run cut to a few steps, each plot.py drawing PNG and PDF from the results alone,
figures byte-identical when redrawn, and bad input to `halfway run` (exit 2, one line).
Exits 77 (skipped) when matplotlib or pandas is missing.

usage: test_experiments.py PATH/TO/halfway
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import matplotlib  # noqa: F401
    import pandas  # noqa: F401
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import text_corpus  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import check, status  # noqa: E402

HALFWAY = os.path.abspath(sys.argv[1])
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments")
TMP = tempfile.mkdtemp(prefix="halfway_experiments_test_")


exps = os.path.join(TMP, "experiments")
shutil.copytree(SRC, exps, ignore=shutil.ignore_patterns("__pycache__"))
names = sorted(d for d in os.listdir(exps) if os.path.exists(os.path.join(exps, d, "plot.py")))
names = text_corpus.leave_out_missing(exps, names)
check(len(names) >= 4, "experiments found: %s" % ", ".join(names))
for n in names:
    p = os.path.join(exps, n, "accumulation.toml")
    if os.path.exists(p):
        with open(p, "w") as f:
            f.write("lengths = [16, 256]\ntrials = 2\nseed = 0\n")
    # emulate.toml: run.py's, a PyTorch model; bisect.toml's cases: their configs, cut to 30
    # steps, since a bisection needs a gap, which 6 steps do not give.
    bisect = os.path.exists(os.path.join(exps, n, "bisect.toml"))
    files = [f for f in os.listdir(os.path.join(exps, n)) if f.endswith(".toml")] if bisect \
        else ["sweep.toml", "emulate.toml"]
    for file in files:
        p = os.path.join(exps, n, file)
        if os.path.exists(p):
            with open(p) as f:
                s = f.read()
            s = re.sub(r"(?m)^steps = \d+", "steps = %d" % (30 if bisect else 6), s)
            with open(p, "w") as f:
                f.write(s)

env = dict(os.environ, HALFWAY_PYTHON=sys.executable)
res = os.path.join(TMP, "results")
r = subprocess.run([HALFWAY, "run", "--all", "--experiments", exps, "--results", res,
                    "--jobs", "2"], capture_output=True, text=True, env=env)
print(r.stdout[-3000:])
print(r.stderr[-3000:])
check(r.returncode == 0, "halfway run --all (tiny versions)")
# An experiment whose run.py cannot run here (no torch) says so and draws nothing.
for n in list(names):
    if "halfway run: %s: skipped, nothing drawn" % n in r.stdout:
        print("skip %s: run.py cannot run here (torch or halfway's Python module missing)" % n)
        names.remove(n)
figs = {}
for n in names:
    d = os.path.join(res, n, "figures")
    files = sorted(os.listdir(d)) if os.path.isdir(d) else []
    pngs = [f for f in files if f.endswith(".png")]
    pdfs = [f for f in files if f.endswith(".pdf")]
    check(len(pngs) >= 1 and sorted(f[:-4] for f in pngs) == sorted(f[:-4] for f in pdfs) and
          all(os.path.getsize(os.path.join(d, f)) > 1000 for f in pngs + pdfs) and
          all(f[:-4] + ".texts.json" in files for f in pngs),
          "%s: PNG and PDF figures and their texts %s" % (n, pngs))
    for f in files:
        with open(os.path.join(d, f), "rb") as fh:
            figs[(n, f)] = fh.read()
check("safe loss-scale window" in r.stdout or "no loss scale keeps" in r.stdout,
      "the demo prints its scale-window summary")

# The accumulation table: fp32 accumulation of 16 products in [0, 1) is within 16 u of the
# exact sum; results are values of the accumulator's format.
import csv  # noqa: E402
import numpy as np  # noqa: E402
with open(os.path.join(res, "accumulation", "accumulation.csv")) as f:
    rows = list(csv.DictReader(f))
check(len(rows) == 2 * 2 * 4 and all(float(r["rel_error"]) >= 0 for r in rows),
      "accumulation.csv: 2 lengths x 2 trials x 4 models")
fp32 = [r for r in rows if r["model"].startswith("fp32") and r["n"] == "16"]
check(all(float(r["rel_error"]) <= 16 * 2.0 ** -24 for r in fp32), "fp32 accumulation within n*u")
check(all(float(r["computed"]) == float(np.float32(float(r["computed"]))) for r in fp32),
      "fp32 accumulation results are binary32 values")
f16 = [r for r in rows if r["model"].startswith("fp16 accumulation (") and r["n"] == "256"]
check(all(float(r["computed"]) == float(np.float16(float(r["computed"]))) for r in f16) and
      all(float(r["rel_error"]) > 0 for r in f16), "fp16 accumulation: fp16 results, inexact at n=256")

# Redrawing from the same results gives the same files (no timestamps in PNG or PDF); the
# experiments named bare, found under --experiments.
redraw = [n for n in ("accumulation", "demo", "memory") if n in names]
r = subprocess.run([HALFWAY, "run", "--plot-only", "--results", res, "--experiments", exps] +
                   redraw, capture_output=True, text=True, env=env)
check(r.returncode == 0, "halfway run --plot-only " + " ".join(redraw))
same = [open(os.path.join(res, n, "figures", f), "rb").read() == b
        for (n, f), b in figs.items() if n in redraw]
check(len(same) >= 6 and all(same), "redrawn figures are byte-identical (%d files)" % len(same))

# plot.py runs without a shell: a folder name full of shell syntax is only a name, and a failing
# plot.py is reported with its exit status.
odd = os.path.join(TMP, "odd", "it's $(touch PWNED); x")
os.makedirs(odd)
with open(os.path.join(odd, "plot.py"), "w") as f:
    f.write("import os, sys\nopen(os.path.join(sys.argv[1], 'drawn'), 'w').close()\n"
            "sys.exit(3 if os.environ.get('FAIL_PLOT') else 0)\n")
odd_res = os.path.join(TMP, "odd_results")
r = subprocess.run([HALFWAY, "run", "--plot-only", "--results", odd_res, odd],
                   capture_output=True, text=True, env=env, cwd=TMP)
check(r.returncode == 0 and os.path.exists(os.path.join(odd_res, os.path.basename(odd), "drawn"))
      and not os.path.exists(os.path.join(TMP, "PWNED")),
      "plot.py of a folder named with shell syntax runs, and nothing else does")
r = subprocess.run([HALFWAY, "run", "--plot-only", "--results", odd_res, odd],
                   capture_output=True, text=True, env=dict(env, FAIL_PLOT="1"), cwd=TMP)
check(r.returncode == 1 and "plot.py failed (exit status 3)" in r.stderr,
      "a failing plot.py: exit 1 with its status (%s)" % r.stderr.strip())

for args, needle in (([os.path.join(TMP, "nope")], "no experiment folder"),
                     (["--all", "--experiments", os.path.join(TMP, "nope")], "no experiments folder"),
                     ([], "usage")):
    r = subprocess.run([HALFWAY, "run"] + args, capture_output=True, text=True, env=env)
    check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr,
          "halfway run %s -> exit 2 (%s)" % (" ".join(args), r.stderr.strip()))

shutil.rmtree(TMP, ignore_errors=True)
sys.exit(status())
