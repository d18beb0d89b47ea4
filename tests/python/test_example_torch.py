"""examples/torch_transformer.py runs on the CPU: a TransformerEncoder trained under
torch.autocast(bfloat16) and traced for fp16, bf16, e4m3 and e5m2 gives a run folder in the
`halfway train` schema whose loss falls, and the three figures, safe_window.png as trace.csv
says."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

pd = hwtest.require("pandas", "the trace's DataFrames")
hwtest.require("torch", "the PyTorch example")
hwtest.require("matplotlib", "the figures")
hwtest.require_sim("_AnalysisRun")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def check_summary(out, stdout):
    """The example's closing lines, recomputed from trace.csv and scale_window.csv here."""
    t = pd.read_csv(os.path.join(out, "trace.csv"))
    w = pd.read_csv(os.path.join(out, "scale_window.csv"), keep_default_na=False)
    last = int(t["step"].max())
    want = [f"at step {last} (the last traced), for each format:"]
    for fmt in ("fp16", "bf16", "e4m3", "e5m2"):
        rows = t[(t["step"] == last) & (t["dtype"] == fmt) & t["flushed_l2_fraction"].notna()]
        top = rows.sort_values("flushed_l2_fraction", kind="stable", ascending=False).iloc[0]
        if top["flushed_l2_fraction"] == 0:
            what = "no tensor loses a value to flushing"
        else:
            what = (f"worst tensor {top['name']}: {100 * top['flushed'] / top['total']:.3g}% of "
                    f"its values flushed, {top['flushed_l2_fraction']:.3g} of its L2 norm")
        c = w[(w["step"].astype(int) == last) & (w["dtype"] == fmt) & (w["name"] == "")]
        ks = c[c["safe"].astype(int) == 1]["k"].astype(int)
        safe = f"2^{ks.min()} .. 2^{ks.max()}" if len(ks) else "none"
        want.append(f"  {fmt:5s} {what}; safe loss scales: {safe} (of 2^{c['k'].astype(int).min()}"
                    f" .. 2^{c['k'].astype(int).max()} tried)")
    got = stdout.splitlines()[:len(want)]
    check(got == want, "the printed summary is not what the CSVs say:\n%s\nwant:\n%s"
          % ("\n".join(got), "\n".join(want)))
    # A worst tensor that flushes something, and a format with no safe scale: the run must show
    # both kinds of line, or the check above proves little.
    check(any("worst tensor" in g for g in got) and any("scales: none" in g for g in got) and
          any("no tensor loses" in g for g in got), f"summary lacks a kind of line: {got}")


def main():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "trace")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "torch_transformer.py"),
                            "--out", out, "--steps", "300", "--every", "50"],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"example failed: {r.stderr[-3000:]}")
        check_summary(out, r.stdout)
        for f in ("trace.csv", "scale_window.csv", "steps.csv", "manifest.json",
                  "fraction_lost.png", "histograms.png", "safe_window.png"):
            check(os.path.getsize(os.path.join(out, f)) > 0, f"{f} missing")
        t = pd.read_csv(os.path.join(out, "trace.csv"))
        check(set(t["dtype"]) == {"fp16", "bf16", "e4m3", "e5m2"}, "formats")
        check(sorted(t["step"].unique()) == [0, 50, 100, 150, 200, 250], "traced steps")
        check(set(t["kind"]) == {"activation", "activation_grad", "weight_grad", "update"},
              f"kinds {set(t['kind'])}")
        steps = pd.read_csv(os.path.join(out, "steps.csv"))
        check(steps["loss"].iloc[-1] < 0.5 * steps["loss"].iloc[0],
              f"the loss did not fall: {list(steps['loss'])}")
        with open(os.path.join(out, "manifest.json")) as f:
            m = json.load(f)
        check(m["tool"] == "halfway.torch" and m["complete"], "manifest")
        # safe_window.png of the example: every format in the legend, every bar and "no safe
        # scale" as trace.csv's last step says (test_figures.py's check).
        import test_figures
        errors = test_figures.expected_errors(out, test_figures.draw(out))
        check(not errors, f"safe_window.png: {errors}")
    print("ok")


if __name__ == "__main__":
    main()
