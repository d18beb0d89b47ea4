"""Experiment 3: the dynamic loss scale over training with skipped (overflowing) steps marked,
for PyTorch's default growth_interval and a short one, against the safe window each step's
trace predicted.

usage: plot.py RESULTS_DIR
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402


def main(results):
    df, _ = style.begin(results)
    fig, axes = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for i, (_, row) in enumerate(df.iterrows()):
        s = style.read_run_csv(results, row, "steps.csv")
        c = style.color(i)
        lab = "growth_interval = %d" % row["scaler.growth_interval"]
        ax = axes[0]
        if i == 0:
            ax.fill_between(s["step"], s["k_low"], s["k_high"], step="mid", color=style.color(2),
                            alpha=0.2, label="safe window of each step\n(trace of the first run)")
        ax.step(s["step"], [math.log2(v) for v in s["loss_scale"]], where="mid", color=c,
                label=lab)
        sk = s[s["skipped"] != 0]
        ax.plot(sk["step"], [math.log2(v) for v in sk["loss_scale"]], "x", color=c, ms=5,
                label="growth_interval = %d: %d skipped steps (x)"
                % (row["scaler.growth_interval"], len(sk)))
        axes[1].plot(s["step"], s["loss"], color=c, lw=1, label=lab)
    axes[0].set_ylabel("loss scale (log2)")
    axes[0].set_title("dynamic loss scaling, tiny transformer, torch-cuda-fp16")
    style.legend_right(axes[0])
    style.axes(axes[1], "step", "training loss (nats)", yscale="log")
    style.legend_right(axes[1])
    fig.tight_layout()
    style.caption(fig, results, "x: step skipped because a scaled gradient overflowed fp16 "
                                "(max 65504)")
    style.save(fig, results, "dynamic_scaler")
    for _, row in df.iterrows():
        print("dynamic_scaler: growth_interval %d: %d skipped steps, final scale %g, final loss %g"
              % (row["scaler.growth_interval"], row["skipped_steps"], row["final_scale"],
                 row["final_loss"]))


if __name__ == "__main__":
    main(sys.argv[1])
