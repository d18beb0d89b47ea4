"""Transformers on real text: validation loss curves of a byte-level GPT-style model trained on
the English fortune-cookie database under five precision recipes, and the share of gradient
values lost to underflow over training; a table of each recipe's validation losses, gradient
values and underflows.

usage: plot.py RESULTS_DIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402


def main(results):
    style.setup()
    df, _ = style.load(results)
    steps = {r["case"]: style.read_run_csv(results, r, "steps.csv") for _, r in df.iterrows()}
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.9))
    for i, (case, s) in enumerate(steps.items()):
        v = s.dropna(subset=["val_loss"])
        ax[0].plot(v["step"], v["val_loss"], "o-", color=style.color(i), lw=1.2, ms=2.5,
                   label=case)
        t = s[s["grad_values"] > 0]
        t = t[t["grad_flushed"] > 0]
        if len(t):
            ax[1].plot(t["step"], 100.0 * t["grad_flushed"] / t["grad_values"], ".-", lw=0.7,
                       color=style.color(i), ms=3)
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("validation loss (nats per byte)")
    ax[0].set_title(style.transformer_title(style.run_config(results, df.iloc[0])))
    ax[1].set_yscale("log")
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("gradient values flushed to zero (%)")
    ax[1].set_title("gradient underflow of the traced steps")
    fig.tight_layout()
    style.legend_below(fig, ax, ncol=5)
    style.caption(fig, results, "English fortune-cookie database, byte-level; underflow panel: "
                                "steps without underflow and fp32 are not drawn")
    paths = style.save(fig, results, "text_lm")

    print("%-22s %14s %8s %14s %14s %12s %8s" % ("recipe", "final_val_loss", "at_step",
                                                 "best_val_loss", "grad_values", "flushed",
                                                 "skipped"))
    for case, s in steps.items():
        v = s.dropna(subset=["val_loss"])
        print("%-22s %14.5g %8d %14.5g %14d %12d %8d" % (
            case, v["val_loss"].iloc[-1], v["step"].iloc[-1], v["val_loss"].min(),
            s["grad_values"].sum(), s["grad_flushed"].sum(), (s["skipped"] != 0).sum()))
    print("figures: " + ", ".join(os.path.relpath(p) for p in paths))


if __name__ == "__main__":
    main(sys.argv[1])
