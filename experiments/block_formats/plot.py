"""Block-scaled formats in training: validation loss curves of the byte-level transformer under
eight precision recipes (mean of the seeds), and, for the block-scaled recipes, the
quantization SNR and the share of elements flushed to zero of each GEMM operand (X the
activations, W the weights, dY the output gradients) over training; a table of each recipe's
final validation losses and its operands' SNR, flushes, saturations and clamped scales.

SNR and shares pool every seed, layer and copy (fprop, dgrad, wgrad) of a traced step (or of
all traced steps, in the table): 10·log10(Σx² / Σ(x − q)²) from blocks.csv's signal and noise
for the block-scaled recipes, and from trace.csv's for the per-tensor fp8 recipes, whose GEMM
operand casts are the same tensors (the linear layers' input, weight and grad_output rows, op
`linear`), so every fp8 and block recipe shares one metric. bf16 autocast casts other tensors
(whatever reaches a linear layer in fp32) and is not drawn there.

The options figure (block_formats_options) compares each block family's variants, the cases
named PRESET:VARIANT ([precision.blocks] choices: MXFP4 and MXFP8 under the four e8m0 scale
rules, NVFP4 without its Hadamard transform and without its stochastic rounding), each beside
its preset: the final validation loss (mean of the seeds, line: min-max) and the SNR of X, W
and dY, pooled as in the table.

usage: plot.py RESULTS_DIR
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
import pandas as pd  # noqa: E402

ROLES = (("X", "input", "--"), ("W", "weight", ":"), ("dY", "grad_output", "-"))


def final_val_loss(s):
    return float(s.dropna(subset=["val_loss"])["val_loss"].iloc[-1])


def snr_db(signal, noise):
    return 10.0 * np.log10(signal / noise)


def role_of(names):
    return names.str.rsplit(".", n=1).str[1]


def operand_copies(results, row):
    """One run's GEMM operand copies: blocks.csv's rows, or for a per-tensor fp8 run (no block
    copies) trace.csv's linear operand casts in blocks.csv's column names (no block scales)."""
    b = style.read_run_csv(results, row, "blocks.csv")
    if len(b):
        return b
    t = style.read_run_csv(results, row, "trace.csv")
    if "signal" not in t:  # a trace.csv from before the error sums
        return b
    t = t[(t["op"] == "linear") & role_of(t["name"]).isin([r for _, r, _ in ROLES]) &
          t["dtype"].str.startswith(("e4m3", "e5m2"))]
    t = t.rename(columns={"total": "elements", "overflow": "saturated"})
    t["scales_clamped"] = t["scales_clamped_harmless"] = np.nan
    return t[["step", "name", "elements", "flushed", "saturated", "scales_clamped",
              "scales_clamped_harmless", "signal", "noise"]]


def clamp_split(b):
    """(real, harmless) clamped scales of a recipe's copies as table cells: '-' for per-tensor
    fp8 (no block scales) and for results from before blocks.csv split its clamps."""
    if "scales_clamped_harmless" not in b or b["scales_clamped_harmless"].isna().any():
        return ("-", "-")
    harmless = int(b["scales_clamped_harmless"].sum())
    return ("%d" % (int(b["scales_clamped"].sum()) - harmless), "%d" % harmless)


# The block families of the options figure: (preset, what the preset itself chooses).
FAMILIES = (("mxfp4", "floor"), ("mxfp8", "rceil"), ("nvfp4", "RHT, SR"))


def pooled_snr(b, role):
    sel = b[b["role"] == role]
    return float(snr_db(np.sum(sel["signal"].to_numpy(dtype=np.float64)),
                        np.sum(sel["noise"].to_numpy(dtype=np.float64))))


def options_figure(results, df, steps, blocks):
    """Each family's preset and its PRESET:VARIANT cases: final validation loss (mean, min-max
    line) and the pooled SNR of X, W and dY; None when the results hold no variant."""
    groups = [[f] + [c for c in steps if c.startswith(f + ":")] for f, _ in FAMILIES
              if f in steps]
    if not any(len(g) > 1 for g in groups):
        return None
    x, labels, pos = [], [], 0
    for (family, own), g in zip(FAMILIES, groups):
        for c in g:
            x.append((c, pos))
            labels.append("%s (%s)" % (c, own) if c == family else c.split(":", 1)[1])
            pos += 1
        pos += 1  # a gap between families
    fig, ax = plt.subplots(1, 2, figsize=(13, 3.9))
    xs = [p for _, p in x]
    finals = {c: [final_val_loss(s) for s in steps[c]] for c, _ in x}
    style.mark(ax[0].plot(xs, [np.mean(finals[c]) for c, _ in x], "o", color=style.color(0),
                          ms=4, label="mean of the seeds")[0], "loss mean")
    style.mark(ax[0].vlines(xs, [min(finals[c]) for c, _ in x], [max(finals[c]) for c, _ in x],
                            color=style.color(0), lw=1.2, label="min-max of the seeds"),
               "loss range")
    for i, (name, role, _) in enumerate(ROLES):
        style.mark(ax[1].plot([p + 0.2 * (i - 1) for p in xs],
                              [pooled_snr(blocks[c], role) for c, _ in x],
                              "osD"[i], color=style.color(i + 1), ms=4, label=name)[0],
                   "snr " + name)
    for a in ax:
        a.set_xticks(xs)
        a.set_xticklabels(labels, rotation=35, ha="right", fontsize=7)
    ax[0].set_ylabel("final validation loss (nats per byte)")
    ax[0].set_title("final validation loss by scale rule and NVFP4 option")
    ax[1].set_ylabel("SNR (dB)")
    ax[1].set_title("quantization SNR of the GEMM operands by option")
    fig.tight_layout()
    style.legend_below(fig, ax, ncol=5)
    style.caption(fig, results, "each family's first entry is its preset (its own choice in "
                                "brackets); loss at the last validation, %d seeds; SNR: every "
                                "seed, layer, copy and traced step" % df["run.seed"].nunique())
    return style.save(fig, results, "block_formats_options")


def main(results):
    df, _ = style.begin(results)
    every = list(dict.fromkeys(df["case"]))
    # The main figure's recipes; the PRESET:VARIANT cases are the options figure's.
    cases = [c for c in every if ":" not in c]
    steps, blocks = {}, {}
    for case in every:
        rows = [r for _, r in df[df["case"] == case].iterrows()]
        steps[case] = [style.read_run_csv(results, r, "steps.csv") for r in rows]
        b = pd.concat([operand_copies(results, r) for r in rows])
        b["role"] = role_of(b["name"])
        blocks[case] = b
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.9))
    for i, case in enumerate(cases):
        v = pd.concat([s.dropna(subset=["val_loss"]) for s in steps[case]])
        g = v.groupby("step")["val_loss"]
        mean = g.mean()
        ax[0].plot(mean.index, mean.values, "o-", color=style.color(i), lw=1.2, ms=2.5,
                   label=case)
        ax[0].fill_between(mean.index, g.min().values, g.max().values, color=style.color(i),
                           alpha=0.12, lw=0)
        b = blocks[case]
        if not len(b):
            continue
        for _, role, ls in ROLES:
            g = b[b["role"] == role].groupby("step")[["signal", "noise", "flushed",
                                                     "elements"]].sum()
            ax[1].plot(g.index, snr_db(g["signal"], g["noise"]), ls, color=style.color(i),
                       lw=1.0, label=case)
            # A step that flushed nothing has no place on the log axis: the line breaks there.
            share = 100.0 * g["flushed"] / g["elements"]
            ax[2].plot(g.index, share.where(share > 0), ls, color=style.color(i), lw=1.0,
                       label=case)
    later = pd.concat([s[s["step"] > 0]["val_loss"] for c in cases for s in steps[c]]).dropna()
    style.validation_loss_axes(ax[0], results, df.iloc[0], later)
    style.axes(ax[1], "step", "SNR (dB)", title="quantization SNR of the GEMM operands")
    style.axes(ax[2], "step", "elements flushed to zero (%)",
               title="flushed elements of the GEMM operands", yscale="log")
    fig.tight_layout()
    extra = [(Line2D([], [], color="#555555", ls=ls), label) for label, _, ls in ROLES]
    style.legend_below(fig, ax, ncol=11, extra=extra)
    style.caption(fig, results, "English fortune-cookie database, byte-level; loss: mean of the "
                                "%d seeds, band: min-max; SNR and flushes: block copies and per-tensor fp8 casts "
                                "of the linear layers' operands, every seed, layer and copy of the traced steps; "
                                "bf16: other tensors, not drawn; a flush line breaks at steps that flushed nothing"
                                % df["run.seed"].nunique())
    paths = style.save(fig, results, "block_formats")
    paths += options_figure(results, df, steps, blocks) or []

    # Clamped block scales, split: real clamps, and NVFP4's harmless one-ulp clamps of the
    # blocks holding the tensor's amax (blocks.csv's scales_clamped_real, _harmless).
    print("%-18s %9s %9s %9s %7s %7s %7s %10s %10s %10s %9s %10s %10s" % (
        "recipe", "val_mean", "val_min", "val_max", "snr_X", "snr_W", "snr_dY", "flush_X%",
        "flush_W%", "flush_dY%", "satur%", "clamp_real", "clamp_ulp"))
    for case in every:
        vals = [final_val_loss(s) for s in steps[case]]
        line = "%-18s %9.4f %9.4f %9.4f" % (case, np.mean(vals), min(vals), max(vals))
        b = blocks[case]
        if len(b):
            sums = {role: b[b["role"] == role][["signal", "noise", "flushed", "elements"]].sum()
                    for _, role, _ in ROLES}
            line += "".join(" %7.2f" % snr_db(sums[r]["signal"], sums[r]["noise"])
                            for _, r, _ in ROLES)
            line += "".join(" %10.4f" % (100.0 * sums[r]["flushed"] / sums[r]["elements"])
                            for _, r, _ in ROLES)
            line += " %9.4f %10s %10s" % ((100.0 * b["saturated"].sum() / b["elements"].sum(),)
                                          + clamp_split(b))
        else:
            line += " %7s %7s %7s %10s %10s %10s %9s %10s %10s" % (("-",) * 9)
        print(line)
    style.seed_spread(every, {c: [final_val_loss(s) for s in steps[c]] for c in every})
    print("figures: " + ", ".join(os.path.relpath(p) for p in paths))


if __name__ == "__main__":
    main(sys.argv[1])
