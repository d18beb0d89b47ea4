"""Experiment 8: training memory by dtype for each precision policy, stacked.

usage: plot.py RESULTS_DIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import style  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def main(results):
    df, _ = style.begin(results)
    rows = []
    for _, row in df.iterrows():
        m = style.read_run_csv(results, row, "memory.csv")
        m["policy"] = row["precision.policy"]
        rows.append(m)
    mem = pd.concat(rows)
    table = mem.pivot_table(index="policy", columns="dtype", values="bytes", aggfunc="sum",
                            fill_value=0).reindex(list(df["precision.policy"]))
    fig, ax = plt.subplots(figsize=(8, 3.8))
    bottom = None
    for i, dt in enumerate(table.columns):
        vals = table[dt] / 1024.0
        ax.bar(table.index, vals, bottom=bottom, color=style.color(i), label=dt)
        bottom = vals if bottom is None else bottom + vals
    style.axes(ax, "precision policy", "memory (KiB)",
               title="training memory by dtype (weights, copies, activations, gradients, "
                     "optimizer state)")
    style.legend_right(ax, title="dtype")
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    c = style.run_config(results, df.iloc[0])
    style.caption(fig, results, "%s %s, batch %d, %s; elements x bits / 8"
                  % ("-".join(str(n) for n in c["model"].get("layers", [])),
                     c["model"]["kind"].upper(), c["data"]["batch_size"],
                     {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}.get(
                         c["optimizer"]["kind"], c["optimizer"]["kind"])))
    style.save(fig, results, "memory")
    print((table / 1024.0).round(1).to_string())


if __name__ == "__main__":
    main(sys.argv[1])
