#!/usr/bin/env python3
"""halfway.figures' bisect.png: every number it shows (bar labels, titles, legend) recomputed here
from a bisection folder's bisect.csv and bisect.json, by code that shares nothing with the
plotting; and a planted fault (a wrong closed share in the CSV) must make the check fail."""
import csv
import json
import os
import sys
import tempfile

try:
    import matplotlib  # noqa: F401
except ImportError:
    sys.exit(77)
from halfway import figures

CSV = """run,role,promoted,parts,seed,metric,mean_metric,closed
0,reference,,0,0,0.03843,0.03843,1
1,original,,0,0,0.1036,0.1036,0
2,candidate,matmul/linear + optimizer state exp_avg_sq,2,0,0.04,0.04,0.9767
3,candidate,matmul/linear,1,0,0.1,0.1,0.05493
4,candidate,optimizer state exp_avg_sq,1,0,0.03843,0.03843,1
"""
ANSWER = {"metric": "final_loss", "against": "fp32", "threshold": 0.9,
          "reference_metric": 0.03843,
          "original_metric": 0.1036, "gap": 0.06517,
          "culprit": [{"name": "optimizer state exp_avg_sq"}],
          "losses_seed_0": {"reference": [1.0, 0.5, 0.03843], "original": [1.0, 0.6, 0.1036],
                            "fixed": [1.0, 0.5, 0.03843]}}


def expected(directory):
    rows = list(csv.DictReader(open(os.path.join(directory, "bisect.csv"))))
    a = json.load(open(os.path.join(directory, "bisect.json")))
    bars, seen = [], set()
    for r in rows:
        if r["role"] == "candidate" and r["promoted"] not in seen:
            seen.add(r["promoted"])
            bars.append((r["promoted"], float(r["closed"])))
    if a.get("direction") == "demote":  # bars: the parts left in low precision, share opened
        names = [p["name"] for p in a["parts"]]
        bars = [(" + ".join(n for n in names if n not in p.split(" + ")), 1 - v) for p, v in bars]
    bars = [(p, "%.1f%%" % (100 * v)) for p, v in bars]
    c = a["losses_seed_0"]
    culprit = a["culprit"][0]["name"]
    titles = ["final_loss: %.4g against the reference's %.4g (gap %.4g)" %
              (a["original_metric"], a["reference_metric"], a["gap"]), "loss curves, seed 0"]
    legend = ["reference (%s), last %.4g" % (a["against"], c["reference"][-1]),
              "original, last %.4g" % c["original"][-1]]
    if "fixed" in c:
        legend.append("fixed (promoting %s), last %.4g" % (culprit, c["fixed"][-1]))
    if "culprit_only" in c:
        legend.append("only %s in low precision, last %.4g" % (culprit, c["culprit_only"][-1]))
    return {"bars": bars, "titles": titles, "legend": legend}


# The same runs read as a demoting bisection: the candidate that promoted matmul/linear alone
# is the one that left optimizer state exp_avg_sq alone in low precision.
DEMOTE_CSV = CSV.replace("2,candidate,matmul/linear + optimizer state exp_avg_sq,2,0,0.04,0.04,"
                         "0.9767\n", "")
DEMOTE = dict(ANSWER, direction="demote",
              parts=[{"name": "matmul/linear"}, {"name": "optimizer state exp_avg_sq"}],
              losses_seed_0={"reference": [1.0, 0.5, 0.03843], "original": [1.0, 0.6, 0.1036],
                             "culprit_only": [1.0, 0.6, 0.1]})


def fails(directory, csv_text, answer=ANSWER):
    with open(os.path.join(directory, "bisect.csv"), "w") as f:
        f.write(csv_text)
    json.dump(answer, open(os.path.join(directory, "bisect.json"), "w"))
    want = expected(directory)
    out, drawn = figures.draw_bisect(directory)
    drawn["bars"] = [tuple(b) for b in drawn["bars"]]
    bad = [k for k in want if want[k] != drawn[k]]
    if not os.path.getsize(out):
        bad.append("empty png")
    return bad, want, drawn


with tempfile.TemporaryDirectory() as d:
    bad, want, drawn = fails(d, CSV)
    if bad:
        print("FAIL: the figure differs from the CSV/JSON in", bad, want, drawn)
        sys.exit(1)
    # Negative control: the figure drawn from one CSV, the check recomputed from another.
    _, drawn = figures.draw_bisect(d)
    with open(os.path.join(d, "bisect.csv"), "w") as f:
        f.write(CSV.replace("0.05493", "0.06493"))
    if [tuple(b) for b in drawn["bars"]] == expected(d)["bars"]:
        print("FAIL: a planted wrong closed share was not caught")
        sys.exit(1)
with tempfile.TemporaryDirectory() as d:
    bad, want_d, drawn = fails(d, DEMOTE_CSV, DEMOTE)
    if bad or want_d["bars"][0] != ("optimizer state exp_avg_sq", "94.5%"):
        print("FAIL: the demoting figure differs from the CSV/JSON in", bad, want_d, drawn)
        sys.exit(1)
print("ok: bisect.png's", len(want["bars"]), "bars, 2 titles and 3 legend entries match")
