"""halfway.tensorboard: run folders exported as TensorBoard event files, read back with
TensorBoard's own reader (its LegacyEventFileLoader, the raw events, and protocol buffers,
which check the records' CRCs) and compared with the CSVs, the expected values recomputed here
with pandas.

Folders: three `halfway.train` runs of a small MLP (fp32: steps only; torch-cuda-fp16 with its
GradScaler: loss scale, gradient counts and trace.csv; nvfp4: blocks.csv) as a sweep folder of
three members; a halfway.torch.emulate run with tensorboard= and a halfway.torch.trace run with
tensorboard=. Also: the export is byte-identical when repeated; bad arguments are a ValueError
or TypeError naming the argument, and exit 2 on the command line. Negative controls: a changed
CSV value and a flipped byte in an event file are caught. Argument: the halfway program, whose
`tensorboard` command must write the same bytes as export().
Skipped (exit 77) without tensorboard or pandas."""

import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import check, check_raises, status  # noqa: E402

import halfway  # noqa: E402
from halfway import tensorboard as htb  # noqa: E402

pd = hwtest.require("pandas", "recomputing the exported values")
loader = hwtest.require("tensorboard.backend.event_processing.event_file_loader",
                        "reading the event files back")
STEPS = 10
RECIPES = ("fp32", "torch-cuda-fp16", "nvfp4")
CONFIG = {
    "model": {"kind": "mlp", "layers": [6, 16, 1], "activation": "relu"},
    "data": {"synthetic": "regression", "n": 256, "batch_size": 32},
    "loss": {"kind": "mse"},
    "optimizer": {"kind": "adam", "lr": 0.01},
    "scaler": {"kind": "dynamic"},
    "run": {"steps": STEPS, "seed": 7},
}


def read(path):
    """{(tag, step): value or (limits, counts)} of one event file, through TensorBoard."""
    got = {}
    for ev in loader.LegacyEventFileLoader(path).Load():
        for v in ev.summary.value:
            key = (v.tag, ev.step)
            if key in got:
                check(False, f"{path}: {key} twice")
            if v.HasField("histo"):
                got[key] = (list(v.histo.bucket_limit), list(v.histo.bucket))
            else:
                got[key] = v.simple_value
    return got


def hist(texts):
    out = {}
    for t in texts.dropna():
        for part in str(t).split(";"):
            e, c = part.split(":")
            out[int(e)] = out.get(int(e), 0) + int(c)
    es = sorted(out)
    return ([float(e + 1) for e in es], [float(out[e]) for e in es])


def f32(x):
    return float(np.float32(x))


def expected(folder):
    """The tags and values the module's docstring promises, from the CSVs, with pandas."""
    want = {}
    p = os.path.join(folder, "steps.csv")
    if os.path.exists(p):
        s = pd.read_csv(p)
        for col in ("loss", "loss_scale", "val_loss"):
            if col in s:
                for step, v in zip(s["step"], s[col]):
                    if not pd.isna(v):
                        want[(col, int(step))] = f32(v)
        if "grad_values" in s:
            for _, r in s[s["grad_values"] > 0].iterrows():
                for col in ("flushed", "overflow"):
                    want[(f"grad/{col}_fraction", int(r["step"]))] = \
                        f32(r[f"grad_{col}"] / r["grad_values"])
    p = os.path.join(folder, "trace.csv")
    if os.path.exists(p):
        t = pd.read_csv(p)
        for (step, name, dtype), g in t.groupby(["step", "name", "dtype"], sort=False):
            tot = g["total"].sum()
            if tot > 0:
                for col in ("flushed", "overflow"):
                    want[(f"{col}_fraction/{name}/{dtype}", int(step))] = f32(g[col].sum() / tot)
            if g["hist"].notna().any():
                want[(f"magnitude_log2/{name}/{dtype}", int(step))] = hist(g["hist"])
    p = os.path.join(folder, "blocks.csv")
    if os.path.exists(p):
        b = pd.read_csv(p)
        for (step, name, gemm, scheme), g in b.groupby(["step", "name", "gemm", "scheme"],
                                                        sort=False):
            tag = f"{name}/{gemm}/{scheme}"
            el = g["elements"].sum()
            if el > 0:
                for col in ("flushed", "saturated"):
                    want[(f"blocks/{col}_fraction/{tag}", int(step))] = f32(g[col].sum() / el)
            sig, noi = g["signal"].sum(), g["noise"].sum()
            if sig > 0 and noi > 0:
                want[(f"blocks/snr_db/{tag}", int(step))] = f32(10 * math.log10(sig / noi))
            if g["scale_hist"].notna().any():
                want[(f"blocks/scale_log2/{tag}", int(step))] = hist(g["scale_hist"])
    return want


def differences(got, want):
    """What differs between exported values and the CSVs' expectations, as messages."""
    out = []
    if set(got) != set(want):
        out.append(f"tags differ: {sorted(set(got) ^ set(want))[:5]}")
    bad = [k for k in want if k in got and got[k] != want[k]]
    if bad:
        out.append(f"{len(bad)} values differ, first {bad[0]}: {(got[bad[0]], want[bad[0]])}")
    return out


def compare(what, got, want):
    for d in differences(got, want):
        check(False, f"{what}: {d}")
    return len(want)


tmp = tempfile.mkdtemp(prefix="halfway-tb-")
try:
    sweep = os.path.join(tmp, "sweep")
    kinds = {}
    for i, recipe in enumerate(RECIPES):
        run = f"{i:04d}"
        halfway.train(dict(CONFIG, precision={"policy": recipe}),
                      os.path.join(sweep, "runs", run))
        kinds[("steps", "trace", "blocks")[i]] = run
    for kind, run in kinds.items():
        with open(os.path.join(sweep, "runs", run, f"{kind}.csv")) as f:
            check(len(f.readlines()) > 1, f"{kind}.csv of {run} has rows")
    logdir = os.path.join(tmp, "logs")
    paths = htb.export([sweep], logdir)
    check(len(paths) == 3, f"{len(paths)} event files for 3 members")
    compared = 0
    for run in kinds.values():
        path = os.path.join(logdir, "sweep", "runs", run, htb.EVENT_FILE)
        check(path in paths, f"{path} written")
        compared += compare(run, read(path), expected(os.path.join(sweep, "runs", run)))
    check(compared > 500, f"only {compared} values compared")

    # The same folder gives the same bytes.
    again = htb.export([sweep], os.path.join(tmp, "logs2"))
    check([open(a, "rb").read() for a in paths] == [open(b, "rb").read() for b in again],
          "a second export differs")

    # halfway tensorboard: the same export from the command line, and its bad input.
    cli = sys.argv[1]
    p = subprocess.run([cli, "tensorboard", sweep, "--out", os.path.join(tmp, "logs3"),
                        "--python", sys.executable], capture_output=True, text=True)
    check(p.returncode == 0, f"halfway tensorboard: {p.returncode} {p.stderr[-300:]}")
    check([open(a, "rb").read() for a in again] ==
          [open(a.replace("logs2", "logs3"), "rb").read() for a in again],
          "halfway tensorboard wrote other bytes than export()")
    for args in (["nope", "--out", logdir], [sweep], [sweep, "--out", logdir, "--python"],
                 [sweep, "--out", logdir, "--python", "/nonexistent/python"]):
        p = subprocess.run([cli, "tensorboard"] + args, capture_output=True, text=True)
        check(p.returncode == 2 and p.stderr.count("\n") == 1,
              f"halfway tensorboard {args}: {p.returncode} {p.stderr!r}")

    # Negative controls: a changed CSV value, a flipped byte.
    blocks_run = os.path.join(sweep, "runs", kinds["blocks"])
    good = read(os.path.join(logdir, "sweep", "runs", kinds["blocks"], htb.EVENT_FILE))
    b = pd.read_csv(os.path.join(blocks_run, "blocks.csv"))
    b.loc[0, "flushed"] += 1
    b.to_csv(os.path.join(blocks_run, "blocks.csv"), index=False)
    seen = differences(good, expected(blocks_run))
    check(len(seen) == 1 and seen[0].startswith("1 values differ"),
          f"a changed flushed count: {seen}")
    intact = read(paths[0])
    data = bytearray(open(paths[0], "rb").read())
    data[len(data) // 2] ^= 0x10
    open(paths[0], "wb").write(bytes(data))
    try:
        check(len(read(paths[0])) < len(intact), "a flipped byte was read as data")
    except Exception:  # noqa: BLE001 - TensorBoard's reader refusing the record is the pass
        pass

    # Bad arguments.
    for args, exc in ((([os.path.join(tmp, "missing")], logdir), ValueError),
                      (([tmp + "/logs"], logdir), ValueError),  # no run schema inside
                      (([sweep], 5), TypeError), (([5], logdir), ValueError)):
        try:
            htb.export(*args)
            check(False, f"export{args}: no error")
        except exc as e:
            check(str(e).split(":")[0] in ("run_dirs", "logdir"), f"export{args}: {e}")
    p = subprocess.run([sys.executable, "-m", "halfway.tensorboard", os.path.join(tmp, "nope"),
                        "--out", logdir], capture_output=True, text=True)
    check(p.returncode == 2 and p.stderr.count("\n") == 1 and "run_dirs" in p.stderr,
          f"CLI on a missing folder: {p.returncode} {p.stderr!r}")

    # tensorboard= on the context managers.
    torch = hwtest.require("torch", "tensorboard= on halfway.torch's context managers")
    import halfway.torch as ht
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    for cm, out in ((lambda o, t: ht.emulate(model, "mxfp8", out=o, tensorboard=t), "em"),
                    (lambda o, t: ht.trace(model, opt, out=o, tensorboard=t), "tr")):
        run_dir, tb = os.path.join(tmp, out), os.path.join(tmp, "tb")
        with cm(run_dir, tb) as c:
            for _ in range(3):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                c.log_loss(loss)
                loss.backward()
                opt.step()
        n = compare(out, read(os.path.join(tb, out, htb.EVENT_FILE)), expected(run_dir))
        check(("loss", 2) in expected(run_dir) and n > 3, f"{out}: {n} values")
    check_raises(ValueError, "tensorboard", "tensorboard= without out", ht.emulate, model, "mxfp8",
                 tensorboard=tb)
finally:
    shutil.rmtree(tmp, ignore_errors=True)

sys.exit(status(f"ok: {compared} exported values of 3 runs equal their CSVs, read back by "
                 "TensorBoard"))
