"""Execute every notebook in notebooks/ with nbclient (a fresh kernel running this
interpreter, so it imports the same halfway); any cell that raises fails the test. The
notebooks are committed with their outputs, so they read without running: re-executing must
reproduce every stored text output (printed lines and results, not stderr) exactly, and every notebook must
draw at least one figure. Images are not compared byte for byte (the numbers drawn are the
printed ones). Negative control: a stored output changed by one character must be reported.

The kernel runs PyTorch with ATEN_CPU_CAPABILITY=default, MKL_ENABLE_INSTRUCTIONS=AVX2 and
ONEDNN_MAX_CPU_ISA=AVX2: its own vectorised kernels' reductions and elementwise loops, and the
fp32 GEMMs it leaves to MKL and oneDNN, then take the same vectors on every x86 CPU with AVX2,
where AVX-512 machines would otherwise sum in another order. Notebook 05's mxfp8 loss read
1.7311e-04 on an AVX-512 Xeon and 1.7255e-04 on an AVX2 EPYC; on the Xeon, pinning ATen's
capability alone still gave 1.7311e-04, halfway's own kernels forced to their AVX2 path
(HALFWAY_DISABLE_ISA=avx512) too, and capping MKL and oneDNN at AVX2 gave 1.7255e-04: the
difference is PyTorch's fp32 GEMMs, not halfway's roundings. The stored outputs are made the
same way: `test_notebooks.py --store NOTEBOOK...` executes the notebooks and writes them back
with their outputs."""

import glob
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

nbformat = hwtest.require("nbformat", "executing the notebooks")
nbclient = hwtest.require("nbclient", "executing the notebooks")
hwtest.require("ipykernel", "executing the notebooks")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


def texts(nb):
    """Per code cell: its text outputs (streams, and results that are not figures), joined;
    a stream's consecutive chunks are one text, however the kernel flushed them."""
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        parts, last = [], None
        for o in cell.get("outputs", []):
            if o.output_type == "stream" and o.name == "stderr":
                continue  # warnings name the kernel's temporary files
            if o.output_type == "stream" and last == o.name:
                parts[-1] += o.text
            elif o.output_type == "stream":
                parts.append(f"[{o.name}]{o.text}")
            elif o.output_type in ("execute_result", "display_data") and \
                    "image/png" not in o.data and "text/plain" in o.data:
                parts.append(o.data["text/plain"])
            elif o.output_type == "error":
                parts.append(f"[error]{o.ename}")
            last = o.name if o.output_type == "stream" else None
        out.append("".join(parts))
    return out


def figures(nb):
    return sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code"
               for o in c.get("outputs", []))


def mismatches(stored, fresh):
    return [i for i, (a, b) in enumerate(zip(stored, fresh)) if a != b] + \
        ([-1] if len(stored) != len(fresh) else [])


# The kernel's environment: PyTorch's CPU kernels at one vector width on every machine.
KERNEL_ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
              "ONEDNN_MAX_CPU_ISA": "AVX2"}


def kernel_spec(tmp):
    """A kernel spec for this interpreter in `tmp` (the notebook sees the same PYTHONPATH and
    numpy as the test, whatever kernels the machine has installed), on JUPYTER_PATH."""
    spec = os.path.join(tmp, "kernels", "halfway-test")
    os.makedirs(spec)
    with open(os.path.join(spec, "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f",
                            "{connection_file}"],
                   "display_name": "halfway test", "language": "python", "env": KERNEL_ENV}, f)
    os.environ["JUPYTER_PATH"] = tmp + os.pathsep + os.environ.get("JUPYTER_PATH", "")


def execute(path):
    """The notebook at `path`, executed by the test's kernel (outputs replaced)."""
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="halfway-test",
                            resources={"metadata": {"path": os.path.dirname(path)}}).execute()
    return nb


class Notebooks(hwtest.unittest.TestCase):
    def test_there_are_notebooks(self):
        self.assertGreaterEqual(len(NOTEBOOKS), 5, "notebooks/ should hold 01-04 and 06")

    def test_comparison_sees_a_change(self):
        nb = nbformat.read(NOTEBOOKS[0], as_version=4)
        stored = texts(nb)
        i = next(k for k, t in enumerate(stored) if t)
        changed = list(stored)
        changed[i] = changed[i][:-1] + ("x" if changed[i][-1] != "x" else "y")
        self.assertEqual(mismatches(stored, changed), [i])

    def test_every_notebook_runs_and_reproduces_its_outputs(self):
        with tempfile.TemporaryDirectory() as tmp:
            kernel_spec(tmp)
            for path in NOTEBOOKS:
                with self.subTest(notebook=os.path.basename(path)):
                    stored = texts(nbformat.read(path, as_version=4))
                    self.assertGreater(sum(map(len, stored)), 0, "no stored outputs")
                    nb = execute(path)  # raises CellExecutionError on the first failing cell
                    fresh = texts(nb)
                    bad = mismatches(stored, fresh)
                    self.assertEqual(bad, [], "outputs differ from the stored ones in cells "
                                     f"{bad}: {[(stored[i], fresh[i]) for i in bad[:1]]}")
                    self.assertGreater(figures(nb), 0, "the notebook draws no figure")


def store(paths):
    """Execute each notebook as the test does and write it back with its new outputs."""
    with tempfile.TemporaryDirectory() as tmp:
        kernel_spec(tmp)
        for path in paths:
            nbformat.write(execute(path), path)
            print("stored", os.path.relpath(path, ROOT))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--store":
        store([os.path.abspath(p) for p in sys.argv[2:]] or NOTEBOOKS)
        sys.exit(0)
    hwtest.main()
