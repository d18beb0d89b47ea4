"""Experiment 4: loss curves for fp32, fp16 without and with dynamic loss scaling, bf16 and
fp8-hybrid, on the MLP and the tiny transformer: the median over seeds, with the min-max
spread shaded.

usage: plot.py RESULTS_DIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def main(results):
    df, _ = style.begin(results)
    models = list(dict.fromkeys(df["model"]))
    formats = list(dict.fromkeys(df["format"]))
    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 3.8), squeeze=False)
    # One legend for all panels: a format's label names its number of seeds in each panel.
    seeds = df.groupby(["format", "model"], sort=False).size()
    labels = {}
    for f in formats:
        counts = [int(seeds.get((f, m), 0)) for m in models]
        labels[f] = "%s (%s seeds)" % (f, counts[0] if len(set(counts)) == 1 else
                                       ", ".join("%s %d" % (m, c) for m, c in zip(models, counts)))
    for a, m in zip(axes[0], models):
        for i, f in enumerate(formats):
            sel = df[(df["model"] == m) & (df["format"] == f)]
            if not len(sel):
                continue
            curves = pd.concat([style.read_run_csv(results, r, "steps.csv").set_index("step")["loss"]
                                for _, r in sel.iterrows()], axis=1)
            c = style.color(i)
            a.plot(curves.index, curves.median(axis=1), color=c, lw=1.2, label=labels[f])
            a.fill_between(curves.index, curves.min(axis=1), curves.max(axis=1), color=c,
                           alpha=0.2, lw=0)
        style.axes(a, "step", "training loss (%s)" %
                   ("mean squared error" if m == "mlp" else "cross-entropy, nats"),
                   title=m, yscale="log")
    fig.tight_layout()
    style.legend_below(fig, axes[0], ncol=len(formats))
    style.caption(fig, results, "line: median over seeds; band: min-max")
    style.save(fig, results, "format_comparison")
    print(df.groupby(["model", "format"], sort=False)["final_loss"]
          .agg(["median", "min", "max"]).to_string())


if __name__ == "__main__":
    main(sys.argv[1])
