"""The main job's figure and summary: loss curves of every configuration and seed, gradient
underflow per step, and the dynamic loss scale against the safe window one unscaled fp16 run
predicts; on the console, a table per configuration and seed, and the effect in two ratios.

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
    ax[0].set_yscale("log")
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("training loss (mean squared error)")
    ax[0].set_title("loss, every seed")
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("gradient values flushed to zero (%)")
    ax[1].set_title("underflow in fp16/bf16 gradients (seed %d)" % seeds[0])

    if REF in cases:
        s = style.read_run_csv(results, run_of(df, REF, seeds[0]), "steps.csv")
        ax[2].fill_between(s["step"], s["k_low"], s["k_high"], color=style.color(2), alpha=0.25,
                           step="mid", label="safe window predicted\nfrom the unscaled run")
    if SCALED in cases:
        s = style.read_run_csv(results, run_of(df, SCALED, seeds[0]), "steps.csv")
        ax[2].step(s["step"], [math.log2(v) for v in s["loss_scale"]], where="mid",
                   color=colors[SCALED], label="dynamic scale (%s)" % SCALED)
        sk = s[s["skipped"] != 0]
        ax[2].plot(sk["step"], [math.log2(v) for v in sk["loss_scale"]], "x",
                   color=style.color(3), label="skipped step (overflow)")
    ax[2].axhline(0, color="#555555", lw=0.8, ls=":", label="no scaling (2^0)")
    ax[2].set_xlabel("step")
    ax[2].set_ylabel("loss scale (log2)")
    ax[2].set_title("fp16 loss scale and its safe window (seed %d)" % seeds[0])
    fig.tight_layout()
    style.legend_below(fig, ax, ncol=4)
    style.caption(fig, results, "fp16 underflow below 2^-25, subnormal below 2^-14; "
                                "bf16 normal down to 2^-126")
    return style.save(fig, results, "demo")


def table(results, df, cases, seeds):
    print()
    print("%-14s %4s %12s %14s %22s %9s %12s %18s" % (
        "configuration", "seed", "final loss", "grad values", "lost to underflow", "skipped",
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
              "(every step: underflow within the tolerance, no overflow)"
              % (REF, seeds[0], int(r["k_low"]), int(r["k_high"])))
    else:
        print("no loss scale keeps every step of %s (seed %d) free of underflow and overflow"
              % (REF, seeds[0]))


def main(results):
    style.setup()
    df, _ = style.load(results)
    cases = list(dict.fromkeys(df["case"]))
    seeds = seeds_of(df)
    paths = draw(results, df, cases, seeds)
    table(results, df, cases, seeds)
    print()
    ratios(df, cases, seeds)
    if REF in cases:
        window(df, seeds)
    print("figures: " + ", ".join(os.path.relpath(p) for p in paths))


if __name__ == "__main__":
    main(sys.argv[1])
