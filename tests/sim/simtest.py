"""Shared helpers for the simulator's end-to-end tests (run by CTest with Debian's python3)."""
import csv
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import data_file  # noqa: E402

SKIP = 77  # CTest SKIP_RETURN_CODE

# The MLP config of the issue that specified `halfway train`, verbatim (comments included).
with open(data_file("issue_mlp.toml")) as f:
    ISSUE_CONFIG = f.read()


def need_torch(version=None):
    """Skips (exit 77) unless torch imports, and, with `version` ("1.13"), is that release."""
    try:
        import torch
    except Exception as e:  # pragma: no cover - depends on the machine
        print(f"SKIP: PyTorch is not importable ({e.__class__.__name__}: {e}); "
              "scripts/test installs it in .venv (or install Debian's python3-torch)")
        sys.exit(SKIP)
    if version and not torch.__version__.startswith(version + "."):
        print(f"SKIP: this check is calibrated against torch {version} (Debian's python3-torch); "
              f"{sys.executable} has torch {torch.__version__}")
        sys.exit(SKIP)


def strace_env():
    """The environment for a run under strace: LeakSanitizer cannot work under ptrace (it stops
    a sanitized build with a fatal error), so leak checks are off there; nothing else changes."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    return env


def strace_missing():
    """Why strace cannot kill or signal a process at a chosen system call here (None: it can)."""
    if not shutil.which("strace"):
        return "strace is not installed"
    r = subprocess.run(["strace", "-f", "-o", os.devnull, "true"], capture_output=True, text=True)
    return None if r.returncode == 0 else f"strace cannot trace here: {r.stderr.strip()}"


class Workdir:
    def __init__(self, name):
        self.path = tempfile.mkdtemp(prefix=f"halfway_{name}_")

    def file(self, name):
        return os.path.join(self.path, name)

    def write(self, name, text):
        with open(self.file(name), "w") as f:
            f.write(text)
        return self.file(name)

    def cleanup(self):
        shutil.rmtree(self.path, ignore_errors=True)


def in_workdir(name, main):
    """A script test's whole run: main(halfway, w), with the halfway binary of the command line
    (sys.argv[1]) and w a fresh Workdir(name) removed afterwards, whether main returns or
    raises (a failed check raises: the test exits 1 with the traceback). The exit status is
    what main returns (SKIP, say), 0 when it returns nothing."""
    w = Workdir(name)
    try:
        return main(sys.argv[1], w) or 0
    finally:
        w.cleanup()


def run(halfway, *args):
    return subprocess.run([halfway, *args], capture_output=True, text=True)


def train(halfway, config_path, out_dir, *extra):
    r = run(halfway, "train", config_path, "--out", out_dir, *extra)
    if r.returncode != 0:
        raise AssertionError(f"halfway train failed ({r.returncode}): {r.stderr.strip()}")
    return read_csv(os.path.join(out_dir, "steps.csv"))


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def mlp_export(np, torch, widths, n, seed, wdir, act="relu", compressed=False):
    """A PyTorch nn.Sequential MLP and data, saved as init.npz / data.npz."""
    torch.manual_seed(seed)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU() if act == "relu" else torch.nn.GELU())
    model = torch.nn.Sequential(*layers)
    g = np.random.default_rng(seed)
    x = g.standard_normal((n, widths[0])).astype(np.float32)
    w = g.standard_normal((widths[0], widths[-1])).astype(np.float32) / np.sqrt(widths[0])
    y = (x @ w + 0.1 * g.standard_normal((n, widths[-1]))).astype(np.float32)
    np.savez(wdir.file("init.npz"), **{k: v.detach().numpy() for k, v in model.state_dict().items()})
    (np.savez_compressed if compressed else np.savez)(wdir.file("data.npz"), x=x, y=y)
    return model, torch.from_numpy(x), torch.from_numpy(y)


def batches(x, y, batch_size, steps):
    """DataLoader(shuffle=False, drop_last=False) order, epoch after epoch."""
    n = x.shape[0]
    pos = 0
    for _ in range(steps):
        if pos >= n:
            pos = 0
        b = min(batch_size, n - pos)
        yield x[pos:pos + b], y[pos:pos + b]
        pos += b


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)
