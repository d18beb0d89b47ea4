"""python3 -m halfway.benchmark --emulate (and halfway bench --torch), small: one row per model,
recipe and contender, each with the goal docs/emulate.md's benchmark section states for it
(native: at most 2x PyTorch fp32 for element recipes and 3x for block recipes, and faster than
fake-quant; fp32 accumulation: 3x and 4x; fake-quant: no goal), `met` saying exactly that of
the ratio, and the machine named. The timings themselves are not checked (a benchmark, not a
timed test). Argument: the halfway program, whose `bench --torch` must give the same rows.
Skipped (exit 77) without torch."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import check, status  # noqa: E402

hwtest.require("torch", "the emulate benchmark")
import halfway  # noqa: E402
from halfway import emulate_bench  # noqa: E402

MODELS = ("mlp", "TransformerEncoder", "CNN")
RECIPES = ("torch-cpu-bf16", "fp8-hybrid", "mxfp8", "nvfp4")
FAKE = "fake-quant (torchao/microxcaling style)"
GOALS = {("native", False): 2.0, ("native", True): 3.0,
         ("fp32 (bit-exact GEMMs)", False): 3.0, ("fp32 (bit-exact GEMMs)", True): 4.0,
         (FAKE, False): None, (FAKE, True): None}


rows = emulate_bench.run(repeats=1, inner=1, quiet=True)
check(len(rows) == len(MODELS) * len(RECIPES) * 3, f"{len(rows)} rows")
for i, r in enumerate(rows):
    model, recipe, contender = MODELS[i // 12], RECIPES[i // 3 % 4], list(GOALS)[i % 3 * 2][0]
    what = f"{r['model']} {r['recipe']} {r['contender']}"
    check(r["model"].lower().startswith(model.lower()) and r["recipe"] == recipe
          and r["contender"] == contender, f"row {i} is {what}, not {model} {recipe} {contender}")
    goal = GOALS[(contender, recipe in ("mxfp8", "nvfp4"))]
    check(r["goal"] == goal, f"{what}: goal {r['goal']}, documented {goal}")
    fake = next(x["ratio"] for x in rows if x["model"] == r["model"] and x["recipe"] == recipe
                and x["contender"] == FAKE)
    want = (None if goal is None else
            r["ratio"] <= goal and (contender != "native" or r["ratio"] < fake))
    check(r["met"] == want, f"{what}: met {r['met']} for ratio {r['ratio']:.2f}")
    check(r["ratio"] > 0 and r["fp32_step_ms"] > 0, f"{what}: times")
    check(r["cpu"] == halfway.cpu_info()["model"], f"{what}: the machine")

p = subprocess.run([sys.argv[1], "bench", "--torch", "--python", sys.executable, "--repeats", "1",
                    "--inner", "1", "--json"], capture_output=True, text=True)
check(p.returncode == 0, f"halfway bench --torch: {p.returncode} {p.stderr[-400:]}")
if p.returncode == 0:
    cli = json.loads(p.stdout)
    check([(r["model"], r["recipe"], r["contender"], r["goal"]) for r in cli] ==
          [(r["model"], r["recipe"], r["contender"], r["goal"]) for r in rows],
          "halfway bench --torch: not the same rows")

sys.exit(status(f"ok: {len(rows)} emulate benchmark rows with their documented goals"))
