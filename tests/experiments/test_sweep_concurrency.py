#!/usr/bin/env python3
"""`halfway sweep` / `halfway merge` under concurrency and hostile input:

- range/pow2 axes: overflow-safe bounds, at most 100000 values per axis and 100000 runs per
  sweep, refused at once (exit 2, one line) instead of looping or filling memory;
- 4 shards started together into one folder (a Slurm array) succeed 100 times out of 100,
  and their merge equals the unsharded sweep;
- a stale temporary file of a killed shard blocks nobody; a shard killed mid-run and started
  again completes;
- two different sweeps started together into one folder: one runs, the other fails with one
  line and leaves nothing behind; the same sweep started twice runs each run once;
- `merge --out` writes through a symlink and refuses what is not a regular file.

usage: test_sweep_concurrency.py PATH/TO/halfway
"""
import os
import resource
import signal
import shutil
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import Raw, config, sweep_base  # noqa: E402
from scratch import tree  # noqa: E402
from checks import check, status  # noqa: E402
from interrupt import kill_when  # noqa: E402

HALFWAY = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="halfway_sweep_conc_")
ENV = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


def run(args, timeout=120):
    try:
        return subprocess.run([HALFWAY] + args, capture_output=True, text=True, env=ENV,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, -999, "", "timed out after %ds" % timeout)


def start(args):
    return subprocess.Popen([HALFWAY] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV)


def write(name, text):
    p = os.path.join(TMP, name)
    with open(p, "w") as f:
        f.write(text)
    return p


def one_line_exit2(r, needle):
    lines = r.stderr.strip().splitlines()
    return r.returncode == 2 and len(lines) == 1 and needle in r.stderr


BASE = sweep_base(config("mlp", model={"layers": [4, 8, 2], "activation": "relu"},
                         data={"synthetic": "blobs", "batch_size": 16, "n": 64},
                         loss={"kind": "cross_entropy"}, optimizer={"kind": "sgd"},
                         precision={"policy": "fp32"}, scaler=None,
                         run={"steps": Raw("STEPS"), "seed": None}))
SWEEP = BASE + """
[axes]
"precision.policy" = ["fp32", "torch-cuda-fp16"]
"run.seed" = [0, 1, 2, 3]
"""

# --- ranges: overflow-safe, bounded ------------------------------------------------------------
top = write("top.toml", BASE.replace("STEPS", "1") +
            '[axes]\n"run.seed" = { range = [9223372036854775806, 9223372036854775807] }\n')
r = run(["sweep", top, "--out", os.path.join(TMP, "top")], timeout=60)
check(r.returncode == 0 and "2 runs" in r.stdout,
      "range at INT64_MAX: 2 runs, no endless loop (%d %r)" % (r.returncode, r.stderr[-200:]))
if r.returncode == 0:
    csv = open(os.path.join(TMP, "top", "sweep.csv")).read()
    check(",9223372036854775806," in csv and ",9223372036854775807," in csv,
          "range at INT64_MAX: both seeds in sweep.csv")
for name, axis, needle in [
        ("full", "{ range = [-9223372036854775808, 9223372036854775807] }", "more than 100000"),
        ("wide", "{ range = [0, 100000] }", "more than 100000 values"),
        ("neg", "{ range = [-9223372036854775808, -9223372036854775807] }", "run.seed"),
        ("rev", "{ range = [5, 4] }", "lo > hi"),
        ("p2", "{ pow2 = [-9223372036854775808, 9223372036854775807] }", "pow2"),
        ("list", "[" + ", ".join(["1"] * 100001) + "]", "more than 100000")]:
    f = write(name + ".toml", BASE.replace("STEPS", "1") + '[axes]\n"run.seed" = %s\n' % axis)
    t0 = time.time()
    r = run(["sweep", f, "--out", os.path.join(TMP, name)], timeout=60)
    check(one_line_exit2(r, needle) and time.time() - t0 < 30,
          "axis %s: exit 2, one line, at once (%.1fs, %r)" % (name, time.time() - t0, r.stderr))
    check(not os.path.exists(os.path.join(TMP, name)), "axis %s: nothing written" % name)
cube = write("cube.toml", BASE.replace("STEPS", "1") + '[axes]\n"run.seed" = { range = [0, 199] }\n'
             '"run.steps" = { range = [1, 200] }\n"optimizer.lr" = { pow2 = [-200, -1] }\n')
t0 = time.time()
r = run(["sweep", cube, "--out", os.path.join(TMP, "cube")], timeout=60)
check(one_line_exit2(r, "more than 100000 runs") and time.time() - t0 < 10,
      "200^3 runs: refused before expanding (%.1fs, %r)" % (time.time() - t0, r.stderr))

# --- 4 shards started together into one folder, 100 times --------------------------------------
# One run per shard, one step per run: the loop measures starting together, not training.
tiny = write("tiny.toml", SWEEP.replace("STEPS", "1").replace("[0, 1, 2, 3]", "[0, 1]"))
ref = os.path.join(TMP, "ref")
r = run(["sweep", tiny, "--out", ref, "--quiet"])
check(r.returncode == 0, "unsharded reference sweep (%r)" % r.stderr)
ref_csv = open(os.path.join(ref, "sweep.csv"), "rb").read()
ok_starts, ok_merges, bad = 0, 0, []
t0 = time.time()
for it in range(100):
    d = os.path.join(TMP, "together")
    shutil.rmtree(d, ignore_errors=True)
    ps = [start(["sweep", tiny, "--out", d, "--shard", "%d/4" % i, "--quiet"]) for i in range(4)]
    for p in ps:
        _, err = p.communicate(timeout=120)
        if p.returncode == 0:
            ok_starts += 1
        elif len(bad) < 3:
            bad.append(err.strip())
    m = run(["merge", d])
    if m.returncode == 0 and open(os.path.join(d, "sweep.csv"), "rb").read() == ref_csv:
        ok_merges += 1
    leftovers = [os.path.relpath(os.path.join(a, f), d) for a, _, fs in os.walk(d) for f in fs
                 if ".tmp" in f or f.endswith(".lock")]
    if leftovers and len(bad) < 3:
        bad.append("left behind: %s" % leftovers)
check(ok_starts == 400, "4 shards started together: %d of 400 starts succeed %s" % (ok_starts, bad))
check(ok_merges == 100, "their merge equals the unsharded sweep.csv: %d of 100 (%.1fs)"
      % (ok_merges, time.time() - t0))

# --- a killed shard blocks nobody ----------------------------------------------------------------
# The temporary file of a shard marker (what a shard killed while starting leaves behind).
d = os.path.join(TMP, "stale")
os.makedirs(os.path.join(d, "shards"))
with open(os.path.join(d, "shards", "1-of-4.tmp.999999"), "w") as f:
    f.write("1-of-4\n")
rs = [start(["sweep", tiny, "--out", d, "--shard", "%d/4" % i, "--quiet"]) for i in range(4)]
errs = [p.communicate(timeout=120)[1] for p in rs]
check(all(p.returncode == 0 for p in rs), "a stale shard temporary file blocks no shard %s"
      % [e.strip() for e in errs if e])
check(sorted(os.listdir(os.path.join(d, "shards"))) == ["%d-of-4" % i for i in range(4)],
      "the stale temporary file is removed")
# A shard killed mid-run, the others started meanwhile, then the killed one started again.
slow = write("slow.toml", SWEEP.replace("STEPS", "400"))
slow_ref = os.path.join(TMP, "slow_ref")
r = run(["sweep", slow, "--out", slow_ref, "--quiet", "--jobs", "2"], timeout=600)
check(r.returncode == 0, "unsharded slow reference (%r)" % r.stderr)
d = os.path.join(TMP, "killed")
runs = os.path.join(d, "runs")
killed = kill_when(lambda: start(["sweep", slow, "--out", d, "--shard", "1/4"]), d,
                   lambda: os.path.isdir(runs) and any(n.startswith(".tmp-")
                                                      for n in os.listdir(runs)), 0.002)
check(killed, "shard 1/4 killed mid-run")
check(any(n.startswith(".tmp-") for n in os.listdir(runs)), "the kill left a temporary run folder")
others = [start(["sweep", slow, "--out", d, "--shard", "%d/4" % i, "--quiet"]) for i in (0, 2, 3)]
errs = [p.communicate(timeout=600)[1] for p in others]
check(all(p.returncode == 0 for p in others),
      "the other shards complete after the kill %s" % [e.strip() for e in errs if e])
r = run(["sweep", slow, "--out", d, "--shard", "1/4"], timeout=600)
check(r.returncode == 0 and "2 runs" in r.stdout, "the killed shard started again completes (%r)"
      % (r.stdout + r.stderr))
r = run(["merge", d])
check(r.returncode == 0 and open(os.path.join(d, "sweep.csv"), "rb").read() ==
      open(os.path.join(slow_ref, "sweep.csv"), "rb").read(),
      "merge after the kill equals the unsharded sweep")
left = [os.path.relpath(os.path.join(a, f), d) for a, dirs, fs in os.walk(d) for f in fs + dirs
        if ".tmp" in f or f.endswith(".lock")]
check(not left, "nothing temporary left (%s)" % left)
check(tree(os.path.join(d, "runs")) == tree(os.path.join(slow_ref, "runs")),
      "every run folder byte-identical to the unsharded sweep's")

# --- two writers in one folder -------------------------------------------------------------------
one = write("one.toml", SWEEP.replace("STEPS", "2"))
two = write("two.toml", SWEEP.replace("STEPS", "3"))
refs = {}
for name, f in (("one", one), ("two", two)):
    refs[name] = os.path.join(TMP, "ref_" + name)
    r = run(["sweep", f, "--out", refs[name], "--quiet"])
    check(r.returncode == 0, "reference sweep %s" % name)
outcomes = []
for it in range(10):
    d = os.path.join(TMP, "mixed")
    shutil.rmtree(d, ignore_errors=True)
    ps = {"one": start(["sweep", one, "--out", d, "--quiet"]),
          "two": start(["sweep", two, "--out", d, "--quiet"])}
    res = {k: (p.communicate(timeout=120), p.returncode) for k, p in ps.items()}
    winners = [k for k, (_, rc) in res.items() if rc == 0]
    losers = [k for k, (_, rc) in res.items() if rc != 0]
    good = len(winners) == 1 and len(losers) == 1
    if good:
        (_, err), rc = res[losers[0]]
        good = rc == 2 and len(err.strip().splitlines()) == 1 and "different sweep" in err
        t, want = tree(d), tree(refs[winners[0]])
        # The definition names its sweep file; the reference has the same one.
        good = good and t == want
    outcomes.append(good or {k: (rc, e.strip()[-200:]) for k, ((_, e), rc) in res.items()})
check(all(o is True for o in outcomes),
      "two different sweeps into one folder: one runs, the other fails with one line and "
      "leaves nothing (%s)" % [o for o in outcomes if o is not True][:2])
for it in range(5):
    d = os.path.join(TMP, "twice")
    shutil.rmtree(d, ignore_errors=True)
    ps = [start(["sweep", one, "--out", d, "--jobs", "2"]) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in ps]
    ran = sum(int(o.split(" run now")[0].split(", ")[-1]) for o, _ in outs
              if " run now" in o)
    check(all(p.returncode == 0 for p in ps) and ran == 8 and tree(d) == tree(refs["one"]),
          "the same sweep started twice: both finish, each run done once (%d), results "
          "unchanged %s" % (ran, [e.strip() for _, e in outs if e]))

# --- merge --out: symlinks written through, non-regular targets refused -------------------------
r = run(["merge", ref, "--out", os.path.join(TMP, "plain.csv")])
want = open(os.path.join(TMP, "plain.csv"), "rb").read()
os.makedirs(os.path.join(TMP, "real"))
link = os.path.join(TMP, "link.csv")
os.symlink(os.path.join("real", "table.csv"), link)  # dangling: the file is created
r = run(["merge", ref, "--out", link])
real = os.path.join(TMP, "real", "table.csv")
check(r.returncode == 0 and os.path.islink(link) and os.path.isfile(real),
      "merge --out LINK: the link stays, its target is written (%r)" % r.stderr)
got = open(real).read()
check(",../ref/runs/0000," in got, "merge --out LINK: run folders relative to the real file")
r = run(["merge", ref, "--out", link])
check(r.returncode == 0 and os.path.islink(link) and open(real).read() == got,
      "merge --out LINK again: replaces the target, keeps the link")
check(not [f for f in os.listdir(os.path.join(TMP, "real")) if ".tmp" in f] and
      not [f for f in os.listdir(TMP) if ".tmp" in f], "merge --out LINK: no temporary file left")
fifo = os.path.join(TMP, "fifo.csv")
os.mkfifo(fifo)
r = run(["merge", ref, "--out", fifo], timeout=60)
check(one_line_exit2(r, "not a regular file") and stat.S_ISFIFO(os.lstat(fifo).st_mode),
      "merge --out FIFO: exit 2, one line, the FIFO kept (%r)" % r.stderr)
os.symlink("fifo.csv", os.path.join(TMP, "to_fifo.csv"))
r = run(["merge", ref, "--out", os.path.join(TMP, "to_fifo.csv")], timeout=60)
check(one_line_exit2(r, "not a regular file"), "merge --out LINK-TO-FIFO: refused (%r)" % r.stderr)
r = run(["merge", ref, "--out", os.path.join(TMP, "real")])
check(one_line_exit2(r, "not a regular file") and os.path.isdir(os.path.join(TMP, "real")),
      "merge --out DIR: refused (%r)" % r.stderr)


def fsize_limit():
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG


r = subprocess.run([HALFWAY, "merge", ref, "--out", os.path.join(TMP, "big.csv")],
                   capture_output=True, text=True, env=ENV, preexec_fn=fsize_limit)
check(one_line_exit2(r, "write to '%s' failed: File too large" % os.path.join(TMP, "big.csv"))
      and not [f for f in os.listdir(TMP) if ".tmp" in f],
      "merge past RLIMIT_FSIZE: the file and the reason, no temporary file (%r)" % r.stderr)
d = os.path.join(TMP, "limited")
r = subprocess.run([HALFWAY, "sweep", tiny, "--out", d], capture_output=True, text=True, env=ENV,
                   preexec_fn=fsize_limit)
check(r.returncode != 0 and "File too large" in r.stderr and "\\x" not in r.stderr,
      "sweep past RLIMIT_FSIZE: says why (%r)" % r.stderr.strip()[-300:])

shutil.rmtree(TMP, ignore_errors=True)
sys.exit(status())
