"""`halfway train`'s .npz outputs: grads.npz is streamed to disk as the run goes (a long run's
peak memory is no higher with it than without it), it holds the gradients the weights moved
by, and past 65,535 members it is a ZIP64 archive numpy reads whole. Needs numpy."""
import os
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from simtest import check, in_workdir  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import Raw, config  # noqa: E402



def train(halfway, w, name, layers, steps, grads, init=""):
    """Run one config; (output directory, peak RSS of the run in KiB)."""
    model = {"layers": Raw(layers), "activation": "relu"}
    if init:
        model["init"] = init
    cfg = w.write(name + ".toml", config(
        "mlp", model=model, data={"n": 64, "batch_size": 8},
        optimizer={"kind": "sgd", "lr": 0.5}, precision={"policy": "fp32"},
        scaler={"kind": "none"}, run={"steps": steps, "seed": 3}, trace={"enabled": False},
        output={"weights": True, "grads": grads}))
    out = w.file(name)
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen([halfway, "train", cfg, "--out", out], stdout=subprocess.DEVNULL,
                             stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        check(p.returncode == 0, f"{name}: exit {p.returncode}: {err.read().decode()!r}")
    leftovers = [f for f in os.listdir(out) if ".tmp" in f]
    check(not leftovers, f"{name}: temporary files left behind: {leftovers}")
    return out, ru.ru_maxrss


def main(halfway, w):
    # Streaming: 1,500 steps of 10,241 gradients each (61 MB as float32). Held in memory,
    # as before, they took several times that; streamed, the peak is the run's own.
    layers, steps = "[8, 1024, 1]", 1500
    _, rss_plain = train(halfway, w, "plain", layers, steps, grads=False)
    out, rss_grads = train(halfway, w, "grads", layers, steps, grads=True)
    grads_mb = os.path.getsize(os.path.join(out, "grads.npz")) / 2**20
    check(grads_mb > 55, f"grads.npz is only {grads_mb:.1f} MiB")
    print(f"peak memory: {rss_plain / 1024:.1f} MiB without grads, {rss_grads / 1024:.1f} "
          f"MiB with {grads_mb:.1f} MiB of grads.npz")
    check(rss_grads < rss_plain + 16 * 1024,
          f"grads = true raised peak memory from {rss_plain} to {rss_grads} KiB")
    z = np.load(os.path.join(out, "grads.npz"))
    check(len(z.files) == 4 * steps, f"{len(z.files)} members, expected {4 * steps}")
    check(z["step1499.0.weight"].shape == (1024, 8) and z["step0.2.bias"].shape == (1,),
          "member shapes")
    check(all(z[k].dtype == np.float32 for k in ("step0.0.weight", "step1499.2.bias")),
          "float32 members")
    manifest = open(os.path.join(out, "manifest.json")).read()
    check('"grads.npz"' in manifest, "manifest lists grads.npz")

    # Content: with plain SGD, one step moves each weight by lr times its gradient.
    g = np.random.default_rng(5)
    init = {"0.weight": g.uniform(-0.3, 0.3, (16, 4)), "0.bias": g.uniform(-0.3, 0.3, 16),
            "2.weight": g.uniform(-0.2, 0.2, (2, 16)), "2.bias": g.uniform(-0.2, 0.2, 2)}
    init = {k: v.astype(np.float32) for k, v in init.items()}
    np.savez(w.file("init.npz"), **init)
    out, _ = train(halfway, w, "one", "[4, 16, 2]", 1, grads=True, init="init.npz")
    grads = np.load(os.path.join(out, "grads.npz"))
    weights = np.load(os.path.join(out, "weights.npz"))
    check(sorted(grads.files) == sorted("step0." + k for k in init), f"{grads.files}")
    for k, w0 in init.items():
        moved = (w0.astype(np.float64) - weights[k]) / 0.5
        gk = grads["step0." + k]
        check(gk.shape == w0.shape, f"{k}: shape {gk.shape}")
        tol = 1e-6 * max(1e-30, float(np.abs(gk).max())) + 2 * np.spacing(np.abs(w0)).max()
        check(float(np.abs(moved - gk).max()) <= tol, f"{k}: gradients do not match the step")

    # More than 65,535 members: ZIP64, read whole by numpy.
    steps = 33000
    out, _ = train(halfway, w, "many", "[1, 1]", steps, grads=True)
    path = os.path.join(out, "grads.npz")
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    check(len(names) == 2 * steps, f"{len(names)} members, expected {2 * steps}")
    z = np.load(path)
    check(len(z.files) == 2 * steps, "numpy sees every member")
    last = z[f"step{steps - 1}.0.weight"]
    check(last.shape == (1, 1) and np.isfinite(last).all(), "last member")
    b = open(path, "rb").read()
    check(b[-22:-18] == b"PK\x05\x06" and b[-42:-38] == b"PK\x06\x07", "ZIP64 end records")
    print("ok")


if __name__ == "__main__":
    sys.exit(in_workdir("npz_output", main))
