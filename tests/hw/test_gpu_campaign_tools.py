#!/usr/bin/env python3
"""The GPU campaign's script and report tools, without a GPU:
 - scripts/gpu-validate says "skipped: no CUDA device", exits 77 and writes nothing;
 - hw/report/merge.py turns a work directory (part reports, some partial, killed, missing or
   not built) into one report whose statuses and summary say what happened, without machine
   paths;
 - hw/report/summarize.py writes summary.md (and plots when matplotlib is present).
Usage: test_gpu_campaign_tools.py REPO_ROOT"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import quiet_check as check, status  # noqa: E402
from gpu import has_gpu  # noqa: E402

ROOT = os.path.abspath(sys.argv[1])
PY = sys.executable


tmp = tempfile.mkdtemp(prefix="halfway-gpu-tools-")
try:
    # 1. The script on a machine without a GPU.
    if not has_gpu():
        out = os.path.join(tmp, "out")
        p = subprocess.run([os.path.join(ROOT, "scripts", "gpu-validate"), "--out", out],
                           capture_output=True, text=True, timeout=120)
        check(p.returncode == 77, f"gpu-validate without GPU: exit {p.returncode}, want 77")
        check("skipped: no CUDA device" in p.stdout, f"gpu-validate stdout: {p.stdout!r}")
        check(not os.path.exists(out), "gpu-validate wrote output without a GPU")
    p = subprocess.run([os.path.join(ROOT, "scripts", "gpu-validate"), "--bogus"], capture_output=True,
                       text=True, timeout=60)
    check(p.returncode == 2, f"gpu-validate --bogus: exit {p.returncode}, want 2")

    # 2. merge.py on a work directory as the script leaves it.
    work = os.path.join(tmp, "work")
    os.makedirs(work)
    device = {"name": "NVIDIA H200", "compute_capability": "9.0", "sms": 132, "memory_gib": 139.8,
              "driver": 13000, "runtime": 13000}
    check_entry = {"op": "f16_add", "source": "exhaustive", "domain": 4294967296, "covered": 4294967296,
                   "complete": True, "seed": 0, "mismatches": 5, "hw_hash": "0x0000000000000001",
                   "ref_hash": "0x0000000000000002", "replay_stride": 4099,
                   "replay_hw_hash": "0x0000000000000003", "replay_ref_hash": "0x0000000000000004",
                   "seconds": 1.5, "classes": [{"class": "nan_payload", "count": 5,
                                                "description": "NaN payload canonicalized to 0x7FFF",
                                                "hw_and": "7FFF", "hw_or": "7FFF",
                                                "example": {"index": 31745, "a": "0000", "b": "7C01",
                                                            "c": "0000", "hw": "7FFF", "ref": "7E01"}}]}
    parts = {
        "arith": {"part": "elementwise:arith", "status": "complete", "device": device,
                  "checks": [check_entry]},
        # killed at the limit while still running: its file says "running"
        "conversions": {"part": "elementwise:conversions", "status": "running", "device": device,
                        "checks": [dict(check_entry, op="f32_to_f16_rn", covered=268435456,
                                        complete=False, domain=4294967296)]},
        "math": {"part": "elementwise:math", "status": "complete", "device": device,
                 "math": [{"fn": "exp", "format": "fp16", "inputs": 65536, "correctly_rounded": 65000,
                           "unresolved": 0, "special_mismatch": 2,
                           "ulp_histogram": [65000, 500, 30, 4, 0, 0, 0], "max_ulp_error": 2.7,
                           "max_ulp_input": "4BFF", "nan_uniform": True, "nan_encoding": "7FFF",
                           "hw_hash": "0x0000000000000005", "exception_count": 0,
                           "exceptions_complete": True, "exceptions": []}]},
        "replay": {"part": "replay", "status": "complete", "device": device,
                   "input": {"bytes": 100, "fnv1a64": "0x0000000000000007", "layers": [16, 64, 64, 1],
                             "batch": 64, "steps": 1},
                   "cases": [{"case": "fp16-dynamic", "low": "fp16", "scaler": "dynamic", "steps": 1,
                              "step_records": [{"step": 0, "loss_scale": 65536, "found_inf": False,
                                                "skipped": False, "growth_tracker": 1,
                                                "next_scale": 65536,
                                                "tensors": [["0.input", "fp16", 1024,
                                                             "0x0000000000000008", "3C00"]]}]},
                             {"case": "bf16", "skipped": "time budget"}]},
    }
    statuses = {"arith": "exit=0 seconds=40 limit=55 killed=0",
                "conversions": f"exit=124 seconds=45 limit=45 killed=1",
                "math": "exit=0 seconds=3 limit=25 killed=0",
                "cublas": "exit=build_failed seconds=0 limit=30 killed=0"}
    for name, part in parts.items():
        with open(os.path.join(work, name + ".json"), "w") as f:
            json.dump(part, f)
    for name, st in statuses.items():
        with open(os.path.join(work, name + ".status"), "w") as f:
            f.write(st + "\n")
    with open(os.path.join(work, "conversions.log"), "w") as f:
        f.write(f"conversions on NVIDIA H200\n  reading {ROOT}/hw/cuda/x\n")
    with open(os.path.join(work, "build-halfway_gpu_cublas.status"), "w") as f:
        f.write("exit=1 seconds=3\n")
    with open(os.path.join(work, "build-halfway_gpu_cublas.log"), "w") as f:
        f.write(f"{ROOT}/hw/cuda/cublas.cu(1): error: something\n")
    for prog in ("halfway_gpu_elementwise", "halfway_gpu_mma"):
        with open(os.path.join(work, f"build-{prog}.status"), "w") as f:
            f.write("exit=0 seconds=30\n")
    out = os.path.join(tmp, "results")
    os.makedirs(out)
    report_path = os.path.join(out, "report.json")
    p = subprocess.run([PY, os.path.join(ROOT, "hw", "report", "merge.py"), "--work", work, "--out",
                        report_path, "--root", ROOT, "--seed", "7", "--fma-count", "100"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"merge.py exit {p.returncode}: {p.stderr}")
    with open(report_path) as f:
        text = f.read()
    rep = json.loads(text)
    check(ROOT not in text, "the merged report contains the machine's repository path")
    check(rep["parts"]["arith"]["status"] == "complete", "arith status")
    check(rep["parts"]["conversions"]["status"] == "partial (killed at the time limit)",
          f'conversions status {rep["parts"]["conversions"]["status"]}')
    check(rep["parts"]["cublas"]["status"] == "not run: build failed", f'cublas {rep["parts"]["cublas"]}')
    check(rep["parts"]["mma"]["status"] == "not run", "mma status")
    check(rep["build"]["halfway_gpu_cublas"]["log_tail"] == ["./hw/cuda/cublas.cu(1): error: something"],
          f'build log tail {rep["build"]["halfway_gpu_cublas"]}')
    check(rep["summary"]["status"] == "partial", "summary status")
    check(rep["summary"]["checks"]["f16_add/exhaustive"]["mismatches"] == 5, "summary of f16_add")
    check(rep["summary"]["checks"]["f16_add/exhaustive"]["classes"] == {"nan_payload": 5}, "summary classes")
    check(rep["summary"]["math"]["hexp/fp16"]["max_ulp_error"] == 2.7, "summary of hexp")
    check(rep["seed"] == 7 and rep["fma_count"] == 100, "seed and fma count recorded")
    check(rep["summary"]["replay"]["fp16-dynamic"]["tensors"] == 1, "summary of the replay")
    check(rep["summary"]["replay"]["bf16"] == {"skipped": "time budget"}, "replay case skipped")
    check(rep["parts"]["replay"]["status"] == "complete", "replay status")

    # 3. summarize.py
    p = subprocess.run([PY, os.path.join(ROOT, "hw", "report", "summarize.py"), report_path, "--out", out],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"summarize.py exit {p.returncode}: {p.stderr}")
    with open(os.path.join(out, "summary.md")) as f:
        md = f.read()
    check("NVIDIA H200" in md, "device in the summary")
    check("5 × NaN payload canonicalized to 0x7FFF (e.g. 0000 7C01 → 7FFF, library 7E01)" in md,
          "f16_add line in the summary")
    check("268 435 456 / 4 294 967 296" in md, "partial coverage shown")
    check("Build of `halfway_gpu_cublas` failed" in md, "build failure shown")
    check("| hexp | fp16 | 99.1821% | 2.7 (at 4BFF)" in md, "hexp row")
    check("| fp16-dynamic | fp16 | dynamic | 1 | 1 | 0 |" in md, "replay row")
    check("| bf16 |  |  | not run: time budget |" in md, "replay case not run")
    try:
        import matplotlib  # noqa: F401
        check(os.path.exists(os.path.join(out, "plots", "math_ulp.png")), "math plot written")
        check("![plots/elementwise_mismatches.png]" in md, "plot linked")
    except ImportError:
        check("matplotlib is not available" in md, "missing matplotlib reported")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

sys.exit(status("ok"))
