"""Plots `halfway train --bench --bench-scaling --json` records: seconds per GPT training step
against d_model (4 blocks) and against the number of blocks (d_model 256), for halfway fp32,
halfway's traced torch-cuda-fp16 and PyTorch's fp32 step, one panel per thread count.

usage: plot_engine_scaling.py RECORDS.jsonl DOCS_DIR  (writes DOCS_DIR/figures/engine_scaling.*)
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments"))
import style  # noqa: E402


def sizes(model):
    m = re.search(r"blocks (\d+) d_model (\d+)", model)
    return int(m.group(1)), int(m.group(2))


def main():
    records, docs = sys.argv[1], sys.argv[2]
    with open(records) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    style.setup()
    threads = sorted({r["threads"] for r in recs})
    fig, axes = style.plt.subplots(len(threads), 2, figsize=(8, 3.2 * len(threads)),
                                   squeeze=False)
    series = [("gpt fp32", "halfway_us", "halfway fp32"),
              ("gpt torch-cuda-fp16 traced", "halfway_us", "halfway torch-cuda-fp16, traced"),
              ("gpt fp32", "reference_us", "PyTorch fp32")]
    for row, t in enumerate(threads):
        for col, (fixed, axis, label) in enumerate(((0, 1, "d_model (4 blocks)"),
                                                    (1, 0, "blocks (d_model 256)"))):
            ax = axes[row][col]
            for i, (name, field, legend) in enumerate(series):
                pts = []
                for r in recs:
                    b, d = sizes(r["model"])
                    keep = (b == 4) if col == 0 else (d == 256)
                    if r["name"] == name and r["threads"] == t and keep and r[field]:
                        pts.append(((b, d)[col == 0], r[field] / 1e6))
                pts.sort()
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=style.color(i),
                            label=legend)
            ax.set_xlabel(label)
            ax.set_ylabel("seconds per training step")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title("%d thread%s" % (t, "" if t == 1 else "s"))
    fig.subplots_adjust(hspace=0.45, wspace=0.3)
    style.legend_below(fig, [a for r in axes for a in r], ncol=3)
    # One line per reference, without the thread count (the panels say it).
    refs = sorted({re.sub(r", \d+ thread\(s\)", "", r["reference"]) for r in recs
                   if r["reference_us"]})
    style.caption(fig, docs, text="halfway train --bench --bench-scaling; reference: " +
                  ("\n".join(refs) if refs else "unavailable"))
    style.save(fig, docs, "engine_scaling")


if __name__ == "__main__":
    main()
