"""Experiment 2: static loss scales 2^0..2^24 under torch-cuda-fp16. Heatmap of the gradient
values flushed to zero per tensor per scale, final loss against scale, and the safe window that
the single run at 2^0 predicted, overlaid on both; predicted against measured flushed values
and overflow.

usage: plot.py RESULTS_DIR
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

GRAD_KINDS = ("activation_grad", "weight_grad")


def main(results):
    df, _ = style.begin(results)
    df = df.sort_values("scaler.scale")
    ks = [int(round(math.log2(s))) for s in df["scaler.scale"]]

    # Values flushed to zero per gradient tensor and scale, summed over steps.
    names, cols = [], []
    for _, row in df.iterrows():
        t = style.read_run_csv(results, row, "trace.csv")
        t = t[t["kind"].isin(GRAD_KINDS)]
        g = t.groupby("name", sort=False)[["flushed", "total"]].sum()
        for n in g.index:
            if n not in names:
                names.append(n)
        cols.append(g)
    heat = np.full((len(names), len(ks)), np.nan)
    for j, g in enumerate(cols):
        for i, n in enumerate(names):
            if n in g.index and g.loc[n, "total"] > 0:
                heat[i, j] = 100.0 * g.loc[n, "flushed"] / g.loc[n, "total"]

    # The prediction of the single run at the smallest scale.
    ref = df.iloc[0]
    k_lo, k_hi = ref["k_low"], ref["k_high"]
    sw = style.read_run_csv(results, ref, "scale_window.csv")
    pred = sw.groupby("k")[["flushed", "values"]].sum()
    pred_frac = 100.0 * pred["flushed"] / pred["values"]
    pred_over = sw[sw["overflow"] != 0].groupby("k")["step"].nunique()

    fig = plt.figure(figsize=(12, 4.2))
    gs = fig.add_gridspec(1, 3, width_ratios=[1.5, 1, 1])
    ax = fig.add_subplot(gs[0])
    im = ax.imshow(heat, aspect="auto", cmap="viridis", origin="upper",
                   extent=(ks[0] - 0.5, ks[-1] + 0.5, len(names) - 0.5, -0.5))
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=6)
    ax.set_xlabel("loss scale (log2)")
    ax.set_title("gradient values flushed to zero (%)")
    ax.grid(False)
    fig.colorbar(im, ax=ax, label="flushed (% of the tensor's values)")

    ax2 = fig.add_subplot(gs[1])
    ax2.plot(ks, df["final_loss"], "o-", color=style.color(0), ms=3,
             label="middle: final loss of each run")
    style.axes(ax2, "loss scale (log2)", "final training loss (mean squared error)",
               title="final loss against scale", yscale="log")

    ax3 = fig.add_subplot(gs[2])
    floor = 1e-5  # zero is drawn on the axis floor of the log scale
    ax3.plot(ks, np.maximum(100.0 * df["grad_flushed_fraction"], floor), "o",
             color=style.color(0), ms=4, label="right: flushed, measured in each run")
    ax3.plot(pred_frac.index, np.maximum(pred_frac.values, floor), "-", color=style.color(1),
             label="right: flushed, predicted from the run at 2^%d" % ks[0])
    ax3.set_xlim(ks[0] - 0.5, ks[-1] + 0.5)
    ax3.set_yscale("log")
    ax3.set_ylim(floor / 2, 100)
    style.axes(ax3, "loss scale (log2)", "gradient values flushed to zero (%; 0 at the floor)",
               title="one traced run predicts the sweep")
    over = df[df["found_inf_steps"] > 0]
    if len(over):
        k = int(round(math.log2(over["scaler.scale"].min())))
        ax3.axvline(k - 0.5, color=style.color(3), lw=1,
                    label="right: first scale with overflow, measured: 2^%d" % k)
    if len(pred_over):
        ax3.axvline(pred_over.index.min() - 0.5, color=style.color(3), lw=1, ls="--",
                    label="right: first scale with overflow, predicted: 2^%d"
                    % pred_over.index.min())

    for a in (ax, ax2, ax3):
        if k_lo == k_lo:
            a.axvspan(k_lo - 0.5, k_hi + 0.5, facecolor="none", edgecolor=style.color(2),
                      hatch="//", lw=1.2,
                      label="all panels: predicted safe window 2^%d..2^%d" % (k_lo, k_hi))
    fig.tight_layout()
    style.legend_below(fig, [ax, ax2, ax3], ncol=3)
    style.caption(fig, results, "torch-cuda-fp16, static scales; window: no values flushed and "
                                "no overflow on any step")
    style.save(fig, results, "loss_scale_sweep")
    if k_lo == k_lo:
        print("loss_scale_sweep: predicted safe window 2^%d..2^%d; measured: %d of %d scales "
              "without flushed values or overflow" % (k_lo, k_hi,
                                                  int(((df["grad_flushed"] == 0) &
                                                       (df["found_inf_steps"] == 0)).sum()),
                                                  len(df)))
    else:
        print("loss_scale_sweep: the run at 2^%d predicts no safe window; measured: %d of %d "
              "scales without flushed values or overflow"
              % (ks[0], int(((df["grad_flushed"] == 0) & (df["found_inf_steps"] == 0)).sum()),
                 len(df)))
    # Above the reference scale the prediction is low: values that are exact zeros there,
    # computed from an upstream gradient that was flushed to zero, may still be flushed at a
    # larger scale (docs/sim.md, "Scale window"). Each scale with at least 100 measured flushed
    # values:
    rows = [(k, int(m), int(pred["flushed"].get(k, 0))) for k, m in zip(ks, df["grad_flushed"])]
    rows = [r for r in rows if r[0] > ks[0] and r[1] >= 100 and r[2] > 0]
    if rows:
        print("loss_scale_sweep: flushed values above 2^%d, measured and predicted from the run "
              "at 2^%d, which misses the values that are zero there because an upstream "
              "gradient was flushed:" % (ks[0], ks[0]))
        for k, m, p in rows:
            print("  2^%d: measured %d, predicted %d, measured/predicted %.2f" % (k, m, p, m / p))


if __name__ == "__main__":
    main(sys.argv[1])
