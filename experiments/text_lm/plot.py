"""Transformers on real text: validation loss curves of a byte-level GPT-style model trained on
the English fortune-cookie database under five precision recipes, and the share of gradient
values flushed to zero over training; a table of each recipe's validation losses, gradient
values and flushed values.

usage: plot.py RESULTS_DIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402


def flushed_rows(ax, zero_ax, s, color, case, row):
    """One recipe's flushed share of the traced steps on the log axis `ax`, the line broken at
    steps that flushed nothing (a log axis has no zero), which `zero_ax` marks on the recipe's
    own row instead."""
    t = s[s["grad_values"] > 0]
    frac = (100.0 * t["grad_flushed"] / t["grad_values"]).where(t["grad_flushed"] > 0)
    style.mark(ax.plot(t["step"], frac, ".-", lw=0.7, color=color, ms=3)[0], "flushed " + case)
    z = t[t["grad_flushed"] == 0]
    style.mark(zero_ax.plot(z["step"], [row] * len(z), "|", color=color, ms=8, mew=1.5)[0],
               "zero " + case)


def rounded_gradients(results, row):
    """The gradient tensors a run rounds into low precision (what its grad_values count), from
    the first traced step of trace.csv: 'N KIND DTYPE (ops)' for each kind and dtype, or '-'
    without any."""
    t = style.read_run_csv(results, row, "trace.csv")
    t = t[t["kind"].isin(["activation_grad", "weight_grad"]) & (t["dtype"] != "fp32")]
    if not len(t):
        return "-"
    t = t[t["step"] == t["step"].min()]
    return ", ".join("%d %s %s (%s)" % (g["name"].nunique(), k, d, ", ".join(sorted(set(g["op"]))))
                     for (k, d), g in t.groupby(["kind", "dtype"], sort=True))


def main(results):
    df, _ = style.begin(results)
    steps = {r["case"]: style.read_run_csv(results, r, "steps.csv") for _, r in df.iterrows()}
    fig = plt.figure(figsize=(11, 4.3))
    gs = fig.add_gridspec(2, 2, height_ratios=[5, 1], hspace=0.08)
    ax = [fig.add_subplot(gs[:, 0]), fig.add_subplot(gs[0, 1])]
    zero_ax = fig.add_subplot(gs[1, 1], sharex=ax[1])
    lowered = [c for c, s in steps.items() if s["grad_values"].sum() > 0]
    for i, (case, s) in enumerate(steps.items()):
        v = s.dropna(subset=["val_loss"])
        ax[0].plot(v["step"], v["val_loss"], "o-", color=style.color(i), lw=1.2, ms=2.5,
                   label=case)
        if case in lowered:
            flushed_rows(ax[1], zero_ax, s, style.color(i), case, lowered.index(case))
    style.axes(ax[0], "step", "validation loss (nats per byte)",
               title=style.transformer_title(style.run_config(results, df.iloc[0])))
    ax[1].set_yscale("log")
    ax[1].set_ylabel("gradient values flushed to zero (%)")
    ax[1].set_title("gradient values flushed on the traced steps")
    ax[1].tick_params(labelbottom=False)
    zero_ax.set_yticks(range(len(lowered)))
    zero_ax.set_yticklabels([""] * len(lowered))
    zero_ax.set_ylim(len(lowered) - 0.5, -0.5)
    zero_ax.set_ylabel("0 flushed", rotation=0, ha="right", va="center")
    zero_ax.set_xlabel("step")
    zero_ax.grid(False)
    fig.tight_layout()
    style.legend_below(fig, ax, ncol=5)
    style.caption(fig, results, "English fortune-cookie database, byte-level; flushed: lines "
                                "join traced steps that flushed values, the row below marks those "
                                "that flushed none")
    paths = style.save(fig, results, "text_lm")

    print("%-22s %14s %8s %14s %14s %12s %8s  %s" % ("recipe", "final_val_loss", "at_step",
                                                     "best_val_loss", "grad_values", "flushed",
                                                     "skipped", "rounded_gradients"))
    for _, r in df.iterrows():
        s = steps[r["case"]]
        v = s.dropna(subset=["val_loss"])
        print("%-22s %14.5g %8d %14.5g %14d %12d %8d  %s" % (
            r["case"], v["val_loss"].iloc[-1], v["step"].iloc[-1], v["val_loss"].min(),
            s["grad_values"].sum(), s["grad_flushed"].sum(), (s["skipped"] != 0).sum(),
            rounded_gradients(results, r)))
    print("grad_values and flushed count the roundings of the tensors in rounded_gradients "
          "(per traced step): recipes that round different tensors are not comparable by them")
    print("figures: " + ", ".join(os.path.relpath(p) for p in paths))


if __name__ == "__main__":
    main(sys.argv[1])
