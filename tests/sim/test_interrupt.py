"""Long runs of `halfway train`: SIGINT, SIGTERM, SIGHUP and SIGQUIT stop a run at a step
boundary; the files of the finished steps are written atomically, manifest.json says
"complete": false with the steps done, the exit code is 128 + the signal (130, 143, 129, 131),
and no temporary file is left. A later run into the same folder removes the temporary files a
SIGKILL left on this host (and keeps other hosts'). A sweep reruns a run whose manifest says
it is incomplete; a sweep stopped by SIGINT stops its runs, indexes the finished ones and
exits 130. `halfway analyze` stopped by SIGINT or SIGTERM (sent by strace on its k-th read)
leaves its output folder as it was and no temporary file. No test depends on timing: a
signal is sent once the run's output shows progress (polled), whenever that is."""
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from simtest import SKIP, check, in_workdir, read_csv, run, strace_env, strace_missing  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import config  # noqa: E402

def long_run(steps):
    """The MLP that these runs train, for `steps` steps."""
    return config("mlp", run={"steps": steps, "seed": None})


OUTPUTS = ("steps.csv", "trace.csv", "scale_window.csv", "memory.csv", "updates.csv",
           "blocks.csv", "manifest.json")


# What the 100,000,000-step runs would write, by far more than any disk: they are stopped.
LONG_DISK = "1000T"


def tmp_files(d):
    return sorted(f for f in os.listdir(d) if ".tmp" in f) if os.path.isdir(d) else []


def interrupted_run(halfway, w, sig, name):
    cfg = w.write(f"{name}.toml", long_run(100000000))
    out = w.file(name)
    # A run meant to be stopped: its disk estimate (hundreds of GiB) is waived by --max-disk.
    p = subprocess.Popen([halfway, "train", cfg, "--out", out, "--max-disk", LONG_DISK],
                         stdout=subprocess.PIPE,
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


def this_host():
    """The host as temporary names spell it: [A-Za-z0-9-] kept, anything else '_'."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "-") else "_"
                   for c in socket.gethostname())


def wait_for(p, cond, what):
    deadline = time.monotonic() + 120
    while not cond():
        if p.poll() is not None:
            raise AssertionError(f"{what}: ended early: {p.returncode} {p.stderr.read()!r}")
        check(time.monotonic() < deadline, f"{what}: no progress in 120 s")
        time.sleep(0.02)


def interrupted_sweep(halfway, w):
    """SIGINT to a sweep whose third run is long: the finished runs are indexed, the run in
    progress stops at a step boundary and is removed, exit 130."""
    w.write("sweep_base.toml", long_run(2))
    sweep = w.write("long_sweep.toml",
                    'base = "sweep_base.toml"\n[axes]\n"run.steps" = [2, 3, 100000000]\n')
    res = w.file("long_sweep")
    p = subprocess.Popen([halfway, "sweep", sweep, "--out", res, "--max-disk", LONG_DISK],
                         stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        tmp = os.path.join(res, "runs", ".tmp-0002")
        wait_for(p, lambda: any(f.startswith("trace.csv.tmp") and
                                os.path.getsize(os.path.join(tmp, f)) for f in tmp_files(tmp)),
                 "sweep")
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    check(p.returncode == 130, f"sweep: exit {p.returncode}, expected 130: {stderr!r}")
    check("stopped by SIGINT: 2 of 3 runs done" in stderr, f"sweep: {stderr!r}")
    runs = sorted(os.listdir(os.path.join(res, "runs")))
    check([r for r in runs if not r.endswith(".lock")] == ["0000", "0001"],
          f"sweep: runs/ holds {runs}")
    index = read_csv(os.path.join(res, "sweep.csv"))
    check([r["run"] for r in index] == ["0", "1"], f"sweep.csv: {index}")
    print(f"sweep: stopped, exit {p.returncode}, runs {runs}")


def interrupted_analyze(halfway, w, sig, np):
    """`halfway analyze` into a folder that holds an older analysis, sent `sig` by strace on
    entering its 60th read (of some 160): the folder is as it was, no temporary file left,
    one line on stderr, exit 128 + sig."""
    out = w.file("analysis")
    small, big = w.file("small.npz"), w.file("big.npz")
    if not os.path.exists(big):
        np.savez(small, x=np.arange(100, dtype=np.float32))
        np.savez(big, x=np.random.default_rng(0).standard_normal(5_000_000).astype(np.float32))
        r = run(halfway, "analyze", small, "--out", out)
        check(r.returncode == 0, r.stderr)
    before = {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)}
    name = signal.Signals(sig).name
    r = subprocess.run(["strace", "-f", "-qq", "-o", os.devnull, "-e", "trace=read", "-e",
                        f"inject=read:signal={name[3:]}:when=60", halfway, "analyze", big,
                        "--out", out], capture_output=True, text=True,
                       env=strace_env())
    check(r.returncode == 128 + sig, f"analyze {name}: exit {r.returncode}: {r.stderr!r}")
    check(r.stderr.count("\n") == 1 and f"halfway analyze: stopped by {name}" in r.stderr,
          f"analyze {name}: {r.stderr!r}")
    after = {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)}
    check(after == before, f"analyze {name}: the folder changed: {sorted(after)}")
    print(f"analyze: stopped by {name}, exit {r.returncode}, folder unchanged")


def main(halfway, w):
    out, _ = interrupted_run(halfway, w, signal.SIGINT, "sigint")
    interrupted_run(halfway, w, signal.SIGTERM, "sigterm")
    # A closed terminal or SSH session (SIGHUP) and Ctrl-\ (SIGQUIT) stop a run the same way.
    interrupted_run(halfway, w, signal.SIGHUP, "sighup")
    interrupted_run(halfway, w, signal.SIGQUIT, "sigquit")
    interrupted_sweep(halfway, w)

    # A run into the same folder replaces the incomplete one with a complete one, and
    # removes what a SIGKILL left: temporary files of processes that no longer exist.
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = this_host()
    stale = [f"steps.csv.tmp.{dead.pid}@{host}", f"manifest.json.tmp.{dead.pid}@{host}",
             f"grads.npz.tmp.{dead.pid}@{host}.data",
             f"grads.npz.tmp.{dead.pid}@{host}.Ab12Cd",
             f"trace.csv.tmp.{dead.pid}", f"grads.npz.tmp.{dead.pid}.data"]  # older names
    kept = [f"steps.csv.tmp.{os.getpid()}@{host}",  # a live process's file
            f"steps.csv.tmp.{dead.pid}@other-{host}",  # another host's: its PID is not ours
            f"notes.txt.tmp.{dead.pid}@{host}", "steps.csv.tmp.x1"]  # not a halfway output
    for f in stale + kept:
        open(os.path.join(out, f), "w").write("partial\n")
    cfg = w.write("short.toml", long_run(3))
    r = run(halfway, "train", cfg, "--out", out)
    check(r.returncode == 0, r.stderr)
    left = tmp_files(out)
    check(left == sorted(kept), f"after a new run: {left}, expected only {sorted(kept)}")
    m = json.load(open(os.path.join(out, "manifest.json")))
    check(m["complete"] is True and m["steps_done"] == 3, f"manifest: {m.get('complete')}")
    check(len(read_csv(os.path.join(out, "steps.csv"))) == 3, "3 steps")

    # A sweep treats a run whose manifest says "complete": false as not done: a resume
    # reruns it (and merge does not count it).
    w.write("base.toml", long_run(2))
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

    try:
        import numpy as np
    except ImportError:
        np = None
    if np is None or strace_missing():
        print("SKIP: the analyze part needs numpy and a working strace")
        return SKIP
    for sig in (signal.SIGINT, signal.SIGTERM):
        interrupted_analyze(halfway, w, sig, np)
    print("ok")


if __name__ == "__main__":
    sys.exit(in_workdir("interrupt", main))
