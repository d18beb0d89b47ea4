#!/usr/bin/env python3
"""Write results/gpu/summary.md and results/gpu/plots/*.png from results/gpu/report.json.

Reads only the report. Plots need matplotlib; without it the summary is still written and says
so.

    summarize.py REPORT.json --out DIR
"""
import argparse
import json
import os
import sys


def fmt_int(n):
    return f"{n:,}".replace(",", " ") if isinstance(n, int) else str(n)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def device_of(report):
    for part in report.get("parts", {}).values():
        if isinstance(part, dict) and "device" in part:
            return part["device"]
    return None


def elementwise_section(report):
    rows, notes = [], []
    for name in ("conversions", "arith", "fma"):
        part = report["parts"].get(name, {})
        for c in part.get("checks", []):
            if "skipped" in c:
                rows.append([c["op"], c["source"], "0 / " + fmt_int(c["domain"]), "—", "not run: " + c["skipped"]])
                continue
            cov = fmt_int(c["covered"]) + (" (all)" if c["complete"] else " / " + fmt_int(c["domain"]))
            classes = "; ".join(
                f'{fmt_int(cl["count"])} × {cl["description"]} (e.g. {cl["example"]["a"]}'
                + (f' {cl["example"]["b"]}' if c["op"].split("_")[1] in ("add", "sub", "mul", "div", "fma") else "")
                + (f' {cl["example"]["c"]}' if c["op"].endswith("fma") else "")
                + f' → {cl["example"]["hw"]}, library {cl["example"]["ref"]})'
                for cl in c.get("classes", [])) or "identical"
            rows.append([c["op"], c["source"], cov, fmt_int(c["mismatches"]), classes])
    if not rows:
        return "No elementwise results.\n"
    return table(["operation", "inputs", "covered", "mismatches", "differences (count × class, example)"], rows) + "\n"


def math_section(report):
    part = report["parts"].get("math", {})
    rows = []
    for m in part.get("math", []):
        if "skipped" in m:
            rows.append([f'h{m["fn"]}', m["format"], "not run", "", "", ""])
            continue
        h = m["ulp_histogram"]
        rows.append([f'h{m["fn"]}', m["format"],
                     f'{m["correctly_rounded"] / m["inputs"]:.4%}',
                     f'{m["max_ulp_error"]:.3g} (at {m["max_ulp_input"]})',
                     " / ".join(fmt_int(x) for x in h),
                     fmt_int(m["special_mismatch"]) + (f', {m["unresolved"]} unresolved' if m["unresolved"] else "")])
    if not rows:
        return "No math-function results.\n"
    return (table(["function", "format", "correctly rounded", "max ulp error",
                   "inputs by ulp distance 0 / 1 / 2 / 3-4 / 5-8 / 9-16 / >16",
                   "NaN vs number"], rows) + "\n")


def mma_section(report, part_name="mma"):
    part = report["parts"].get(part_name, {})
    out = []
    for v in part.get("variants", []):
        name = v.get("variant")
        if v.get("path"):
            name = f"{name}` [{v['path']}]`"
        if "skipped" in v:
            out.append(f"- `{name}`: not run ({v['skipped']})")
            continue
        if not v.get("layout_ok"):
            out.append(f"- `{name}`: **fragment layout probe failed** ({v.get('layout_failure')}); "
                       "no model comparison is meaningful")
            continue
        s = v.get("search") or {}
        pres = ", ".join(f'{p["name"]}: {fmt_int(p["mismatches"])}' for p in v.get("presets", []))
        line = f"- `{name}` ({fmt_int(v['outputs'])} outputs, repeatable: {v['repeatable']}). "
        if not s:
            line += "Search not finished. "
        elif s.get("matched_count"):
            line += (f"**{s['matched_count']} model(s) reproduce every required output bit for bit**"
                     + ("" if s.get("complete") else " (search cut short)") + ": "
                     + "; ".join(m["model"]["description"] for m in s["matched"][:4]) + ". ")
            sub = s["matched"][0]["family_mismatches"].get("subnormal", 0)
            line += f"On subnormal inputs the first match differs in {fmt_int(sub)} outputs. "
        else:
            line += "**No candidate model matches.** Closest: " + "; ".join(
                f'{m["model"]["description"]} ({fmt_int(m["mismatches"])} mismatches)' for m in s.get("closest", [])[:3]) + ". "
        line += f"Published parameters, mismatching outputs: {pres}."
        out.append(line)
    return ("\n".join(out) + "\n") if out else "No tensor-core results.\n"


def cublas_section(report):
    part = report["parts"].get("cublas", {})
    rows = []
    for g in part.get("gemms", []):
        if "error" in g:
            rows.append([g["config"], g["compute"], g["k"], "error: " + g["error"], "", "", ""])
            continue
        rows.append([g["config"], g["compute"], g["k"], g["best_model"], f'{g["best_identical"]}/{g["outputs"]}',
                     "yes" if g["repeatable"] else "**no**", f'{g["max_rel_err_vs_fp64"]:.2e}'])
    if not rows:
        return "No cuBLAS results.\n"
    return table(["inputs -> output", "compute type", "k", "closest model", "identical outputs", "repeatable",
                  "max rel. error vs fp64"], rows) + "\n"


def replay_section(report):
    part = report["parts"].get("replay", {})
    cases = part.get("cases", [])
    if not cases:
        return f'No training-step replay results (status: {part.get("status", "missing")}).\n'
    rows = []
    for c in cases:
        if "skipped" in c:
            rows.append([c.get("case"), "", "", "not run: " + c["skipped"], "", ""])
            continue
        steps = c.get("step_records", [])
        rows.append([c["case"], c.get("low"), c.get("scaler"), len(steps),
                     fmt_int(sum(len(s.get("tensors", [])) for s in steps)),
                     sum(1 for s in steps if s.get("skipped"))])
    inp = part.get("input") or {}
    return (f'The default MLP ({inp.get("layers")}, batch {inp.get("batch")}) trained on the GPU with '
            "the CUDA intrinsics in the simulator's order; every rounded tensor of every step is "
            "recorded as a hash. The comparison with `halfway train`, bit for bit, runs on a CPU: "
            "`ctest -R test_hw_replay_mlp_report` (its result is not part of this report).\n\n"
            + table(["case", "low", "scaler", "steps", "tensor hashes", "skipped steps"], rows) + "\n")


def plots(report, outdir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not available: no plots.\n", []
    os.makedirs(outdir, exist_ok=True)
    made = []
    math = [m for m in report["parts"].get("math", {}).get("math", []) if "ulp_histogram" in m]
    if math:
        fig, ax = plt.subplots(figsize=(11, 4.5))
        labels = [f'h{m["fn"]}\n{m["format"]}' for m in math]
        bottom = [0] * len(math)
        names = ["0", "1", "2", "3-4", "5-8", "9-16", ">16"]
        for b in range(7):
            vals = [m["ulp_histogram"][b] for m in math]
            ax.bar(range(len(math)), vals, bottom=bottom, label=f"{names[b]} ulp")
            bottom = [x + y for x, y in zip(bottom, vals)]
        ax.set_xticks(range(len(math)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_ylabel("inputs (of 65,536)")
        ax.set_yscale("symlog", linthresh=10)
        ax.set_title("Half-precision math functions: distance from the correctly rounded result")
        ax.legend(fontsize=7, ncol=7)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "math_ulp.png"), dpi=120)
        plt.close(fig)
        made.append("plots/math_ulp.png")
    checks = [c for n in ("conversions", "arith", "fma") for c in report["parts"].get(n, {}).get("checks", [])
              if "mismatches" in c]
    if checks:
        made.append(elementwise_plot(plt, checks, outdir))
    gemms = [g for g in report["parts"].get("cublas", {}).get("gemms", []) if "models" in g]
    if gemms:
        made.append(cublas_plot(plt, gemms, outdir))
    return "", made



def nan_only(cls):
    """A class of difference in a NaN's encoding alone (sign, payload, quieting): both results
    are NaN."""
    return cls["class"].startswith("nan_")


def elementwise_plot(plt, checks, outdir):
    """Mismatches per intrinsic, split into NaN-encoding differences and numeric ones, so that
    a bar of NaN encodings is not read as a wrong result."""
    nan = [sum(k["count"] for k in c.get("classes", []) if nan_only(k)) for c in checks]
    num = [c["mismatches"] - n for c, n in zip(checks, nan)]
    fig, ax = plt.subplots(figsize=(11, 4.8))
    x = range(len(checks))
    ax.bar(x, [max(v, 0.5) if v else 0 for v in num], color="tab:red", label="numeric difference")
    ax.bar(x, [v if v else 0 for v in nan], bottom=[max(v, 0.5) if v else 0 for v in num],
           color="tab:gray", label="NaN encoding only (both results NaN)")
    ax.set_xticks(list(x))
    ax.set_xticklabels([f'{c["op"]}\n{c["source"]}' for c in checks], rotation=90, fontsize=6)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_ylim(0, 3 * max(max(a + b for a, b in zip(num, nan)), 1))
    ax.set_ylabel("outputs that differ from the library")
    total_num = sum(num)
    ax.set_title("CUDA intrinsics vs halfway: " + (f"{total_num:,} numeric differences"
                 if total_num else "no numeric difference; NaN encodings only"))
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "elementwise_mismatches.png"), dpi=120)
    plt.close(fig)
    return "plots/elementwise_mismatches.png"


def cublas_plot(plt, gemms, outdir):
    """Share of bit-identical outputs per cuBLAS configuration (rows) and model (columns): a
    grid, since neither axis is ordered."""
    models = list(dict.fromkeys(m["model"] for g in gemms for m in g["models"]))
    share = [{m["model"]: m["identical"] / g["outputs"] for m in g["models"]} for g in gemms]
    grid = [[row.get(m, float("nan")) for m in models] for row in share]  # blank: not compared
    fig, ax = plt.subplots(figsize=(13, 8))
    im = ax.imshow(grid, aspect="auto", vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels(models, rotation=90, fontsize=6)
    ax.set_yticks(range(len(gemms)))
    ax.set_yticklabels([f'{g["config"]}, {g["compute"].replace("CUBLAS_COMPUTE_", "")}, k={g["k"]}'
                        for g in gemms], fontsize=6)
    for r, row in enumerate(grid):
        for c, v in enumerate(row):
            if v == 1:
                ax.text(c, r, "all", ha="center", va="center", fontsize=5, color="black")
    fig.colorbar(im, ax=ax, label="share of outputs bit-identical to the model")
    ax.set_title("cuBLAS GEMM vs accumulation models ('all': every output identical; "
                 "blank: not compared)")
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "cublas_models.png"), dpi=120)
    plt.close(fig)
    return "plots/cublas_models.png"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(a.report) as f:
        report = json.load(f)
    dev = device_of(report)
    s = report.get("summary", {})
    lines = ["# GPU validation report", ""]
    lines.append(f"Device: {dev['name']} (compute capability {dev['compute_capability']}, {dev['sms']} SMs, "
                 f"driver {dev['driver']}, runtime {dev['runtime']}, clocks {dev.get('clock_mhz', '?')} MHz SM / "
                 f"{dev.get('memory_clock_mhz', '?')} MHz memory)." if dev else "Device: unknown (no part ran).")
    builds = {name: (part.get("device") or {}).get("build") for name, part in report.get("parts", {}).items()}
    builds = {k: v for k, v in builds.items() if v}
    if builds:
        lines.append("Built with: " + "; ".join(f"{k}: nvcc {v.get('nvcc')}, -fmad={v.get('fmad')}"
                                                for k, v in builds.items()) + ".")
    bt = report.get("build_time") or {}
    if "seconds" in bt:
        lines.append(f"Build: {bt['seconds']} s.")
    git = report.get("git") or {}
    lines.append(f"Date (UTC): {report.get('date_utc')}; commit {git.get('commit')}"
                 + (" with local changes" if git.get("dirty") else "") + f"; overall status: **{s.get('status')}**.")
    lines.append("")
    rows = []
    for name, part in report.get("parts", {}).items():
        run = part.get("run") or {}
        rows.append([name, part.get("status"), run.get("seconds", ""), run.get("limit", ""), run.get("exit", "")])
    lines += [table(["part", "status", "seconds", "limit", "exit"], rows), ""]
    for prog, b in report.get("build", {}).items():
        st = b.get("status") or {}
        if st.get("exit") != 0:
            lines += [f"Build of `{prog}` failed:", "", "```"] + b.get("log_tail", []) + ["```", ""]
    lines += ["## CUDA intrinsics against the library", "",
              "Every difference is classified; NaN encodings are compared bit for bit.", "",
              elementwise_section(report), "## Half-precision math functions", "",
              "Ulp distance from the correctly rounded result (no bound is published for these).", "",
              math_section(report), "## Tensor cores (mma.sync) and the block-FMA model", "",
              mma_section(report), "## Hopper's native path (wgmma.mma_async, sm_90a)", "",
              mma_section(report, "wgmma"), "## cuBLAS GEMM against the models", "", cublas_section(report),
              "## Training-step replay", "", replay_section(report)]
    note, made = plots(report, os.path.join(a.out, "plots"))
    lines += ["## Plots", ""] + ([note] if note else []) + [f"![{p}]({p})" for p in made] + [""]
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
