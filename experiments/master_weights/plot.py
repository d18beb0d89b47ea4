"""Experiment 5: the fraction of weight updates lost (the rounded fp16 weight does not change
although the update is non-zero) with and without an fp32 master copy, against learning rate,
and the final loss.

usage: plot.py RESULTS_DIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

LABEL = {"low": "fp16 weights, no master copy", "fp32": "fp32 master weights"}


def main(results):
    df, _ = style.begin(results)
    lost = []
    for _, row in df.iterrows():
        t = style.read_run_csv(results, row, "trace.csv")
        u = t[t["kind"] == "update"]
        lost.append(100.0 * u["vanished"].sum() / u["total"].sum() if len(u) and
                    u["total"].sum() else float("nan"))
    df["lost"] = lost
    # With an fp32 master copy no update rounds into fp16 weights: nothing is lost there.
    df.loc[df["precision.params"] == "fp32", "lost"] = 0.0
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, (p, g) in enumerate(df.groupby("precision.params", sort=False)):
        g = g.sort_values("optimizer.lr")
        ax[0].plot(g["optimizer.lr"], g["lost"], "o-", color=style.color(i), label=LABEL.get(p, p))
        ax[1].plot(g["optimizer.lr"], g["final_loss"], "o-", color=style.color(i),
                   label=LABEL.get(p, p))
    style.axes(ax[0], "learning rate (SGD)", "weight updates lost to rounding (%)",
               title="updates that vanish in fp16 weights", xscale="log")
    style.axes(ax[1], "learning rate (SGD)", "final training loss (mean squared error)",
               title="effect on the loss", xscale="log", yscale="log")
    fig.tight_layout()
    style.legend_below(fig, ax, ncol=2)
    style.caption(fig, results, "pure-fp16; master copy: the update is applied in fp32; a lost "
                                "update: w + Δw rounds back to w")
    style.save(fig, results, "master_weights")
    print(df[["precision.params", "optimizer.lr", "lost", "final_loss"]].to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1])
