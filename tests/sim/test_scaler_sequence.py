"""The dynamic loss scaler against a step-by-step reimplementation of PyTorch's update rule
(torch/amp/grad_scaler.py + the _amp_update_scale_ kernel: fp32 scale times a double factor,
rounded to fp32; growth only when the product is finite; tracker reset on inf/NaN) fed with
the same inf/NaN pattern. Pure fp16 overflows whenever the scale exceeds fp16's range in the
loss gradient, so the scale saw-tooths. Also: a skipped step leaves the weights untouched
(one batch per step, so the next loss is the same). Needs numpy only."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from simtest import check, in_workdir, train  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import config  # noqa: E402



def pytorch_rule(found_inf, init, growth, backoff, interval):
    """Yields (scale used, skipped, tracker after, scale after) per step."""
    scale = np.float32(init)
    tracker = 0
    for inf in found_inf:
        used = scale
        if inf:
            scale = np.float32(float(scale) * backoff)
            tracker = 0
        else:
            successful = tracker + 1
            if successful == interval:
                with np.errstate(over="ignore"):  # float(inf) is what the kernel computes
                    grown = np.float32(float(scale) * growth)
                if np.isfinite(grown):
                    scale = grown
                tracker = 0
            else:
                tracker = successful
        yield used, inf, tracker, scale


def main(halfway, w):
    # The last case, in fp32, grows toward fp32's limit, where growth must stop.
    for policy, init, growth, backoff, interval in (
            ("pure-fp16", 2.0 ** 20, 2.0, 0.5, 3), ("pure-fp16", 3.0e5, 3.0, 0.3, 2),
            ("fp32", 1.0e37, 8.0, 0.75, 1)):
        cfg = w.write("run.toml", config(
            "mlp", model={"layers": [8, 16, 1], "activation": "relu"},
            data={"n": 128, "batch_size": 128}, optimizer={"kind": "sgd", "lr": 0.001},
            precision={"policy": policy},
            scaler={"init_scale": init, "growth_factor": growth, "backoff_factor": backoff,
                    "growth_interval": interval}, run={"steps": 40, "seed": 5}))
        rows = train(halfway, cfg, w.file("out"))
        found = [r["found_inf"] == "1" for r in rows]
        if policy != "fp32":
            check(any(found) and not all(found), f"need a mixed inf pattern, got {found}")
        refused = 0
        for r, (used, skip, tracker, after) in zip(
                rows, pytorch_rule(found, init, growth, backoff, interval)):
            step = r["step"]
            check(np.float32(r["loss_scale"]) == used,
                  f"step {step}: scale {r['loss_scale']} vs {used}")
            check((r["skipped"] == "1") == skip, f"step {step}: skipped")
            check(int(r["growth_tracker"]) == tracker, f"step {step}: tracker")
            check(np.float32(r["next_scale"]) == after, f"step {step}: next scale")
            refused += (not skip) and tracker == 0 and after == used and interval == 1
        if policy == "fp32":
            check(refused > 0, "no growth was refused for leaving fp32's range")
        for a, b in zip(rows, rows[1:]):
            if a["skipped"] == "1":
                check(a["loss"] == b["loss"], f"step {a['step']} was skipped but moved weights")
            else:
                check(a["loss"] != b["loss"], f"step {a['step']} was taken but changed nothing")
        print(f"ok: {policy} init {init} growth {growth} backoff {backoff} interval {interval}: "
              f"{sum(found)} of {len(found)} steps skipped")


if __name__ == "__main__":
    sys.exit(in_workdir("scaler", main))
