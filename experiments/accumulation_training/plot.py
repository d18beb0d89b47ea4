"""Does the tensor core's truncation matter for training? Loss curves of fp16 training with
sequential fp32 accumulation and with the A100 and H100 block-FMA models, every seed; the
relative difference of each block model's loss from fp32 accumulation's, step by step; and a
table of final losses, their ratio to fp32 accumulation's, and gradient values flushed to zero.

usage: plot.py RESULTS_DIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

REF = "fp32"


def run_of(df, case, seed):
    return df[(df["case"] == case) & (df["run.seed"] == seed)].iloc[0]


def main(results):
    df, _ = style.begin(results)
    cases = list(dict.fromkeys(df["case"]))
    seeds = sorted(int(s) for s in df["run.seed"].unique())
    steps = {(c, s): style.read_run_csv(results, run_of(df, c, s), "steps.csv")
             for c in cases for s in seeds}
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
    for i, c in enumerate(cases):
        for j, s in enumerate(seeds):
            st = steps[c, s]
            ax[0].plot(st["step"], st["loss"], color=style.color(i), lw=1.0, alpha=0.85,
                       label="%s accumulation (%d seeds)" % (c, len(seeds)) if j == 0 else None)
            if c != REF:
                rel = (st["loss"] - steps[REF, s]["loss"]).abs() / steps[REF, s]["loss"]
                ax[1].plot(st["step"], 100.0 * rel, color=style.color(i), lw=0.8, alpha=0.85)
    style.axes(ax[0], "step", "training loss (mean squared error)", title="fp16 training, loss",
               yscale="log")
    style.axes(ax[1], "step", "|loss - loss with fp32 accumulation| (% of it)",
               title="block FMA against sequential fp32, same seed", yscale="log")
    fig.tight_layout()
    style.legend_below(fig, ax, ncol=3)
    style.caption(fig, results, "torch-cuda-fp16, dynamic loss scaling; block-FMA parameters "
                                "are published hypotheses")
    paths = style.save(fig, results, "accumulation_training")

    print("%-6s %4s %12s %14s %14s %18s" % ("model", "seed", "final loss", "/ fp32's",
                                             "grad values", "flushed to zero"))
    for c in cases:
        for s in seeds:
            r = run_of(df, c, s)
            gv, gu = int(r["grad_values"]), int(r["grad_flushed"])
            print("%-6s %4d %12.6g %14.4g %14d %18d" % (
                c, s, r["final_loss"], r["final_loss"] / run_of(df, REF, s)["final_loss"], gv, gu))
    print("figures: " + ", ".join(os.path.relpath(p) for p in paths))


if __name__ == "__main__":
    main(sys.argv[1])
