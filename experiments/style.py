"""One figure style for every experiment, and helpers that read a sweep's results.

Figures use the Okabe-Ito colour-blind-safe palette, labelled axes with units, shaded format
ranges, legends outside the data (`legend_right`, `legend_below`), and a caption line naming the
sweep (file and definition hash), halfway's version and the git revision of the build that
produced the results, set below everything else. `save` writes PNG and PDF without timestamps,
so the same results give the same files, and NAME.texts.json: every text of the figure except
tick labels (titles, axis labels, legend entries, annotations, the caption), so that a test can
check each number a figure prints against the results, and NAME.data.json: the data of every
artist marked with `mark` (a line's points, a LineCollection's segments), read back from
the drawn artists, so that a test can compare what is drawn with the results.

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

CAPTION_GID = "halfway-caption"
DATA_GID = "halfway-data:"


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


# Columns renamed since older result folders were written (halfway.columns has the same table
# for the Python package; plots run without importing it): the count of values flushed to zero
# was called underflow.
RENAMED = {"underflow": "flushed", "underflow_fraction": "flushed_fraction",
           "grad_underflow": "grad_flushed", "grad_underflow_fraction": "grad_flushed_fraction"}


def read_csv(path):
    """A result CSV, old column names replaced by their new ones."""
    df = pd.read_csv(path)
    return df.rename(columns={k: v for k, v in RENAMED.items()
                              if k in df.columns and v not in df.columns})


def load(results):
    """The sweep's index (a DataFrame, one row per run) and its definition (a dict)."""
    df = read_csv(os.path.join(results, "sweep.csv"))
    with open(os.path.join(results, "sweep.json")) as f:
        definition = json.load(f)
    return df, definition


def begin(results):
    """The start of a sweep's plot script: the figure style (`setup`), then the sweep's index
    and definition (`load`)."""
    setup()
    return load(results)


def run_file(results, row, name):
    """A file of one run, given its sweep.csv row."""
    return os.path.join(results, row["dir"], name)


def read_run_csv(results, row, name):
    return read_csv(run_file(results, row, name))


def transformer_title(cfg):
    """A transformer run's shape, from its config: blocks, d_model, heads, seq, batch."""
    m, d = cfg["model"], cfg["data"]
    return "%d blocks, d_model %d, %d heads, seq %d, batch %d" % (
        m["blocks"], m["d_model"], m["heads"], m["seq_len"], d["batch_size"])


def axes(ax, xlabel, ylabel, title=None, xscale=None, yscale=None):
    """A panel's scales, axis labels and title, in that order."""
    if xscale:
        ax.set_xscale(xscale)
    if yscale:
        ax.set_yscale(yscale)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)


def validation_loss_axes(ax, results, row, later):
    """A transformer's validation-loss panel: steps, nats per byte, the shape of the model of
    the sweep row `row` as title, and the scale's top just above `later` (every drawn loss after
    the first validation, whose untrained model lies far above the rest)."""
    if len(later):
        ax.set_ylim(top=float(max(later)) * 1.02)
    axes(ax, "step", "validation loss (nats per byte)",
         title=transformer_title(run_config(results, row)))


def run_config(results, row):
    """The full config of one run (its manifest's `config`), as a dict."""
    with open(run_file(results, row, "manifest.json")) as f:
        return json.load(f)["config"]


def provenance(results):
    """'sweep FILE (hash H), halfway V, git REV' from the results folder."""
    df, d = load(results)
    version = rev = "?"
    if len(df):
        with open(run_file(results, df.iloc[0], "manifest.json")) as f:
            m = json.load(f)
        version, rev = m.get("halfway_version", "?"), m.get("git_revision", "?")
    return "sweep %s (hash %s), %d runs, halfway %s, git %s" % (
        d.get("sweep_file", "?"), d.get("sweep_hash", "?")[:12], len(df), version, short_rev(rev))


def short_rev(rev):
    """A manifest's git revision in 12 digits, keeping its '-dirty' (a binary built from a tree
    with uncommitted changes)."""
    return rev[:12] + ("-dirty" if rev.endswith("-dirty") else "")


def caption(fig, results, extra="", text=None):
    """The caption line (`extra | provenance`, or `text` as given); `save` sets it below the
    axes and legends."""
    if text is None:
        text = provenance(results)
        if extra:
            text = extra + " | " + text
    fig.text(0.005, 0.005, text, fontsize=6, color="#555555", ha="left", va="top",
             gid=CAPTION_GID)


def _unique(handles, labels):
    seen, h2, l2 = set(), [], []
    for h, lab in zip(handles, labels):
        if lab and not lab.startswith("_") and lab not in seen:
            seen.add(lab)
            h2.append(h)
            l2.append(lab)
    return h2, l2


def legend_right(ax, **kw):
    """The axes' legend outside it, to its right (off the data)."""
    h, lab = _unique(*ax.get_legend_handles_labels())
    kw.setdefault("fontsize", 7)
    return ax.legend(h, lab, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                     **kw)


def legend_below(fig, axes, ncol=3, extra=(), **kw):
    """One legend for `axes` (entries with the same label drawn once, plus `extra` (handle,
    label) pairs) under the figure's axes, off the data; call after tight_layout. `save` puts
    the caption below it."""
    hs, ls = [], []
    for a in axes:
        h, lab = a.get_legend_handles_labels()
        hs += h
        ls += lab
    for h, lab in extra:
        hs.append(h)
        ls.append(lab)
    # Bars (the data of a histogram) before lines and shades.
    from matplotlib.container import Container
    order = sorted(range(len(hs)), key=lambda i: not isinstance(hs[i], Container))
    hs, ls = _unique([hs[i] for i in order], [ls[i] for i in order])
    r = fig.canvas.get_renderer()
    y0 = min(a.get_tightbbox(r).y0 for a in fig.axes)
    y = fig.transFigure.inverted().transform((0, y0))[1]
    kw.setdefault("fontsize", 7)
    return fig.legend(hs, ls, loc="upper center", bbox_to_anchor=(0.5, y - 0.01), ncol=ncol,
                      frameon=False, **kw)


def _place_caption(fig):
    """Move the caption under everything else that is drawn (axes, their labels, legends)."""
    caps = [t for t in fig.texts if t.get_gid() == CAPTION_GID]
    if not caps:
        return
    r = fig.canvas.get_renderer()
    for c in caps:
        c.set_visible(False)
    boxes = [a.get_tightbbox(r) for a in fig.axes] + [
        lg.get_window_extent(r) for lg in fig.legends] + [
        t.get_window_extent(r) for t in fig.texts if t.get_visible()]
    y0 = min(b.y0 for b in boxes if b is not None)
    x0 = min(b.x0 for b in boxes if b is not None)
    inv = fig.transFigure.inverted()
    x, y = inv.transform((x0, y0 - 4))
    for c in caps:
        c.set_visible(True)
        c.set_position((x, y))


def figure_texts(fig):
    """Every non-empty visible text of the figure except tick labels and axis offset texts, in
    drawing-tree order: [{"role": ..., "text": ...}]."""
    from matplotlib.axis import Axis, Tick
    from matplotlib.legend import Legend
    from matplotlib.text import Annotation, Text

    roles = {}
    for ax in fig.axes:
        for t, role in ((ax.title, "title"), (ax._left_title, "title"),
                        (ax._right_title, "title"), (ax.xaxis.label, "xlabel"),
                        (ax.yaxis.label, "ylabel")):
            roles[id(t)] = role
    if fig._suptitle is not None:
        roles[id(fig._suptitle)] = "suptitle"
    out, seen = [], set()

    def walk(a, in_legend):
        if isinstance(a, Tick) or id(a) in seen:
            return
        seen.add(id(a))
        if isinstance(a, Axis):
            skip = {id(a.offsetText)}
        else:
            skip = set()
        if isinstance(a, Text) and a.get_visible() and a.get_text().strip():
            if a.get_gid() == CAPTION_GID:
                role = "caption"
            elif isinstance(a, Annotation):
                role = "annotation"
            elif in_legend:
                role = "legend title" if a is in_legend.get_title() else "legend"
            else:
                role = roles.get(id(a), "text")
            out.append({"role": role, "text": a.get_text()})
        for c in a.get_children():
            if id(c) not in skip:
                walk(c, a if isinstance(a, Legend) else in_legend)

    walk(fig, None)
    return out


def shade_fp16(ax, axis="x", log2=True, bf16=True, labels=True):
    """Shade fp16's flush-to-zero, subnormal and normal ranges on a magnitude axis (log2 units when
    `log2`, else the values), mark its largest finite value, and bf16's smallest normal for
    comparison. Every shade and line has a legend label (with `labels`)."""
    import math

    def t(v):
        return math.log2(v) if log2 else v

    span = ax.axvspan if axis == "x" else ax.axhspan
    line = ax.axvline if axis == "x" else ax.axhline
    lo, hi = (ax.get_xlim() if axis == "x" else ax.get_ylim())
    span(min(lo, t(FP16_MIN_SUB) - 1), t(FP16_MIN_SUB) - 1, color="#D55E00", alpha=0.10, lw=0,
         zorder=0,
         label="fp16 flushed to zero: |x| ≤ 2^-25" if labels else None)
    span(t(FP16_MIN_SUB) - 1, t(FP16_MIN_NORMAL), color="#E69F00", alpha=0.15, lw=0, zorder=0,
         label="fp16 subnormal: 2^-25 < |x| < 2^-14" if labels else None)
    span(t(FP16_MIN_NORMAL), t(FP16_MAX), color="#009E73", alpha=0.08, lw=0, zorder=0,
         label="fp16 normal: 2^-14 ≤ |x| ≤ 65504" if labels else None)
    line(t(FP16_MAX), color="#D55E00", lw=0.8, ls="--",
         label="fp16 largest finite value 65504" if labels else None)
    if bf16:
        for v in (BF16_MIN_NORMAL,):
            if lo <= t(v) <= hi:
                line(t(v), color="#0072B2", lw=0.8, ls=":",
                     label="bf16 smallest normal 2^-126" if labels else None)
    if axis == "x":
        ax.set_xlim(lo, hi)
    else:
        ax.set_ylim(lo, hi)


def mark(artist, key):
    """Name a drawn artist so that `save` writes its data to NAME.data.json under `key`;
    returns the artist."""
    artist.set_gid(DATA_GID + key)
    return artist


def _plain(v):
    """A float for JSON: NaN and inf as None (a gap in a line)."""
    v = float(v)
    return v if v == v and abs(v) != float("inf") else None


def figure_data(fig):
    """{key: data} of every artist marked with `mark`, read from the artist as drawn: a line's
    {"x": [...], "y": [...]} (NaN as None), a LineCollection's (vlines, hlines)
    {"segments": [[[x, y], ...], ...]}."""
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    out = {}
    for ax in fig.axes:
        for a in ax.get_children():
            gid = a.get_gid() or ""
            if not gid.startswith(DATA_GID):
                continue
            key = gid[len(DATA_GID):]
            if key in out:
                raise ValueError("two artists marked %r" % key)
            if isinstance(a, Line2D):
                out[key] = {"x": [_plain(x) for x in a.get_xdata()],
                            "y": [_plain(y) for y in a.get_ydata()]}
            elif isinstance(a, LineCollection):
                out[key] = {"segments": [[[_plain(x), _plain(y)] for x, y in seg]
                                         for seg in a.get_segments()]}
            else:
                raise TypeError("mark: no data reader for %s" % type(a).__name__)
    return out


# Significand bits (with the implicit one) of the formats a printed quantity may be rounded to,
# coarsest first.
PRECISIONS = (("bf16", 8), ("fp16", 11), ("fp32", 24))


def precision_of(values):
    """(name, significand bits) of the coarsest format that holds every value exactly: what the
    values were rounded to (a bf16 loss is a float32 whose low 16 bits are zero)."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v) & (v != 0)]
    for name, bits in PRECISIONS[:-1]:
        dtype = {"bf16": None, "fp16": np.float16}[name]
        if dtype is None:
            f = v.astype(np.float32)
            exact = (f == v).all() and not (f.view(np.uint32) & 0xFFFF).any()
        else:
            with np.errstate(over="ignore"):
                exact = (v.astype(dtype).astype(np.float64) == v).all()
        if len(v) and exact:
            return name, bits
    return PRECISIONS[-1]


def spacing(value, bits):
    """The distance between neighbouring numbers of a `bits`-bit significand at `value`."""
    import math

    return 2.0 ** (math.floor(math.log2(abs(value))) - bits + 1) if value else 0.0


def ratio_text(a, a_values, b, b_values, b_name, digits=3):
    """a / b printed to `digits`, or '= B_NAME within F's resolution' when a and b differ by
    less than the spacing of the coarser format F their values were rounded to (`a_values`,
    `b_values`: every value each of them was taken from): a ratio below the resolution of the
    numbers it divides is no gain and no loss."""
    (fa, pa), (fb, pb) = precision_of(a_values), precision_of(b_values)
    res = max(spacing(a, pa), spacing(b, pb))
    if abs(a - b) < res:
        return "= %s within %s's resolution" % (b_name, fa if pa <= pb else fb)
    return "%.*g" % (digits, a / b)


def seed_spread(cases, finals, ref="fp32", what="final validation loss", number=".4f"):
    """Print each recipe's mean `what` against the reference's (`finals`: {case: [the final
    validation loss, or `what`, of each seed]}), marked "within the seed spread" when the
    difference is smaller than the larger of the two recipes' spreads over seeds (max - min):
    such a difference is not a measured one. `number`: the format of the printed numbers."""
    import numpy as np

    if ref not in finals:
        return
    r = finals[ref]
    for case in cases:
        if case == ref:
            continue
        v = finals[case]
        d = float(np.mean(v) - np.mean(r))
        spread = max(max(v) - min(v), max(r) - min(r))
        print(("%s: mean %s %+" + number + " against %s's, %s (spread over %d seeds: %" +
               number + " %s, %" + number + " %s)") % (case, what, d, ref,
                                     "within the seed spread" if abs(d) < spread
                                     else "beyond the seed spread", len(v), max(v) - min(v),
                                     case, max(r) - min(r), ref))


def save(fig, results, name):
    """Write figures/NAME.png and figures/NAME.pdf under the results folder,
    figures/NAME.texts.json (`figure_texts`) and, when artists are marked, figures/NAME.data.json
    (`figure_data`)."""
    out = os.path.join(results, "figures")
    os.makedirs(out, exist_ok=True)
    _place_caption(fig)
    paths = []
    for ext, meta in (("png", {"Software": None}),
                      ("pdf", {"CreationDate": None, "ModDate": None, "Producer": None,
                               "Creator": None})):
        p = os.path.join(out, name + "." + ext)
        fig.savefig(p, metadata=meta, bbox_inches="tight")
        paths.append(p)
    with open(os.path.join(out, name + ".texts.json"), "w") as f:
        json.dump(figure_texts(fig), f, indent=1, ensure_ascii=False)
        f.write("\n")
    data = figure_data(fig)
    if data:
        with open(os.path.join(out, name + ".data.json"), "w") as f:
            json.dump(data, f, separators=(",", ":"))
            f.write("\n")
    plt.close(fig)
    return paths
