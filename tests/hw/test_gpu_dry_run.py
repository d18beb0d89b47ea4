#!/usr/bin/env python3
"""scripts/gpu-validate --dry-run on the programs of a CMake build, without a GPU: every part is
run (and says "no CUDA device"), the report and summary are written, and they say what happened:
each program prebuilt, each part skipped, the campaign partial, no machine paths.
On a machine with a GPU the parts really run; only the report's shape is checked then.
With --self-build instead: the same dry run builds the programs itself, as the first run on a GPU
machine does: every build must succeed (a failure fails this test), and wgmma must carry only
its sm_90a binary, no PTX. Without nvcc that is skipped (exit 77). It is the CTest entry
gpu_validate_self_build, labelled slow: about two minutes of nvcc for programs the CMake build
has just compiled from the same sources.
Usage: test_gpu_dry_run.py REPO_ROOT BIN_DIR [--self-build]"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import quiet_check as check, status  # noqa: E402
from gpu import has_gpu  # noqa: E402

ROOT, BIN = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
SELF_BUILD = sys.argv[3:] == ["--self-build"]
PARTS = ["math", "conversions", "arith", "fma", "mma", "wgmma", "cublas", "replay", "philox",
         "device_reference"]


def prebuilt(tmp):
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


def self_build(tmp):
    """The script's own build (no --bin)."""
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                     if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None)
    if nvcc is None:
        print("skipped: no nvcc here, the script's own build was not checked")
        sys.exit(77)
    out2, build2 = os.path.join(tmp, "out2"), os.path.join(tmp, "build2")
    env2 = dict(os.environ, HALFWAY_GPU_BUILD_DIR=build2,
                PATH=os.path.dirname(nvcc) + os.pathsep + os.environ.get("PATH", ""))
    p = subprocess.run([os.path.join(ROOT, "scripts", "gpu-validate"), "--dry-run", "--out",
                        out2, "--total", "280"], capture_output=True, text=True, env=env2,
                       timeout=600)
    print(p.stdout[-2000:])
    with open(os.path.join(out2, "report.json")) as f:
        rep2 = json.load(f)
    check(len(rep2["build"]) >= 5, f"programs built: {sorted(rep2['build'])}")
    for prog, b in rep2["build"].items():
        check(b["status"] and b["status"].get("exit") == 0 and "prebuilt" not in b["status"],
              f"the script's own build of {prog}: {b}")
    wgmma = os.path.join(build2, "halfway_gpu_wgmma")
    cuobjdump = os.path.join(os.path.dirname(nvcc), "cuobjdump")
    check(os.path.exists(wgmma), f"{wgmma} built")
    if not os.access(cuobjdump, os.X_OK):
        print("no cuobjdump next to nvcc: wgmma's binary was not inspected")
    elif os.path.exists(wgmma):
        ptx = subprocess.run([cuobjdump, "--list-ptx", wgmma], capture_output=True, text=True)
        elf = subprocess.run([cuobjdump, "--list-elf", wgmma], capture_output=True, text=True)
        check("sm_90a" in elf.stdout, f"wgmma's binary is for sm_90a: {elf.stdout!r}")
        check(".ptx" not in ptx.stdout, f"wgmma embeds PTX (its kernels trap): {ptx.stdout!r}")


tmp = tempfile.mkdtemp(prefix="halfway-gpu-dry-")
try:
    self_build(tmp) if SELF_BUILD else prebuilt(tmp)
finally:
    shutil.rmtree(tmp, ignore_errors=True)

sys.exit(status("ok"))
