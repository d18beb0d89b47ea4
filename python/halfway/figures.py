"""Figures of an analysis folder (`halfway analyze`, halfway.analyze, halfway.torch.trace),
drawn from its files only (trace.csv, scale_window.csv) for one step (default: the last):

  fraction_lost.png   heatmap tensors x formats, coloured by the part of each tensor's L2 norm
                      lost to flushing (flushed_l2_fraction); a cross marks overflows
  histograms.png      per tensor, the power-of-two histogram of the magnitudes, with each
                      format's subnormal and normal ranges (up to 24 tensors: those that lose
                      the most)
  safe_window.png     per tensor and format, the safe loss scales 2^k (k_low..k_high) as a bar

    python3 -m halfway.figures DIR [--step N]
"""
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .analysis import read_result  # noqa: E402

PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000"]  # Okabe-Ito, as experiments/style.py
MAX_HIST = 24


def parse_hist(text):
    """'e:count;e:count' -> {e: count}."""
    out = {}
    if isinstance(text, str) and text:
        for item in text.split(";"):
            e, c = item.split(":")
            out[int(e)] = out.get(int(e), 0) + int(c)
    return out


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


def heatmap(t, out):
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
    ax.set_title("flushed to zero (x: some values overflow)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def histograms(t, out):
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
    # Room under each axis for the format bands (tight_layout does not see them).
    fig.subplots_adjust(left=0.06, right=0.94, top=0.95, bottom=0.12, hspace=0.9, wspace=0.3)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def safe_windows(t, out):
    names, fmts = ordered(t["name"]), ordered(t["dtype"])
    fig, ax = plt.subplots(figsize=(7.5, 1.2 + 0.22 * len(names) * max(1, len(fmts)) / 2))
    height = 0.8 / max(1, len(fmts))
    for j, f in enumerate(fmts):
        rows = t[t["dtype"] == f]
        for name, lo, hi in zip(rows["name"], rows["k_low"], rows["k_high"]):
            if lo == lo and hi == hi:  # no bar when no scale is safe
                ax.barh(names.index(name) + j * height, hi - lo + 1, left=lo - 0.5,
                        height=height, color=PALETTE[j % 8],
                        label=f if name == rows["name"].iloc[0] else None)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(names))])
    ax.set_yticklabels(names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("loss scale 2^k: safe (no overflow, no underflow) for k in the bar")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def draw(directory, step=None):
    """Draw the three figures into `directory`; return their paths."""
    r = read_result(directory, True)
    t, step = step_rows(r.trace, step)
    paths = [os.path.join(directory, n) for n in
             ("fraction_lost.png", "histograms.png", "safe_window.png")]
    heatmap(t, paths[0])
    histograms(t, paths[1])
    safe_windows(t, paths[2])
    return paths


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    step = None
    if len(argv) == 3 and argv[1] == "--step":
        step = int(argv[2])
    elif len(argv) != 1:
        sys.exit(__doc__)
    for p in draw(argv[0], step):
        print(p)


if __name__ == "__main__":
    main(sys.argv[1:])
