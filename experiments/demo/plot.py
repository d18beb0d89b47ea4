"""The main job's figure and summary: loss curves of every configuration and seed, the share
of gradient values flushed to zero per step, and the dynamic loss scale against the safe window
of its own steps (with, dashed, the window the unscaled fp16 run's steps predict, a different
trajectory); on the console, a table per configuration and seed, the effect in two ratios, and
how often each seed's scale left its own safe window.

usage: plot.py RESULTS_DIR   (reads only the results of `halfway sweep experiments/demo/sweep.toml`)
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

REF = "fp16-noscale"       # the unscaled run whose trace predicts the window
SCALED = "fp16-dynamic"
FIRST_LAYER = "0.weight.grad"  # the first layer's weight gradient, rounded into fp16


def seeds_of(df):
    return sorted(int(s) for s in df["run.seed"].unique()) if "run.seed" in df else [0]


def run_of(df, case, seed):
    sel = df[df["case"] == case]
    if "run.seed" in df:
        sel = sel[sel["run.seed"] == seed]
    return sel.iloc[0]


def first_layer_zeros(results, row):
    """% of the first layer's low-precision weight-gradient values that are zero after rounding
    (exact zeros and flushed ones), over the run; None without such a rounding."""
    t = style.read_run_csv(results, row, "trace.csv")
    t = t[t["name"] == FIRST_LAYER]
    return 100.0 * t["zeros"].sum() / t["total"].sum() if t["total"].sum() else None


def draw(results, df, cases, seeds):
    colors = {c: style.color(i) for i, c in enumerate(cases)}
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.6))
    for c in cases:
        for j, seed in enumerate(seeds):
            s = style.read_run_csv(results, run_of(df, c, seed), "steps.csv")
            ax[0].plot(s["step"], s["loss"], color=colors[c], lw=1.0, alpha=0.85,
                       label="%s (%d seeds)" % (c, len(seeds)) if j == 0 else None)
            if s["grad_values"].sum() and seed == seeds[0]:
                frac = 100.0 * s["grad_flushed"] / s["grad_values"].where(s["grad_values"] > 0)
                ax[1].plot(s["step"], frac, color=colors[c], lw=1.0)
    style.axes(ax[0], "step", "training loss (mean squared error)", title="loss, every seed",
               yscale="log")
    style.axes(ax[1], "step", "gradient values flushed to zero (%)",
               title="fp16/bf16 gradients flushed to zero (seed %d)" % seeds[0])

    if SCALED in cases:
        scale_panel(ax[2], results, df, cases, seeds[0], colors[SCALED])
    fig.tight_layout()
    style.legend_below(fig, ax, ncol=4)
    style.caption(fig, results, "right: band: the safe window of %s's own steps; dashed: the "
                                "window predicted from %s's steps, another trajectory (seed %d "
                                "each) | fp16 flushed to zero below 2^-25, subnormal below "
                                "2^-14; bf16 normal down to 2^-126" % (SCALED, REF, seeds[0]))
    return style.save(fig, results, "demo")


def log2s(values):
    return [math.log2(v) for v in values]


def scale_steps(s):
    """Per step of a scaled run's steps.csv: log2 of its loss scale, and masks of the steps
    whose scale lies below / above that step's own safe window k_low..k_high, and of those on
    which no scale is safe."""
    k = s["loss_scale"].map(math.log2)
    none = s["k_low"].isna()
    return k, (~none) & (k < s["k_low"]), (~none) & (k > s["k_high"]), none


def scale_panel(ax, results, df, cases, seed, color):
    """The scaled run's loss scale against the safe window of its own steps (a band, one
    vertical line per step from k_low to k_high), and, dashed, the window the unscaled run's
    steps predict (another trajectory: it stalls on the plateau)."""
    s = style.read_run_csv(results, run_of(df, SCALED, seed), "steps.csv")
    w = s[s["k_low"].notna()]
    style.mark(ax.vlines(w["step"], w["k_low"], w["k_high"], color="#bcd6ee", lw=1.2, zorder=1,
                         label="safe window of %s's own steps" % SCALED), "band")
    if REF in cases:
        r = style.read_run_csv(results, run_of(df, REF, seed), "steps.csv")
        for edge in ("k_low", "k_high"):
            style.mark(ax.step(r["step"], r[edge], where="mid", color="#555555", lw=0.6, ls="--",
                               alpha=0.8, zorder=2, label="window predicted from %s's steps" % REF)[0],
                       "predicted " + edge)
    k, below, above, none = scale_steps(s)
    style.mark(ax.step(s["step"], k, where="mid", color=color, zorder=3,
                       label="dynamic scale (%s)" % SCALED)[0], "scale")
    for mask, marker, c, what, key in (
            (below, ".", style.color(1), "scale below the step's safe window", "below"),
            (above, "^", style.color(4), "scale above the step's safe window", "above"),
            (none, "o", style.color(3), "no scale safe on the step", "none")):
        style.mark(ax.plot(s["step"][mask], k[mask], marker, ls="none", ms=3, mfc="none",
                           color=c, zorder=4,
                           label="%s (%d of %d steps)" % (what, mask.sum(), len(s)))[0], key)
    sk = s[s["skipped"] != 0]
    style.mark(ax.plot(sk["step"], log2s(sk["loss_scale"]), "x", color=style.color(7), zorder=5,
                       label="skipped step (overflow)")[0], "skipped")
    ax.axhline(0, color="#555555", lw=0.8, ls=":", label="no scaling (2^0)")
    style.axes(ax, "step", "loss scale (log2)",
               title="%s's loss scale and its own safe window (seed %d)" % (SCALED, seed))


def scaled_window(results, df, seeds):
    """Per seed of the scaled run: how often its scale left its own steps' safe window, and the
    steps that lost more gradient values than the tolerance."""
    for seed in seeds:
        row = run_of(df, SCALED, seed)
        s = style.read_run_csv(results, row, "steps.csv")
        tol = style.run_config(results, row).get("trace", {}).get("flush_tolerance", 0.0)
        _, below, above, none = scale_steps(s)
        lost = s["grad_flushed"] / s["grad_values"].where(s["grad_values"] > 0)
        over = lost > tol
        worst = lost.idxmax() if lost.notna().any() else None
        print("%s, seed %d: the scale was below its own step's safe window on %d of %d steps, "
              "above it on %d, no scale was safe on %d; %d steps lost more than the %.3g%% "
              "tolerance%s" % (SCALED, seed, below.sum(), len(s), above.sum(), none.sum(),
                               over.sum(), 100.0 * tol,
                               "" if worst is None or not over.any() else
                               " (at most %.3g%%, step %d)" % (100.0 * lost[worst],
                                                                s["step"][worst])))


def table(results, df, cases, seeds):
    print()
    print("%-14s %4s %12s %14s %22s %9s %12s %18s" % (
        "configuration", "seed", "final loss", "grad values", "flushed to zero", "skipped",
        "final scale", "first-layer zeros"))
    for c in cases:
        for seed in seeds:
            r = run_of(df, c, seed)
            gv, gu = int(r["grad_values"]), int(r["grad_flushed"])
            lost = "%d (%.3g%%)" % (gu, 100.0 * gu / gv) if gv else "- (fp32)"
            z = first_layer_zeros(results, r)
            print("%-14s %4d %12.6g %14d %22s %9d %12.6g %18s" % (
                c, seed, r["final_loss"], gv, lost, int(r["skipped_steps"]), r["final_scale"],
                "-" if z is None else "%.4g%%" % z))


def ratios(df, cases, seeds):
    """The effect, seed by seed: unscaled fp16 against the scaler, the scaler against fp32."""
    def final(c, seed):
        return float(run_of(df, c, seed)["final_loss"])

    for num, den, what in ((REF, SCALED, "final loss of %s / %s" % (REF, SCALED)),
                           (SCALED, "fp32", "final loss of %s / fp32" % SCALED)):
        if num in cases and den in cases:
            rs = [final(num, s) / final(den, s) for s in seeds]
            print("%s: %s (seeds %s)" % (what, ", ".join("%.3g" % x for x in rs),
                                         ", ".join(str(s) for s in seeds)))


def window(df, seeds):
    r = run_of(df, REF, seeds[0])
    if r["k_low"] == r["k_low"]:
        print("safe loss-scale window predicted from the single %s run (seed %d): 2^%d .. 2^%d "
              "(every step: flushed values within the tolerance, no overflow)"
              % (REF, seeds[0], int(r["k_low"]), int(r["k_high"])))
    else:
        print("no loss scale keeps every step of %s (seed %d) within the flush tolerance and "
              "free of overflow" % (REF, seeds[0]))


def main(results):
    df, _ = style.begin(results)
    cases = list(dict.fromkeys(df["case"]))
    seeds = seeds_of(df)
    paths = draw(results, df, cases, seeds)
    table(results, df, cases, seeds)
    print()
    ratios(df, cases, seeds)
    if REF in cases:
        window(df, seeds)
    if SCALED in cases:
        scaled_window(results, df, seeds)
    print("figures: " + ", ".join(os.path.relpath(p) for p in paths))


if __name__ == "__main__":
    main(sys.argv[1])
