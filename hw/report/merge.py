#!/usr/bin/env python3
"""Merge the GPU campaign's part reports into results/gpu/report.json.

scripts/gpu-validate leaves in its work directory, per part NAME, the program's own report
NAME.json (rewritten after every finished check, so it is valid even when the program was
killed), NAME.status (exit code, seconds, time limit, killed or not) and NAME.log, plus
build-PROGRAM.status/.log for the five programs and build.status (the build's wall time). This script puts them in one document with a
summary (replayed by the CPU test test_hw_replay, which checks the summary against the details).

    merge.py --work DIR --out report.json --root REPO [--seed S] [--fma-count N]
"""
import argparse
import datetime
import glob
import json
import os
import re
import subprocess
import sys

PARTS = ["math", "conversions", "arith", "fma", "mma", "wgmma", "cublas", "replay", "philox",
         "device_reference"]
PROGRAMS = ["halfway_gpu_elementwise", "halfway_gpu_mma", "halfway_gpu_wgmma", "halfway_gpu_cublas",
            "halfway_gpu_replay", "halfway_gpu_philox", "halfway_device_reference"]


def read_status(path):
    """'key=value key=value' -> dict (numbers as int where they are)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    out = {}
    for item in text.split():
        if "=" in item:
            k, v = item.split("=", 1)
            out[k] = int(v) if v.lstrip("-").isdigit() else v
    return out


def sanitize(text, root):
    """Build logs go into the report: without the machine's paths."""
    return text.replace(root, ".").replace(os.path.expanduser("~"), "~")


def tail(path, root, n=25):
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return [sanitize(l, root) for l in lines[-n:]]


def git_info(root):
    def git(*args):
        try:
            return subprocess.run(["git", "-C", root] + list(args), capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"commit": commit or None, "dirty": dirty}


SCALAR_ARRAY = re.compile(r'\[\s*((?:"[^"\n]*"|[-+0-9.eE]+|true|false|null)'
                          r'(?:\s*,\s*(?:"[^"\n]*"|[-+0-9.eE]+|true|false|null))*)\s*\]')


def dumps(obj):
    """Indented JSON with arrays of scalars kept on one line (diff-friendly, not bloated)."""
    text = json.dumps(obj, indent=1)
    return SCALAR_ARRAY.sub(lambda m: "[" + re.sub(r"\s*,\s*", ", ", m.group(1)) + "]", text) + "\n"


def summarize(parts):
    checks, math, mma, cublas, replay = {}, {}, {}, {}, {}
    statuses = []
    for name, part in parts.items():
        statuses.append(part.get("status", "missing"))
        for c in part.get("checks", []):
            key = f'{c.get("op")}/{c.get("source")}'
            if "skipped" in c:
                checks[key] = {"skipped": c["skipped"]}
                continue
            checks[key] = {
                "mismatches": c["mismatches"], "covered": c["covered"], "domain": c["domain"],
                "complete": c["complete"],
                "classes": {cl["class"]: cl["count"] for cl in c.get("classes", [])},
            }
        for m in part.get("math", []):
            key = f'h{m.get("fn")}/{m.get("format")}'
            if "skipped" in m:
                math[key] = {"skipped": m["skipped"]}
                continue
            math[key] = {"correctly_rounded": m["correctly_rounded"], "inputs": m["inputs"],
                         "max_ulp_error": m["max_ulp_error"], "special_mismatch": m["special_mismatch"]}
        for v in part.get("variants", []):
            # mma.sync variants by name; wgmma's (same names) prefixed with "wgmma ".
            key = ("wgmma " if name == "wgmma" else "") + str(v.get("variant"))
            if "skipped" in v:
                mma[key] = {"skipped": v["skipped"]}
                continue
            search = v.get("search") or {}
            matched = search.get("matched") or []
            mma[key] = {
                "path": v.get("path"),
                "layout_ok": v.get("layout_ok"), "repeatable": v.get("repeatable"),
                "matched_count": search.get("matched_count"),
                "search_complete": search.get("complete"),
                "matched": [m["model"] for m in matched[:3]],
                "presets": {p["name"]: p["mismatches"] for p in v.get("presets", [])},
            }
        for g in part.get("gemms", []):
            key = f'{g.get("config")}, {g.get("compute")}/k={g.get("k")}'
            cublas[key] = ({"error": g["error"]} if "error" in g else
                           {"best_model": g["best_model"], "best_identical": g["best_identical"],
                            "outputs": g["outputs"], "repeatable": g["repeatable"]})
        for c in part.get("cases", []):
            key = c.get("case")
            if "skipped" in c:
                replay[key] = {"skipped": c["skipped"]}
                continue
            steps = c.get("step_records", [])
            replay[key] = {"low": c.get("low"), "scaler": c.get("scaler"), "steps": len(steps),
                           "tensors": sum(len(s.get("tensors", [])) for s in steps),
                           "skipped_steps": sum(1 for s in steps if s.get("skipped")),
                           "final_scale": steps[-1].get("next_scale") if steps else None}
    status = "complete" if statuses and all(s == "complete" for s in statuses) and \
        len(statuses) == len(PARTS) else "partial"
    return {"status": status, "checks": checks, "math": math, "mma": mma, "cublas": cublas,
            "replay": replay}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--fma-count", type=int, default=None)
    a = ap.parse_args()

    report = {
        "schema": 1,
        "generated_by": "scripts/gpu-validate",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git": git_info(a.root),
        "seed": a.seed,
        "fma_count": a.fma_count,
        "campaign": read_status(os.path.join(a.work, "campaign.status")),
        "build": {},
        "build_time": read_status(os.path.join(a.work, "build.status")),
        "parts": {},
    }
    for prog in PROGRAMS:
        st = read_status(os.path.join(a.work, f"build-{prog}.status"))
        entry = {"status": st}
        if st is None or st.get("exit") != 0:
            entry["log_tail"] = tail(os.path.join(a.work, f"build-{prog}.log"), a.root)
        report["build"][prog] = entry
    for name in PARTS:
        path = os.path.join(a.work, f"{name}.json")
        run = read_status(os.path.join(a.work, f"{name}.status"))
        part = {"status": "not run"}
        if os.path.exists(path):
            try:
                with open(path) as f:
                    part = json.load(f)
            except (OSError, ValueError) as e:
                part = {"status": "unreadable", "error": str(e)}
        if run is not None:
            part["run"] = run
            if run.get("killed") == 1 and part.get("status") in ("running", "complete"):
                part["status"] = "partial (killed at the time limit)"
            if isinstance(run.get("exit"), int) and run["exit"] not in (0, 1) and part.get("status") == "running":
                part["status"] = f'failed (exit {run["exit"]})'
            if run.get("exit") == 77:
                part["status"] = "skipped: no CUDA device"
            if run.get("exit") == "not_applicable":
                part = {"status": "complete", "run": run, "variants": [
                    {"variant": "all", "skipped": "wgmma.mma_async needs compute capability 9.0"}]}
            if run.get("exit") in ("build_failed", "no_time"):
                part["status"] = "not run: " + run["exit"].replace("_", " ")
        if part.get("status") != "complete":
            part["log_tail"] = tail(os.path.join(a.work, f"{name}.log"), a.root)
        report["parts"][name] = part
    report["summary"] = summarize(report["parts"])

    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(dumps(report))
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
