"""PyTorch cross-check in fp32: the same MLP (PyTorch's initial weights exported to .npz with
state_dict names), the same data and the same optimizer in halfway and in PyTorch on the CPU.
Per-step losses and the first steps' gradients agree to fp32 rounding: the only differences
are summation orders (halfway accumulates sequentially, oneDNN/MKL in blocks)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from simtest import batches, check, in_workdir, mlp_export, need_torch, train  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import config  # noqa: E402

need_torch()
import numpy as np  # noqa: E402
import torch  # noqa: E402


OPTIMIZERS = {
    "sgd": ({"kind": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01},
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01)),
    "adam": ({"kind": "adam", "lr": 0.01}, lambda p: torch.optim.Adam(p, lr=0.01)),
    "adamw": ({"kind": "adamw", "lr": 0.01, "weight_decay": 0.1},
              lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
}


def main(halfway, w):
    torch.set_num_threads(1)
    steps = 8
    worst_loss = worst_grad = 0.0
    for name, (optimizer, make_opt) in OPTIMIZERS.items():
        model, x, y = mlp_export(np, torch, [10, 32, 32, 1], 256, 7, w)
        cfg = w.write("run.toml", config(
            "mlp", model={"layers": [10, 32, 32, 1], "activation": "relu", "init": "init.npz"},
            data={"synthetic": None, "n": None, "npz": "data.npz"}, optimizer=optimizer,
            precision={"policy": "fp32"}, scaler=None, run={"steps": steps},
            output={"grads": True}))
        out = w.file("out_" + name)
        rows = train(halfway, cfg, out)
        grads = np.load(os.path.join(out, "grads.npz"))
        opt = make_opt(model.parameters())
        for step, (xb, yb) in enumerate(batches(x, y, 64, steps)):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            ours = float(rows[step]["loss"])
            rel = abs(ours - loss.item()) / abs(loss.item())
            worst_loss = max(worst_loss, rel)
            check(rel < 1e-6, f"{name} step {step}: loss {ours} vs PyTorch {loss.item()}")
            if step < 3:
                for pname, p in model.named_parameters():
                    g = grads[f"step{step}.{pname}"]
                    ref = p.grad.numpy()
                    err = np.max(np.abs(g - ref)) / np.max(np.abs(ref))
                    worst_grad = max(worst_grad, err)
                    check(err < 1e-6, f"{name} step {step} {pname}: gradient error {err:.3g}")
            opt.step()
    print(f"ok: worst relative loss difference {worst_loss:.3g}, "
          f"worst gradient difference {worst_grad:.3g} (of max |g|)")


if __name__ == "__main__":
    sys.exit(in_workdir("torch_fp32", main))
