"""emulate_recipes: a PyTorch nn.TransformerEncoder trained under halfway.torch.emulate with
seven recipes: training loss curves (mean of the seeds, band min-max), the quantization SNR of
the linear layers' GEMM operands (X the input, W the weight, dY the output gradient) for
every recipe that rounds them, and per recipe and layer the share of those elements flushed
to zero and saturated (or overflowed); a table of the same numbers per recipe.

Every share pools the seeds, the traced steps and, for the block-scaled recipes, each operand's
copies (fprop, dgrad, wgrad), from blocks.csv (block recipes: elements, flushed, saturated,
signal, noise) or trace.csv (per-tensor recipes: the rows of the same operands rounded to a
low-precision dtype: total, flushed, overflow, signal, noise). SNR is 10·log10(Σx² / Σ(x − q)²)
over the pooled rows, the same metric for a per-tensor cast and a block-scaled copy.

usage: plot.py RESULTS_DIR
"""
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

ROLES = (("X", "input"), ("W", "weight"), ("dY", "grad_output"))
# The linear layers' GEMM operands: MODULE.input, MODULE.weight, MODULE.grad_output.
OPERAND = re.compile(r"^(?:encoder\.layers\.(\d+)\.(?:self_attn\.in_proj|self_attn\.out_proj|"
                     r"linear1|linear2)|(head))\.(input|weight|grad_output)$")
LAST = 10  # the final loss: mean training loss of the last LAST steps


def operands(table, names):
    """`table`'s rows that are linear-layer GEMM operands, with their layer and role."""
    m = names.str.extract(OPERAND)
    keep = m[2].notna()
    t = table[keep.values].copy()
    m = m[keep]
    t["layer"] = np.where(m[1].notna(), "head", "layer " + m[0].fillna(""))
    t["role"] = m[2].values
    return t


def counts(results, row):
    """One run's operand rows: elements, flushed, saturated, signal, noise (NaN when unknown)."""
    b = style.read_run_csv(results, row, "blocks.csv")
    t = style.read_run_csv(results, row, "trace.csv")
    t = t[t["dtype"] != "fp32"]
    parts = []
    if len(b):
        b = operands(b, b["name"])
        parts.append(b[["layer", "role", "elements", "flushed", "saturated", "signal", "noise"]])
    if len(t):
        t = operands(t, t["name"]).rename(columns={"total": "elements", "overflow": "saturated"})
        if "signal" not in t:  # a trace.csv from before the error sums
            t["signal"] = t["noise"] = np.nan
        parts.append(t[["layer", "role", "elements", "flushed", "saturated", "signal", "noise"]])
    if not parts:
        return pd.DataFrame(columns=["layer", "role", "elements", "flushed", "saturated",
                                     "signal", "noise"])
    return pd.concat(parts)


def final_loss(s):
    return float(s["loss"].tail(LAST).mean())


def snr_db(signal, noise):
    """inf when every rounding was exact (noise 0)."""
    with np.errstate(divide="ignore"):
        return 10.0 * np.log10(signal / noise)


def heatmap(ax, cases, layers, share, title):
    """Cases x layers, each cell printed (%); an empty cell: no low-precision operand."""
    grid = np.full((len(cases), len(layers)), np.nan)
    for i, case in enumerate(cases):
        for j, layer in enumerate(layers):
            grid[i, j] = share.get((case, layer), np.nan)
    shown = np.where(np.isfinite(grid) & (grid > 0), grid, np.nan)
    ax.imshow(np.log10(shown), cmap="Oranges", aspect="auto", vmin=-4, vmax=2)
    for i in range(len(cases)):
        for j in range(len(layers)):
            v = grid[i, j]
            ax.text(j, i, "-" if not np.isfinite(v) else "0" if v == 0 else "%.3g" % v,
                    ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(layers)), layers)
    ax.set_yticks(range(len(cases)), cases)
    ax.grid(False)
    ax.set_title(title)


def main(results):
    df, d = style.begin(results)
    cases = list(dict.fromkeys(df["case"]))
    steps, ops = {}, {}
    for case in cases:
        rows = [r for _, r in df[df["case"] == case].iterrows()]
        steps[case] = [style.read_run_csv(results, r, "steps.csv") for r in rows]
        ops[case] = pd.concat([counts(results, r) for r in rows])
    layers = sorted({x for c in cases for x in ops[c]["layer"]}, key=lambda s: (s == "head", s))
    fig, ax = plt.subplots(2, 2, figsize=(13, 7.5))
    ax = ax.ravel()
    for i, case in enumerate(cases):
        g = pd.concat(steps[case]).groupby("step")["loss"]
        mean = g.mean()
        ax[0].plot(mean.index, mean.values, "-", color=style.color(i), lw=1.1, label=case)
        ax[0].fill_between(mean.index, g.min().values, g.max().values, color=style.color(i),
                           alpha=0.12, lw=0)
    # log scale: the recipes part where the loss is small
    style.axes(ax[0], "step", "training loss (nats)",
               title="training loss: mean of the seeds, band min-max", yscale="log")
    style.legend_right(ax[0])
    with_snr = [c for c in cases if ops[c]["signal"].notna().any()]
    width = 0.8 / max(len(with_snr), 1)
    for k, case in enumerate(with_snr):
        o = ops[case]
        vals = [snr_db(o[o["role"] == r]["signal"].sum(), o[o["role"] == r]["noise"].sum())
                for _, r in ROLES]
        # An exact operand (inf dB: bf16's dY arrives in bf16) has no bar, only its label.
        bars = ax[1].bar(np.arange(len(ROLES)) + (k - (len(with_snr) - 1) / 2) * width,
                         [v if np.isfinite(v) else 0 for v in vals], width,
                         color=style.color(cases.index(case)), label=case)
        ax[1].bar_label(bars, labels=["%.1f" % v if np.isfinite(v) else "inf" for v in vals],
                        fontsize=6.5, rotation=90, padding=2)
    ax[1].set_xticks(range(len(ROLES)), [label for label, _ in ROLES])
    ax[1].set_ylabel("SNR (dB)")
    ax[1].margins(y=0.15)  # room for the labels above the bars
    ax[1].set_title("quantization SNR of the linear layers' GEMM operands")
    without = [c for c in cases if c not in with_snr]
    if without:  # below the axis: the bars keep the whole panel
        ax[1].text(0.0, -0.12, "no low-precision operand, no SNR: " +
                   ", ".join(without), transform=ax[1].transAxes, va="top", fontsize=7)
    if with_snr:
        style.legend_right(ax[1])
    flushed, saturated = {}, {}
    for case in cases:
        g = ops[case].groupby("layer")[["elements", "flushed", "saturated"]].sum()
        for layer, r in g.iterrows():
            flushed[(case, layer)] = 100.0 * r["flushed"] / r["elements"]
            saturated[(case, layer)] = 100.0 * r["saturated"] / r["elements"]
    heatmap(ax[2], cases, layers, flushed, "operand elements flushed to zero (%)")
    heatmap(ax[3], cases, layers, saturated, "operand elements saturated or overflowed (%)")
    fig.tight_layout()
    style.caption(fig, results, "PyTorch nn.TransformerEncoder (%d layers, d_model %d, %d heads, "
                  "seq %d, batch %d), AdamW, %d seeds; shares and SNR pool every seed and traced "
                  "step; inf dB: every rounding exact; '-': no low-precision operand" % (
                      d["definition"]["model"]["layers"], d["definition"]["model"]["d_model"],
                      d["definition"]["model"]["heads"], d["definition"]["model"]["seq_len"],
                      d["definition"]["data"]["batch_size"], df["seed"].nunique()))
    paths = style.save(fig, results, "emulate_recipes")

    print("%-16s %9s %9s %9s %7s %7s %7s %9s %9s" % (
        "recipe", "loss_mean", "loss_min", "loss_max", "snr_X", "snr_W", "snr_dY", "flush%",
        "satur%"))
    for case in cases:
        vals = [final_loss(s) for s in steps[case]]
        line = "%-16s %9.4g %9.4g %9.4g" % (case, np.mean(vals), min(vals), max(vals))
        o = ops[case]
        for _, r in ROLES:
            sel = o[o["role"] == r]
            line += (" %7.2f" % snr_db(sel["signal"].sum(), sel["noise"].sum())
                     if sel["signal"].notna().any() else " %7s" % "-")
        if len(o):
            line += " %9.4f %9.4f" % (100.0 * o["flushed"].sum() / o["elements"].sum(),
                                      100.0 * o["saturated"].sum() / o["elements"].sum())
        else:
            line += " %9s %9s" % ("-", "-")
        print(line)
    style.seed_spread(cases, {c: [final_loss(s) for s in steps[c]] for c in cases},
                      what="final loss (last %d steps)" % LAST, number=".3g")
    print("figures: " + ", ".join(os.path.relpath(p) for p in paths))


if __name__ == "__main__":
    main(sys.argv[1])
