"""A run folder written before the MX scale rule ':ceil' was renamed ':rceil' (docs/blocks.md,
"Renamed") is refused, not reused: its manifest names mxfp8_e4m3:ceil, which now means
torchao's CEIL. A sweep of two tiny mxfp8 runs is made, one run's manifest is given the old
names (as the previous version wrote them), and resuming the sweep or merging it must end in
one line naming the folder and what to do, exit 2. The negative controls: the same resume with
the manifest as this version wrote it succeeds, and so does one whose recipe names ':ceil' in
this version's manifest format (a [precision.blocks] choice of torchao's CEIL)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from simtest import check, in_workdir, run  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import config  # noqa: E402

CONFIG = config("mlp", model={"layers": [32, 32, 1]}, data={"batch_size": 32, "n": 64},
                optimizer={"lr": 0.003}, precision={"policy": "mxfp8"}, scaler={"kind": "none"},
                run={"steps": 1, "seed": None})


def main(halfway, w):
    w.write("base.toml", CONFIG)
    sweep = w.write("sweep.toml", 'base = "base.toml"\n[axes]\n"run.seed" = [0, 1]\n')
    res = w.file("out")
    r = run(halfway, "sweep", sweep, "--out", res, "--quiet")
    check(r.returncode == 0, f"sweep: {r.returncode} {r.stderr!r}")
    man = os.path.join(res, "runs", "0001", "manifest.json")
    m = json.load(open(man))
    blocks = m["policy"]["blocks"]
    check(blocks["input"] == "mxfp8_e4m3:rceil", f"this version's name: {blocks}")
    # The negative control: a resume with this version's manifests reuses both runs.
    r = run(halfway, "sweep", sweep, "--out", res)
    check(r.returncode == 0, f"resume: {r.returncode} {r.stderr!r}")
    for role in ("input", "weight", "grad"):
        blocks[role] = "mxfp8_e4m3:ceil"
    with open(man, "w") as f:
        json.dump(m, f)
    r = run(halfway, "sweep", sweep, "--out", res)
    check(r.returncode == 0, f"resume, this version's ':ceil': {r.returncode} {r.stderr!r}")
    # The previous version's recipe keys (before [precision.blocks]).
    m["policy"]["blocks"] = {"input": "mxfp8_e4m3:ceil", "weight": "mxfp8_e4m3:ceil",
                             "grad": "mxfp8_e4m3:ceil", "grad_stochastic_rounding": False,
                             "wgrad_rht": False, "pow2_scales": False}
    with open(man, "w") as f:
        json.dump(m, f)
    for args in (["sweep", sweep, "--out", res], ["merge", res, "--out", w.file("m.csv")]):
        r = run(halfway, *args)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1, f"{args[0]}: {r.returncode} {r.stderr!r}")
        check("before the MX scale rule ':ceil' was renamed ':rceil'" in lines[0]
              and "runs/0001" in lines[0] and "rerun" in lines[0], f"{args[0]}: {lines[0]}")
    print("renamed schemes: ok")


if __name__ == "__main__":
    sys.exit(in_workdir("renamed", main))
