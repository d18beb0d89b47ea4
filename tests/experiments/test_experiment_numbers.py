"""Every number the experiments print, checked against the results they were drawn from.

For each experiment (the tiny versions of tests/experiments/test_experiments.py: every run cut
to 6 steps), this runs its plot.py and takes its console output and figures/*.texts.json (every
text of each figure except tick labels: titles, axis labels, legend entries, annotations, the
caption; written by style.save). An experiment's checker here recomputes each printed number
from the run's CSVs (sweep.csv, runs/*/steps.csv, trace.csv, scale_window.csv, memory.csv,
accumulation.csv) and manifests with pandas/numpy, sharing no code with style.py or any
plot.py, and checks format constants (2^-24, 65504, ...) against numpy's float16/float32
limits. A number agrees when it is the recomputed value rounded to the digits printed. Each
checked number is blanked out; a digit left over in any text or console line is an unchecked
number and fails the test, and so does an experiment without a checker. Negative controls:
a corrupted CSV value, the gradient histogram's old double counting of zeros, and a new number
in a figure must each be caught.

usage: test_experiment_numbers.py PATH/TO/halfway
       test_experiment_numbers.py --check NAME RESULTS_DIR [PLOT_PY]
         (run PLOT_PY, default experiments/NAME/plot.py, on existing results and check them)
Exits 77 (skipped) when matplotlib, pandas or numpy is missing.
"""
import concurrent.futures
import csv
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import matplotlib  # noqa: F401  (plot.py needs it)
    import numpy as np
    import pandas as pd
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import text_corpus  # noqa: E402
from checks import check as ok, status  # noqa: E402

SRC = os.path.join(HERE, "..", "..", "experiments")

# Format limits, from numpy (not from style.py). bf16 has binary32's exponent range.
F16 = np.finfo(np.float16)
F32 = np.finfo(np.float32)
LOG2_F16_MIN_SUB = int(math.log2(float(F16.smallest_subnormal)))   # -24
LOG2_F16_MIN_NORMAL = int(math.log2(float(F16.tiny)))               # -14
LOG2_F16_FLUSH = LOG2_F16_MIN_SUB - 1        # |x| <= 2^-25 rounds to zero (tie to even)
F16_MAX = float(F16.max)                                            # 65504
LOG2_BF16_MIN_NORMAL = int(math.log2(float(F32.tiny)))              # -126
LOG2_U_F16 = int(math.log2(float(F16.eps))) - 1                     # unit roundoff 2^-11
LOG2_U_F32 = int(math.log2(float(F32.eps))) - 1                     # 2^-24
PAPER_SHIFT, PAPER_YEAR = 3, 2018    # Micikevicius et al. 2018 scale gradients by 2^3

NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan|NaN"
# A number standing on its own in a table cell (not the digits of a name such as fp16).
CELL = re.compile(r"(?<![\w.^])(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)(?![\w.])"
                  r"|(?<!\w)(?:[-+]?inf|nan|NaN)(?!\w)")
# Names that contain digits but are no numbers.
NAMES = re.compile(r"(?<!\w)(?:fp8|fp16|fp32|fp64|bf16|log2)(?!\w)")
BLANK = "\u2591"


def agree(text, value):
    """`text` (a printed number) is `value` rounded to the digits shown."""
    t = text.strip()
    if isinstance(value, str):
        return t == value
    v = float(value)
    low = t.lower()
    if low == "nan":
        return math.isnan(v)
    if low.lstrip("+-") == "inf":
        return math.isinf(v) and (v < 0) == low.startswith("-")
    if not math.isfinite(v):
        return False
    m = re.fullmatch(r"[-+]?(\d*)(?:\.(\d*))?(?:[eE]([-+]?\d+))?", t)
    if not m:
        return False
    unit = 10.0 ** (int(m.group(3) or 0) - len(m.group(2) or ""))
    return abs(float(t) - v) <= 0.5 * unit * (1 + 1e-9) + 1e-12 * abs(v)


def template(s, full):
    """A regex from a template: {N} a number, {I} an integer, {P} 2^k (the group is k); the rest
    literal."""
    parts = re.split(r"(\{[NIP]\})", s)
    rx = "".join({"{N}": "(" + NUM + ")", "{I}": r"([-+]?\d+)", "{P}": r"2\^([-+]?\d+)"}.get(
        p, re.escape(p)) for p in parts)
    return re.compile("^" + rx + "$" if full else rx)


class Doc:
    """The texts of one figure (or the console lines of one plot.py); checked numbers are blanked
    out, mismatches collected in `errors`."""

    def __init__(self, what, texts):
        self.what = what
        self.texts = list(texts)
        self.errors = []

    def _take(self, rx, values, optional=False, label=None):
        """The first text that matches with all numbers agreeing, else the first that matches
        (an error per number that disagrees); blanks the match."""
        found = []
        for i, t in enumerate(self.texts):
            m = rx.search(t)
            if m:
                if len(m.groups()) != len(values):
                    raise AssertionError("template %r has %d numbers, %d values given"
                                         % (rx.pattern, len(m.groups()), len(values)))
                good = all(agree(g, v) for g, v in zip(m.groups(), values))
                found.append((not good, i, m))
                if good:
                    break
        if found:
            _, i, m = min(found, key=lambda f: (f[0], f[1]))
            t = self.texts[i]
            for g, v in zip(m.groups(), values):
                if not agree(g, v):
                    self.errors.append("%s: %r: printed %s, the results give %r"
                                       % (self.what, t, g, v))
            self.texts[i] = t[:m.start()] + BLANK + t[m.end():]
            return m
        if not optional:
            self.errors.append("%s: no text matches %r (values %r)"
                               % (self.what, label or rx.pattern, list(values)))
        return None

    def expect(self, tmpl, *values, full=False, optional=False):
        """One text (a legend entry etc. when `full`) reads `tmpl` with these numbers."""
        return self._take(template(tmpl, full), values, optional, tmpl)

    def text(self, s):
        """A text (whole) that holds no number, or only names: just present."""
        return self.expect(s, full=True)

    def row(self, label, values, line=None):
        """A table line (the first one not yet checked, or line number `line`): `label`, then
        exactly these numbers."""
        for i, t in enumerate(self.texts):
            s = t.strip()
            if line is not None and i != line:
                continue
            if s.startswith(label) and (len(s) == len(label) or s[len(label)].isspace()):
                cells = CELL.findall(s[len(label):])
                if len(cells) != len(values) or not all(agree(c, v)
                                                          for c, v in zip(cells, values)):
                    self.errors.append("%s: row %r: printed %s, the results give %r"
                                       % (self.what, label, cells, list(values)))
                self.texts[i] = BLANK
                return
        self.errors.append("%s: no table row %r" % (self.what, label))

    def header(self, first, values):
        """A table header: the word `first`, then these column names (strings) or numbers."""
        for i, t in enumerate(self.texts):
            w = t.split()
            if w[:1] == [first]:
                if len(w) - 1 != len(values) or not all(agree(c, v)
                                                          for c, v in zip(w[1:], values)):
                    self.errors.append("%s: table header %s, the results give %r"
                                       % (self.what, w, list(values)))
                self.texts[i] = BLANK
                return w[1:]
        self.errors.append("%s: no table header %r" % (self.what, first))
        return []

    def leftovers(self):
        for t in self.texts:
            rest = NAMES.sub("", t)
            if re.search(r"\d", rest):
                self.errors.append("%s: a number nothing checks: %r" % (self.what, t))
        return self.errors


# ---------------------------------------------------------------- reading the results

def sweep(res):
    return pd.read_csv(os.path.join(res, "sweep.csv"))


def run_csv(res, row, name):
    return pd.read_csv(os.path.join(res, row["dir"], name))


def manifest(res, row):
    with open(os.path.join(res, row["dir"], "manifest.json")) as f:
        return json.load(f)


def steps_summary(s):
    """What a run's steps.csv says: final loss and scale, sums, skipped steps."""
    return {"final_loss": float(s["loss"].iloc[-1]),
            "final_scale": float(s["next_scale"].iloc[-1]),
            "grad_values": int(s["grad_values"].sum()),
            "grad_flushed": int(s["grad_flushed"].sum()),
            "skipped": int((s["skipped"] != 0).sum()),
            "found_inf": int((s["found_inf"] != 0).sum())}


def safe_ks(sw, tol):
    """The k (log2 of the loss scale) that no step's prediction flags: flushed fraction at most
    `tol` and no overflow on every step."""
    if not len(sw):
        return []
    bad = (sw["flushed_fraction"] > tol) | (sw["overflow"] != 0)
    per_k = bad.groupby(sw["k"]).any()
    return sorted(int(k) for k, b in per_k.items() if not b)


def window(res, row):
    """(k_low, k_high) of the run from scale_window.csv, or None; the window must be all safe."""
    tol = manifest(res, row)["config"].get("trace", {}).get("flush_tolerance", 0.0)
    ks = safe_ks(run_csv(res, row, "scale_window.csv"), tol)
    if not ks:
        return None
    assert ks == list(range(ks[0], ks[-1] + 1)), "safe scales not contiguous: %s" % ks
    return ks[0], ks[-1]


def expect_transformer_title(doc, cfg):
    """The figure names the transformer of the run's config; returns the config."""
    m = cfg["model"]
    doc.expect("{I} blocks, d_model {I}, {I} heads, seq {I}, batch {I}", m["blocks"],
               m["d_model"], m["heads"], m["seq_len"], cfg["data"]["batch_size"], full=True)
    return cfg


def short_rev(rev):
    """12 digits of a revision; a binary built from an uncommitted tree keeps its '-dirty'."""
    sha, dirty = (rev[:-len("-dirty")], True) if rev.endswith("-dirty") else (rev, False)
    return sha[:12] + ("-dirty" if dirty else "")


def provenance(doc, res):
    """The caption's 'sweep FILE (hash H), N runs, halfway V, git R' against sweep.json, sweep.csv
    and the manifests."""
    with open(os.path.join(res, "sweep.json")) as f:
        d = json.load(f)
    df = sweep(res)
    mans = [manifest(res, r) for _, r in df.iterrows()]
    rx = re.compile(r"sweep (\S+) \(hash ([0-9a-f]+)\), (\d+) runs, halfway (\S+), "
                    r"git ([0-9a-f]+(?:-dirty)?)")
    for i, t in enumerate(doc.texts):
        m = rx.search(t)
        if m:
            want = (d["sweep_file"], d["sweep_hash"][:12], str(len(df)),
                    mans[0]["halfway_version"], short_rev(mans[0]["git_revision"]))
            if m.groups() != want or len(os.listdir(os.path.join(res, "runs"))) != len(df) or \
                    any((x["halfway_version"], x["git_revision"]) != (mans[0]["halfway_version"],
                                                                      mans[0]["git_revision"])
                        for x in mans):
                doc.errors.append("%s: caption %r, the results give %r" % (doc.what, m.group(0),
                                                                            want))
            doc.texts[i] = t[:m.start()] + BLANK + t[m.end():]
            return
    doc.errors.append("%s: no provenance caption" % doc.what)


def parse_hist(s):
    """'e:count;...' into {e: count}."""
    out = {}
    if isinstance(s, str) and s:
        for item in s.split(";"):
            e, c = item.split(":")
            out[int(e)] = out.get(int(e), 0) + int(c)
    return out


# ---------------------------------------------------------------- one checker per experiment
# Each takes the results folder, {figure name: Doc} and the console Doc, and checks every
# number they print.

def check_accumulation(res, figs, con):
    df = pd.read_csv(os.path.join(res, "accumulation.csv"))
    with open(os.path.join(res, "manifest.json")) as f:
        man = json.load(f)
    doc = figs["accumulation"]
    doc.expect("fp16 inputs uniform in [{N}, {N})", 0, 1)
    for m in dict.fromkeys(df["model"]):
        doc.text(m)
    doc.expect("n·u, fp16 (u = {P})", LOG2_U_F16, full=True)
    doc.expect("n·u, fp32 (u = {P})", LOG2_U_F32, full=True)
    trials = df["trial"].nunique()
    floor = 1e-12   # the drawing floor of a zero error: must lie below every non-zero error
    pos = df.loc[df["rel_error"] > 0, "rel_error"]
    if len(pos) and not pos.min() > floor:
        doc.errors.append("accumulation: the floor 1e-12 is not below the smallest error")
    doc.expect("median over {I} trials, band: min-max; 0 drawn at {N} | ", trials, floor)
    if trials != man["trials"]:
        doc.errors.append("accumulation: %d trials in the CSV, %d in the manifest"
                          % (trials, man["trials"]))
    doc.expect("%s, seed {I}, halfway %s, git %s" % (man["config_file"], man["halfway_version"],
                                                     short_rev(man["git_revision"])), man["seed"])
    # The console: median relative error per model (rows) and length (columns).
    ns = [int(n) for n in sorted(df["n"].unique())]
    con.header("n", ns)
    med = df.groupby(["model", "n"])["rel_error"].median()
    for mdl in dict.fromkeys(df["model"]):
        con.row(mdl, [med[(mdl, n)] for n in ns])


def check_accumulation_training(res, figs, con):
    df = sweep(res)
    doc = figs["accumulation_training"]
    seeds = sorted(int(x) for x in df["run.seed"].unique())
    cases = list(dict.fromkeys(df["case"]))
    for c in cases:
        doc.expect(c + " accumulation ({I} seeds)", len(seeds), full=True)
    doc.text("fp16 training, loss")
    doc.text("block FMA against sequential fp32, same seed")
    doc.text("|loss - loss with fp32 accumulation| (% of it)")
    doc.expect("torch-cuda-fp16, dynamic loss scaling; block-FMA parameters are published "
               "hypotheses")
    provenance(doc, res)
    con.header("model", ["seed", "final", "loss", "/", "fp32's", "grad", "values", "flushed",
                         "to", "zero"])
    final = {}
    for c in cases:
        for seed in seeds:
            r = df[(df["case"] == c) & (df["run.seed"] == seed)].iloc[0]
            final[c, seed] = steps_summary(run_csv(res, r, "steps.csv"))
    for c in cases:
        for seed in seeds:
            s = final[c, seed]
            con.row(c, [seed, s["final_loss"], s["final_loss"] / final["fp32", seed]["final_loss"],
                        s["grad_values"], s["grad_flushed"]])


def check_demo(res, figs, con):
    df = sweep(res)
    doc = figs["demo"]
    seeds = sorted(int(x) for x in df["run.seed"].unique())
    cases = list(dict.fromkeys(df["case"]))
    for c in cases:
        doc.expect(c + " ({I} seeds)", len(seeds), full=True)
    doc.text("loss, every seed")
    doc.expect("fp16/bf16 gradients flushed to zero (seed {I})", seeds[0], full=True)
    doc.expect("no scaling ({P})", 0, full=True)
    doc.expect("right: band: the safe window of fp16-dynamic's own steps; dashed: the window "
               "predicted from fp16-noscale's steps, another trajectory (seed {I} each) | ",
               seeds[0])
    doc.expect("fp16 flushed to zero below {P}, subnormal below {P}; bf16 normal down to "
               "{P}",
               LOG2_F16_FLUSH, LOG2_F16_MIN_NORMAL, LOG2_BF16_MIN_NORMAL)
    provenance(doc, res)
    check_demo_scale(res, df, doc, con, seeds)
    con.header("configuration", ["seed", "final", "loss", "grad", "values", "flushed", "to",
                                 "zero", "skipped", "final", "scale", "first-layer", "zeros"])
    final = {}
    for c in cases:
        for seed in seeds:
            r = df[(df["case"] == c) & (df["run.seed"] == seed)].iloc[0]
            s = steps_summary(run_csv(res, r, "steps.csv"))
            final[c, seed] = s["final_loss"]
            gv, gu = s["grad_values"], s["grad_flushed"]
            t = run_csv(res, r, "trace.csv")
            t = t[t["name"] == "0.weight.grad"]      # the first layer's fp16/bf16 weight gradient
            z = [100.0 * t["zeros"].sum() / t["total"].sum()] if t["total"].sum() else []
            con.row(c, [seed, s["final_loss"], gv] + ([gu, 100.0 * gu / gv] if gv else []) +
                    [s["skipped"], s["final_scale"]] + z)
    listed = ", ".join(["{N}"] * len(seeds))
    for num, den in (("fp16-noscale", "fp16-dynamic"), ("fp16-dynamic", "fp32")):
        con.expect("final loss of %s / %s: %s (seeds %s)" % (num, den, listed,
                                                            ", ".join(["{I}"] * len(seeds))),
                   *([final[num, x] / final[den, x] for x in seeds] + seeds), full=True)
    ref = "fp16-noscale"
    w = window(res, df[(df["case"] == ref) & (df["run.seed"] == seeds[0])].iloc[0])
    if w:
        con.expect("safe loss-scale window predicted from the single %s run (seed {I}): {P} .. {P} "
                   "(every step: flushed values within the tolerance, no overflow)" % ref,
                   seeds[0], *w)
    else:
        con.expect("no loss scale keeps every step of %s (seed {I}) within the flush tolerance "
                   "and free of overflow" % ref, seeds[0])


def figure_data(res, name):
    """figures/NAME.data.json: what the figure drew, read back from its artists."""
    p = os.path.join(res, "figures", name + ".data.json")
    if not os.path.exists(p):
        return {}
    with open(p) as f:
        return json.load(f)


def drawn(doc, data, key, want):
    """The artist `key` of the figure drew exactly `want` (NaN and missing as None)."""
    got = data.get(key)
    if got != want:
        doc.errors.append("%s: %s draws %s, the results give %s"
                          % (doc.what, key, str(got)[:300], str(want)[:300]))


def nan_none(values):
    return [None if v != v else float(v) for v in values]


def check_demo_scale(res, df, doc, con, seeds):
    """The right panel: the scaled run's loss scale in the band of its own steps' safe windows
    (steps.csv k_low..k_high, one vertical segment per step), the unscaled run's window only as
    the dashed second element; the legend counts and the console lines per seed."""
    data = figure_data(res, "demo")

    def steps(case, seed):
        return run_csv(res, df[(df["case"] == case) & (df["run.seed"] == seed)].iloc[0],
                       "steps.csv")

    s, r = steps("fp16-dynamic", seeds[0]), steps("fp16-noscale", seeds[0])
    k = np.log2(s["loss_scale"].to_numpy(dtype=np.float64))
    lo, hi = s["k_low"].to_numpy(dtype=np.float64), s["k_high"].to_numpy(dtype=np.float64)
    has = ~np.isnan(lo)
    drawn(doc, data, "band", {"segments": [[[float(st), float(a)], [float(st), float(b)]]
                                           for st, a, b, h in zip(s["step"], lo, hi, has) if h]})
    drawn(doc, data, "scale", {"x": nan_none(s["step"]), "y": nan_none(k)})
    for edge in ("k_low", "k_high"):
        drawn(doc, data, "predicted " + edge, {"x": nan_none(r["step"]), "y": nan_none(r[edge])})
    masks = {"below": has & (k < np.where(has, lo, 0)), "above": has & (k > np.where(has, hi, 0)),
             "none": ~has}
    for key, m in masks.items():
        drawn(doc, data, key, {"x": nan_none(s["step"][m]), "y": nan_none(k[m])})
    sk = (s["skipped"] != 0).to_numpy()
    drawn(doc, data, "skipped", {"x": nan_none(s["step"][sk]), "y": nan_none(k[sk])})
    doc.expect("fp16-dynamic's loss scale and its own safe window (seed {I})", seeds[0],
               full=True)
    doc.text("safe window of fp16-dynamic's own steps")
    doc.text("window predicted from fp16-noscale's steps")
    doc.text("dynamic scale (fp16-dynamic)")
    doc.text("skipped step (overflow)")
    for key, what in (("below", "scale below the step's safe window"),
                      ("above", "scale above the step's safe window"),
                      ("none", "no scale safe on the step")):
        doc.expect(what + " ({I} of {I} steps)", int(masks[key].sum()), len(s), full=True)
    for seed in seeds:
        s = steps("fp16-dynamic", seed)
        tol = manifest(res, df[(df["case"] == "fp16-dynamic") & (df["run.seed"] == seed)]
                       .iloc[0])["config"].get("trace", {}).get("flush_tolerance", 0.0)
        k = np.log2(s["loss_scale"].to_numpy(dtype=np.float64))
        lo, hi = s["k_low"].to_numpy(dtype=np.float64), s["k_high"].to_numpy(dtype=np.float64)
        gv = s["grad_values"].to_numpy(dtype=np.float64)
        lost = np.divide(s["grad_flushed"].to_numpy(dtype=np.float64), gv,
                         out=np.full(len(gv), np.nan), where=gv > 0)
        over = lost > tol
        line = ("fp16-dynamic, seed {I}: the scale was below its own step's safe window on {I} "
                "of {I} steps, above it on {I}, no scale was safe on {I}; {I} steps lost more "
                "than the {N}% tolerance")
        vals = [seed, int(np.sum(k < lo)), len(s), int(np.sum(k > hi)), int(np.sum(np.isnan(lo))),
                int(over.sum()), 100.0 * tol]
        if over.any():
            i = int(np.nanargmax(lost))
            line += " (at most {N}%, step {I})"
            vals += [100.0 * lost[i], int(s["step"][i])]
        con.expect(line, *vals, full=True)


def check_dynamic_scaler(res, figs, con):
    df = sweep(res)
    doc = figs["dynamic_scaler"]
    for _, r in df.iterrows():
        gi = int(r["scaler.growth_interval"])
        s = steps_summary(run_csv(res, r, "steps.csv"))
        doc.expect("growth_interval = {I}", gi, full=True)   # the scale ...
        doc.expect("growth_interval = {I}", gi, full=True)   # ... and the loss
        doc.expect("growth_interval = {I}: {I} skipped steps (x)", gi, s["skipped"], full=True)
        con.expect("dynamic_scaler: growth_interval {I}: {I} skipped steps, final scale {N}, "
                   "final loss {N}", gi, s["skipped"], s["final_scale"], s["final_loss"],
                   full=True)
    doc.expect("overflowed fp16 (max {N})", F16_MAX)
    provenance(doc, res)


def check_fp8_accumulation(res, figs, con):
    df = sweep(res)
    doc = figs["fp8_accumulation"]
    data = figure_data(res, "fp8_accumulation")
    expect_transformer_title(doc, manifest(res, df.iloc[0])["config"])
    cases = list(dict.fromkeys(df["case"]))
    seeds = sorted(int(x) for x in df["run.seed"].unique())
    for t in ("step", "step", "validation loss (nats per byte)",
              "validation loss / fp32 accumulation's (same seed)",
              "fp8 accumulators against exact fp32, every seed",
              "fp32 accumulation's seed-to-seed spread (min, max / mean)"):
        doc.text(t)
    for c in cases:
        doc.text(c + " accumulation")
    doc.expect("fp8-hybrid (delayed scaling), English fortune-cookie database, byte-level; left: "
               "mean of the {I} seeds, band: min-max; accumulator models are published "
               "hypotheses | ", len(seeds))
    provenance(doc, res)
    # The experiment's name holds a digit: the line naming its files is checked whole.
    con.text("figures: figures/fp8_accumulation.png, figures/fp8_accumulation.pdf")
    # Every run's validation losses: every data.val_every steps and at the last step.
    val = {}
    for _, r in df.iterrows():
        s = run_csv(res, r, "steps.csv")
        v = s[s["val_loss"].notna()]
        every, n = int(manifest(res, r)["config"]["data"]["val_every"]), len(s)
        if sorted(v["step"]) != sorted(set(range(0, n, every)) | {n - 1}):
            con.errors.append("fp8_accumulation: %s seed %d: validation losses at steps %s"
                              % (r["case"], r["run.seed"], list(v["step"])[:8]))
        val[r["case"], int(r["run.seed"])] = (v["step"].to_numpy(), v["val_loss"].to_numpy())
    # The right panel: each seed's validation losses divided by fp32's, step by step.
    for c in cases:
        for seed in seeds:
            if c != "fp32":
                st, a = val[c, seed]
                drawn(doc, data, "ratio %s seed %d" % (c, seed),
                      {"x": nan_none(st), "y": nan_none(a / val["fp32", seed][1])})
    con.header("accumulation", ["seed", "final_val_loss", "at_step", "/", "fp32's", "(same",
                                "seed)"])
    final = {(c, seed): float(val[c, seed][1][-1]) for c in cases for seed in seeds}
    for c in cases:
        for seed in seeds:
            a, b = final[c, seed], final["fp32", seed]
            cells = [seed, a, int(val[c, seed][0][-1])]
            if c == "fp32":
                con.row(c, cells)
                continue
            # Losses closer than their format's spacing print no ratio (then the row's
            # remaining cells are the seed, loss and step).
            same = within_resolution(a, [a], b, [b])
            if same:
                con.expect("= fp32 within %s's resolution" % same)
                con.row(c, cells)
            else:
                con.row(c, cells + [a / b])
    expect_seed_spread(con, {c: [final[c, x] for x in seeds] for c in cases},
                       "final validation loss")
    for c in cases:
        if c == "fp32":
            continue
        v, ref = [final[c, x] for x in seeds], [final["fp32", x] for x in seeds]
        diff = [a - b for a, b in zip(v, ref)]
        con.expect("%s - fp32, same seed: final validation loss {N} to {N}, above fp32's on {I} "
                   "of {I} seeds" % c, min(diff), max(diff), sum(x > 0 for x in diff),
                   len(diff), full=True)


def check_format_comparison(res, figs, con):
    df = sweep(res)
    doc = figs["format_comparison"]
    df["final"] = [steps_summary(run_csv(res, r, "steps.csv"))["final_loss"]
                   for _, r in df.iterrows()]
    models, formats = list(dict.fromkeys(df["model"])), list(dict.fromkeys(df["format"]))
    for m in models:
        doc.text(m)
    for f in formats:
        counts = [int(((df["model"] == m) & (df["format"] == f)).sum()) for m in models]
        if len(set(counts)) == 1:
            doc.expect(f + " ({I} seeds)", counts[0], full=True)
        else:
            doc.expect(f + " (" + ", ".join(m + " {I}" for m in models) + " seeds)", *counts,
                       full=True)
    provenance(doc, res)
    # The console: median, min, max of the final loss per (model, format), model names shown
    # on the first row of each model.
    g = df.groupby(["model", "format"])["final"]
    lines = [i for i, t in enumerate(con.texts) if t.strip()]
    body = [i for i in lines if CELL.search(con.texts[i])]
    want = [(m, f) for m in models for f in formats if ((df["model"] == m) &
                                                        (df["format"] == f)).any()]
    if len(body) != len(want):
        con.errors.append("format_comparison: %d table rows, %d (model, format) groups"
                          % (len(body), len(want)))
    for i, (m, f) in zip(body, want):
        s = con.texts[i].strip()
        if s.startswith(m + " "):
            s = s[len(m):].strip()
        con.texts[i] = s
        con.row(f, [g.median()[(m, f)], g.min()[(m, f)], g.max()[(m, f)]], line=i)


def check_gradient_histogram(res, figs, con, shifts=("safe", PAPER_SHIFT)):
    df = sweep(res)
    row = df.iloc[0]
    doc = figs["gradient_histogram"]
    t = run_csv(res, row, "trace.csv")
    t = t[t["kind"] == "activation_grad"]
    hist = {}
    for h in t["hist"]:
        for e, c in parse_hist(h).items():
            hist[e] = hist.get(e, 0) + c
    n = int(t["total"].sum())
    in_hist = sum(hist.values())
    zeros, flushed = int(t["zeros"].sum()), int(t["flushed"].sum())
    nonfinite = int(t["nonfinite_in"].sum())
    exact = zeros - flushed
    # docs/sim.md: hist holds the finite non-zero values before rounding (those flushed to zero
    # included), zeros every zero result (exact zeros and flushed values), so each value is counted
    # once here.
    if in_hist + exact + nonfinite != n:
        doc.errors.append("gradient_histogram: hist %d + exact zeros %d + inf/NaN %d != total %d"
                          % (in_hist, exact, nonfinite, n))
    below = sum(c for e, c in hist.items() if e < LOG2_F16_FLUSH)
    steps = len(run_csv(res, row, "steps.csv"))
    if steps != manifest(res, row)["config"]["run"]["steps"]:
        doc.errors.append("gradient_histogram: steps.csv has %d steps, the config %d"
                          % (steps, manifest(res, row)["config"]["run"]["steps"]))
    title = "activation gradients over {I} steps: {N}% exact zeros, {N}% flushed to 0 by fp16"
    vals = [steps, 100.0 * exact / n, 100.0 * flushed / n]
    if nonfinite:
        title += ", {N}% inf/NaN"
        vals.append(100.0 * nonfinite / n)
    doc.expect(title, *vals, full=True)
    doc.expect("{N}%", 100.0 * exact / n, full=True)      # the exact-zero bar
    w = window(res, row)
    curves, note = {}, False
    for s in shifts:
        if s == "safe":
            if w:
                curves.setdefault(w[0], []).append("lowest safe scale of this run")
            else:
                note = True
        else:
            curves.setdefault(int(s), []).append("Micikevicius et al. {I}" if int(s) == PAPER_SHIFT
                                                 else "chosen with --shift")
    for k, why in curves.items():
        vals = [k] + [PAPER_YEAR for x in why if "{I}" in x]
        doc.expect("shifted by {P}: " + ", ".join(why), *vals, full=True)
    if note:
        doc.text("no loss scale is safe on every step of this run")
    doc.expect("fp16 flushed to zero: |x| ≤ {P}", LOG2_F16_FLUSH, full=True)
    doc.expect("fp16 subnormal: {P} < |x| < {P}", LOG2_F16_FLUSH, LOG2_F16_MIN_NORMAL, full=True)
    doc.expect("fp16 normal: {P} ≤ |x| ≤ {N}", LOG2_F16_MIN_NORMAL, F16_MAX, full=True)
    doc.expect("fp16 largest finite value {N}", F16_MAX, full=True)
    doc.expect("bf16 smallest normal {P}", LOG2_BF16_MIN_NORMAL, full=True, optional=True)
    doc.expect("right: fp16 smallest subnormal {P}", LOG2_F16_MIN_SUB, full=True)
    doc.expect("right: fp16 smallest normal {P}", LOG2_F16_MIN_NORMAL, full=True)
    doc.expect("(bin e holds [2^e, 2^(e+{I})))", 1)
    provenance(doc, res)
    con.expect("gradient_histogram: {I} activation-gradient values: {N}% exact zeros, {N}% "
               "flushed to zero by fp16 ({N}% below {P} before rounding); ",
               n, 100.0 * exact / n, 100.0 * flushed / n, 100.0 * below / n, LOG2_F16_FLUSH)
    if w:
        con.expect("lowest safe scale {P}", w[0])
    else:
        con.expect("no safe loss scale")


def check_loss_scale_sweep(res, figs, con):
    df = sweep(res)
    df = df.sort_values("scaler.scale")
    doc = figs["loss_scale_sweep"]
    ks = [int(round(math.log2(s))) for s in df["scaler.scale"]]
    ref = df.iloc[0]
    w = window(res, ref)
    ss = [steps_summary(run_csv(res, r, "steps.csv")) for _, r in df.iterrows()]
    sw = run_csv(res, ref, "scale_window.csv")
    if w:
        doc.expect("all panels: predicted safe window {P}..{P}", *w, full=True)
    doc.expect("right: flushed, predicted from the run at {P}", ks[0], full=True)
    measured = [k for k, s in zip(ks, ss) if s["found_inf"] > 0]
    if measured:
        doc.expect("right: first scale with overflow, measured: {P}", min(measured), full=True)
    predicted = sorted(set(sw.loc[sw["overflow"] != 0, "k"]))
    if predicted:
        doc.expect("right: first scale with overflow, predicted: {P}", int(predicted[0]),
                   full=True)
    doc.expect("(%; {I} at the floor)", 0)
    provenance(doc, res)
    clean = sum(1 for s in ss if s["grad_flushed"] == 0 and s["found_inf"] == 0)
    if w:
        con.expect("loss_scale_sweep: predicted safe window {P}..{P}; measured: {I} of {I} "
                   "scales without flushed values or overflow", *w, clean, len(df), full=True)
    else:
        con.expect("loss_scale_sweep: the run at {P} predicts no safe window; measured: {I} of "
                   "{I} scales without flushed values or overflow", ks[0], clean, len(df),
                   full=True)
    # Above the reference scale, each scale with at least 100 measured flushed values (steps.csv)
    # against the reference's prediction summed over its steps.
    pred = sw.groupby("k")["flushed"].sum()
    rows = [(k, s["grad_flushed"], int(pred.get(k, 0))) for k, s in zip(ks, ss)]
    rows = [r for r in rows if r[0] > ks[0] and r[1] >= 100 and r[2] > 0]
    if rows:
        con.expect("loss_scale_sweep: flushed values above {P}, measured and predicted from the "
                   "run at {P}, which misses the values that are zero there because an upstream "
                   "gradient was flushed:", ks[0], ks[0], full=True)
    for k, m, p in rows:
        con.expect("  {P}: measured {I}, predicted {I}, measured/predicted {N}", k, m, p, m / p,
                   full=True)


def check_master_weights(res, figs, con):
    df = sweep(res)
    doc = figs["master_weights"]
    provenance(doc, res)
    for _, r in df.iterrows():
        t = run_csv(res, r, "trace.csv")
        # Both arms train in fp16: every linear layer's output is rounded into fp16 (with fp32
        # parameters, type promotion alone would compute them in fp32).
        lin = t[(t["op"] == "linear") & (t["kind"] == "activation")]
        if len(lin) == 0 or (lin["dtype"] != "fp16").any():
            con.errors.append("master_weights: %s: linear outputs are not all fp16 (%s)"
                              % (r["dir"], sorted(set(lin["dtype"]))))
        u = t[t["kind"] == "update"]
        if r["precision.params"] == "fp32":
            # An fp32 master copy: no update is rounded into fp16, so none can vanish.
            if len(u):
                con.errors.append("master_weights: fp32 master weights, but %d update roundings"
                                  % len(u))
            lost = 0.0
        else:
            lost = 100.0 * u["vanished"].sum() / u["total"].sum()
        s = steps_summary(run_csv(res, r, "steps.csv"))
        con.row(r["precision.params"], [r["optimizer.lr"], lost, s["final_loss"]])


def check_memory(res, figs, con):
    df = sweep(res)
    doc = figs["memory"]
    kib = {}
    for _, r in df.iterrows():
        m = run_csv(res, r, "memory.csv")
        kib[r["precision.policy"]] = (m.groupby("dtype")["bytes"].sum() / 1024.0).to_dict()
    dtypes = sorted({d for v in kib.values() for d in v})
    for d in dtypes:
        doc.text(d)
    c = manifest(res, df.iloc[0])["config"]
    doc.expect("%s %s, batch {I}, %s; elements x bits / {I}"
               % ("-".join(str(x) for x in c["model"]["layers"]), c["model"]["kind"].upper(),
                  {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}[c["optimizer"]["kind"]]),
               c["data"]["batch_size"], 8)
    if any(manifest(res, r)["config"]["model"] != c["model"] for _, r in df.iterrows()):
        doc.errors.append("memory: the runs' models differ; the caption names one")
    provenance(doc, res)
    # The console: KiB per policy (rows) and dtype (columns, in header order), 1 decimal.
    cols = con.header("dtype", dtypes)
    for p, v in kib.items():
        con.row(p, [v.get(d, 0.0) for d in cols])


def check_pitfalls(res, figs, con):
    df = sweep(res)
    doc = figs["pitfalls"]
    for _, r in df.iterrows():
        st = run_csv(res, r, "steps.csv")
        s = steps_summary(st)
        bad = st[~np.isfinite(st["loss"]) | (st["loss"] > 1e6)]
        if not len(bad):
            doc.text(r["case"])
        elif np.isfinite(bad["loss"].iloc[0]):
            doc.expect(r["case"] + ": loss > {N} from step {I}", 1e6, int(bad["step"].iloc[0]),
                       full=True)
        else:
            doc.expect(r["case"] + ": loss inf/NaN from step {I}", int(bad["step"].iloc[0]),
                       full=True)
        con.row(r["case"], [s["final_loss"], s["skipped"], s["grad_flushed"]])
    opts = [manifest(res, r)["config"]["optimizer"] for _, r in df.iterrows()]
    if any(o != opts[0] for o in opts) or opts[0]["kind"] != "sgd":
        doc.errors.append("pitfalls: the caption names one SGD setting, the runs have %s" % opts)
    doc.expect("SGD momentum {N}, lr {N}; ", opts[0].get("momentum", 0.0), opts[0]["lr"])
    provenance(doc, res)


def rounded_to(values):
    """(name, significand bits) of the coarsest of bf16, fp16, fp32 that holds every value
    exactly (bf16: a float32 whose low 16 bits are zero)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v) & (v != 0)]
    f = v.astype(np.float32)
    if len(v) and (f == v).all() and ((f.view(np.uint32) & np.uint32(0xFFFF)) == 0).all():
        return "bf16", 8
    if len(v) and (v.astype(np.float16).astype(np.float64) == v).all():
        return "fp16", 11
    return "fp32", 24


def within_resolution(a, avals, b, bvals):
    """The name of the coarser format when a and b (medians of the values avals, bvals) differ by
    less than its spacing at them, else None: their ratio is then no measured difference."""
    (fa, pa), (fb, pb) = rounded_to(avals), rounded_to(bvals)
    gap = max(math.ldexp(1.0, math.frexp(a)[1] - pa), math.ldexp(1.0, math.frexp(b)[1] - pb))
    if abs(a - b) < gap:
        return fa if pa <= pb else fb
    return None


def check_update_rounding(res, figs, con):
    df = sweep(res)
    doc = figs["update_rounding"]
    models = list(dict.fromkeys(df["model"]))
    updates = list(dict.fromkeys(df["update"]))
    lrs = sorted(df["optimizer.lr"].unique())

    def lost(runs):
        # updates.csv of every run, summed: vanished and non-zero updates.
        v = n = 0
        for _, r in runs.iterrows():
            u = run_csv(res, r, "updates.csv")
            if (u["vanished"] > u["nonzero"]).any() or (u["nonzero"] > u["elements"]).any():
                con.errors.append("update_rounding: %s: vanished > nonzero or nonzero > "
                                  "elements" % r["dir"])
            v += int(u["vanished"].sum())
            n += int(u["nonzero"].sum())
        return 100.0 * v / n if n else float("nan")

    for m in models:
        doc.expect("%s: final loss against learning rate" % m, full=True)
        doc.expect("%s: vanished updates at lr {N}" % m, lrs[0], full=True)
    for u in updates:
        doc.text(u)  # the legend, one for all panels
    for t in ("learning rate (Adam)", "step", "updates that vanished (% of non-zero)",
              "final training loss (mean squared error)",
              "final training loss (cross-entropy, nats)"):
        while doc.expect(t, full=True, optional=True):
            pass
    doc.expect("pure-bf16 except fp32; line: median over seeds, band: min-max; vanished: the "
               "stored weight compares equal after the step |")
    provenance(doc, res)
    con.text("update_rounding: final loss (median over seeds) and the updates that vanished "
             "(% of non-zero updates, all traced steps and seeds), per learning rate")
    con.row("lr", lrs)
    ratio = {}
    for m in models:
        for u in updates:
            sel = df[(df["model"] == m) & (df["update"] == u)]
            med = [float(np.median(sel[sel["optimizer.lr"] == lr]["final_loss"])) for lr in lrs]
            con.row("%s/%s loss" % (m, u), med)
            con.row("%s/%s vanished%%" % (m, u),
                    [lost(sel[sel["optimizer.lr"] == lr]) for lr in lrs])
            ratio[(m, u)] = med[0]
    if "fp32" in updates:
        for m in models:
            others = [u for u in updates if u != "fp32"]
            b = ratio[(m, "fp32")]
            bvals = df[(df["model"] == m) & (df["update"] == "fp32") &
                       (df["optimizer.lr"] == lrs[0])]["final_loss"]
            parts, vals = [], [lrs[0]]
            for u in others:
                a = ratio[(m, u)]
                avals = df[(df["model"] == m) & (df["update"] == u) &
                           (df["optimizer.lr"] == lrs[0])]["final_loss"]
                same = within_resolution(a, avals, b, bvals)
                if same:
                    parts.append("%s = fp32 within %s's resolution" % (u, same))
                else:
                    parts.append("%s {N}" % u)
                    vals.append(a / b)
            con.expect("%s at lr {N}, final loss / fp32's: " % m + ", ".join(parts), *vals,
                       full=True)


def check_text_lm(res, figs, con):
    df = sweep(res)
    doc = figs["text_lm"]
    cfg = expect_transformer_title(doc, manifest(res, df.iloc[0])["config"])
    for t in ("step", "step", "validation loss (nats per byte)",
              "gradient values flushed to zero (%)", "gradient values flushed on the traced steps"):
        doc.text(t)
    doc.text("0 flushed")
    doc.expect("English fortune-cookie database, byte-level; flushed: lines join traced steps "
               "that flushed values, the row below marks those that flushed none | ")
    provenance(doc, res)
    con.header("recipe", ["final_val_loss", "at_step", "best_val_loss", "grad_values",
                          "flushed", "skipped", "rounded_gradients"])
    con.text("grad_values and flushed count the roundings of the tensors in rounded_gradients "
             "(per traced step): recipes that round different tensors are not comparable by them")
    data = figure_data(res, "text_lm")
    lowered = [r["case"] for _, r in df.iterrows()
               if run_csv(res, r, "steps.csv")["grad_values"].sum() > 0]
    for _, r in df.iterrows():
        doc.text(r["case"])
        s = run_csv(res, r, "steps.csv")
        # The log axis: a point per traced step that flushed values, a gap (None) at those that
        # flushed none, which the zero row marks on the recipe's own row instead.
        t = s[s["grad_values"] > 0]
        fl, gv = t["grad_flushed"].to_numpy(), t["grad_values"].to_numpy(dtype=np.float64)
        if r["case"] in lowered:
            drawn(doc, data, "flushed " + r["case"],
                  {"x": nan_none(t["step"]),
                   "y": [100.0 * a / b if a > 0 else None for a, b in zip(fl, gv)]})
            drawn(doc, data, "zero " + r["case"],
                  {"x": nan_none(t["step"][fl == 0]),
                   "y": [float(lowered.index(r["case"]))] * int((fl == 0).sum())})
        elif "flushed " + r["case"] in data:
            doc.errors.append("text_lm: %s rounds no gradient but has a line" % r["case"])
        # The tensors its grad_values count: the first traced step's low-precision gradients.
        tr = run_csv(res, r, "trace.csv")
        tr = tr[tr["kind"].isin(["activation_grad", "weight_grad"]) & (tr["dtype"] != "fp32")]
        tr = tr[tr["step"] == tr["step"].min()] if len(tr) else tr
        counts = [g["name"].nunique() for _, g in tr.groupby(["kind", "dtype"], sort=True)]
        # Validation rows: every data.val_every steps and the last step, nowhere else.
        every, n = int(cfg["data"]["val_every"]), len(s)
        val = {int(st): float(v) for st, v in zip(s["step"], s["val_loss"]) if v == v}
        want = sorted(set(range(0, n, every)) | {n - 1})
        if sorted(val) != want:
            con.errors.append("text_lm: %s: validation losses at steps %s, the config asks for %s"
                              % (r["case"], sorted(val)[:8], want[:8]))
        last = max(val)
        ss = steps_summary(s)
        con.row(r["case"], [val[last], last, min(val.values()), ss["grad_values"],
                            ss["grad_flushed"], ss["skipped"]] + counts)


def expect_seed_spread(con, finals, what, *what_values):
    """Each recipe's seed-spread line (`finals`: {case: [the final value of each seed]}): its
    mean `what` (a template, with `what_values`) against fp32's, marked within or beyond the
    larger of the two spreads over seeds."""
    ref = finals.get("fp32")
    for case, v in finals.items():
        if ref is None or case == "fp32":
            continue
        d = float(np.mean(v)) - float(np.mean(ref))
        sa, sr = float(np.ptp(v)), float(np.ptp(ref))
        con.expect("%s: mean %s {N} against fp32's, %s the seed spread (spread over {I} seeds: "
                   "{N} %s, {N} fp32)"
                   % (case, what, "within" if abs(d) < max(sa, sr) else "beyond", case),
                   *what_values, d, len(v), sa, sr, full=True)


def check_block_formats(res, figs, con):
    df = sweep(res)
    doc = figs["block_formats"]
    cfg = expect_transformer_title(doc, manifest(res, df.iloc[0])["config"])
    for t in ("step", "step", "step", "validation loss (nats per byte)", "SNR (dB)",
              "quantization SNR of the GEMM operands", "elements flushed to zero (%)",
              "flushed elements of the GEMM operands", "X", "W", "dY"):
        doc.text(t)
    doc.expect("English fortune-cookie database, byte-level; loss: mean of the {I} seeds, band: "
               "min-max; SNR and flushes: block copies and per-tensor fp8 casts of the linear "
               "layers' operands, every seed, layer and copy of the traced steps; bf16: other "
               "tensors, not drawn; a flush line breaks at steps that flushed nothing | ",
               df["run.seed"].nunique())
    provenance(doc, res)
    roles = ["input", "weight", "grad_output"]
    con.header("recipe", ["val_mean", "val_min", "val_max", "snr_X", "snr_W", "snr_dY",
                          "flush_X%", "flush_W%", "flush_dY%", "satur%", "clamp_real",
                          "clamp_ulp"])
    all_finals, snr = {}, {}
    for case in dict.fromkeys(df["case"]):
        if ":" not in case:  # PRESET:VARIANT cases are the options figure's
            doc.text(case)
        finals, tables = [], []
        for _, r in df[df["case"] == case].iterrows():
            st = run_csv(res, r, "steps.csv")
            val = st[st["val_loss"].notna()]
            finals.append(float(val["val_loss"].values[-1]))
            b = run_csv(res, r, "blocks.csv")
            # Every traced step of a block-scaled run has every copy; others have none.
            policy = manifest(res, r)["policy"]
            if ("blocks" in policy) != (len(b) > 0):
                con.errors.append("block_formats: %s: %d blocks.csv rows for policy %s"
                                  % (case, len(b), policy["name"]))
            if "fp8_forward" in policy:  # per-tensor fp8: the linear operands' casts
                t = run_csv(res, r, "trace.csv")
                keep = [(op == "linear" and n.rsplit(".", 1)[-1] in roles and
                         d.split(":")[0] in ("e4m3", "e5m2"))
                        for op, n, d in zip(t["op"], t["name"], t["dtype"])]
                b = pd.DataFrame({"name": t["name"][keep], "signal": t["signal"][keep],
                                  "noise": t["noise"][keep], "flushed": t["flushed"][keep],
                                  "elements": t["total"][keep], "saturated": t["overflow"][keep]})
            tables.append(b)
        all_finals[case] = finals
        values = [sum(finals) / len(finals), min(finals), max(finals)]
        b = pd.concat(tables)
        if len(b):
            role = np.array([n.split(".")[-1] for n in b["name"]])
            tot = {}
            for ro in roles:
                sel = b[role == ro]
                tot[ro] = {k: float(np.sum(sel[k].to_numpy(dtype=np.float64)))
                           for k in ("signal", "noise", "flushed", "elements")}
            values += [10 * math.log10(tot[ro]["signal"] / tot[ro]["noise"]) for ro in roles]
            snr[case] = [float(10 * np.log10(tot[ro]["signal"] / tot[ro]["noise"]))
                         for ro in roles]
            values += [100 * tot[ro]["flushed"] / tot[ro]["elements"] for ro in roles]
            values += [100 * int(b["saturated"].sum()) / int(b["elements"].sum())]
            if "scales_clamped" in b:  # block scales only: real, then harmless clamps
                harmless = [int(h) for h in b["scales_clamped_harmless"]]
                real = [int(c) - h for c, h in zip(b["scales_clamped"], harmless)]
                values += [sum(real), sum(harmless)]
        con.row(case, values)
    expect_seed_spread(con, all_finals, "final validation loss")
    check_block_options(res, figs, all_finals, snr, df["run.seed"].nunique())


def check_block_options(res, figs, finals, snr, seeds):
    """The options figure: each block family (mxfp4, mxfp8, nvfp4), its preset then its
    PRESET:VARIANT cases in sweep order, one x position each and a gap between families."""
    if not any(":" in c for c in finals):
        return
    doc = figs["block_formats_options"]
    for t in ("final validation loss (nats per byte)",
              "final validation loss by scale rule and NVFP4 option", "SNR (dB)",
              "quantization SNR of the GEMM operands by option", "mean of the seeds",
              "min-max of the seeds", "X", "W", "dY"):
        doc.text(t)
    doc.expect("each family's first entry is its preset (its own choice in brackets); loss at "
               "the last validation, {I} seeds; SNR: every seed, layer, copy and traced step | ",
               seeds)
    provenance(doc, res)
    order, pos = [], 0
    for family in ("mxfp4", "mxfp8", "nvfp4"):
        for c in [family] + [c for c in finals if c.startswith(family + ":")]:
            order.append((c, float(pos)))
            pos += 1
        pos += 1
    data = figure_data(res, "block_formats_options")
    drawn(doc, data, "loss mean", {"x": [x for _, x in order],
                                   "y": [sum(finals[c]) / len(finals[c]) for c, _ in order]})
    drawn(doc, data, "loss range", {"segments": [[[x, min(finals[c])], [x, max(finals[c])]]
                                                 for c, x in order]})
    for i, name in enumerate(("X", "W", "dY")):
        drawn(doc, data, "snr " + name, {"x": [x + 0.2 * (i - 1) for _, x in order],
                                         "y": [snr[c][i] for c, _ in order]})


# The linear layers' GEMM operands of emulate_recipes' encoder, by name: (layer, role).
EMU_OPERAND = re.compile(r"^(?:encoder\.layers\.(\d+)\.(?:self_attn\.in_proj|"
                         r"self_attn\.out_proj|linear1|linear2)|(head))\."
                         r"(input|weight|grad_output)$")


def emulate_operand_rows(res, row):
    """[(layer, role, elements, flushed, saturated, signal, noise)] of one run: blocks.csv's
    rows, and trace.csv's rows rounded to a dtype other than fp32."""
    out = []
    for file in ("blocks.csv", "trace.csv"):
        t = run_csv(res, row, file)
        for _, r in t.iterrows():
            m = EMU_OPERAND.match(r["name"])
            if not m or (file == "trace.csv" and r["dtype"] == "fp32"):
                continue
            layer = "head" if m.group(2) else "layer " + m.group(1)
            if file == "blocks.csv":
                out.append((layer, m.group(3), int(r["elements"]), int(r["flushed"]),
                            int(r["saturated"]), float(r["signal"]), float(r["noise"])))
            else:
                out.append((layer, m.group(3), int(r["total"]), int(r["flushed"]),
                            int(r["overflow"]), float(r["signal"]), float(r["noise"])))
    return out


def take_in_order(doc, before, values):
    """The len(values) texts just before the text `before` are, in order, these values ('-' for
    None); blanks them."""
    i = doc.texts.index(before) if before in doc.texts else -1
    got = doc.texts[i - len(values):i] if i >= len(values) else []
    if len(got) != len(values):
        doc.errors.append("%s: %d texts before %r expected" % (doc.what, len(values), before))
        return
    for k, (t, v) in enumerate(zip(got, values)):
        if not (t == "-" if v is None else agree(t, v)):
            doc.errors.append("%s: %r before %r: drawn %s, the results give %r"
                              % (doc.what, before, k, t, v))
        doc.texts[i - len(values) + k] = BLANK


def check_emulate_recipes(res, figs, con):
    df = sweep(res)
    with open(os.path.join(res, "sweep.json")) as f:
        d = json.load(f)["definition"]
    doc = figs["emulate_recipes"]
    m = d["model"]
    doc.expect("PyTorch nn.TransformerEncoder ({I} layers, d_model {I}, {I} heads, seq {I}, batch "
               "{I}), AdamW, {I} seeds; shares and SNR pool every seed and traced step; inf dB: every "
               "rounding exact; '-': no low-precision operand | ", m["layers"], m["d_model"], m["heads"], m["seq_len"],
               d["data"]["batch_size"], df["seed"].nunique())
    provenance(doc, res)
    for t in ("step", "training loss (nats)", "training loss: mean of the seeds, band min-max",
              "quantization SNR of the linear layers' GEMM operands"):
        doc.text(t)
    roles = ["input", "weight", "grad_output"]
    cases = list(dict.fromkeys(df["case"]))
    finals, rows, layers = {}, {}, set()
    for case in cases:
        doc.text(case)
        finals[case], rows[case] = [], []
        for _, r in df[df["case"] == case].iterrows():
            loss = run_csv(res, r, "steps.csv")["loss"].to_numpy(dtype=np.float64)
            finals[case].append(float(np.mean(loss[-10:])))
            rows[case] += emulate_operand_rows(res, r)
        layers |= {x[0] for x in rows[case]}
    layers = sorted(layers, key=lambda s: (s == "head", s))
    con.header("recipe", ["loss_mean", "loss_min", "loss_max", "snr_X", "snr_W", "snr_dY",
                          "flush%", "satur%"])
    bars, without = [], []
    for case in cases:
        v, o = finals[case], rows[case]
        values = [sum(v) / len(v), min(v), max(v)]
        snr = []
        for ro in roles:
            sel = [x for x in o if x[1] == ro and x[5] is not None]
            if sel:
                noise = sum(x[6] for x in sel)
                snr.append(10 * math.log10(sum(x[5] for x in sel) / noise) if noise
                           else math.inf)
        if snr:
            doc.text(case)  # the SNR panel's legend
            bars += snr
        else:
            without.append(case)
        values += snr
        if o:
            n = sum(x[2] for x in o)
            values += [100 * sum(x[3] for x in o) / n, 100 * sum(x[4] for x in o) / n]
        con.row(case, values)
    # The bar labels, recipe by recipe, X W dY, are drawn just before the note (or the label).
    note = "no low-precision operand, no SNR: " + ", ".join(without)
    take_in_order(doc, note if without else "SNR (dB)", bars)
    if without:
        doc.text(note)
    doc.text("SNR (dB)")
    for col, title in ((3, "operand elements flushed to zero (%)"),
                       (4, "operand elements saturated or overflowed (%)")):
        cells = []
        for case in cases:
            for layer in layers:
                sel = [x for x in rows[case] if x[0] == layer]
                n = sum(x[2] for x in sel)
                cells.append(100 * sum(x[col] for x in sel) / n if n else None)
        take_in_order(doc, title, cells)
        doc.text(title)
    expect_seed_spread(con, finals, "final loss (last {I} steps)", 10)


def check_bisect_cases(res, figs, con):
    """Each bisection's title, bar labels and legend, and its console line, recomputed from its
    bisect.csv (the mean metric per candidate set, the gap, the share closed) and the loss
    curves of its bisect.json; a case without a gap prints its no_gap.txt line."""
    doc = figs["bisect_cases"]
    cases, drawn, versions = ["mxfp4_operands", "fp16_layers", "bf16_update"], 0, set()
    for name in cases:
        folder = os.path.join(res, name)
        no_gap = os.path.join(res, name + ".no_gap.txt")
        if not os.path.exists(os.path.join(folder, "manifest.json")):
            if os.path.exists(no_gap):
                with open(no_gap) as f:
                    con.expect("%s: %s" % (name, f.read().strip()), full=True)
            else:
                con.expect("%s: not run" % name, full=True)
            continue
        drawn += 1
        with open(os.path.join(folder, "bisect.csv")) as f:
            rows = list(csv.DictReader(f))
        with open(os.path.join(folder, "bisect.json")) as f:
            j = json.load(f)
        versions.add(j["version"])
        metrics, order = {}, []
        for r in rows:
            key = (r["role"], r["promoted"])
            if key not in metrics:
                order.append(key)
            metrics.setdefault(key, []).append(float(r["metric"]) if r["metric"] else math.nan)
        mean = {k: sum(v) / len(v) for k, v in metrics.items()}
        ref, orig = mean[("reference", "")], mean[("original", "")]
        gap = orig - ref
        closed = {k[1]: (orig - mean[k]) / gap for k in order if k[0] == "candidate"}
        doc.expect("%s (%s):\n%s {N} against fp32's {N}, {I} runs" % (name, j["granularity"],
                                                                     j["metric"]),
                   orig, ref, len(rows))
        for p in closed:
            if math.isfinite(closed[p]):
                doc.expect(" {N}%", 100 * closed[p], full=True)
            else:
                doc.text(" n/a")
        culprit = [m["name"] for m in j["culprit"]]
        shown = " + ".join(culprit[:3]) + (" + %d more" % (len(culprit) - 3)
                                           if len(culprit) > 3 else "")
        seed = next(k for k in j if k.startswith("losses_seed_"))
        doc.expect("%s: loss curves, seed {I}" % name, int(seed[len("losses_seed_"):]))
        for k, label in (("reference", "fp32 reference"), ("original", "original"),
                         ("fixed", "fixed: " + shown)):
            if k in j[seed]:
                doc.expect(label + ", last {N}", j[seed][k][-1], full=True)
        key = " + ".join(culprit)
        con.expect("%s: promoting %s closes {N}%% of the gap in %s ({N} against fp32's {N}, gap "
                   "{N}); {I} runs, finished %s" % (name, " + ".join("`%s`" % c for c in culprit),
                                                    j["metric"], "yes" if j["finished"] else "no"),
                   100 * closed[key], orig, ref, gap, len(rows))
    doc.expect("halfway bisect, {I} of {I} cases drawn, halfway %s" % ", ".join(sorted(versions)),
               drawn, len(cases))


CHECKERS = {"accumulation": check_accumulation,
            "accumulation_training": check_accumulation_training,
            "bisect_cases": check_bisect_cases,
            "block_formats": check_block_formats, "demo": check_demo,
            "dynamic_scaler": check_dynamic_scaler,
            "emulate_recipes": check_emulate_recipes, "format_comparison": check_format_comparison,
            "fp8_accumulation": check_fp8_accumulation,
            "gradient_histogram": check_gradient_histogram,
            "loss_scale_sweep": check_loss_scale_sweep, "master_weights": check_master_weights,
            "memory": check_memory, "pitfalls": check_pitfalls, "text_lm": check_text_lm,
            "update_rounding": check_update_rounding}


def texts_of(res):
    """{figure name: [text, ...]} from figures/*.texts.json."""
    out = {}
    for p in sorted(glob.glob(os.path.join(res, "figures", "*.texts.json"))):
        with open(p) as f:
            out[os.path.basename(p)[:-len(".texts.json")]] = [e["text"] for e in json.load(f)]
    return out


def check(name, res, texts, console, checker=None):
    """Every error of one experiment's printed numbers (an empty list when all agree)."""
    figs = {k: Doc("%s figure %s" % (name, k), v) for k, v in texts.items()}
    con = Doc("%s console" % name, console.splitlines())
    checker = checker or CHECKERS.get(name)
    if checker is None:
        return ["%s: no checker in test_experiment_numbers.py" % name]
    try:
        checker(res, figs, con)
    except KeyError as e:
        return ["%s: no figure or column %s" % (name, e)]
    except AssertionError as e:
        return ["%s: %s" % (name, e)]
    errors = []
    for d in list(figs.values()) + [con]:
        errors += d.leftovers()
    return errors


def plot(plot_py, res):
    """Run plot.py in the results folder; its console output."""
    r = subprocess.run([sys.executable, os.path.abspath(plot_py), "."], cwd=res,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed:\n%s" % (plot_py, r.stderr[-3000:]))
    return r.stdout


def main_check(argv):
    name, res = argv[0], argv[1]
    plot_py = argv[2] if len(argv) > 2 else os.path.join(SRC, name, "plot.py")
    out = plot(plot_py, res)
    errors = check(name, res, texts_of(res), out)
    print(out)
    for e in errors:
        print("FAIL " + e)
    print("%s: %s" % (name, "%d errors" % len(errors) if errors else "every number agrees"))
    return 1 if errors else 0


def shorten(path, steps=6):
    """Cut every run of a sweep.toml, emulate.toml or config to `steps` (the tiny versions)."""
    with open(path) as f:
        s = f.read()
    with open(path, "w") as f:
        f.write(re.sub(r"(?m)^steps = \d+", "steps = %d" % steps, s))


def main(halfway):
    tmp = tempfile.mkdtemp(prefix="halfway_numbers_test_")
    exps, res_root = os.path.join(tmp, "experiments"), os.path.join(tmp, "results")
    shutil.copytree(SRC, exps, ignore=shutil.ignore_patterns("__pycache__"))
    names = sorted(d for d in os.listdir(exps) if os.path.exists(os.path.join(exps, d, "plot.py")))
    ok(set(names) == set(CHECKERS), "a checker for every experiment (%s)" % ", ".join(names))
    names = text_corpus.leave_out_missing(exps, names)
    env = dict(os.environ, HALFWAY_PYTHON=sys.executable)
    skipped = []
    for n in names:
        p = os.path.join(exps, n, "accumulation.toml")
        if os.path.exists(p):
            with open(p, "w") as f:
                f.write("lengths = [16, 256]\ntrials = 2\nseed = 0\n")
            r = subprocess.run([halfway, "run", os.path.join(exps, n), "--results", res_root],
                               capture_output=True, text=True, env=env)
            ok(r.returncode == 0, "%s: halfway run (tiny)" % n)
        p = os.path.join(exps, n, "bisect.toml")
        if os.path.exists(p):
            # Each case's config cut short; a bisection needs a gap, which 6 steps do not give.
            for c in glob.glob(os.path.join(exps, n, "*.toml")):
                shorten(c, 30)
            r = subprocess.run([halfway, "run", os.path.join(exps, n), "--results", res_root,
                                "--jobs", "2"], capture_output=True, text=True, env=env)
            ok(r.returncode == 0, "%s: halfway run (tiny) %s" % (n, r.stderr.strip()[-300:]))
        p = os.path.join(exps, n, "emulate.toml")
        if os.path.exists(p):  # a Python experiment (run.py): torch and the module needed
            shorten(p)
            r = subprocess.run([halfway, "run", os.path.join(exps, n), "--results", res_root,
                                "--jobs", "2"], capture_output=True, text=True, env=env)
            ok(r.returncode == 0, "%s: halfway run (tiny) %s" % (n, r.stderr.strip()[-300:]))
            if "skipped, nothing drawn" in r.stdout:
                print("skip %s: %s" % (n, r.stdout.strip().splitlines()[-2:]))
                skipped.append(n)
        p = os.path.join(exps, n, "sweep.toml")
        if os.path.exists(p):
            shorten(p)
            r = subprocess.run([halfway, "sweep", p, "--out", os.path.join(res_root, n),
                                "--jobs", "2", "--quiet"], capture_output=True, text=True, env=env)
            ok(r.returncode == 0, "%s: halfway sweep (tiny) %s" % (n, r.stderr.strip()[-300:]))

    names = [n for n in names if n not in skipped]
    # Two plot.py at a time (each is mostly matplotlib's start-up and PDF writing).
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        jobs = {n: pool.submit(plot, os.path.join(exps, n, "plot.py"), os.path.join(res_root, n))
                for n in names}
    seen = {}
    for n in names:
        res = os.path.join(res_root, n)
        try:
            out = jobs[n].result()
        except RuntimeError as e:
            ok(False, str(e))
            continue
        texts = texts_of(res)
        seen[n] = (res, texts, out)
        ok(len(texts) >= 1 and all(texts.values()), "%s: figure texts %s" % (n, sorted(texts)))
        errors = check(n, res, texts, out)
        for e in errors:
            print("     " + e)
        ok(not errors, "%s: every number in %d figure texts and %d console lines agrees with the "
           "results" % (n, sum(len(v) for v in texts.values()), len(out.splitlines())))

    # Negative controls: the checkers must notice each of these.
    def corrupted(name, pick, file, change):
        """The checker's errors on a copy of `name`'s results in which `change` edited `file`
        (a DataFrame of strings) of the run `pick` chose from the sweep table; and that run."""
        res, texts, out = seen[name]
        bad = os.path.join(tempfile.mkdtemp(prefix=name + "-corrupt-", dir=tmp), "results")
        shutil.copytree(res, bad)
        row = pick(sweep(bad))
        p = os.path.join(bad, row["dir"], file)
        t = pd.read_csv(p, dtype=str, keep_default_na=False)
        change(t)
        t.to_csv(p, index=False)
        return check(name, bad, texts, out), row

    def case(name):
        return lambda df: df[df["case"] == name].iloc[0]

    def planted(name, old, new, word):
        """A copy of `name`'s plot.py with `old` replaced by `new` (a planted plotting bug), run
        on a copy of its results: whether the checker then reports an error containing
        `word`."""
        res = seen[name][0]
        bad = os.path.join(tempfile.mkdtemp(prefix=name + "-planted-", dir=tmp), "results")
        shutil.copytree(res, bad)
        src = os.path.join(exps, name, "plot.py")
        with open(src) as f:
            code = f.read()
        if old not in code:
            print("     planted bug: %r is not in %s" % (old, src))
            return False
        bad_py = os.path.join(exps, name, "plot_planted.py")
        with open(bad_py, "w") as f:
            f.write(code.replace(old, new))
        try:
            out = plot(bad_py, bad)
        except RuntimeError as e:
            print("     " + str(e))
            return False
        errors = check(name, bad, texts_of(bad), out)
        print("     planted bug in %s: %s" % (name, errors[:1]))
        return any(word in e for e in errors)

    if "bisect_cases" in seen:
        res, texts, out = seen["bisect_cases"]
        drawn = [c for c in ("mxfp4_operands", "fp16_layers", "bf16_update")
                 if os.path.exists(os.path.join(res, c, "manifest.json"))]
        ok(drawn, "bisect_cases: some case has a gap to bisect in the tiny version")
        if drawn:
            bad = os.path.join(tempfile.mkdtemp(prefix="bisect-corrupt-", dir=tmp), "results")
            shutil.copytree(res, bad)
            p = os.path.join(bad, drawn[0], "bisect.csv")
            t = pd.read_csv(p, dtype=str, keep_default_na=False)
            t.loc[1, "metric"] = repr(float(t.loc[1, "metric"]) * 1.01)  # the original's
            t.to_csv(p, index=False)
            errors = check("bisect_cases", bad, texts, out)
            ok(any(drawn[0] in e for e in errors), "negative control: the original run's metric "
               "1%% higher in %s's bisect.csv is caught (%s)" % (drawn[0], errors[:1]))

    if "demo" in seen:
        def more_flushed(s):
            s.loc[0, "grad_flushed"] = str(int(s.loc[0, "grad_flushed"]) + 7)
        errors, _ = corrupted("demo", case("fp16-noscale"), "steps.csv", more_flushed)
        ok(any("fp16-noscale" in e for e in errors),
           "negative control: 7 more flushed values in one step of fp16-noscale's steps.csv are "
           "caught (%s)" % (errors[:1],))

        def lower_window(s):
            i = next(j for j in range(len(s)) if s.loc[j, "k_low"] != "")
            s.loc[i, "k_low"] = str(int(float(s.loc[i, "k_low"])) - 1)
        errors, _ = corrupted("demo", case("fp16-dynamic"), "steps.csv", lower_window)
        ok(any("band" in e for e in errors),
           "negative control: one step's k_low lowered in fp16-dynamic's steps.csv is caught "
           "in the drawn band (%s)" % (errors[:1],))
        ok(planted("demo", 'run_of(df, SCALED, seed), "steps.csv")\n    w = ',
                   'run_of(df, REF, seed), "steps.csv")\n    w = ', "band"),
           "negative control: a demo plot.py that draws the unscaled run's window as the band "
           "is caught")
    def higher_val_loss(s):
        """The last validation loss of a steps.csv 0.01 higher."""
        s.loc[len(s) - 1, "val_loss"] = "%.9g" % (float(s.loc[len(s) - 1, "val_loss"]) + 0.01)

    if "text_lm" in seen:
        errors, row = corrupted("text_lm", lambda df: df.iloc[1], "steps.csv", higher_val_loss)
        ok(any(row["case"] in e for e in errors),
           "negative control: a final validation loss 0.01 higher in %s's steps.csv is caught (%s)"
           % (row["case"], errors[:1]))
        ok(planted("text_lm", 't = s[s["grad_values"] > 0]\n',
                   't = s[(s["grad_values"] > 0) & (s["grad_flushed"] > 0)]\n', "draws"),
           "negative control: a text_lm plot.py that leaves out the traced steps without "
           "flushed values (its line spans them on the log axis) is caught")
    if "fp8_accumulation" in seen:
        errors, row = corrupted("fp8_accumulation", case("h100"), "steps.csv", higher_val_loss)
        ok(any("h100" in e for e in errors),
           "negative control: a final validation loss 0.01 higher in h100's steps.csv is caught "
           "(%s)" % (errors[:1],))
        ok(planted("fp8_accumulation", "ratio = val[c, s] / val[REF, s]",
                   "ratio = val[c, s] / val[REF, seeds[0]]", "draws"),
           "negative control: an fp8_accumulation plot.py that divides every seed by the first "
           "seed's fp32 losses is caught")
    def more_flushed_elements(b):
        last = len(b) - 1
        b.loc[last, "flushed"] = str(int(b.loc[last, "flushed"]) +
                                     int(b.loc[last, "elements"]) // 2)

    if "emulate_recipes" in seen:
        errors, _ = corrupted("emulate_recipes", case("nvfp4"), "blocks.csv",
                              more_flushed_elements)
        ok(any("nvfp4" in e for e in errors) and any("flushed to zero" in e for e in errors),
           "negative control: half a copy's elements more flushed in one row of nvfp4's "
           "blocks.csv are caught in the table and the drawn cells (%s)" % (errors[:2],))
        ok(planted("emulate_recipes", 'flushed[(case, layer)] = 100.0 * r["flushed"]',
                   'flushed[(case, layer)] = 100.0 * r["saturated"]', "flushed to zero"),
           "negative control: an emulate_recipes plot.py that draws the saturated share as the "
           "flushed one is caught")
    if "block_formats" in seen:
        errors, _ = corrupted("block_formats", case("nvfp4"), "blocks.csv", more_flushed_elements)
        ok(any("nvfp4" in e for e in errors),
           "negative control: half a copy's elements more flushed in one row of nvfp4's "
           "blocks.csv are caught (%s)" % (errors[:1],))
    if "gradient_histogram" in seen:
        res, texts, out = seen["gradient_histogram"]
        t = run_csv(res, sweep(res).iloc[0], "trace.csv")
        t = t[t["kind"] == "activation_grad"]
        zeros = int(t["zeros"].sum())
        in_hist = sum(sum(parse_hist(h).values()) for h in t["hist"])
        old = 100.0 * zeros / (in_hist + zeros)   # zeros counted with the flushed values, twice
        rx = re.compile(r"(over \d+ steps: )(" + NUM + r")(% exact zeros)")
        doctored = {k: [rx.sub(lambda m: m.group(1) + "%.2f" % old + m.group(3), x) for x in v]
                    for k, v in texts.items()}
        changed = doctored != texts
        errors = check("gradient_histogram", res, doctored, out)
        ok(int(t["flushed"].sum()) > 0 and changed and
           any("exact zeros" in e for e in errors),
           "negative control: the old count of exact zeros (%.2f%%, zeros after rounding over "
           "hist + zeros) is caught" % old)
        extra = {k: v + ["a new number: 42"] for k, v in texts.items()}
        errors = check("gradient_histogram", res, extra, out)
        ok(any("nothing checks" in e and "42" in e for e in errors),
           "negative control: a number no checker knows fails the test")

    shutil.rmtree(tmp, ignore_errors=True)
    return status()


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--check":
        sys.exit(main_check(sys.argv[2:]))
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(os.path.abspath(sys.argv[1])))
