#!/usr/bin/env python3
"""`halfway bisect` on planted culprits: configs whose gap to fp32 has one known cause (or two
that only close it together), each of which must be named exactly, within the stated budget.
Every number of the console paragraph and bisect.json is recomputed from bisect.csv here, by
code that shares nothing with the command's. Also: resuming reuses the finished runs and gives
the same answer, --jobs does not change it, and bad input is one line and exit code 2.
Usage: test_bisect.py PATH/TO/halfway
"""
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import quiet_check as check, status  # noqa: E402
from configs import Raw, config  # noqa: E402

HALFWAY = sys.argv[1]


def run(args):
    p = subprocess.run([HALFWAY, "bisect"] + args, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def run_ok(name, args):
    """`halfway bisect ARGS`, its output printed: its stdout, or None (a failed check named
    `name`) when it does not exit 0."""
    rc, so, se = run(args)
    print(f"{name}: rc {rc}\n{so}{se}", end="")
    check(rc == 0, f"{name}: exit {rc}: {se}")
    return so if rc == 0 else None


def bisect_json(out):
    with open(os.path.join(out, "bisect.json")) as f:
        return json.load(f)


def mlp(optimizer, precision, steps, scaler=None):
    """The planted MLP (8-32-32-1, gelu) with its optimizer, precision and steps."""
    return config("mlp", model={"layers": [8, 32, 32, 1], "activation": "gelu"},
                  data={"batch_size": 32}, optimizer=optimizer, precision=precision,
                  scaler=scaler, run={"steps": steps, "seed": None})


# name: (config text, expected culprit, budget, extra arguments)
PLANTED = {
    # Adam's second moment in fp16: (1 - beta2) g^2 flushes to zero for small gradients and the
    # update becomes m / eps. The matmul family in bf16 is a decoy. Two seeds, averaged.
    "exp_avg_sq": (mlp({"exp_avg_sq_dtype": "fp16"}, {"policy": "torch-cuda-bf16"}, 40),
                   ["optimizer state exp_avg_sq"], 12, ["--seeds", "0,1"]),
    # Pure bf16 weights with a small learning rate and nearest rounding: most updates vanish.
    # The ops computing in bf16 and the input cast are decoys.
    "vanishing_update": (mlp({"lr": 0.0005}, {"policy": "pure-bf16"}, 40), ["weights"], 12, []),
    # Only the softmax in fp16, no loss scaling; the first moment in bf16 is a decoy.
    "softmax": (config("transformer", model={"d_model": 16}, data={"n": 256},
                       optimizer={"exp_avg_dtype": "bf16"},
                       precision={"policy": "custom", "low": "fp16"}, scaler=None,
                       run={"steps": 30}, **{"precision.ops": {"softmax": "lower"}}),
                ["softmax"], 8, ["--metric", "drift"]),
    # The same, cut into layers: the softmax lives in the one transformer block.
    "softmax_layer": (None, ["layer blocks.0"], 16, ["--metric", "drift", "--granularity", "layer"]),
    # The same, cut into single op sites: the attention's softmax, not its scores, scale or
    # context, nor the q/k/v/proj linear layers beside it.
    "softmax_tensor": (None, ["tensor blocks.0.attn.softmax"], 16,
                       ["--metric", "drift", "--granularity", "tensor"]),
    # fp16 exp_avg_sq in a byte-level language model, measured by the validation loss.
    "val_loss": (config("transformer",
                        model={"vocab": 256, "seq_len": 16, "d_model": 16, "causal": True},
                        data={"synthetic": None, "n": None, "text": "corpus.txt", "batch_size": 8,
                              "val_every": 10, "val_windows": 16},
                        optimizer={"exp_avg_sq_dtype": "fp16"}, scaler=None, run={"steps": 30}),
                  ["optimizer state exp_avg_sq"], 10, ["--metric", "val_loss"]),
    # Two causes, each enough to stop learning: a static loss scale of 2^-24 flushes every
    # fp16 gradient, and fp16 weights with a small learning rate lose their updates. Only
    # promoting the backward pass and the update together closes the gap.
    "pair": (mlp({"lr": 0.00005}, {"policy": "pure-fp16"}, 300,
                 scaler={"kind": "static", "scale": Raw("5.9604644775390625e-08")}),
             ["backward", "update"], 8, ["--granularity", "role"]),
}

# The tensors whose trace.csv rows the paragraph's flushed count sums.
EVIDENCE = {"exp_avg_sq": ".exp_avg_sq", "vanishing_update": ".update"}


PLANTED["softmax_layer"] = (PLANTED["softmax"][0],) + PLANTED["softmax_layer"][1:]
PLANTED["softmax_tensor"] = (PLANTED["softmax"][0],) + PLANTED["softmax_tensor"][1:]

# fp8 with per-tensor current scaling and a 4-bit (e2m1) backward format: the gradients' fp8
# copies are coarse, the search runs over the six GEMM operand copies.
FP8_OPERANDS = mlp({}, {"policy": "fp8-current", "fp8_backward": "e2m1"}, 40)
COPIES = ["X (fprop)", "W (fprop)", "dY (dgrad)", "W (dgrad)", "dY (wgrad)", "X (wgrad)"]


def write_config(tmp, name, text):
    """TMP/NAME.toml holding `text`; its path."""
    path = os.path.join(tmp, name + ".toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def recompute(rows):
    """Mean metric per (role, promoted), the gap, and each candidate's closed fraction."""
    by = defaultdict(list)
    for r in rows:
        by[(r["role"], r["promoted"])].append(float(r["metric"]) if r["metric"] else float("nan"))
    mean = {k: sum(v) / len(v) for k, v in by.items()}
    ref = mean[("reference", "")]
    orig = mean[("original", "")]
    gap = orig - ref
    closed = {k[1]: (orig - m) / gap for k, m in mean.items() if k[0] == "candidate"}
    return ref, orig, gap, closed


def check_outputs(name, out, stdout, want, budget):
    j = bisect_json(out)
    rows = read_csv(os.path.join(out, "bisect.csv"))
    names = [m["name"] for m in j["culprit"]]
    check(names == want, f"{name}: culprit {names}, planted {want}")
    check(j["finished"], f"{name}: search did not finish")
    check(j["runs_used"] <= budget, f"{name}: {j['runs_used']} runs over the budget {budget}")
    check(len(rows) == j["runs_used"], f"{name}: {len(rows)} csv rows, {j['runs_used']} runs")
    check(os.path.exists(os.path.join(out, "manifest.json")), f"{name}: no manifest.json")
    ref, orig, gap, closed = recompute(rows)
    key = " + ".join(want)
    check(key in closed and closed[key] >= 0.9, f"{name}: {key} closes {closed.get(key)}")
    check(abs(j["gap"] - gap) <= 1e-12 * max(1.0, abs(gap)), f"{name}: gap {j['gap']} vs {gap}")
    check(abs(j["closed"] - closed[key]) <= 1e-12, f"{name}: closed {j['closed']} vs {closed[key]}")
    for m in j["culprit"]:
        check(abs(m["closed_alone"] - closed[m["name"]]) <= 1e-12, f"{name}: {m['name']} alone")
    # The paragraph: the culprit in backquotes, the share printed as a whole percent.
    pct = f"{100 * closed[key]:.0f}%"
    for w in want:
        check(f"`{w}`" in stdout, f"{name}: paragraph does not name {w}: {stdout}")
    check(f"closes {pct} of the gap" in stdout, f"{name}: paragraph lacks 'closes {pct}': {stdout}")
    check(f"{j['runs_used']} runs of a budget of {budget}" in stdout, f"{name}: runs: {stdout}")
    check(f"({orig:.4g} against the fp32 reference's {ref:.4g}, gap {gap:.4g}" in stdout,
          f"{name}: paragraph's metrics differ from bisect.csv's: {stdout}")
    if len(want) > 1:
        alone = ", ".join(f"`{w}` closes {100 * closed[w]:.0f}%" for w in want)
        check(f"alone, {alone}." in stdout, f"{name}: paragraph lacks '{alone}': {stdout}")
    check("flushed" in stdout and "vanished" in stdout and "drift" in stdout,
          f"{name}: paragraph lacks trace evidence: {stdout}")
    return j, rows


def check_evidence(name, tmp, text, want_suffix, stdout):
    """The trace evidence against `halfway train`'s own trace.csv and updates.csv of the same
    config with run.reference = "fp32"."""
    cfg = write_config(tmp, name + "-train",
                       text.replace("[run]\n", '[run]\nreference = "fp32"\n'))
    out = os.path.join(tmp, name + "-train")
    p = subprocess.run([HALFWAY, "train", cfg, "--out", out], capture_output=True, text=True)
    check(p.returncode == 0, f"{name}: halfway train: {p.stderr}")
    trace = [r for r in read_csv(os.path.join(out, "trace.csv")) if r["name"].endswith(want_suffix)]
    total = sum(int(r["total"]) for r in trace)
    flushed = sum(int(r["flushed"]) for r in trace)
    updates = read_csv(os.path.join(out, "updates.csv"))
    nonzero = sum(int(r["nonzero"]) for r in updates)
    vanished = sum(int(r["vanished"]) for r in updates)
    last = max(int(r["step"]) for r in updates)
    drifts = [float(r["drift"]) for r in updates if int(r["step"]) == last]
    drift = sum(drifts) / len(drifts)
    check(f"flushed {flushed} of {total} rounded values" in stdout,
          f"{name}: trace.csv has {flushed} of {total} flushed: {stdout}")
    check(f"{vanished} of {nonzero} non-zero updates vanished" in stdout,
          f"{name}: updates.csv has {vanished} of {nonzero} vanished: {stdout}")
    check(f"the weights drift {drift:.4g} from" in stdout, f"{name}: drift {drift:.4g}: {stdout}")


def planted(tmp):
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far"]
    with open(os.path.join(tmp, "corpus.txt"), "w") as f:  # a deterministic text for val_loss
        f.write(" ".join(words[(i * 7 + i // 3) % len(words)] for i in range(3000)))
    for name, (text, want, budget, extra) in PLANTED.items():
        cfg = write_config(tmp, name, text)
        out = os.path.join(tmp, name + ".bisect")
        so = run_ok(name, [cfg, "--budget", str(budget), "--out", out] + extra)
        if so is not None:
            check_outputs(name, out, so, want, budget)
        if name in EVIDENCE:
            check_evidence(name, tmp, text, EVIDENCE[name], so or "")


def operands(tmp):
    """--granularity operand: the parts are the six copies, every printed number recomputes
    from bisect.csv, and with all six promoted each GEMM reads fp32 operands and is the fp32
    linear layer's, so that run's metric is the fp32 reference's, bit for bit."""
    cfg = write_config(tmp, "operands", FP8_OPERANDS)
    out = os.path.join(tmp, "operands.bisect")
    so = run_ok("operands", [cfg, "--granularity", "operand", "--budget", "24", "--out", out])
    if so is None:
        return
    j = bisect_json(out)
    check([p["name"] for p in j["parts"]] == ["operand " + c for c in COPIES],
          f"operands: parts {j['parts']}")
    want = [m["name"] for m in j["culprit"]]
    check(want and all(w.startswith("operand ") for w in want), f"operands: culprit {want}")
    check_outputs("operands", out, so, want, 24)
    rows = read_csv(os.path.join(out, "bisect.csv"))
    ref = [r["metric"] for r in rows if r["role"] == "reference"]
    every = [r["metric"] for r in rows if r["role"] == "candidate" and r["parts"] == "6"]
    check(len(every) == 1 and every == ref, f"operands: all promoted {every}, fp32 {ref}")


def against_config(tmp):
    """--against CONFIG2: the reference is that config's run; the matmul family, bf16 in both,
    is no part; exp_avg (fp32 in the reference) and exp_avg_sq (bf16 there) are promoted to the
    reference's own formats, so the run with every part promoted is the reference's, bit for
    bit, seed by seed; the culprit is the fp16 exp_avg_sq."""
    base = mlp({"exp_avg_sq_dtype": "bf16"}, {"policy": "torch-cuda-bf16"}, 40)
    ref = write_config(tmp, "against_ref", base)
    cfg = write_config(tmp, "against_orig", base.replace(
        'exp_avg_sq_dtype = "bf16"', 'exp_avg_sq_dtype = "fp16"\nexp_avg_dtype = "bf16"'))
    out = os.path.join(tmp, "against.bisect")
    so = run_ok("against", [cfg, "--against", ref, "--seeds", "0,1", "--budget", "12",
                            "--out", out])
    if so is None:
        return
    j = bisect_json(out)
    check(j["parts"] == [
        {"name": "optimizer state exp_avg", "setting": 'optimizer.exp_avg_dtype = "fp32"'},
        {"name": "optimizer state exp_avg_sq", "setting": 'optimizer.exp_avg_sq_dtype = "bf16"'}],
        f"against: parts {j['parts']}")
    check([m["name"] for m in j["culprit"]] == ["optimizer state exp_avg_sq"],
          f"against: culprit {j['culprit']}")
    check(j["against"] == ref, f"against: bisect.json's against {j['against']}")
    rows = read_csv(os.path.join(out, "bisect.csv"))
    refm = {r["seed"]: r["metric"] for r in rows if r["role"] == "reference"}
    every = {r["seed"]: r["metric"] for r in rows if r["role"] == "candidate" and r["parts"] == "2"}
    check(every == refm, f"against: every part promoted {every}, the reference {refm}")
    check("to the reference's precision (optimizer.exp_avg_sq_dtype = \"bf16\")" in so and
          f"against the reference {ref}'s " in so, f"against: paragraph {so}")


def demoted(tmp):
    """--direction demote on the planted pair: promoting needs the backward pass and the update
    together, but the backward pass alone, every other role promoted, opens the whole gap. The
    opened shares of bisect.json and the paragraph are recomputed from bisect.csv: 1 minus what
    promoting the other parts closed."""
    text, _, budget, extra = PLANTED["pair"]
    cfg = write_config(tmp, "demote", text)
    out = os.path.join(tmp, "demote.bisect")
    so = run_ok("demote",
                [cfg, "--budget", str(budget), "--out", out, "--direction", "demote"] + extra)
    if so is None:
        return
    j = bisect_json(out)
    names = [m["name"] for m in j["culprit"]]
    check(j["direction"] == "demote" and names == ["backward"], f"demote: culprit {names}")
    _, _, _, closed = recompute(read_csv(os.path.join(out, "bisect.csv")))
    rest = " + ".join(p["name"] for p in j["parts"] if p["name"] not in names)
    opened = 1 - closed[rest]
    check(opened >= 0.9 and abs(j["opened"] - opened) <= 1e-12,
          f"demote: opened {j['opened']}, bisect.csv gives {opened}")
    check(abs(j["culprit"][0]["opened_alone"] - opened) <= 1e-12, "demote: opened alone")
    check(f"keeping only `backward` in {cfg}'s precision (every other part promoted to fp32) "
          f"opens {100 * opened:.0f}% of the gap" in so, f"demote: paragraph {so}")


def shards(tmp):
    """--shard I/N: two processes bisecting into one folder at once give the unsharded answer
    and bisect.csv byte for byte, each training part of the runs; a shard left alone trains the
    others' share itself once --shard-wait passes (no hang), with the same answer."""
    text, want, budget, extra = PLANTED["exp_avg_sq"]
    cfg = write_config(tmp, "shards", text)
    whole = os.path.join(tmp, "whole_shards.bisect")
    rc, _, _ = run([cfg, "--budget", str(budget), "--out", whole] + extra)
    check(rc == 0, f"shards: unsharded exit {rc}")
    out = os.path.join(tmp, "sharded.bisect")
    args = [HALFWAY, "bisect", cfg, "--budget", str(budget), "--out", out] + extra
    p1 = subprocess.Popen(args + ["--shard", "1/2"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    rc0, so0, se0 = run(args[2:] + ["--shard", "0/2"])
    so1, se1 = p1.communicate(timeout=600)
    check(rc0 == 0 and p1.returncode == 0, f"shards: exit {rc0}, {p1.returncode}: {se0}{se1}")
    m = re.search(r"shard 1/2 done \((\d+) runs of (\d+) trained here\)", so1)
    check(m is not None and 0 < int(m.group(1)) < int(m.group(2)),
          f"shards: shard 1 trained part of the runs: {so1}")
    check("closes" in so0 and "closes" not in so1, f"shards: shard 0 prints the answer: {so0}")
    with open(os.path.join(out, "bisect.csv")) as f, open(os.path.join(whole, "bisect.csv")) as g:
        check(f.read() == g.read(), "shards: sharded bisect.csv differs from the unsharded one")
    alone = os.path.join(tmp, "alone.bisect")
    rc, so, se = run([cfg, "--budget", str(budget), "--out", alone, "--shard", "0/3",
                      "--shard-wait", "0"] + extra)
    check(rc == 0, f"shards: a lone shard exit {rc}: {se}")
    with open(os.path.join(alone, "bisect.csv")) as f, open(os.path.join(whole, "bisect.csv")) as g:
        check(f.read() == g.read(), "shards: a lone shard's bisect.csv differs")


def resume_and_jobs(tmp):
    """A second run into the same folder reuses every run; --jobs 2 gives the same answer."""
    text, want, budget, extra = PLANTED["exp_avg_sq"]
    cfg = write_config(tmp, "resume", text)
    out = os.path.join(tmp, "resume.bisect")
    rc1, so1, _ = run([cfg, "--budget", str(budget), "--out", out] + extra)
    with open(os.path.join(out, "bisect.csv")) as f:
        csv1 = f.read()
    # Lose the answer and one run, as an interrupted bisection would.
    os.remove(os.path.join(out, "bisect.json"))
    os.remove(os.path.join(out, "manifest.json"))
    runs = sorted(os.listdir(os.path.join(out, "runs")))
    os.remove(os.path.join(out, "runs", runs[-1]))
    rc2, so2, _ = run([cfg, "--budget", str(budget), "--out", out] + extra)
    check(rc1 == 0 and rc2 == 0, f"resume: exit {rc1}, {rc2}")
    check("(1 run now)" in so2, f"resume: expected exactly one run redone: {so2}")
    with open(os.path.join(out, "bisect.csv")) as f:
        check(f.read() == csv1, "resume: bisect.csv differs")
    out3 = os.path.join(tmp, "jobs.bisect")
    rc3, so3, _ = run([cfg, "--budget", str(budget), "--out", out3, "--jobs", "2"] + extra)
    check(rc3 == 0, f"jobs: exit {rc3}")
    check([m["name"] for m in bisect_json(out3)["culprit"]] == want, "jobs: another culprit")
    # Runs of the same candidate have the same metric whatever the number of jobs.
    m1 = {(r["role"], r["promoted"]): r["metric"] for r in read_csv(os.path.join(out, "bisect.csv"))}
    m3 = {(r["role"], r["promoted"]): r["metric"] for r in read_csv(os.path.join(out3, "bisect.csv"))}
    check(all(m3[k] == v for k, v in m1.items() if k in m3), "jobs: metrics differ")


def interrupted(tmp):
    """SIGINT in the middle: exit 130, no answer and no manifest; started again, the bisection
    finishes with the same bisect.csv as one that was never stopped."""
    import signal
    import time
    text = PLANTED["pair"][0].replace("steps = 300", "steps = 2000")
    cfg = write_config(tmp, "stop", text)
    args = ["--budget", "8", "--granularity", "role"]
    whole = os.path.join(tmp, "whole.bisect")
    rc, _, _ = run([cfg, "--out", whole] + args)
    check(rc == 0, f"interrupt: uninterrupted exit {rc}")
    out = os.path.join(tmp, "stop.bisect")
    p = subprocess.Popen([HALFWAY, "bisect", cfg, "--out", out] + args,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Stop once two runs are kept (the reference and the original), in the search.
    runs = os.path.join(out, "runs")
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None:
        if os.path.isdir(runs) and len([f for f in os.listdir(runs) if f.endswith(".json")]) >= 2:
            break
        time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    so, se = p.communicate(timeout=120)
    if p.returncode == 0:
        print("interrupt: the bisection finished before the signal; not checked")
        return
    check(p.returncode == 130, f"interrupt: exit {p.returncode}: {se}")
    check("stopped by SIGINT" in se, f"interrupt: stderr {se!r}")
    check(not os.path.exists(os.path.join(out, "manifest.json")), "interrupt: manifest left")
    check(not os.path.exists(os.path.join(out, "bisect.json")), "interrupt: answer left")
    rc, so, _ = run([cfg, "--out", out] + args)
    check(rc == 0, f"interrupt: resumed exit {rc}")
    with open(os.path.join(out, "bisect.csv")) as f, open(os.path.join(whole, "bisect.csv")) as g:
        check(f.read() == g.read(), "interrupt: resumed bisect.csv differs")


def budget_runs_out(tmp):
    """A budget that pays for the reference, the original and the full set only: the answer is
    the smallest set found (all parts), marked unfinished, exit code 1."""
    text = PLANTED["vanishing_update"][0]
    cfg = write_config(tmp, "short", text)
    out = os.path.join(tmp, "short.bisect")
    rc, so, se = run([cfg, "--budget", "3", "--out", out])
    check(rc == 1, f"budget: exit {rc}: {se}")
    j = bisect_json(out)
    check(not j["finished"] and j["runs_used"] == 3, f"budget: {j['finished']}, {j['runs_used']}")
    check(len(j["culprit"]) == len(j["parts"]), f"budget: culprit {j['culprit']}")
    check("the budget ran out" in so, f"budget: paragraph does not say so: {so}")


def bad_input(tmp):
    text = PLANTED["exp_avg_sq"][0]
    cfg = write_config(tmp, "bad", text)
    fp32 = write_config(tmp, "fp32", mlp({}, {"policy": "fp32"}, 3))
    other_model = write_config(tmp, "other_model", text.replace("[8, 32, 32, 1]", "[8, 16, 1]"))
    cases = {
        "unknown granularity": ([cfg, "--granularity", "bogus"], "unknown granularity 'bogus'"),
        "reference of another run": ([cfg, "--against", other_model],
                                     "the configs differ in 'model.layers'"),
        "drift against a config": ([cfg, "--against", fp32, "--metric", "drift"],
                                   "use final_loss or val_loss"),
        "reference not a config": ([cfg, "--against", os.path.join(tmp, "nope.toml")],
                                   "--against must be fp32 or a config file"),
        "budget below 2": ([cfg, "--budget", "1"], "--budget must be at least 2"),
        "shard out of range": ([cfg, "--shard", "2/2"], "--shard 2/2 is out of range"),
        "unknown direction": ([cfg, "--direction", "down"], "unknown direction 'down'"),
        "unknown metric": ([cfg, "--metric", "accuracy"], "unknown metric 'accuracy'"),
        "val_loss without text": ([cfg, "--metric", "val_loss"], "needs text data"),
        "no gap": ([fp32, "--out", os.path.join(tmp, "fp32.bisect")], "no gap: final_loss"),
        "missing config": ([os.path.join(tmp, "missing.toml")], "missing.toml"),
    }
    for what, (args, needle) in cases.items():
        rc, so, se = run(args)
        lines = se.strip().splitlines()
        check(rc == 2, f"{what}: exit {rc} (want 2): {se}")
        check(len(lines) == 1 and lines[0].startswith("halfway bisect: error: ") and needle in se,
              f"{what}: stderr {se!r}")
        check(so == "", f"{what}: stdout {so!r}")
    # "No gap" gives the measured gap.
    rc, _, se = run([fp32, "--out", os.path.join(tmp, "fp32b.bisect")])
    check(re.search(r"gap 0\b", se) is not None, f"no gap: the measured gap is missing: {se}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        bad_input(tmp)
        planted(tmp)
        operands(tmp)
        against_config(tmp)
        demoted(tmp)
        shards(tmp)
        resume_and_jobs(tmp)
        budget_runs_out(tmp)
        interrupted(tmp)
    return status("ok")


if __name__ == "__main__":
    sys.exit(main())
