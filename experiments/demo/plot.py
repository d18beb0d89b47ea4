"""The main job's figure and summary: loss curves, gradient underflow per step, and the dynamic
loss scale against the safe window one unscaled fp16 run predicts.

usage: plot.py RESULTS_DIR   (reads only the results of `halfway sweep experiments/demo/sweep.toml`)
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402


def fmt_pow2(k):
    return "2^%d" % k if k == k else "none"


def main(results):
    style.setup()
    df, _ = style.load(results)
    steps = {row["case"]: style.read_run_csv(results, row, "steps.csv") for _, row in df.iterrows()}
    cases = list(df["case"])
    colors = {c: style.color(i) for i, c in enumerate(cases)}

    fig, ax = plt.subplots(1, 3, figsize=(12, 3.6))
    for c in cases:
        s = steps[c]
        ax[0].plot(s["step"], s["loss"], label=c, color=colors[c], lw=1.2)
    ax[0].set_yscale("log")
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("training loss (mean squared error)")
    ax[0].set_title("loss")

    for c in cases:
        s = steps[c]
        if s["grad_values"].sum() == 0:
            continue  # fp32 rounds no gradient into a low-precision format
        frac = 100.0 * s["grad_underflow"] / s["grad_values"].where(s["grad_values"] > 0)
        ax[1].plot(s["step"], frac, label=c, color=colors[c], lw=1.2)
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("gradient values flushed to zero (%)")
    ax[1].set_title("underflow in low-precision gradients")

    ref = "fp16-noscale"
    if ref in steps:
        s = steps[ref]
        ax[2].fill_between(s["step"], s["k_low"], s["k_high"], color=style.color(2), alpha=0.25,
                           step="mid", label="safe window predicted\nfrom the unscaled run")
    if "fp16-dynamic" in steps:
        s = steps["fp16-dynamic"]
        k = [math.log2(v) for v in s["loss_scale"]]
        ax[2].step(s["step"], k, where="mid", color=colors["fp16-dynamic"],
                   label="dynamic scale (fp16-dynamic)")
        sk = s[s["skipped"] != 0]
        ax[2].plot(sk["step"], [math.log2(v) for v in sk["loss_scale"]], "x",
                   color=style.color(3), label="skipped step (overflow)")
    ax[2].axhline(0, color="#555555", lw=0.8, ls=":", label="no scaling (2^0)")
    ax[2].set_xlabel("step")
    ax[2].set_ylabel("loss scale (log2)")
    ax[2].set_title("fp16 loss scale and its safe window")
    fig.tight_layout()
    style.legend_below(fig, ax, ncol=4)
    style.caption(fig, results, "fp16 underflow below 2^-25, subnormal below 2^-14; "
                                "bf16 normal down to 2^-126")
    paths = style.save(fig, results, "demo")

    # The text summary.
    print()
    print("%-14s %12s %14s %22s %9s %12s" % ("configuration", "final loss", "grad values",
                                           "lost to underflow", "skipped", "final scale"))
    for _, r in df.iterrows():
        gv, gu = int(r["grad_values"]), int(r["grad_underflow"])
        lost = "%d (%.3g%%)" % (gu, 100.0 * gu / gv) if gv else "- (fp32)"
        print("%-14s %12.6g %14d %22s %9d %12.6g" % (r["case"], r["final_loss"], gv, lost,
                                                  int(r["skipped_steps"]), r["final_scale"]))
    for _, r in df.iterrows():
        if r["case"] == ref:
            if r["k_low"] == r["k_low"]:
                print("\nsafe loss-scale window predicted from the single %s run: 2^%d .. 2^%d "
                      "(every step: no underflow, no overflow)" % (ref, int(r["k_low"]),
                                                                    int(r["k_high"])))
            else:
                print("\nno loss scale keeps every step of %s free of underflow and overflow"
                      % ref)
    print("figures: " + ", ".join(os.path.relpath(p) for p in paths))


if __name__ == "__main__":
    main(sys.argv[1])
