#!/usr/bin/env python3
"""The training-step replay's path from the device program's report to the comparison, without
a GPU: `test_hw_replay_mlp --host-report` writes the part the GPU program would (same JSON code,
host intrinsics), hw/report/merge.py and summarize.py turn it into a campaign report, and
`test_hw_replay_mlp --report` compares every hash with the simulator (exit 0), reports a changed
hash (exit 1), and skips with 77 when the report has no replay part.
Usage: test_replay_dry_run.py TEST_BINARY INPUT_FILE REPO_ROOT"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import quiet_check as check, status  # noqa: E402

BIN, INPUT, ROOT = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
PY = sys.executable


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=300)


tmp = tempfile.mkdtemp(prefix="halfway-replay-dry-")
try:
    work, out = os.path.join(tmp, "work"), os.path.join(tmp, "out")
    os.makedirs(work)
    os.makedirs(out)
    p = run(BIN, "--input", INPUT, "--host-report", os.path.join(work, "replay.json"))
    check(p.returncode == 0, f"--host-report exit {p.returncode}: {p.stdout}{p.stderr}")
    with open(os.path.join(work, "replay.status"), "w") as f:
        f.write("exit=0 seconds=2 limit=30 killed=0\n")
    report = os.path.join(out, "report.json")
    p = run(PY, os.path.join(ROOT, "hw", "report", "merge.py"), "--work", work, "--out", report,
            "--root", ROOT)
    check(p.returncode == 0, f"merge.py exit {p.returncode}: {p.stderr}")
    p = run(PY, os.path.join(ROOT, "hw", "report", "summarize.py"), report, "--out", out)
    check(p.returncode == 0, f"summarize.py exit {p.returncode}: {p.stderr}")
    with open(os.path.join(out, "summary.md")) as f:
        md = f.read()
    check("| fp16-dynamic | fp16 | dynamic | 20 | 920 | 0 |" in md, "replay row in summary.md")
    with open(report) as f:
        rep = json.load(f)
    check(rep["summary"]["replay"]["bf16"]["tensors"] == 880, "replay summary")

    p = run(BIN, "--input", INPUT, "--report", report)
    print(p.stdout.strip())
    check(p.returncode == 0, f"comparator on the merged report: exit {p.returncode}")
    check("3600 tensor hashes compared, 0 failures" in p.stdout, "comparator counts")

    t = rep["parts"]["replay"]["cases"][2]["step_records"][19]["tensors"][5]
    t[3] = t[3][:-1] + ("1" if t[3][-1] == "0" else "0")
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        json.dump(rep, f)
    p = run(BIN, "--input", INPUT, "--report", bad)
    check(p.returncode == 1 and "hash differs" in p.stdout, f"tampered hash: exit {p.returncode}")

    del rep["parts"]["replay"]
    with open(bad, "w") as f:
        json.dump(rep, f)
    p = run(BIN, "--input", INPUT, "--report", bad)
    check(p.returncode == 77 and "skipped: no GPU replay report committed" in p.stdout,
          f"no replay part: exit {p.returncode}")
    p = run(BIN, "--input", INPUT, "--report", os.path.join(tmp, "missing.json"))
    check(p.returncode == 77, f"no report: exit {p.returncode}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

sys.exit(status("ok"))
