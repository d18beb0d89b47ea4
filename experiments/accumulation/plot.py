"""Experiment 6: relative error of a dot product against its length for fp16 accumulation
(round to nearest even and stochastic rounding), fp32 accumulation and the tensor-core block
model, against the exact sum; median over trials with the min-max band, and the worst-case
bound n*u for each accumulator.

usage: plot.py RESULTS_DIR   (reads accumulation.csv and manifest.json)
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def main(results):
    style.setup()
    df = pd.read_csv(os.path.join(results, "accumulation.csv"))
    with open(os.path.join(results, "manifest.json")) as f:
        man = json.load(f)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    floor = 1e-12
    for i, (m, g) in enumerate(df.groupby("model", sort=False)):
        s = g.groupby("n")["rel_error"]
        n = np.array(s.median().index)
        ax.plot(n, np.maximum(s.median().values, floor), "o-", color=style.color(i), ms=3,
                label=m)
        ax.fill_between(n, np.maximum(s.min().values, floor), np.maximum(s.max().values, floor),
                        color=style.color(i), alpha=0.2, lw=0)
    n = np.array(sorted(df["n"].unique()), dtype=float)
    ax.plot(n, np.minimum(n * 2.0 ** -11, 1), ":", color="#555555", lw=1,
            label="n·u, fp16 (u = 2^-11)")
    ax.plot(n, n * 2.0 ** -24, "--", color="#555555", lw=1, label="n·u, fp32 (u = 2^-24)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(floor / 2, 2)
    style.axes(ax, "dot-product length n", "relative error |computed − exact| / exact",
               title="accumulation error against length (fp16 inputs uniform in [0, 1))")
    style.legend_right(ax)
    fig.tight_layout()
    style.caption(fig, results, text="median over %d trials, band: min-max; 0 drawn at 1e-12 | "
                  "%s, seed %d, halfway %s, git %s"
                  % (man["trials"], man["config_file"], man["seed"], man["halfway_version"],
                     style.short_rev(man["git_revision"])))
    style.save(fig, results, "accumulation")
    print(df.groupby(["model", "n"], sort=False)["rel_error"].median().unstack().to_string())


if __name__ == "__main__":
    main(sys.argv[1])
