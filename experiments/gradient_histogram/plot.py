"""Experiment 1: histogram of activation-gradient magnitudes over training, one bin per power
of two, with fp16's normal, subnormal and flush-to-zero ranges shaded, bf16's smallest normal
marked, exact zeros in a bar of their own, and the histogram shifted by loss scales (Micikevicius
et al. 2018, Fig. 3 style). Right: the same histogram per step.

Counting (trace.csv, docs/sim.md): `hist` holds the magnitudes before rounding of the finite
non-zero values, including those then flushed to zero; `zeros` counts the results that are
zero, which are the exact zeros and the values flushed to zero (`flushed`); `nonfinite_in` the inf/NaN
inputs. So the exact zeros are `zeros - flushed`, and every value is counted once:
`total = sum(hist) + (zeros - flushed) + nonfinite_in`. Percentages are of `total`.

usage: plot.py RESULTS_DIR [--shift K|safe ...]
  --shift K     draw the histogram shifted by the loss scale 2^K (repeatable); `safe` is the
                run's lowest safe scale. Default: `--shift safe --shift 3` (the lowest safe
                scale, when the run has one, and Micikevicius et al.'s 2^3).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
import numpy as np  # noqa: E402

DEFAULT_SHIFTS = ["safe", "3"]
PAPER_SHIFT = 3  # Micikevicius et al. 2018 scale their gradients by 8


def parse_hist(text):
    out = {}
    if isinstance(text, str):
        for item in text.split(";"):
            e, c = item.split(":")
            out[int(e)] = out.get(int(e), 0) + int(c)
    return out


def parse_args(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    results, shifts, i = argv[0], [], 1
    while i < len(argv):
        if argv[i] == "--shift" and i + 1 < len(argv):
            k = argv[i + 1]
            if k != "safe":
                try:
                    int(k)
                except ValueError:
                    sys.exit("plot.py: --shift takes an integer or 'safe', not %r" % k)
            shifts.append(k)
            i += 2
        else:
            sys.exit("plot.py: unknown argument %r\n%s" % (argv[i], __doc__))
    return results, shifts or DEFAULT_SHIFTS


def shift_curves(shifts, k_low):
    """[(k, label)] for the requested shifts; a note when `safe` was asked for but no scale is
    safe on every step."""
    curves, note = {}, None
    for s in shifts:
        if s == "safe":
            if k_low is None:
                note = "no loss scale is safe on every step of this run"
            else:
                curves.setdefault(k_low, []).append("lowest safe scale of this run")
        else:
            k = int(s)
            curves.setdefault(k, []).append("Micikevicius et al. 2018" if k == PAPER_SHIFT
                                            else "chosen with --shift")
    return [(k, "shifted by 2^%d: %s" % (k, ", ".join(why))) for k, why in curves.items()], note


def main(argv):
    results, shifts = parse_args(argv)
    df, _ = style.begin(results)
    row = df.iloc[0]
    t = style.read_run_csv(results, row, "trace.csv")
    t = t[t["kind"] == "activation_grad"]
    total, per_step, step_n = {}, {}, {}
    for step, h, n_step in zip(t["step"], t["hist"], t["total"]):
        step_n[step] = step_n.get(step, 0) + int(n_step)
        for e, c in parse_hist(h).items():
            total[e] = total.get(e, 0) + c
            per_step.setdefault(step, {})
            per_step[step][e] = per_step[step].get(e, 0) + c
    n = int(t["total"].sum())
    exact_zeros = int(t["zeros"].sum() - t["flushed"].sum())
    flushed = int(t["flushed"].sum())
    nonfinite = int(t["nonfinite_in"].sum())
    pct_zero = 100.0 * exact_zeros / n
    es = np.arange(min(total) - 2, max(total) + 3) if total else np.arange(-30, 0)
    pct = np.array([100.0 * total.get(e, 0) / n for e in es])
    k_low = int(row["k_low"]) if row["k_low"] == row["k_low"] else None
    curves, note = shift_curves(shifts, k_low)

    fig = plt.figure(figsize=(12, 4.2))
    outer = fig.add_gridspec(1, 2, width_ratios=[1.5, 1.0], wspace=0.18, left=0.06, right=0.97,
                             top=0.92, bottom=0.14)
    left = outer[0].subgridspec(1, 2, width_ratios=[0.07, 1.0], wspace=0.12)
    z = fig.add_subplot(left[0])
    a = fig.add_subplot(left[1], sharey=z)
    h = fig.add_subplot(outer[1])

    # Exact zeros: a bar of their own, apart from the magnitude axis.
    z.bar([0], [pct_zero], width=0.6, color="#555555", alpha=0.8, hatch="//", edgecolor="white")
    z.set_xlim(-0.6, 0.6)
    z.set_xticks([0])
    z.set_xticklabels(["exact 0"])
    z.grid(False, axis="x")
    z.set_ylabel("% of all activation-gradient values")

    lo = min([es[0], -40] + [es[0] + k for k, _ in curves])
    hi = max([es[-1], 17] + [es[-1] + k for k, _ in curves]) + 1
    a.set_xlim(lo, hi)
    a.bar(es + 0.5, pct, width=1.0, color="#555555", alpha=0.8,
          label="activation gradients, unscaled (magnitude before rounding)")
    for i, (k, label) in enumerate(curves):
        a.step(es + k + 1, pct, where="pre", lw=1.3, label=label,
               color=(style.color(4), "#000000", style.color(5))[i % 3],
               ls=("-", "--", "-.")[i % 3])
    style.shade_fp16(a, "x", log2=True)
    a.set_yscale("log")
    shown = [p for p in list(pct) + [pct_zero] if p > 0]
    bottom = min(shown) / 2 if shown else 1e-4
    a.set_ylim(bottom, 150)
    z.text(0, max(pct_zero, bottom) * 1.2, "%.2f%%" % pct_zero, ha="center", va="bottom",
           fontsize=7)
    a.tick_params(labelleft=False)
    a.set_xlabel("log2(|gradient|)  (bin e holds [2^e, 2^(e+1)))")
    title = "activation gradients over %d steps: %.2f%% exact zeros, %.2f%% flushed to 0 by fp16" \
        % (int(row["steps"]), pct_zero, 100.0 * flushed / n)
    if nonfinite:
        title += ", %.2f%% inf/NaN" % (100.0 * nonfinite / n)
    a.set_title(title)

    steps = sorted(per_step)
    grid = np.zeros((len(es), len(steps)))
    for j, s in enumerate(steps):
        tot = step_n[s]
        for i, e in enumerate(es):
            grid[i, j] = 100.0 * per_step[s].get(e, 0) / tot if tot else 0
    if steps:
        im = h.imshow(np.where(grid > 0, grid, np.nan), aspect="auto", origin="lower",
                      cmap="viridis", extent=(steps[0] - 0.5, steps[-1] + 0.5, es[0], es[-1] + 1))
        fig.colorbar(im, ax=h, label="% of the step's values (exact zeros not drawn)")
    h.axhline(-24, color=style.color(3), ls="--", lw=1,
              label="right: fp16 smallest subnormal 2^-24")
    h.axhline(-14, color=style.color(1), ls="--", lw=1,
              label="right: fp16 smallest normal 2^-14")
    style.axes(h, "step", "log2(|gradient|)", title="per step")
    h.grid(False)
    extra = [(Line2D([], [], ls="none"), note)] if note else []
    style.legend_below(fig, [a, h], ncol=3, extra=extra)
    style.caption(fig, results, "torch-cuda-fp16 without scaling; magnitudes before rounding")
    style.save(fig, results, "gradient_histogram")
    below = sum(c for e, c in total.items() if e < -25)
    print("gradient_histogram: %d activation-gradient values: %.3f%% exact zeros, %.3f%% flushed "
          "to zero by fp16 (%.3f%% below 2^-25 before rounding); %s"
          % (n, pct_zero, 100.0 * flushed / n, 100.0 * below / n,
             "lowest safe scale 2^%d" % k_low if k_low is not None else "no safe loss scale"))


if __name__ == "__main__":
    main(sys.argv[1:])
