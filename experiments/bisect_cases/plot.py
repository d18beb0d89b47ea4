"""Experiment: which rounding costs the loss, named by `halfway bisect` in three real cases (see
bisect.toml). One row per case: the share of the gap each candidate set closed (mean over the
seeds, in the order the search tried them; dashed: the 90% the answer must close; orange: the
answer), and the loss curves of the fp32 reference, the original and the fixed run (the answer
promoted) of the first seed. A case whose config showed no gap is one line of text.

usage: plot.py RESULTS_DIR
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

CASES = ["mxfp4_operands", "fp16_layers", "bf16_update"]


def read_case(results, name):
    """(bisect.json, [(promoted, mean closed)] per candidate set in order), or the no-gap line."""
    folder = os.path.join(results, name)
    if os.path.exists(os.path.join(folder, "manifest.json")):
        with open(os.path.join(folder, "bisect.json")) as f:
            answer = json.load(f)
        rows = style.read_csv(os.path.join(folder, "bisect.csv"))
        sets = []
        for _, r in rows[rows["role"] == "candidate"].iterrows():
            p = "" if isinstance(r["promoted"], float) else r["promoted"]
            if not sets or sets[-1][0] != p:
                sets.append((p, float(r["closed"])))
        return answer, sets
    gap = os.path.join(results, name + ".no_gap.txt")
    if os.path.exists(gap):
        with open(gap) as f:
            return f.read().strip(), None
    return None, None


def pct(f):
    return "n/a" if not math.isfinite(f) else "%.0f%%" % (100 * f)


def short(names):
    """A candidate set on one tick label: at most three names, then the count."""
    parts = names.split(" + ")
    return " + ".join(parts[:3]) + (" + %d more" % (len(parts) - 3) if len(parts) > 3 else "")


def draw_case(ax, bx, name, answer, sets):
    culprit = " + ".join(m["name"] for m in answer["culprit"])
    ys = list(range(len(sets)))
    vals = [100 * c if math.isfinite(c) else 0.0 for _, c in sets]
    ax.barh(ys, vals, color=[style.PALETTE[3] if p == culprit else style.PALETTE[0]
                             for p, _ in sets])
    for y, (_, c) in zip(ys, sets):
        ax.text(max(0.0, vals[y]), y, " " + pct(c), va="center", fontsize=6)
    ax.axvline(100 * answer["threshold"], color="#555555", ls="--", lw=1)
    ax.set_yticks(ys)
    ax.set_yticklabels([short(p) for p, _ in sets], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("gap closed (%), mean over the seeds")
    ax.set_title("%s (%s):\n%s %.4g against fp32's %.4g, %d runs" % (
        name, answer["granularity"], answer["metric"], answer["original_metric"],
        answer["reference_metric"], answer["runs_used"]), fontsize=8)
    key = next(k for k in answer if k.startswith("losses_seed_"))
    labels = {"reference": "fp32 reference", "original": "original",
              "fixed": "fixed: %s" % short(culprit)}
    for j, (k, label) in enumerate(labels.items()):
        if k in answer[key]:
            v = [math.nan if x is None else x for x in answer[key][k]]
            bx.plot(range(len(v)), v, color=style.color(j), lw=1.0,
                    label="%s, last %.4g" % (label, v[-1]))
    style.axes(bx, "step", "training loss", yscale="log")
    bx.set_title("%s: loss curves, seed %s" % (name, key[len("losses_seed_"):]), fontsize=8)
    bx.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), fontsize=6, ncol=1)


def main(results):
    style.setup()
    found = [(n,) + read_case(results, n) for n in CASES]
    drawn = [(n, a, s) for n, a, s in found if s is not None]
    fig, axes = plt.subplots(max(1, len(drawn)), 2, figsize=(12, 0.8 + 3.4 * max(1, len(drawn))),
                             squeeze=False, gridspec_kw={"width_ratios": [1.4, 1]})
    for (name, answer, sets), (ax, bx) in zip(drawn, axes):
        draw_case(ax, bx, name, answer, sets)
    for name, answer, sets in found:
        if answer is None:
            print("%s: not run" % name)
        elif sets is None:
            print("%s: %s" % (name, answer))
        else:
            print("%s: promoting %s closes %s of the gap in %s (%.4g against fp32's %.4g, gap "
                  "%.4g); %d runs, finished %s" % (
                      name, " + ".join("`%s`" % m["name"] for m in answer["culprit"]),
                      pct(answer["closed"]), answer["metric"], answer["original_metric"],
                      answer["reference_metric"], answer["gap"], answer["runs_used"],
                      "yes" if answer["finished"] else "no"))
    if not drawn:
        axes[0][0].set_axis_off()
        axes[0][1].set_axis_off()
    fig.tight_layout()
    versions = sorted({a["version"] for _, a, _ in drawn})
    style.caption(fig, results, text="halfway bisect, %d of %d cases drawn, halfway %s" % (
        len(drawn), len(CASES), ", ".join(versions) or "?"))
    style.save(fig, results, "bisect_cases")


if __name__ == "__main__":
    main(sys.argv[1])
