"""Long runs of `halfway train`: SIGINT and SIGTERM stop a run at a step boundary; the files of
the finished steps are written atomically, manifest.json says "complete": false with the steps
done, the exit code is 128 + the signal (130, 143), and no temporary file is left. A later run
into the same folder removes the temporary files a SIGKILL left. A sweep reruns a run whose
manifest says it is incomplete. No test depends on timing: the signal is sent once the run's
output shows progress (polled), whenever that is."""
import json
import os
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from simtest import Workdir, check, read_csv, run  # noqa: E402

LONG = """\
[model]
kind = "mlp"
layers = [10, 32, 1]
[data]
synthetic = "regression"
n = 256
batch_size = 64
[loss]
kind = "mse"
[optimizer]
kind = "adam"
lr = 0.01
[precision]
policy = "torch-cuda-fp16"
[scaler]
kind = "dynamic"
[run]
steps = STEPS
"""
OUTPUTS = ("steps.csv", "trace.csv", "scale_window.csv", "memory.csv", "updates.csv",
           "blocks.csv", "manifest.json")


def tmp_files(d):
    return sorted(f for f in os.listdir(d) if ".tmp" in f) if os.path.isdir(d) else []


def interrupted_run(halfway, w, sig, name):
    cfg = w.write(f"{name}.toml", LONG.replace("STEPS", "100000000"))
    out = w.file(name)
    p = subprocess.Popen([halfway, "train", cfg, "--out", out], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        # Progress: the temporary trace.csv has rows on disk (its buffer was written out at
        # least once), so some steps are finished. Poll; the run itself would take hours.
        deadline = time.monotonic() + 120
        while True:
            if p.poll() is not None:
                raise AssertionError(f"the run ended early: {p.returncode} {p.stderr.read()!r}")
            check(time.monotonic() < deadline, "no progress in 120 s")
            grown = [f for f in tmp_files(out)
                     if f.startswith("trace.csv.tmp") and os.path.getsize(os.path.join(out, f))]
            if grown:
                break
            time.sleep(0.02)
        p.send_signal(sig)
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    code = 128 + sig
    check(p.returncode == code, f"{name}: exit code {p.returncode}, expected {code}: {stderr!r}")
    lines = stderr.strip().splitlines()
    check(len(lines) == 1 and lines[0].startswith("halfway train: stopped by "),
          f"{name}: expected one line on stderr, got {stderr!r}")
    check(stdout == "", f"{name}: nothing on stdout for an incomplete run: {stdout!r}")
    check(tmp_files(out) == [], f"{name}: temporary files left: {tmp_files(out)}")
    for f in OUTPUTS:
        check(os.path.isfile(os.path.join(out, f)), f"{name}: {f} missing")
    m = json.load(open(os.path.join(out, "manifest.json")))
    check(m["complete"] is False, f"{name}: manifest complete = {m.get('complete')!r}")
    done = m["steps_done"]
    check(0 < done < 100000000, f"{name}: steps_done = {done}")
    check(f"after {done} of 100000000 steps" in lines[0], lines[0])
    steps = read_csv(os.path.join(out, "steps.csv"))
    check([int(s["step"]) for s in steps] == list(range(done)),
          f"{name}: steps.csv holds steps 0..{len(steps) - 1}, the manifest says {done} done")
    trace = read_csv(os.path.join(out, "trace.csv"))
    check({int(t["step"]) for t in trace} == set(range(done)), f"{name}: trace.csv steps")
    window = read_csv(os.path.join(out, "scale_window.csv"))
    check(max(int(r["step"]) for r in window) == done - 1, f"{name}: scale_window.csv steps")
    def f32(v):
        return struct.unpack("f", struct.pack("f", float(v)))[0]

    check(f32(m["summary"]["final_loss"]) == f32(steps[-1]["loss"]),
          f"{name}: the final loss is not the last finished step's")
    print(f"{name}: stopped after {done} steps, exit {p.returncode}")
    return out, done


def main(halfway):
    w = Workdir("interrupt")
    try:
        out, _ = interrupted_run(halfway, w, signal.SIGINT, "sigint")
        interrupted_run(halfway, w, signal.SIGTERM, "sigterm")

        # A run into the same folder replaces the incomplete one with a complete one, and
        # removes what a SIGKILL left: temporary files of processes that no longer exist.
        dead = subprocess.Popen(["true"])
        dead.wait()
        stale = [f"steps.csv.tmp.{dead.pid}", f"manifest.json.tmp.{dead.pid}",
                 f"grads.npz.tmp.{dead.pid}.data", f"grads.npz.tmp.{dead.pid}.Ab12Cd"]
        kept = [f"steps.csv.tmp.{os.getpid()}",  # a live process's file
                f"notes.txt.tmp.{dead.pid}", "steps.csv.tmp.x1"]  # not a halfway output
        for f in stale + kept:
            open(os.path.join(out, f), "w").write("partial\n")
        cfg = w.write("short.toml", LONG.replace("STEPS", "3"))
        r = run(halfway, "train", cfg, "--out", out)
        check(r.returncode == 0, r.stderr)
        left = tmp_files(out)
        check(left == sorted(kept), f"after a new run: {left}, expected only {sorted(kept)}")
        m = json.load(open(os.path.join(out, "manifest.json")))
        check(m["complete"] is True and m["steps_done"] == 3, f"manifest: {m.get('complete')}")
        check(len(read_csv(os.path.join(out, "steps.csv"))) == 3, "3 steps")

        # A sweep treats a run whose manifest says "complete": false as not done: a resume
        # reruns it (and merge does not count it).
        w.write("base.toml", LONG.replace("STEPS", "2"))
        sweep = w.write("sweep.toml", 'base = "base.toml"\n[axes]\n"run.seed" = [0, 1, 2]\n')
        res = w.file("sweep_out")
        r = run(halfway, "sweep", sweep, "--out", res, "--quiet")
        check(r.returncode == 0, r.stderr)
        man = os.path.join(res, "runs", "0001", "manifest.json")
        whole = open(man).read()
        m = json.loads(whole)
        m["complete"], m["steps_done"] = False, 1
        open(man, "w").write(json.dumps(m))
        r = run(halfway, "merge", res, "--out", w.file("merged.csv"))
        check(r.returncode == 1 and "1 of 3 runs are not done: 1" in r.stderr,
              f"merge counted an incomplete run: {r.returncode} {r.stderr!r}")
        r = run(halfway, "sweep", sweep, "--out", res)
        check(r.returncode == 0 and "1 run now" in r.stdout,
              f"resume: {r.returncode} {r.stdout!r} {r.stderr!r}")
        check(open(man).read() == whole, "the rerun run is the same as the first time")
        print("ok")
        return 0
    finally:
        w.cleanup()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
