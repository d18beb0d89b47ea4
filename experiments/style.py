"""One figure style for every experiment, and helpers that read a sweep's results.

Figures use the Okabe-Ito colour-blind-safe palette, labelled axes with units, shaded format
ranges, and a caption line naming the sweep (file and definition hash), halfway's version and
the git revision of the build that produced the results. `save` writes PNG and PDF without
timestamps, so the same results give the same files.

Plot scripts read only results: `sweep.csv`, `sweep.json` and the run folders.
"""
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

# Okabe & Ito (2008): distinguishable under the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000"]

# Format ranges (magnitudes), from the formats' definitions.
FP16_MIN_SUB = 2.0 ** -24      # smallest subnormal
FP16_MIN_NORMAL = 2.0 ** -14
FP16_MAX = 65504.0
BF16_MIN_SUB = 2.0 ** -133
BF16_MIN_NORMAL = 2.0 ** -126
BF16_MAX = 3.3895313892515355e38


def setup():
    plt.rcParams.update({
        "figure.dpi": 100,
        "savefig.dpi": 150,
        "font.size": 9,
        "axes.titlesize": 10,
        "axes.labelsize": 9,
        "legend.fontsize": 8,
        "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "svg.hashsalt": "halfway",
    })


def color(i):
    return PALETTE[i % len(PALETTE)]


def load(results):
    """The sweep's index (a DataFrame, one row per run) and its definition (a dict)."""
    df = pd.read_csv(os.path.join(results, "sweep.csv"))
    with open(os.path.join(results, "sweep.json")) as f:
        definition = json.load(f)
    return df, definition


def run_file(results, row, name):
    """A file of one run, given its sweep.csv row."""
    return os.path.join(results, row["dir"], name)


def read_run_csv(results, row, name):
    return pd.read_csv(run_file(results, row, name))


def provenance(results):
    """'sweep FILE (hash H), halfway V, git REV' from the results folder."""
    df, d = load(results)
    version = rev = "?"
    if len(df):
        with open(run_file(results, df.iloc[0], "manifest.json")) as f:
            m = json.load(f)
        version, rev = m.get("halfway_version", "?"), m.get("git_revision", "?")
    return "sweep %s (hash %s), %d runs, halfway %s, git %s" % (
        d.get("sweep_file", "?"), d.get("sweep_hash", "?")[:12], len(df), version, rev[:12])


def caption(fig, results, extra=""):
    text = provenance(results)
    if extra:
        text = extra + " | " + text
    fig.text(0.005, 0.005, text, fontsize=6, color="#555555", ha="left", va="bottom")


def shade_fp16(ax, axis="x", log2=True, bf16=True, labels=True):
    """Shade fp16's underflow, subnormal and normal ranges on a magnitude axis (log2 units when
    `log2`, else the values), and mark bf16's range for comparison."""
    import math

    def t(v):
        return math.log2(v) if log2 else v

    span = ax.axvspan if axis == "x" else ax.axhspan
    line = ax.axvline if axis == "x" else ax.axhline
    lo, hi = (ax.get_xlim() if axis == "x" else ax.get_ylim())
    span(min(lo, t(FP16_MIN_SUB) - 1), t(FP16_MIN_SUB) - 1, color="#D55E00", alpha=0.10, lw=0,
         label="fp16 underflow (→ 0)" if labels else None)
    span(t(FP16_MIN_SUB) - 1, t(FP16_MIN_NORMAL), color="#E69F00", alpha=0.15, lw=0,
         label="fp16 subnormal" if labels else None)
    span(t(FP16_MIN_NORMAL), t(FP16_MAX), color="#009E73", alpha=0.08, lw=0,
         label="fp16 normal" if labels else None)
    line(t(FP16_MAX), color="#D55E00", lw=0.8, ls="--")
    if bf16:
        for v in (BF16_MIN_NORMAL,):
            if lo <= t(v) <= hi:
                line(t(v), color="#0072B2", lw=0.8, ls=":",
                     label="bf16 smallest normal" if labels else None)
    if axis == "x":
        ax.set_xlim(lo, hi)
    else:
        ax.set_ylim(lo, hi)


def save(fig, results, name):
    """Write figures/NAME.png and figures/NAME.pdf under the results folder."""
    out = os.path.join(results, "figures")
    os.makedirs(out, exist_ok=True)
    paths = []
    for ext, meta in (("png", {"Software": None}),
                      ("pdf", {"CreationDate": None, "ModDate": None, "Producer": None,
                               "Creator": None})):
        p = os.path.join(out, name + "." + ext)
        fig.savefig(p, metadata=meta, bbox_inches="tight")
        paths.append(p)
    plt.close(fig)
    return paths
