"""Execute every notebook in notebooks/ with nbclient (a fresh kernel running this
interpreter, so it imports the same halfway); any cell that raises fails the test."""

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


class Notebooks(hwtest.unittest.TestCase):
    def test_there_are_notebooks(self):
        self.assertTrue(NOTEBOOKS, "no notebooks found in notebooks/")

    def test_every_notebook_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            # A kernel spec for this interpreter: the notebook sees the same PYTHONPATH and
            # numpy as the test, whatever kernels the machine has installed.
            spec = os.path.join(tmp, "kernels", "halfway-test")
            os.makedirs(spec)
            with open(os.path.join(spec, "kernel.json"), "w") as f:
                json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f",
                                    "{connection_file}"],
                           "display_name": "halfway test", "language": "python"}, f)
            os.environ["JUPYTER_PATH"] = tmp + os.pathsep + os.environ.get("JUPYTER_PATH", "")
            for path in NOTEBOOKS:
                with self.subTest(notebook=os.path.basename(path)):
                    nb = nbformat.read(path, as_version=4)
                    client = nbclient.NotebookClient(
                        nb, timeout=300, kernel_name="halfway-test",
                        resources={"metadata": {"path": os.path.dirname(path)}})
                    client.execute()  # raises CellExecutionError on the first failing cell


if __name__ == "__main__":
    hwtest.main()
