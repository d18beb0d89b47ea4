"""Experiment 1: histogram of activation-gradient magnitudes over training, one bin per power
of two, with fp16's normal, subnormal and underflow ranges shaded, bf16's smallest normal
marked, and the histogram shifted by the loss scale the trace recommends (Micikevicius et al.
2018, Fig. 3 style). Right: the same histogram per step.

usage: plot.py RESULTS_DIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def parse_hist(text):
    out = {}
    if isinstance(text, str):
        for item in text.split(";"):
            e, c = item.split(":")
            out[int(e)] = out.get(int(e), 0) + int(c)
    return out


def main(results):
    style.setup()
    df, _ = style.load(results)
    row = df.iloc[0]
    t = style.read_run_csv(results, row, "trace.csv")
    t = t[t["kind"] == "activation_grad"]
    total, per_step = {}, {}
    for step, h in zip(t["step"], t["hist"]):
        for e, c in parse_hist(h).items():
            total[e] = total.get(e, 0) + c
            per_step.setdefault(step, {})
            per_step[step][e] = per_step[step].get(e, 0) + c
    zeros = int(t["zeros"].sum())
    n = sum(total.values()) + zeros
    es = np.arange(min(total) - 2, max(total) + 3)
    pct = np.array([100.0 * total.get(e, 0) / n for e in es])
    shift = int(row["k_low"]) if row["k_low"] == row["k_low"] else 0

    fig, ax = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [1.4, 1]})
    a = ax[0]
    a.set_xlim(min(es[0], -40), max(es[-1] + shift, 17) + 1)
    a.bar(es + 0.5, pct, width=1.0, color="#555555", alpha=0.8,
          label="activation gradients, unscaled")
    if shift:
        a.step(es + shift + 1, pct, where="pre", color=style.color(0), lw=1.2,
               label="after loss scaling by 2^%d (lowest safe scale)" % shift)
    style.shade_fp16(a, "x", log2=True)
    a.set_yscale("log")
    a.set_xlabel("log2(|gradient|)  (bin e holds [2^e, 2^(e+1)))")
    a.set_ylabel("% of all activation-gradient values")
    a.set_title("activation gradients over %d steps (%.2f%% exact zeros)"
                % (int(row["steps"]), 100.0 * zeros / n))
    a.legend(fontsize=7, loc="upper left")

    steps = sorted(per_step)
    grid = np.zeros((len(es), len(steps)))
    for j, s in enumerate(steps):
        tot = sum(per_step[s].values())
        for i, e in enumerate(es):
            grid[i, j] = 100.0 * per_step[s].get(e, 0) / tot if tot else 0
    im = ax[1].imshow(np.where(grid > 0, grid, np.nan), aspect="auto", origin="lower",
                      cmap="viridis", extent=(steps[0] - 0.5, steps[-1] + 0.5, es[0], es[-1] + 1))
    ax[1].axhline(-24, color=style.color(3), ls="--", lw=1, label="fp16 smallest subnormal 2^-24")
    ax[1].axhline(-14, color=style.color(1), ls="--", lw=1, label="fp16 smallest normal 2^-14")
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("log2(|gradient|)")
    ax[1].set_title("per step")
    ax[1].grid(False)
    ax[1].legend(fontsize=7, loc="lower left")
    fig.colorbar(im, ax=ax[1], label="% of the step's values")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    style.caption(fig, results, "torch-cuda-fp16 without scaling; magnitudes before rounding")
    style.save(fig, results, "gradient_histogram")
    below = sum(c for e, c in total.items() if e < -25)
    print("gradient_histogram: %.3f%% of activation-gradient values below 2^-25 (flush to zero "
          "in fp16); lowest safe scale 2^%d" % (100.0 * below / n, shift))


if __name__ == "__main__":
    main(sys.argv[1])
