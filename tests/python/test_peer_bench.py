"""python3 -m halfway.benchmark --peers, small: every row is timed or says why its peer cannot
run, and the rows whose peer is an exact oracle agree with halfway on every result.

Expected agreement (from the peers' definitions, not from halfway): ml_dtypes' and torch's
nearest-even casts are correctly rounded, and so is halfway.round, on in-range data; torchao's
to_mx with FLOOR is OCP MX's scale rule and its element cast, and nvfp4_quantize with its
per-tensor scale is NVFP4's two-level scale, as halfway's mxfp8_e4m3, mxfp4 and nvfp4 (the
block data have no code-0 block: test_peer_torchao_mx's one difference class cannot occur).
QPyTorch's and pychop's nearest rows are reported, not asserted, except that every difference
of QPyTorch's nearest from halfway.round is a tie that QPyTorch rounds away from zero (its
documented deviation), checked on 2^18 values of each custom format. Stochastic rows are never compared. Negative controls: the
comparisons see one planted wrong element and one planted wrong scale code. Argument: the
halfway program, whose `bench --peers` must give the same rows.
Skipped (exit 77) without ml_dtypes, torch or torchao; QPyTorch and pychop rows may report
their peer as unable to run, which is checked to carry a reason."""

import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import check, status  # noqa: E402

import halfway  # noqa: E402
from halfway import peer_bench  # noqa: E402

for mod in ("ml_dtypes", "torch", "torchao.prototype.mx_formats"):
    hwtest.require(mod, "the peer benchmark's exact rows")

EXACT = ("ml_dtypes", "torch .to", "torchao")


rows = peer_bench.run(n=8192, repeats=1, inner=1, quiet=True)
print(json.dumps(rows, indent=1)[:3000])
names = [(r["format"], r["rounding"], r["reference"]) for r in rows]
check(len(names) == len(set(names)), "every row once")
check(len(rows) == 9 + 2 * 2 * len(peer_bench.CUSTOM) + 3, f"{len(rows)} rows")
for r in rows:
    what = f"{r['format']} {r['rounding']} {r['reference']}"
    if "skipped" in r:
        check(not r["reference"].startswith(EXACT), f"{what}: an installed peer skipped: "
              f"{r['skipped']}")
        check(len(r["skipped"]) > 10, f"{what}: a skip without its reason")
        continue
    check(r["ratio"] > 0 and r["halfway_gelem_s"] > 0 and r["reference_gelem_s"] > 0, what)
    check(r["met"] == (r["ratio"] >= 1.0) and r["goal"] == 1.0, f"{what}: goal")
    check(r["cpu"] == halfway.cpu_info()["model"], f"{what}: the machine")
    if r["rounding"] == "stochastic":
        check(r["differ"] is None, f"{what}: a stochastic row compared")
    if r["reference"].startswith(EXACT):
        check(r["differ"] == 0, f"{what}: {r['differ']} of the results differ")
exact_rows = sum(1 for r in rows if r["reference"].startswith(EXACT) and "skipped" not in r)
check(exact_rows == 12, f"{exact_rows} exact rows ran (9 casts, 3 block schemes)")

# Negative controls: the comparisons are not blind.
x = peer_bench._data(1024, 8)
a = halfway.round(x, "e4m3")
b = a.copy()
b[17] = np.nextafter(b[17], np.float32(np.inf))
check(peer_bench._differ(a, a) == 0 and peer_bench._differ(a, b) == 1 / 1024, "cast control")
import torch  # noqa: E402
from torchao.prototype.mx_formats.config import ScaleCalculationMode  # noqa: E402
from torchao.prototype.mx_formats.mx_tensor import to_mx  # noqa: E402

xb = x.reshape(4, 256)
ours = halfway.encode_blocks(xb, "mxfp8_e4m3")
s, d = to_mx(torch.from_numpy(xb), torch.float8_e4m3fn, 32, ScaleCalculationMode.FLOOR)
check(peer_bench._block_differ("mxfp8_e4m3", ours, (s, d)) == 0, "block control: equal")
s2 = s.view(torch.uint8).clone()
s2[0, 3] += 1
check(peer_bench._block_differ("mxfp8_e4m3", ours, (s2, d)) == 1 / (32 + 1024),
      "block control: one planted scale code")

# QPyTorch's nearest differs from round-to-nearest-even at ties only, which it rounds away.
try:
    from qtorch.quant import float_quantize
except Exception as e:  # noqa: BLE001 - reported in the rows above as a reason
    print("QPyTorch's differences not classified:", e)
    float_quantize = None
if float_quantize is not None:
    classified = 0
    for fmt in peer_bench.CUSTOM:
        _f, e, m, emax, _ml, _t = peer_bench.CASTS[fmt]
        xq = peer_bench._data(1 << 18, emax)
        ours = halfway.round(xq, fmt)
        theirs = float_quantize(torch.from_numpy(xq), exp=e, man=m, rounding="nearest").numpy()
        d = np.nonzero(ours.view(np.uint32) != theirs.view(np.uint32))[0]
        x64 = xq[d].astype(np.float64)
        lo, hi = halfway.round(xq[d], fmt, "min"), halfway.round(xq[d], fmt, "max")
        check(np.array_equal(x64 - lo, hi - x64) and np.all(np.abs(theirs[d]) > np.abs(ours[d])),
              f"QPyTorch {fmt}: a difference that is not a tie rounded away")
        print(f"QPyTorch {fmt}: {len(d)} of {xq.size} differ, all ties rounded away")
        classified += len(d)
    check(classified > 0, "no QPyTorch difference to classify: the check saw nothing")

# The command line: --emulate with --peers is refused with exit 2.
p = subprocess.run([sys.executable, "-m", "halfway.benchmark", "--peers", "--emulate"],
                   capture_output=True, text=True)
check(p.returncode == 2 and "--peers" in p.stderr, f"--peers --emulate: {p.returncode}")

# halfway bench --peers: the same benchmark from the command line, with this interpreter.
cli = sys.argv[1]
p = subprocess.run([cli, "bench", "--peers", "--python", sys.executable, "--n", "2048",
                    "--repeats", "1", "--json"], capture_output=True, text=True)
check(p.returncode == 0, f"halfway bench --peers: {p.returncode} {p.stderr[-500:]}")
if p.returncode == 0:
    cli_rows = json.loads(p.stdout)
    check([(r["format"], r["rounding"], r["reference"]) for r in cli_rows] == names,
          "halfway bench --peers: not the same rows")
p = subprocess.run([cli, "bench", "--peers", "--python", "/nonexistent/python"],
                   capture_output=True, text=True)
check(p.returncode == 2 and p.stderr.count("\n") == 1 and "--python" in p.stderr,
      f"halfway bench --peers --python /nonexistent: {p.returncode} {p.stderr!r}")

sys.exit(status(f"ok: {len(rows)} peer rows, {exact_rows} of them identical to their exact peer"))
