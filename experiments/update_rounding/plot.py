"""Experiment: how the weight update is rounded. Pure-bf16 training with round-to-nearest
updates, stochastically rounded updates, Kahan-compensated updates, fp32 master weights and
fp32 throughout, over learning rates: the final loss against the learning rate (median over
seeds, min-max band), and the updates that vanished (the stored weight did not change although
the update was non-zero) over training at the smallest learning rate.

usage: plot.py RESULTS_DIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def vanished_by_step(results, runs):
    """Per traced step: vanished and non-zero updates summed over the runs' parameters."""
    u = pd.concat([style.read_run_csv(results, r, "updates.csv") for _, r in runs.iterrows()])
    return u.groupby("step")[["vanished", "nonzero"]].sum()


def pct(v, n):
    return 100.0 * v / n if n else float("nan")


def main(results):
    df, _ = style.begin(results)
    models = list(dict.fromkeys(df["model"]))
    updates = list(dict.fromkeys(df["update"]))
    lrs = sorted(df["optimizer.lr"].unique())
    lr0 = lrs[0]
    fig, axes = plt.subplots(len(models), 2, figsize=(10, 3.4 * len(models)), squeeze=False)
    table, finals = [], {}
    for row, m in zip(axes, models):
        for i, u in enumerate(updates):
            sel = df[(df["model"] == m) & (df["update"] == u)]
            g = sel.groupby("optimizer.lr")["final_loss"]
            med, lo, hi = g.median(), g.min(), g.max()
            c = style.color(i)
            row[0].plot(med.index, med.values, "o-", color=c, ms=3, lw=1.2, label=u)
            row[0].fill_between(med.index, lo.values, hi.values, color=c, alpha=0.2, lw=0)
            v = vanished_by_step(results, sel[sel["optimizer.lr"] == lr0])
            row[1].plot(v.index, [pct(a, b) for a, b in zip(v["vanished"], v["nonzero"])],
                        color=c, lw=1.2, label=u)
            lost = [pct(*vanished_by_step(results, sel[sel["optimizer.lr"] == lr]).sum())
                    for lr in lrs]
            table.append((m, u, [med[lr] for lr in lrs], lost))
            finals[m, u] = sel[sel["optimizer.lr"] == lr0]["final_loss"].tolist()
        style.axes(row[0], "learning rate (Adam)", "final training loss (%s)" %
                   ("mean squared error" if m == "mlp" else "cross-entropy, nats"),
                   title="%s: final loss against learning rate" % m, xscale="log", yscale="log")
        style.axes(row[1], "step", "updates that vanished (% of non-zero)",
                   title="%s: vanished updates at lr %g" % (m, lr0))
    fig.tight_layout()
    style.legend_below(fig, axes[-1], ncol=len(updates))
    style.caption(fig, results, "pure-bf16 except fp32; line: median over seeds, band: min-max; "
                                "vanished: the stored weight compares equal after the step")
    style.save(fig, results, "update_rounding")

    print("update_rounding: final loss (median over seeds) and the updates that vanished "
          "(% of non-zero updates, all traced steps and seeds), per learning rate")
    print("lr " + " ".join("%g" % lr for lr in lrs))
    for m, u, loss, lost in table:
        print("%s/%s loss %s" % (m, u, " ".join("%.4g" % x for x in loss)))
        print("%s/%s vanished%% %s" % (m, u, " ".join("%.1f" % x for x in lost)))
    # The expectation, measured rather than assumed: at the smallest learning rate, how far
    # each configuration's final loss is from fp32's.
    # A ratio within the resolution of the losses it divides (bf16 losses: 2^-8 to 2^-7 of
    # their value) is printed as equal.
    if "fp32" in updates:
        for m in models:
            ref = [loss[0] for (mm, u, loss, _) in table if mm == m and u == "fp32"][0]
            parts = ["%s %s" % (u, style.ratio_text(loss[0], finals[m, u], ref, finals[m, "fp32"],
                                                    "fp32"))
                     for (mm, u, loss, _) in table if mm == m and u != "fp32"]
            print("%s at lr %g, final loss / fp32's: %s" % (m, lr0, ", ".join(parts)))

if __name__ == "__main__":
    main(sys.argv[1])
