#!/usr/bin/env python3
"""scripts/gpu-validate --dry-run on the programs of a CMake build, without a GPU: every part is
run (and says "no CUDA device"), the report and summary are written, and they say what happened:
each program prebuilt, each part skipped, the campaign partial, no machine paths.
On a machine with a GPU the parts really run; only the report's shape is checked then.
Usage: test_gpu_dry_run.py REPO_ROOT BIN_DIR"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT, BIN = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
PARTS = ["math", "conversions", "arith", "fma", "mma", "wgmma", "cublas", "replay"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def has_gpu():
    try:
        return bool(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                   timeout=20).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return False


tmp = tempfile.mkdtemp(prefix="halfway-gpu-dry-")
try:
    out = os.path.join(tmp, "out")
    env = dict(os.environ, HALFWAY_GPU_BUILD_DIR=os.path.join(tmp, "build"))
    p = subprocess.run([os.path.join(ROOT, "scripts", "gpu-validate"), "--dry-run", "--bin", BIN,
                        "--out", out, "--total", "200"], capture_output=True, text=True, env=env,
                       timeout=400)
    print(p.stdout[-3000:])
    gpu = has_gpu()
    check(p.returncode in ((0, 1) if gpu else (1,)), f"exit {p.returncode}: {p.stderr[-500:]}")
    with open(os.path.join(out, "report.json")) as f:
        rep = json.load(f)
    check(set(rep["parts"]) == set(PARTS), f"parts {sorted(rep['parts'])}")
    for prog, b in rep["build"].items():
        check(b["status"] and b["status"].get("exit") == 0 and b["status"].get("prebuilt") == 1,
              f"build {prog}: {b}")
    check(rep["build_time"] is not None and "seconds" in rep["build_time"], "build time recorded")
    if not gpu:
        for name, part in rep["parts"].items():
            check(part["status"] == "skipped: no CUDA device", f"{name}: {part['status']}")
        check(rep["summary"]["status"] == "partial", "a campaign without a GPU is not complete")
    check(os.path.exists(os.path.join(out, "summary.md")), "summary.md written")
    text = open(os.path.join(out, "report.json")).read()
    check(tmp not in text and ROOT not in text, "no machine paths in the report")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

print("FAILED" if failures else "ok", f"({len(failures)} failures)")
sys.exit(1 if failures else 0)
