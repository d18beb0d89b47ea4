"""Experiment 7: the correct AMP loop, the bug of stepping on still-scaled gradients, fp16
without a scaler, and bf16 without one: loss curves and the gradient values flushed to zero.

usage: plot.py RESULTS_DIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def main(results):
    df, _ = style.begin(results)
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
    for i, (_, row) in enumerate(df.iterrows()):
        s = style.read_run_csv(results, row, "steps.csv")
        loss = s["loss"].where(np.isfinite(s["loss"]))
        label = row["case"]
        bad = s[~np.isfinite(s["loss"]) | (s["loss"] > 1e6)]
        if len(bad):
            label += ": loss %s from step %d" % ("inf/NaN" if not np.isfinite(bad["loss"].iloc[0])
                                                 else "> 1e6", bad["step"].iloc[0])
        ax[0].plot(s["step"], loss, color=style.color(i), lw=1.1, label=label,
                   ls=("-", "--", ":", "-.")[i % 4])
        frac = 100.0 * s["grad_flushed"] / s["grad_values"].where(s["grad_values"] > 0)
        ax[1].plot(s["step"], frac, color=style.color(i), lw=1.1, label=label,
                   ls=("-", "--", ":", "-.")[i % 4])
    style.axes(ax[0], "step", "training loss (mean squared error; gaps: inf/NaN)", title="loss",
               yscale="log")
    style.axes(ax[1], "step", "gradient values flushed to zero (%)",
               title="gradient values flushed to zero")
    fig.tight_layout()
    style.legend_below(fig, ax, ncol=2)
    opt = style.run_config(results, df.iloc[0])["optimizer"]
    style.caption(fig, results, "SGD momentum %g, lr %g; the bug: optimizer.step() before "
                                "scaler.unscale_()" % (opt.get("momentum", 0), opt["lr"]))
    style.save(fig, results, "pitfalls")
    print(df[["case", "final_loss", "skipped_steps", "grad_flushed"]].to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1])
