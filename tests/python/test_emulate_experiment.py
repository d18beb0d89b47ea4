"""experiments/emulate_recipes/run.py, the runner of a Python experiment: the same outputs at 1
and 2 jobs, byte for byte; a stopped invocation resumes (only the missing run is trained again,
a half-written run folder is removed) and a folder without sweep.json is incomplete; a results
folder of another definition, an unknown key and an unknown recipe are one line and exit 2.
Exits 77 (skipped) without torch or the simulator in the module."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import hwtest  # noqa: E402
from scratch import tree  # noqa: E402
from checks import check, status  # noqa: E402

hwtest.require("torch", "the PyTorch model")
hwtest.require_sim("_AnalysisRun")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def experiment(tmp, name, edit):
    """A copy of the experiment whose emulate.toml `edit` changed; its run.py."""
    d = os.path.join(tmp, name)
    shutil.copytree(os.path.join(ROOT, "experiments", "emulate_recipes"), d,
                    ignore=shutil.ignore_patterns("__pycache__"))
    p = os.path.join(d, "emulate.toml")
    with open(p) as f:
        s = f.read()
    with open(p, "w") as f:
        f.write(edit(s))
    return os.path.join(d, "run.py")


def small(s):
    s = s.replace("steps = 300", "steps = 3").replace("every = 10", "every = 2")
    s = s.replace("seeds = [0, 1, 2]", "seeds = [0, 1]")
    start = s.index("recipes = [")
    return s[:start] + 'recipes = ["fp32", "nvfp4", "fp8-hybrid"]\n'


def run(script, out, *args):
    return subprocess.run([sys.executable, script, out] + list(args), capture_output=True,
                          text=True)


def main():
    tmp = tempfile.mkdtemp(prefix="halfway_emulate_experiment_")
    script = experiment(tmp, "exp", small)
    one, two = os.path.join(tmp, "one"), os.path.join(tmp, "two")
    r1, r2 = run(script, one), run(script, two, "--jobs", "2")
    check(r1.returncode == 0 and r2.returncode == 0, "runs at 1 and 2 jobs: %s %s"
          % (r1.stderr[-500:], r2.stderr[-500:]))
    f1, f2 = tree(one), tree(two)
    check(len(f1) == 2 + 1 + 6 * 4 and f1 == f2,
          "byte-identical results at 1 and 2 jobs (%d files)" % len(f1))

    # Stopped after some runs: no sweep.json, one run missing, a half-written one left.
    os.remove(os.path.join(one, "sweep.json"))
    shutil.rmtree(os.path.join(one, "runs", "0003"))
    stale = os.path.join(one, "runs", ".0004.tmp.999999")
    shutil.copytree(os.path.join(one, "runs", "0004"), stale)
    kept = os.stat(os.path.join(one, "runs", "0000", "steps.csv")).st_mtime_ns
    r = run(script, one)
    check(r.returncode == 0, "resume: exit %d %s" % (r.returncode, r.stderr[-300:]))
    check(not os.path.exists(stale), "resume: the half-written run folder is removed")
    check(os.stat(os.path.join(one, "runs", "0000", "steps.csv")).st_mtime_ns == kept,
          "resume: a finished run is not trained again")
    check(tree(one) == f2, "resume: the results are the uninterrupted ones, byte for byte")

    def one_line(r, needle, what):
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and needle in lines[0] and
              lines[0].startswith("emulate_recipes: error: "),
              "%s: exit %d, %r" % (what, r.returncode, r.stderr))

    other = experiment(tmp, "other", lambda s: small(s).replace("lr = 0.003", "lr = 0.004"))
    one_line(run(other, one), "holds the runs of another emulate.toml", "another definition")
    check(tree(one) == f2, "another definition: the results are left as they were")
    bad = experiment(tmp, "bad", lambda s: small(s) + "[extra]\nx = 1\n")
    one_line(run(bad, os.path.join(tmp, "b1")), "unknown table(s) extra", "unknown table")
    bad = experiment(tmp, "bad2", lambda s: small(s).replace("vocab = 16", "vocab = 16\nwidth = 3"))
    one_line(run(bad, os.path.join(tmp, "b2")), "[model] needs exactly", "unknown key")
    bad = experiment(tmp, "bad3", lambda s: small(s).replace('"nvfp4"', '"nvfp5"'))
    one_line(run(bad, os.path.join(tmp, "b3")), "unknown recipe 'nvfp5'", "unknown recipe")
    one_line(run(script, os.path.join(tmp, "b4"), "--jobs", "0"), "--jobs must be in 1..256",
             "--jobs 0")
    shutil.rmtree(tmp, ignore_errors=True)
    return status()


if __name__ == "__main__":
    sys.exit(main())
