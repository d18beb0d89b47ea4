#!/usr/bin/env python3
"""docs/hardware.md's "Status" paragraph, recomputed from the committed GPU report
(results/gpu/report.json): every count it prints is derived here from the report's own fields and
must appear in the paragraph as written, so that a new report, or an edited sentence, fails
until the two agree. Without a committed report: exit 77 (skipped).

    test_gpu_report_claims.py ROOT
"""
import json
import os
import re
import sys

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)


def status_text(root):
    text = open(os.path.join(root, "docs", "hardware.md"), encoding="utf-8").read()
    start = text.index("**Status: one campaign run")
    end = text.index("\n## ", start)
    return re.sub(r"\s+", " ", text[start:end])


def variants(report, part):
    return {v["variant"]: v for v in report["parts"][part]["variants"]}


def presets(v):
    return {p["name"]: p["mismatches"] for p in v["presets"]}


def n(x):
    return f"{x:,}"


def claims(report):
    """(phrase the paragraph must contain, what it states) from the report alone."""
    out = []
    mma, wg = variants(report, "mma"), variants(report, "wgmma")
    f16, bf16 = "m16n8k16.f32.f16.f16.f32", "m16n8k16.f32.bf16.bf16.f32"
    h16 = "m16n8k16.f16.f16.f16.f16"
    e4, e5 = "m16n8k32.f32.e4m3.e4m3.f32", "m16n8k32.f32.e5m2.e5m2.f32"
    # The published Hopper models are exact on every native shape, and the search finds one model.
    for part, vs in (("mma", mma), ("wgmma", wg)):
        for name, preset in ((f16, "mmasim_hopper"), (bf16, "mmasim_hopper"),
                             (h16, "mmasim_hopper_fp16")):
            check(presets(vs[name])[preset] == 0, f"{part} {name}: {preset} exact")
            check(vs[name]["search"]["matched_count"] == 1, f"{part} {name}: one match")
    for name in (e4, e5):
        check(presets(wg[name])["mmasim_hopper_fp8"] == 0, f"wgmma {name}: mmasim_hopper_fp8 exact")
        check(wg[name]["search"]["matched_count"] == 1, f"wgmma {name}: one match")
        check(mma[name]["search"]["matched_count"] == 0, f"mma {name}: no candidate matches")
    # mma.sync and wgmma give the same counts on the shared shapes.
    for name in (f16, bf16, h16):
        check(presets(mma[name]) == presets(wg[name]), f"{name}: mma.sync and wgmma agree")
    out.append(f"fp16 and bf16 inputs with fp32 accumulators ({n(wg[f16]['outputs'])} outputs each)")
    out.append(f"e4m3 and e5m2 inputs ({n(wg[e4]['outputs'])} outputs each)")
    out.append(f"`h100` hypothesis (normalised alignment) mismatches {n(presets(wg[f16])['h100_fp32'])}"
               f" (fp16) and {n(presets(wg[bf16])['h100_fp32'])} (bf16) of {n(wg[f16]['outputs'])}")
    out.append(f"`h100-fp8` {n(presets(wg[e4])['h100_fp8_fp32'])} (e4m3) and "
               f"{n(presets(wg[e5])['h100_fp8_fp32'])} (e5m2) of {n(wg[e4]['outputs'])}")
    out.append(f"`h100-fp16` {n(presets(wg[h16])['h100_fp16'])} of {n(wg[h16]['outputs'])}")
    other = [presets(wg[k])[p] / wg[k]["outputs"] for k in (f16, bf16)
             for p in ("v100_fp32", "a100_fp32", "mmasim_volta", "mmasim_ampere")]
    out.append(f"mismatch {round(100 * min(other))}–{round(100 * max(other))}%")
    out.append(f"sequential fp32 fma, {n(presets(mma[e4])['fp32_sequential'])} and "
               f"{n(presets(mma[e5])['fp32_sequential'])} of {n(mma[e4]['outputs'])} outputs differ")
    check(all(presets(mma[k])["fp32_sequential"] == min(presets(mma[k]).values()) for k in (e4, e5)),
          "mma fp8: sequential fp32 fma is the closest preset")
    # Intrinsics: every difference is in a NaN's encoding.
    checks = [c for p in ("conversions", "arith", "fma") for c in report["parts"][p]["checks"]]
    check(all(c["complete"] for c in checks), "every intrinsic check complete")
    check(all(k["class"].startswith("nan_") for c in checks for k in c["classes"]),
          "no numeric difference in any intrinsic")
    out.append("no numeric difference")
    hard = {c["op"]: c["covered"] for c in checks if c["source"] == "hard_cases"}
    rand = {c["op"]: c["covered"] for c in checks if c["source"] == "random"}
    out.append(f"`__hfma` on {n(hard['f16_fma'])} (fp16) and {n(hard['bf16_fma'])} (bf16) hard cases")
    check(rand["f16_fma"] == rand["bf16_fma"] == 2 * 10**9, "2e9 random fma triples each")
    # Math functions: correctly rounded on every input.
    math = report["parts"]["math"]["math"]
    check(all(m["correctly_rounded"] == m["inputs"] for m in math), "math correctly rounded")
    check(all(m["max_ulp_error"] <= 0.5 for m in math), "math max 0.5 ulp")
    fns = sorted({m["fn"] for m in math})
    out.append(", ".join(f"`h{f}`" for f in [m["fn"] for m in math if m["format"] == "fp16"]))
    check(len(fns) == 12 and {m["format"] for m in math} == {"fp16", "bf16"}, "12 functions, 2 formats")
    # The training-step replay.
    cases = report["parts"]["replay"]["cases"]
    tensors = sum(len(s["tensors"]) for c in cases for s in c["step_records"])
    steps = {len(c["step_records"]) for c in cases}
    out.append(f"{len(cases)} cases × {steps.pop()} steps of the default MLP, {n(tensors)} tensor hashes")
    out.append(f"took {report['campaign']['total_seconds']} s of its 290 s budget, the build "
               f"{report['build_time']['seconds']} s of it")
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    path = os.path.join(root, "results", "gpu", "report.json")
    if not os.path.exists(path):
        print("skipped: no GPU report committed yet")
        return 77
    report = json.load(open(path))
    text = status_text(root)
    phrases = claims(report)
    for p in phrases:
        check(p in text, f"docs/hardware.md Status says: {p!r}")
    for f in FAILURES:
        print("FAIL:", f)
    print(f"{len(phrases)} phrases of the Status paragraph recomputed from the report, "
          f"{len(FAILURES)} failures")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
