"""Figures of an analysis folder (`halfway analyze`, halfway.analyze, halfway.torch.trace),
drawn from its files only (trace.csv, scale_window.csv) for one step (default: the last), which
each figure's title names:

  fraction_lost.png   heatmap tensors x formats, coloured by the part of each tensor's L2 norm
                      lost to flushing (flushed_l2_fraction); a cross marks overflows
  histograms.png      per tensor, the power-of-two histogram of the magnitudes, with each
                      format's subnormal and normal ranges (up to 24 tensors: those that lose
                      the most)
  safe_window.png     per tensor and format, the safe scales 2^k (k_low..k_high) as a bar, or
                      "no safe scale"; gradients (a loss scale) and the other tensors (a
                      per-tensor scale factor) in panels of their own; the title names the step

and, when the folder has block schemes (blocks.csv):

  block_snr.png       heatmap tensors x block schemes, coloured and labelled by snr_db
                      (one decimal; "inf" when exact, "-" when not defined)
  block_scales.png    per scheme, the histogram of floor(log2 scale) over the step's
                      tensors (scale_hist, summed), with the mean exponent marked

A bisection folder (`halfway bisect`, its bisect.csv and bisect.json) gets instead:

  bisect.png          left: the share of the gap each candidate set closed (mean over the seeds,
                      one bar per set, labelled in percent; the 90% line, the culprit marked);
                      right: the loss curves of the reference, the original and the fixed run

    python3 -m halfway.figures DIR [--step N]
"""
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .analysis import read_result  # noqa: E402
from .columns import parse_hist  # noqa: E402

PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000"]  # Okabe-Ito, as experiments/style.py
MAX_HIST = 24


def format_range(fmt):
    """(smallest subnormal or None, smallest normal, largest finite) as exponents log2."""
    from . import finfo
    fi = finfo(fmt)
    sub = fi.smallest_subnormal
    return (None if sub is None else float(np.log2(float(sub))),
            float(np.log2(float(fi.smallest_normal))), float(np.log2(float(fi.max))))


def step_rows(trace, step):
    steps = sorted(trace["step"].unique())
    if not steps:
        raise ValueError("the trace holds no rows")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise ValueError(f"no step {step} in the trace (steps {steps[0]}..{steps[-1]})")
    return trace[trace["step"] == step], step


def ordered(values):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def step_text(step, steps):
    """'traced step N (of M traced steps, a..b)'."""
    text = "traced step %d" % step
    if steps is not None and len(steps) > 1:
        text += " (of %d traced steps, %d..%d)" % (len(steps), steps[0], steps[-1])
    return text


def heatmap(t, out, step, steps=None):
    names, fmts = ordered(t["name"]), ordered(t["dtype"])
    grid = np.full((len(names), len(fmts)), np.nan)
    over = np.zeros_like(grid, dtype=bool)
    for name, fmt, frac, n_over in zip(t["name"], t["dtype"], t["flushed_l2_fraction"],
                                       t["overflow"]):
        i, j = names.index(name), fmts.index(fmt)
        grid[i, j] = frac
        over[i, j] = n_over > 0
    fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(fmts), 1.2 + 0.22 * len(names)))
    im = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=max(1e-12, np.nanmax(grid))
                   if np.isfinite(grid).any() else 1)
    ax.set_xticks(range(len(fmts)))
    ax.set_xticklabels(fmts)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=7)
    for i, j in zip(*np.nonzero(over)):
        ax.text(j, i, "x", ha="center", va="center", color="#D55E00", fontsize=9)
    fig.colorbar(im, ax=ax, label="fraction of the L2 norm lost to flushing")
    ax.set_title("flushed to zero (x: some values overflow)\n" + step_text(step, steps),
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def histograms(t, out, step, steps=None):
    fmts = ordered(t["dtype"])
    worst = t.groupby("name", sort=False)["flushed_l2_fraction"].max().fillna(0)
    names = list(worst.sort_values(ascending=False, kind="stable").index[:MAX_HIST])
    cols = min(4, len(names))
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.9 * rows), squeeze=False)
    ranges = {f: format_range(f) for f in fmts}
    for ax, name in zip(axes.flat, names):
        row = t[t["name"] == name].iloc[0]
        h = parse_hist(row["hist"])
        lo, hi = (min(h), max(h) + 1) if h else (-30, 20)
        lo, hi = min(lo, -30) - 4, max(hi, 20) + 4  # fp8's and fp16's ranges stay in view
        if h:
            es = np.array(sorted(h))
            ax.bar(es + 0.5, [h[e] for e in es], width=1.0, color="#555555")
        ax.set_xlim(lo, hi)
        tr = ax.get_xaxis_transform()
        for j, f in enumerate(fmts):
            sub, norm, top = ranges[f]
            y = -0.24 - 0.06 * j  # one band per format under the tick labels (axes coordinates)
            for a, b, alpha in ((sub, norm, 0.4), (norm, top + 1, 1.0)):
                a, b = (None, None) if a is None else (max(a, lo), min(b, hi))  # in view
                if a is not None and a < b:
                    ax.plot([a, b], [y, y], transform=tr, color=PALETTE[j % 8], lw=2,
                            alpha=alpha, clip_on=False)
            if ax is axes.flat[0]:
                ax.plot([], [], color=PALETTE[j % 8], lw=2, label=f)
        ax.set_title(name, fontsize=7)
        ax.set_yscale("log")
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.supxlabel("log2 |value| (bars: values per power of two; lines: each format's normal "
                  "range, pale: subnormal)", fontsize=8, y=0.01)
    if names:
        fig.legend(loc="upper right", fontsize=7)
    fig.suptitle("magnitudes before rounding, " + step_text(step, steps), fontsize=9, x=0.4)
    # Room under each axis for the format bands (tight_layout does not see them).
    fig.subplots_adjust(left=0.06, right=0.94, top=0.92, bottom=0.12, hspace=0.9, wspace=0.3)
    fig.savefig(out, dpi=120)
    plt.close(fig)


# Gradients are multiplied by the loss scale; any other tensor (activations, weights, updates)
# only by a scale factor of its own (a per-tensor scale, as fp8 recipes keep).
GRADIENT_KINDS = ("activation_grad", "weight_grad")
NO_SAFE_SCALE = "no safe scale"


def scale_groups(t):
    """[(x-axis label, rows of t)]: the gradients, whose safe 2^k is a loss scale, then the other
    tensors, whose 2^k is a per-tensor scale factor; groups without rows left out."""
    grad = t["kind"].isin(GRADIENT_KINDS) if "kind" in t else np.zeros(len(t), dtype=bool)
    groups = [("loss scale 2^k (gradients): safe for k in the bar", t[grad]),
              ("per-tensor scale factor 2^k (activations, weights, updates; not the loss "
               "scale): safe for k in the bar", t[~grad])]
    return [(label, rows) for label, rows in groups if len(rows)]


def safe_windows(t, out, step, steps=None):
    """Per tensor and format, a bar over its safe k (k_low - 0.5 .. k_high + 0.5), or the words
    "no safe scale"; one panel for gradients (loss scale), one for the other tensors (scale
    factor). Every format in `t` has its legend entry. Returns what was drawn, read back from the
    figure: {"legend": [...], "title": ..., "panels": [{"xlabel", "names", "bars": {(name,
    format): (left, width)}, "no_safe": [(name, format), ...]}]}."""
    from matplotlib.patches import Patch

    fmts = ordered(t["dtype"])
    groups = scale_groups(t)
    heights = [max(1, len(ordered(rows["name"]))) for _, rows in groups] or [1]
    bar = 0.8 / max(1, len(fmts))
    fig, axes = plt.subplots(len(heights), 1, squeeze=False, gridspec_kw={"height_ratios": heights},
                             figsize=(8, 1.6 + 0.2 * sum(heights) * max(1, len(fmts)) / 2
                                      + 0.7 * len(heights)))
    for ax, (label, rows) in zip(axes[:, 0], groups):
        names = ordered(rows["name"])
        for name, f, lo, hi in zip(rows["name"], rows["dtype"], rows["k_low"], rows["k_high"]):
            j = fmts.index(f)
            y = names.index(name) + j * bar
            if lo == lo and hi == hi:
                ax.barh(y, hi - lo + 1, left=lo - 0.5, height=bar, color=PALETTE[j % 8],
                        gid="%s|%s" % (name, f))
            else:
                ax.text(0.01, y, "%s (%s)" % (NO_SAFE_SCALE, f), transform=ax.get_yaxis_transform(),
                        va="center", fontsize=6, color=PALETTE[j % 8], gid="%s|%s" % (name, f))
        ax.set_yticks([i + 0.4 - bar / 2 for i in range(len(names))])
        ax.set_yticklabels(names, fontsize=7)
        ax.set_ylim(len(names) - bar / 2 - 0.1, -bar / 2 - 0.1)
        ax.set_xlabel(label, fontsize=8)
    top = 1 - 0.45 / fig.get_figheight()   # the title's and the legend's lines
    fig.suptitle("safe scales (no overflow, flushed fraction within the tolerance), " +
                 step_text(step, steps), fontsize=9, x=0.01, ha="left")
    handles = [Patch(color=PALETTE[j % 8], label=f) for j, f in enumerate(fmts)]
    fig.legend(handles=handles, fontsize=7, loc="upper left", ncol=len(fmts) or 1, frameon=False,
               bbox_to_anchor=(0.0, 1 - 0.3 / fig.get_figheight()))
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(out, dpi=120)
    drawn = {"legend": [x.get_text() for lg in fig.legends for x in lg.get_texts()],
             "title": fig._suptitle.get_text(), "panels": []}
    for ax in axes[:, 0]:
        bars = {tuple(p.get_gid().split("|")): (p.get_x(), p.get_width())
                for p in ax.patches if p.get_gid()}
        no_safe = [tuple(x.get_gid().split("|")) for x in ax.texts
                   if x.get_gid() and x.get_text().startswith(NO_SAFE_SCALE)]
        drawn["panels"].append({"xlabel": ax.get_xlabel(), "bars": bars, "no_safe": no_safe,
                                "names": [x.get_text() for x in ax.get_yticklabels()]})
    plt.close(fig)
    return drawn


def snr_text(v):
    """snr_db as a cell label: one decimal, 'inf', or '-' (not defined)."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-"
    if np.isinf(v):
        return "inf"
    return f"{v:.1f}"


def block_snr(b, out, step, steps=None):
    """Heatmap tensors x schemes of snr_db; returns what it drew: names, schemes and the
    label of every cell."""
    names, schemes = ordered(b["name"]), ordered(b["scheme"])
    grid = np.full((len(names), len(schemes)), np.nan)
    labels = {}
    for name, scheme, v in zip(b["name"], b["scheme"], b["snr_db"]):
        v = float(v)
        grid[names.index(name), schemes.index(scheme)] = v if np.isfinite(v) else np.nan
        labels[(name, scheme)] = snr_text(v)
    fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(schemes), 1.2 + 0.3 * len(names)))
    finite = grid[np.isfinite(grid)]
    im = ax.imshow(grid, aspect="auto", cmap="viridis",
                   vmin=finite.min() if finite.size else 0,
                   vmax=finite.max() if finite.size else 1)
    ax.set_xticks(range(len(schemes)))
    ax.set_xticklabels(schemes, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=7)
    for (name, scheme), text in labels.items():
        ax.text(schemes.index(scheme), names.index(name), text, ha="center", va="center",
                color="white", fontsize=7)
    fig.colorbar(im, ax=ax, label="SNR (dB)")
    ax.set_title("block-scaled quantization: SNR per tensor and scheme\n" +
                 step_text(step, steps), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return {"names": names, "schemes": schemes, "labels": labels}


def block_scales(b, out, step, steps=None):
    """Per scheme, the scale exponents of the step's tensors together; returns what it drew:
    per panel the scheme, the bars {exponent: blocks} and the mean marked."""
    schemes = ordered(b["scheme"])
    fig, axes = plt.subplots(len(schemes), 1, figsize=(7, 1.2 + 1.4 * len(schemes)),
                             squeeze=False)
    panels = []
    for ax, scheme in zip(axes[:, 0], schemes):
        hist = {}
        for text in b[b["scheme"] == scheme]["scale_hist"]:
            for e, c in parse_hist(text).items():
                hist[e] = hist.get(e, 0) + c
        n = sum(hist.values())
        mean = sum(e * c for e, c in hist.items()) / n if n else None
        ax.bar(list(hist), list(hist.values()), width=0.9, color=PALETTE[0])
        if mean is not None:
            ax.axvline(mean, color=PALETTE[3], lw=1)
        ax.set_ylabel("blocks", fontsize=8)
        ax.set_title(f"{scheme}: {n} blocks with a finite non-zero scale" +
                     ("" if mean is None else f", mean exponent {mean:.2f}"), fontsize=8)
        panels.append({"scheme": scheme, "bars": hist,
                       "mean": None if mean is None else f"{mean:.2f}", "blocks": n})
    axes[-1, 0].set_xlabel("floor(log2 block scale)")
    fig.suptitle("block scales, all tensors\n" + step_text(step, steps), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return {"panels": panels}


def draw(directory, step=None):
    """Draw the figures into `directory`: the three of trace.csv when it has rows, the two of
    blocks.csv when it has; return their paths."""
    r = read_result(directory, True)
    paths = []
    if len(r.trace):
        t, tstep = step_rows(r.trace, step)
        steps = sorted(int(x) for x in r.trace["step"].unique())
        names = [os.path.join(directory, n) for n in
                 ("fraction_lost.png", "histograms.png", "safe_window.png")]
        heatmap(t, names[0], tstep, steps)
        histograms(t, names[1], tstep, steps)
        safe_windows(t, names[2], tstep, steps)
        paths += names
    if r.blocks is not None and len(r.blocks):
        b, bstep = step_rows(r.blocks, step)
        steps = sorted(int(x) for x in r.blocks["step"].unique())
        names = [os.path.join(directory, n) for n in ("block_snr.png", "block_scales.png")]
        block_snr(b, names[0], bstep, steps)
        block_scales(b, names[1], bstep, steps)
        paths += names
    if not paths:
        raise ValueError("the folder holds no rows to draw")
    return paths


def pct_text(v):
    """A closed share as a bar label: '93.1%', or '-' for a run that diverged."""
    return "-" if v is None or not np.isfinite(v) else "%.1f%%" % (100 * v)


def read_bisection(directory):
    """(candidate sets [(promoted, closed)] in the order tried, the answer of bisect.json)."""
    with open(os.path.join(directory, "bisect.json")) as f:
        answer = json.load(f)
    sets = []
    with open(os.path.join(directory, "bisect.csv"), newline="") as f:
        for row in csv.DictReader(f):
            if row["role"] == "candidate" and row["promoted"] not in [p for p, _ in sets]:
                sets.append((row["promoted"], float(row["closed"])))
    return sets, answer


def demoted_sets(sets, answer):
    """A demoting bisection's candidates as the search saw them: each run promoted every part
    but a set; [(that set, the share of the gap it opens alone)]."""
    parts = [p["name"] for p in answer["parts"]]
    out = []
    for promoted, closed in sets:
        kept = set(promoted.split(" + ")) if promoted else set()
        out.append((" + ".join(p for p in parts if p not in kept), 1 - closed))
    return out


def draw_bisect(directory):
    """bisect.png of a bisection folder; returns what it drew, read back from the figure:
    {"bars": [(label, text)], "titles": [...], "legend": [...]}. A demoting bisection
    (bisect.json's direction) draws each set left in low precision and the share it opens."""
    sets, a = read_bisection(directory)
    demote = a.get("direction") == "demote"
    if demote:
        sets = demoted_sets(sets, a)
    culprit = " + ".join(m["name"] for m in a["culprit"])
    key = next(k for k in a if k.startswith("losses_seed_"))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 1.8 + 0.3 * max(1, len(sets))))
    ys = list(range(len(sets)))
    vals = [0.0 if not np.isfinite(c) else 100 * c for _, c in sets]
    ax.barh(ys, vals, color=[PALETTE[3] if p == culprit else PALETTE[0] for p, _ in sets])
    for y, (p, c) in zip(ys, sets):
        ax.text(max(0.0, vals[y]), y, " " + pct_text(c), va="center", fontsize=7, gid="bar")
    ax.axvline(100 * a["threshold"], color="#555555", ls="--", lw=1)
    ax.set_yticks(ys)
    ax.set_yticklabels([p for p, _ in sets], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("gap %s (%%), mean over the seeds; dashed: %.0f%%" %
                  ("opened by the set alone" if demote else "closed", 100 * a["threshold"]))
    ax.set_title("%s: %.4g against the reference's %.4g (gap %.4g)" %
                 (a["metric"], a["original_metric"], a["reference_metric"], a["gap"]), fontsize=8)
    curves = a[key]
    names = {"reference": "reference (%s)" % a.get("against", "fp32"), "original": "original",
             "fixed": "fixed (promoting %s)" % culprit,
             "culprit_only": "only %s in low precision" % culprit}
    for j, (k, label) in enumerate(names.items()):
        if k in curves:
            v = [np.nan if x is None else x for x in curves[k]]
            bx.plot(range(len(v)), v, color=PALETTE[j], lw=1.2,
                    label="%s, last %.4g" % (label, v[-1]))
    bx.set_yscale("log")
    bx.set_xlabel("step")
    bx.set_ylabel("loss")
    bx.set_title("loss curves, seed %s" % key[len("losses_seed_"):], fontsize=8)
    bx.legend(fontsize=7)
    fig.tight_layout()
    out = os.path.join(directory, "bisect.png")
    fig.savefig(out, dpi=120)
    drawn = {"bars": [(ax.get_yticklabels()[i].get_text(), t.get_text().strip())
                      for i, t in enumerate(x for x in ax.texts if x.get_gid() == "bar")],
             "titles": [ax.get_title(), bx.get_title()],
             "legend": [t.get_text() for t in bx.get_legend().get_texts()]}
    plt.close(fig)
    return out, drawn


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    step = None
    if len(argv) == 3 and argv[1] == "--step":
        step = int(argv[2])
    elif len(argv) != 1:
        sys.exit(__doc__)
    if os.path.exists(os.path.join(argv[0], "bisect.json")):
        print(draw_bisect(argv[0])[0])
        return
    for p in draw(argv[0], step):
        print(p)


if __name__ == "__main__":
    main(sys.argv[1:])
