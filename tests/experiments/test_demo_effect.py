"""The main job shows the effect it is about, on every seed: the full demo sweep
(experiments/demo/sweep.toml, as ./scripts/demo runs it), then, from its results alone:
  - fp16 without loss scaling ends at least 3x above fp16 with the dynamic scaler;
  - the scaler run ends within 2x of fp32;
  - without scaling the first layer's fp16 weight gradients are all zeros, with the scaler not;
and every number the demo's figure and console print agrees with the results
(test_experiment_numbers.py's checker, on the full run). Exits 77 without matplotlib/pandas.

usage: test_demo_effect.py PATH/TO/halfway
"""
import os
import subprocess
import sys
import tempfile

try:
    import pandas as pd
    import matplotlib  # noqa: F401
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
DEMO = os.path.join(HERE, "..", "..", "experiments", "demo")


def main(halfway):
    out = tempfile.mkdtemp(prefix="halfway_demo_effect_")
    r = subprocess.run([halfway, "sweep", os.path.join(DEMO, "sweep.toml"), "--out", out,
                        "--jobs", "2", "--quiet"], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr)
        return 1
    df = pd.read_csv(os.path.join(out, "sweep.csv"))
    failures = []

    def final(case, seed):
        return float(df[(df["case"] == case) & (df["run.seed"] == seed)]["final_loss"].iloc[0])

    def first_layer_zeros(case, seed):
        row = df[(df["case"] == case) & (df["run.seed"] == seed)].iloc[0]
        t = pd.read_csv(os.path.join(out, row["dir"], "trace.csv"))
        t = t[t["name"] == "0.weight.grad"]
        return t["zeros"].sum() / t["total"].sum()

    seeds = sorted(df["run.seed"].unique())
    if len(seeds) < 3:
        failures.append("the demo runs %d seeds, want at least 3" % len(seeds))
    for s in seeds:
        a = final("fp16-noscale", s) / final("fp16-dynamic", s)
        b = final("fp16-dynamic", s) / final("fp32", s)
        z0, z1 = first_layer_zeros("fp16-noscale", s), first_layer_zeros("fp16-dynamic", s)
        print("seed %d: fp16-noscale / fp16-dynamic = %.3g (want >= 3), fp16-dynamic / fp32 = "
              "%.3g (want <= 2); first-layer weight-gradient zeros %.4g%% without scaling, "
              "%.4g%% with" % (s, a, b, 100 * z0, 100 * z1))
        if not a >= 3:
            failures.append("seed %d: unscaled fp16 ends only %.3gx above the scaler" % (s, a))
        if not b <= 2:
            failures.append("seed %d: the scaler ends %.3gx above fp32" % (s, b))
        if not (z0 == 1.0 and z1 < 0.01):
            failures.append("seed %d: first-layer zeros %.4g / %.4g" % (s, z0, z1))
    r = subprocess.run([sys.executable, os.path.join(HERE, "test_experiment_numbers.py"),
                        "--check", "demo", out], capture_output=True, text=True)
    print(r.stdout[-1500:])
    if r.returncode != 0:
        failures.append("the demo's printed numbers disagree with its results")
    for f in failures:
        print("FAIL " + f)
    print("0 failed" if not failures else "%d failed" % len(failures))
    if not failures:
        import shutil
        shutil.rmtree(out, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1])))
