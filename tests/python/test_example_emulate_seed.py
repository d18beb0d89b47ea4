"""examples/emulate_seed.py runs, and every number it prints is recomputed here from the run
folders it writes (steps.csv's losses, trace.csv's flushed counts), by code that does not share
the example's; rows this torch cannot run (no torch.amp.GradScaler("cpu")) say skipped.
Negative control: a run folder with one loss changed must fail the recomputation."""

import csv
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

np = hwtest.np
torch = hwtest.require("torch", "halfway.torch.emulate")

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "emulate_seed.py")
FOLDERS = {"fp32": "fp32", "fp32, scaler": "fp32-scaler", "torch-cuda-fp16, no scaler": "fp16",
           "torch-cuda-fp16, scaler": "fp16-scaler", "nvfp4": "nvfp4"}


def table(stdout):
    rows = {}
    for line in stdout.splitlines():
        for label in sorted(FOLDERS, key=len, reverse=True):
            if line.startswith(label + " "):
                rows[label] = line[len(label):].split()
                break
    return rows


def recomputed(folder):
    with open(os.path.join(folder, "steps.csv")) as f:
        losses = [f"{np.float32(float(r['loss'])):.6g}" for r in csv.DictReader(f)]
    flushed = {}
    with open(os.path.join(folder, "trace.csv")) as f:
        for r in csv.DictReader(f):
            flushed[r["step"]] = flushed.get(r["step"], 0) + int(r["flushed"])
    return losses + [str(flushed.get(str(s), 0)) for s in range(len(losses))]


class Example(hwtest.unittest.TestCase):
    def test_printed_numbers_come_from_the_run_folders(self):
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([sys.executable, EXAMPLE, d], capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            rows = table(r.stdout)
            self.assertEqual(set(rows), set(FOLDERS), r.stdout)
            ran = 0
            for label, cells in rows.items():
                folder = os.path.join(d, FOLDERS[label])
                if cells[0] == "skipped:":
                    self.assertIn("scaler", label)
                    self.assertFalse(os.path.exists(folder))
                    continue
                ran += 1
                self.assertEqual(cells, recomputed(folder), label)
                self.assertEqual(len(cells), 10, label)  # five losses, five flushed counts
            self.assertGreaterEqual(ran, 3)
            # Negative control: one changed loss in a copy of a folder is seen.
            bad = os.path.join(d, "bad")
            shutil.copytree(os.path.join(d, "nvfp4"), bad)
            path = os.path.join(bad, "steps.csv")
            lines = open(path).read().splitlines()
            step, loss = lines[3].split(",")
            lines[3] = f"{step},{float(loss) * 1.5!r}"
            open(path, "w").write("\n".join(lines) + "\n")
            self.assertNotEqual(rows["nvfp4"], recomputed(bad))


if __name__ == "__main__":
    hwtest.unittest.main()
