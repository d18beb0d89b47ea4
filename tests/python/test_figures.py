"""halfway.figures draws what the analysis folder says: safe_window.png has a legend entry for
every format in trace.csv (also when the first tensor has no safe scale in it), a bar from
k_low - 0.5 to k_high + 0.5 for every tensor and format with a safe window and the words "no safe
scale" for every one without, gradients (loss scale) apart from the other tensors (a per-tensor
scale factor, never called a loss scale), and every figure's title names the traced step it
shows. The expected drawing is computed here from trace.csv with pandas; the figure's is read
back from its artists. Negative controls: a corrupted k_low in trace.csv and the old legend
rule (a label only on the first tensor's bar) must be caught."""
import copy
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

pd = hwtest.require("pandas", "the analysis folder's tables")
hwtest.require("matplotlib", "the figures")
import halfway  # noqa: E402
import halfway.figures as hf  # noqa: E402
from halfway.analysis import read_result  # noqa: E402

hwtest.require_sim("_AnalysisRun")

FORMATS = ["fp16", "bf16", "e4m3", "e5m2"]


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def folder(d):
    """An analysis folder whose first tensor spans 2^-28..2^8 (no safe scale in e4m3 or e5m2,
    whose ranges are narrower), then a narrow one, and a third marked as an activation
    gradient in trace.csv."""
    wide = np.exp2(np.linspace(-28, 8, 4001)).astype(np.float32)
    narrow = np.exp2(np.linspace(-3, 3, 501)).astype(np.float32)
    halfway.analyze({"wide": wide, "narrow": narrow, "grad": narrow * np.float32(2.0 ** -20)},
                    FORMATS, out_dir=d)
    p = os.path.join(d, "trace.csv")
    t = pd.read_csv(p, dtype=str, keep_default_na=False)
    t.loc[t["name"] == "grad", "kind"] = "activation_grad"
    t.to_csv(p, index=False)


def expected_errors(d, drawn):
    """What differs between `drawn` (safe_windows' read-back) and trace.csv of folder d."""
    t = pd.read_csv(os.path.join(d, "trace.csv"))
    step = int(t["step"].max())
    t = t[t["step"] == step]
    errors = []
    fmts = list(dict.fromkeys(t["dtype"]))
    if drawn["legend"] != fmts:
        errors.append("legend %s, the formats in trace.csv are %s" % (drawn["legend"], fmts))
    if "traced step %d" % step not in drawn["title"]:
        errors.append("title %r does not name step %d" % (drawn["title"], step))
    grad = t["kind"].isin(["activation_grad", "weight_grad"])
    groups = [g for g in (t[grad], t[~grad]) if len(g)]
    if len(drawn["panels"]) != len(groups):
        return errors + ["%d panels for %d groups" % (len(drawn["panels"]), len(groups))]
    for panel, rows in zip(drawn["panels"], groups):
        is_grad = rows["kind"].isin(["activation_grad", "weight_grad"]).all()
        label = panel["xlabel"]
        if is_grad != label.startswith("loss scale") or (not is_grad and "per-tensor scale factor"
                                                          not in label):
            errors.append("x-axis %r for %s" % (label, sorted(set(rows["kind"]))))
        if panel["names"] != list(dict.fromkeys(rows["name"])):
            errors.append("rows %s, trace.csv has %s" % (panel["names"], list(rows["name"])))
        bars, none = {}, []
        for name, f, lo, hi in zip(rows["name"], rows["dtype"], rows["k_low"], rows["k_high"]):
            if np.isnan(lo):
                none.append((name, f))
            else:
                bars[(name, f)] = (lo - 0.5, hi - lo + 1)
        if panel["bars"] != bars:
            errors.append("bars %s, trace.csv gives %s" % (panel["bars"], bars))
        if sorted(panel["no_safe"]) != sorted(none):
            errors.append("'no safe scale' on %s, trace.csv gives %s" % (panel["no_safe"], none))
    return errors


def draw(d):
    r = read_result(d, True)
    t, step = hf.step_rows(r.trace, None)
    steps = sorted(int(x) for x in r.trace["step"].unique())
    return hf.safe_windows(t, os.path.join(d, "safe_window.png"), step, steps)


def main():
    with tempfile.TemporaryDirectory() as d:
        res = os.path.join(d, "a")
        folder(res)
        t = pd.read_csv(os.path.join(res, "trace.csv"))
        first = t[t["name"] == "wide"]
        check(first[first["dtype"] == "e4m3"]["k_low"].isna().all(),
              "the first tensor has a safe scale in e4m3: the legend case is not tested")
        drawn = draw(res)
        errors = expected_errors(res, drawn)
        check(not errors, "safe_window.png: %s" % errors)
        print("ok   safe_window.png: %d bars, %d 'no safe scale', legend %s, %s"
              % (sum(len(p["bars"]) for p in drawn["panels"]),
                 sum(len(p["no_safe"]) for p in drawn["panels"]), drawn["legend"],
                 [p["xlabel"].split(":")[0] for p in drawn["panels"]]))
        paths = hf.draw(res)
        check(all(os.path.getsize(p) > 0 for p in paths), "figures missing")

        # Negative controls.
        bad = os.path.join(d, "bad")
        shutil.copytree(res, bad)
        p = os.path.join(bad, "trace.csv")
        c = pd.read_csv(p, dtype=str, keep_default_na=False)
        i = c.index[(c["name"] == "narrow") & (c["dtype"] == "fp16")][0]
        c.loc[i, "k_low"] = str(int(c.loc[i, "k_low"]) - 1)
        c.to_csv(p, index=False)
        check(any("bars" in e for e in expected_errors(bad, drawn)),
              "negative control: a lowered k_low in trace.csv is not caught")
        old = copy.deepcopy(drawn)   # the old rule: a legend label only on the first tensor's bar
        old["legend"] = [f for f in FORMATS if ("wide", f) in old["panels"][-1]["bars"]]
        check(any("legend" in e for e in expected_errors(res, old)),
              "negative control: a legend without e4m3 and e5m2 is not caught")
        print("ok   negative controls: a corrupted k_low and the old legend rule are caught")
    print("ok")


if __name__ == "__main__":
    main()
