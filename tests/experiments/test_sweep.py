"""`halfway sweep` / `halfway merge` end to end: results independent of --jobs, resume after a
kill with byte-identical results, shards and merge, SLURM variables, the pandas-readable
index, the progress bar only on a terminal, and every bad input (exit 2, one line, nothing run).

usage: test_sweep.py PATH/TO/halfway
"""
import os
import pty
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import Raw, config, sweep_base  # noqa: E402
from scratch import tree  # noqa: E402
from checks import check, status  # noqa: E402
from interrupt import kill_when  # noqa: E402

HALFWAY = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="halfway_sweep_test_")


def run(args, env=None, **kw):
    e = dict(os.environ)
    for k in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN"):
        e.pop(k, None)
    e.update(env or {})
    if args[0] not in ("sweep", "merge"):
        args = ["sweep"] + args
    return subprocess.run([HALFWAY] + args, capture_output=True, text=True, env=e, **kw)


def write(name, text):
    p = os.path.join(TMP, name)
    with open(p, "w") as f:
        f.write(text)
    return p


BASE = sweep_base(config("mlp", model={"layers": [8, 16, 3], "activation": "gelu"},
                         data={"synthetic": "blobs", "batch_size": 32, "n": 256},
                         loss={"kind": "cross_entropy"}, precision=None, scaler={"kind": "none"},
                         run={"steps": Raw("STEPS"), "seed": None}))

SWEEP = BASE + """
[axes]
"precision.policy" = ["fp32", "torch-cuda-fp16"]
"run.seed" = [0, 1, 2]
"""

small = write("small.toml", SWEEP.replace("STEPS", "4"))

# --- --jobs 1 and --jobs 2 give byte-identical results --------------------------------------
r1 = run([small, "--out", os.path.join(TMP, "j1"), "--jobs", "1"])
r2 = run([small, "--out", os.path.join(TMP, "j2"), "--jobs", "2"])
check(r1.returncode == 0 and r2.returncode == 0, "sweep runs (%s %s)" % (r1.stderr, r2.stderr))
t1, t2 = tree(os.path.join(TMP, "j1")), tree(os.path.join(TMP, "j2"))
check(len([p for p in t1 if p.endswith("manifest.json")]) == 6, "6 runs, 6 manifests")
check(t1 == t2, "--jobs 1 and --jobs 2: byte-identical results (%d files)" % len(t1))
check(r1.stderr == "", "piped: no progress output on stderr")

# --- the index reads with pandas, no custom parsing ------------------------------------------
try:
    import pandas as pd
    df = pd.read_csv(os.path.join(TMP, "j1", "sweep.csv"))
    check(list(df["run"]) == list(range(6)), "sweep.csv: runs 0..5 in order")
    check(list(df["precision.policy"]) == ["fp32"] * 3 + ["torch-cuda-fp16"] * 3 and
          list(df["run.seed"]) == [0, 1, 2] * 2, "sweep.csv: cartesian product, last axis fastest")
    check(df["final_loss"].dtype.kind == "f" and df["run.seed"].dtype.kind == "i" and
          df["grad_flushed"].dtype.kind == "i", "sweep.csv: numeric columns parse as numbers")
    check((df.loc[df["precision.policy"] == "fp32", "grad_values"] == 0).all() and
          (df.loc[df["precision.policy"] != "fp32", "grad_values"] > 0).all() and
          df["grad_flushed_fraction"].isna().tolist() == [True] * 3 + [False] * 3,
          "sweep.csv: fp32 rounds no gradient (fraction empty -> NaN), fp16 does")
    for _, row in df.iterrows():
        steps = pd.read_csv(os.path.join(TMP, "j1", row["dir"], "steps.csv"))
        if float(steps["loss"].iloc[-1]) != float(row["final_loss"]) and len(steps) != 4:
            check(False, "final loss of run %d" % row["run"])
        check(int(steps["grad_flushed"].sum()) == int(row["grad_flushed"]),
              "run %d: grad_flushed is the sum of steps.csv" % row["run"])
except ImportError:
    print("skip pandas checks (pandas not installed)")

# --- rerunning a finished sweep runs nothing and changes nothing -----------------------------
r = run([small, "--out", os.path.join(TMP, "j1")])
check(r.returncode == 0 and "6 already done, 0 run now" in r.stdout, "rerun: nothing to do")
check(tree(os.path.join(TMP, "j1")) == t1, "rerun: files unchanged")

# --- interrupt (SIGKILL after some runs) and resume == uninterrupted -------------------------
big = write("big.toml", SWEEP.replace("STEPS", "150"))
full = os.path.join(TMP, "full")
r = run([big, "--out", full, "--jobs", "1"])
check(r.returncode == 0, "uninterrupted sweep")
part = os.path.join(TMP, "part")
runs = os.path.join(part, "runs")


def two_runs_done():
    # Only finished run folders: a run writes its manifest in .tmp-NNNN before the rename.
    done = [d for d in os.listdir(runs) if d.isdigit()] if os.path.isdir(runs) else []
    return sum(os.path.exists(os.path.join(runs, d, "manifest.json")) for d in done) >= 2


def start_big():
    return subprocess.Popen([HALFWAY, "sweep", big, "--out", part, "--jobs", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


killed_mid = kill_when(start_big, part, two_runs_done, 0.005)
check(killed_mid, "the sweep was killed before it finished")
finished = sorted(d for d in os.listdir(runs)
                  if d.isdigit() and os.path.exists(os.path.join(runs, d, "manifest.json")))
check(2 <= len(finished) < 6, "after the kill: %d of 6 runs done" % len(finished))
check(not os.path.exists(os.path.join(part, "sweep.csv")), "after the kill: no sweep.csv yet")
# Leftovers an interruption can leave: a temporary run folder and a folder without manifest.
todo = [i for i in range(6) if "%04d" % i not in finished]
os.makedirs(os.path.join(runs, ".tmp-%04d" % todo[0]), exist_ok=True)
with open(os.path.join(runs, ".tmp-%04d" % todo[0], "steps.csv"), "w") as f:
    f.write("garbage\n")
if len(todo) > 1:
    os.makedirs(os.path.join(runs, "%04d" % todo[1]), exist_ok=True)
r = run([big, "--out", part, "--jobs", "2"])
check(r.returncode == 0 and ("%d already done" % len(finished)) in r.stdout,
      "resume runs only the missing runs (%s)" % r.stdout.strip())
tp, tf = tree(part), tree(full)
check(tp == tf, "resumed results byte-identical to the uninterrupted sweep (differing: %s)"
      % sorted(k for k in set(tp) | set(tf) if tp.get(k) != tf.get(k))[:8])

# --- shards, SLURM variables and merge -------------------------------------------------------
shared = os.path.join(TMP, "shared")
for i in range(3):
    r = run([small, "--out", shared, "--shard", "%d/3" % i])
    check(r.returncode == 0, "shard %d/3 into one folder" % i)
r = subprocess.run([HALFWAY, "merge", shared], capture_output=True, text=True)
check(r.returncode == 0, "merge of one shared folder")
with open(os.path.join(shared, "sweep.csv"), "rb") as f, \
        open(os.path.join(TMP, "j1", "sweep.csv"), "rb") as g:
    check(f.read() == g.read(), "merged sweep.csv == the unsharded sweep.csv")
sep = [os.path.join(TMP, "sep%d" % i) for i in range(3)]
for i in range(3):
    r = run([small, "--out", sep[i]], env={"SLURM_ARRAY_TASK_ID": str(i + 1),
                                             "SLURM_ARRAY_TASK_COUNT": "3",
                                             "SLURM_ARRAY_TASK_MIN": "1"})
    check(r.returncode == 0 and os.path.exists(os.path.join(sep[i], "sweep.shard-%d-of-3.csv" % i)),
          "SLURM array task %d of 3 (ids from 1) runs shard %d/3" % (i + 1, i))
    check(len(os.listdir(os.path.join(sep[i], "runs"))) == 2, "shard %d ran 2 runs" % i)
r = subprocess.run([HALFWAY, "merge", sep[0], sep[1], "--out", os.path.join(TMP, "m.csv")],
                   capture_output=True, text=True)
check(r.returncode == 1 and "2 of 6 runs are not done" in r.stderr, "merge with a shard missing fails")
r = subprocess.run([HALFWAY, "merge"] + sep + ["--out", os.path.join(TMP, "m.csv")],
                   capture_output=True, text=True)
check(r.returncode == 0, "merge of three shard folders")
try:
    import pandas as pd
    a = pd.read_csv(os.path.join(TMP, "m.csv"))
    b = pd.read_csv(os.path.join(TMP, "j1", "sweep.csv"))
    check(list(a["dir"]) == ["sep%d/runs/%04d" % (i % 3, i) for i in range(6)],
          "merged table points at each shard's run folders")
    check(a.drop(columns="dir").equals(b.drop(columns="dir")), "merged table == unsharded table")
except ImportError:
    pass


# --- bad input: one line, exit 2, nothing run -----------------------------------------------
def bad(args, needle, what, env=None, out=None):
    r = run(args, env=env)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(lines) == 1 and needle in r.stderr,
          "%s -> exit 2, one line (%s)" % (what, r.stderr.strip()))
    if out:
        check(not os.path.exists(os.path.join(out, "runs")) or
              not os.listdir(os.path.join(out, "runs")), what + ": nothing run")


o = os.path.join(TMP, "bad")
bad([write("b1.toml", SWEEP.replace("STEPS", "2") + '"scaler.nonexistent" = [1, 2]\n'), "--out", o],
    "axis 'scaler.nonexistent'", "axis naming a key that does not exist", out=o)
bad([write("b1b.toml", SWEEP.replace("STEPS", "2") + '"optimizer.nonexistent" = [1, 2]\n'),
     "--out", o], "unknown option 'optimizer.nonexistent'", "axis naming an unknown option", out=o)
bad([write("b2.toml", SWEEP.replace("STEPS", "2").replace("[base.run]", "[base.run]\nfoo = 1")),
     "--out", o], "foo", "unknown config key in the base", out=o)
bad([write("b3.toml", SWEEP.replace("STEPS", "2") + '"seed" = [1]\n'), "--out", o],
    "TABLE.OPTION", "axis that is not TABLE.OPTION", out=o)
bad([write("b4.toml", SWEEP.replace("STEPS", "2") + '"precision.policy2" = []\n'), "--out", o],
    "precision.policy2", "empty axis", out=o)
bad([write("b5.toml", "[axes]\n\"run.seed\" = [0]\n"), "--out", o], "run 0", "missing required options", out=o)
bad(["sweep", small, "--shard", "3/3", "--out", o], "out of range", "shard 3/3")
bad(["sweep", small, "--shard", "x", "--out", o], "I/N", "shard x")
bad(["sweep", small, "--shard", "0/3", "--out", o], "conflicting shard numbers",
    "--shard disagreeing with SLURM", env={"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3"})
bad(["sweep", small, "--shard", "0/2", "--out", shared], "conflicting shard numbers",
    "shard count different from the folder's")
other = write("other.toml", SWEEP.replace("STEPS", "5"))
bad(["sweep", other, "--out", os.path.join(TMP, "j1")], "different sweep",
    "a results folder of a different sweep definition")
check(tree(os.path.join(TMP, "j1")) == t1, "the refused folder is unchanged")
bad(["sweep", os.path.join(TMP, "missing.toml")], "missing.toml", "missing sweep file")

# --- the progress bar appears on a terminal --------------------------------------------------
pid, fd = pty.fork()
if pid == 0:
    os.execv(HALFWAY, [HALFWAY, "sweep", big, "--out", os.path.join(TMP, "tty"), "--jobs", "1"])
buf = b""
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    buf += chunk
_, wait_status = os.waitpid(pid, 0)
text = buf.decode(errors="replace")
check(os.WEXITSTATUS(wait_status) == 0 and "ETA" in text and "\r[" in text and "runs" in text,
      "terminal: progress bar with ETA")

shutil.rmtree(TMP, ignore_errors=True)
sys.exit(status())
