"""The 10-32-1 ReLU MLP (Adam 0.01, 64 samples, five epochs of one batch) trained four ways:
plain PyTorch fp32 without and with torch.amp.GradScaler("cpu") (a row this torch cannot run,
for want of GradScaler("cpu"), is printed as skipped), then under
halfway.torch.emulate(recipe="torch-cuda-fp16") without a scaler and with one, then nvfp4.
Prints the loss table and, from each run folder's trace.csv, the values flushed to zero.

    python3 examples/emulate_seed.py [out_dir]

Each run writes its folder under out_dir (default: a temporary folder): steps.csv (the losses
printed), trace.csv (the flushed counts printed), manifest.json.
"""
import os
import sys
import tempfile

import numpy as np
import torch

import halfway.torch as ht

EPOCHS = 5
F = torch.nn.functional


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 10, generator=g)
    y = x[:, :1] * 0.5 + torch.randn(64, 1, generator=g) * 0.1
    return x, y


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def grad_scaler():
    """torch.amp.GradScaler("cpu") where this torch has it (2.3 and later), else None."""
    amp = getattr(torch, "amp", None)
    cls = getattr(amp, "GradScaler", None) if amp else None
    if cls is None:
        return None
    try:
        return cls("cpu", init_scale=2.0 ** 16)
    except (TypeError, RuntimeError):
        return None


def train(out, recipe=None, scaler=None):
    """Five epochs; the losses as logged (steps.csv under out)."""
    net = model()
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    x, y = data()
    with ht.emulate(net, recipe=recipe or "fp32", accumulation=None if recipe else "native",
                    out=out, scaler=scaler) as em:
        for _ in range(EPOCHS):
            opt.zero_grad()
            loss = F.mse_loss(net(x), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            em.log_loss(loss)
    return [l for _, l in em.losses]


def flushed(out):
    """Values flushed to zero per step, summed over the run folder's trace.csv."""
    import csv
    per_step = {}
    with open(os.path.join(out, "trace.csv")) as f:
        for row in csv.DictReader(f):
            s = int(row["step"])
            per_step[s] = per_step.get(s, 0) + int(row["flushed"])
    return [per_step.get(s, 0) for s in range(EPOCHS)]


def main(argv):
    base = argv[1] if len(argv) > 1 else tempfile.mkdtemp(prefix="emulate_seed.")
    runs = [("fp32", None, lambda: None, "fp32"),
            ("fp32, scaler", None, grad_scaler, "fp32-scaler"),
            ("torch-cuda-fp16, no scaler", "torch-cuda-fp16", lambda: None, "fp16"),
            ("torch-cuda-fp16, scaler", "torch-cuda-fp16", grad_scaler, "fp16-scaler"),
            ("nvfp4", "nvfp4", lambda: None, "nvfp4")]
    print(f"{'run':28s} " + " ".join(f"epoch {e:<7d}" for e in range(EPOCHS)) + "  flushed")
    for label, recipe, make_scaler, folder in runs:
        scaler = make_scaler()
        if make_scaler is grad_scaler and scaler is None:
            print(f"{label:28s} skipped: this torch ({torch.__version__}) has no "
                  "torch.amp.GradScaler('cpu')")
            continue
        out = os.path.join(base, folder)
        losses = train(out, recipe, scaler)
        print(f"{label:28s} " + " ".join(f"{np.float32(l):<13.6g}" for l in losses) +
              "  " + " ".join(str(n) for n in flushed(out)))
    print(f"run folders: {base}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
