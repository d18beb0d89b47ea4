"""Does the fp8 accumulator cost loss? Validation loss curves of the byte-level GPT under
Transformer Engine's fp8 hybrid recipe with exact fp32 accumulation and with the Hopper fp8
accumulators (mean of the seeds, band: min-max), and each seed's validation loss against exact
fp32's on the same seed, beside fp32's own seed-to-seed spread; a table of final validation
losses and their ratio to exact fp32's per seed, and whether each accumulator's difference is
beyond the seed-to-seed spread.

usage: plot.py RESULTS_DIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

REF = "fp32"


def validations(results, row):
    """One run's validation losses, indexed by step."""
    s = style.read_run_csv(results, row, "steps.csv").dropna(subset=["val_loss"])
    return s.set_index("step")["val_loss"]


def main(results):
    df, _ = style.begin(results)
    cases = list(dict.fromkeys(df["case"]))
    seeds = sorted(int(s) for s in df["run.seed"].unique())
    val = {(r["case"], int(r["run.seed"])): validations(results, r) for _, r in df.iterrows()}
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.0))
    for i, c in enumerate(cases):
        v = pd.concat([val[c, s] for s in seeds], axis=1)
        ax[0].plot(v.index, v.mean(axis=1), "o-", color=style.color(i), lw=1.2, ms=2.5,
                   label="%s accumulation" % c)
        ax[0].fill_between(v.index, v.min(axis=1), v.max(axis=1), color=style.color(i),
                           alpha=0.12, lw=0)
        for s in seeds:
            if c != REF:
                ratio = val[c, s] / val[REF, s]
                style.mark(ax[1].plot(ratio.index, ratio.values, lw=0.9, color=style.color(i),
                                      label="%s accumulation" % c)[0],
                           "ratio %s seed %d" % (c, s))
    ref = pd.concat([val[REF, s] for s in seeds], axis=1)
    mean = ref.mean(axis=1)
    ax[1].fill_between(ref.index, ref.min(axis=1) / mean, ref.max(axis=1) / mean,
                       color="#999999", alpha=0.25, lw=0,
                       label="fp32 accumulation's seed-to-seed spread (min, max / mean)")
    ax[1].axhline(1.0, color="#555555", lw=0.6, ls=":")
    style.validation_loss_axes(ax[0], results, df.iloc[0],
                               pd.concat([v[v.index > 0] for v in val.values()]))
    style.axes(ax[1], "step", "validation loss / fp32 accumulation's (same seed)",
               title="fp8 accumulators against exact fp32, every seed")
    fig.tight_layout()
    style.legend_below(fig, ax, ncol=4)
    style.caption(fig, results, "fp8-hybrid (delayed scaling), English fortune-cookie database, "
                                "byte-level; left: mean of the %d seeds, band: min-max; "
                                "accumulator models are published hypotheses" % len(seeds))
    paths = style.save(fig, results, "fp8_accumulation")

    finals = {c: [float(val[c, s].iloc[-1]) for s in seeds] for c in cases}
    print("%-14s %4s %15s %8s  %s" % ("accumulation", "seed", "final_val_loss", "at_step",
                                      "/ fp32's (same seed)"))
    for c in cases:
        for j, s in enumerate(seeds):
            a, b = finals[c][j], finals[REF][j]
            ratio = "-" if c == REF else style.ratio_text(a, [a], b, [b], REF, digits=5)
            print("%-14s %4d %15.5f %8d  %s" % (c, s, a, val[c, s].index[-1], ratio))
    style.seed_spread(cases, finals, REF)
    for c in cases:
        if c == REF:
            continue
        d = [a - b for a, b in zip(finals[c], finals[REF])]
        print("%s - %s, same seed: final validation loss %+.5f to %+.5f, above %s's on %d of %d "
              "seeds" % (c, REF, min(d), max(d), REF, sum(x > 0 for x in d), len(d)))
    print("figures: " + ", ".join(os.path.relpath(p) for p in paths))


if __name__ == "__main__":
    main(sys.argv[1])
