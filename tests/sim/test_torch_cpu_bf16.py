"""PyTorch cross-check under CPU autocast bf16: the issue's config verbatim (torch-cpu-bf16,
Adam, dynamic scaler) against `torch.autocast('cpu', dtype=torch.bfloat16)` with the same
initial weights and data. Per-step losses agree to 4 decimals. (GradScaler is CUDA-only in
PyTorch 1.13, and scaling by 2^16 is exact in bf16, so the reference runs unscaled.) The
`torch-cpu` accumulation model is torch 1.13's, so the check needs torch 1.13 (Debian 12's
python3-torch) and skips under any other version: torch 2.x accumulates the small bf16 GEMMs
that 1.13 computed in bf16 in fp32 instead (docs/sim.md). It also skips on CPUs without
AVX512-BF16, where torch 1.13 takes another bf16 kernel than the one calibrated.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from simtest import ISSUE_CONFIG, batches, check, in_workdir, mlp_export, need_torch, train  # noqa: E402

need_torch(version="1.13")


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# The calibration was measured on CPUs with AVX512-BF16 (AMD Zen 4, Intel Xeon). On an AMD EPYC
# with AVX2 only, torch 1.13 takes another bf16 GEMM kernel: seed 0's loss at step 3 read
# 1.1573567 against halfway's 1.1571412, so this check does not describe that machine.
if "avx512_bf16" not in cpu_flags():
    print("SKIP: torch 1.13's CPU bf16 GEMMs were calibrated on CPUs with AVX512-BF16; "
          "this CPU has none")
    sys.exit(77)
import numpy as np  # noqa: E402
import torch  # noqa: E402


def main(halfway, w):
    torch.set_num_threads(1)
    worst = 0.0
    differing = total = 0
    for seed, steps in ((0, 5), (1, 12), (2, 12)):
        model, x, y = mlp_export(np, torch, [10, 32, 1], 256, seed, w)
        cfg = w.write("run.toml", ISSUE_CONFIG.replace("steps = 5", f"steps = {steps}") +
                      "[output]\ngrads = true\n")
        out = w.file(f"out{seed}")
        rows = train(halfway, cfg, out)
        grads = np.load(os.path.join(out, "grads.npz"))
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        for step, (xb, yb) in enumerate(batches(x, y, 64, steps)):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(xb), yb)
            check(loss.dtype == torch.float32, "mse runs in fp32 under CPU autocast")
            loss.backward()
            # Reported, not asserted: bit-identity depends on PyTorch's kernel choice on
            # this CPU (oneDNN bf16 needs AVX-512), which the torch-cpu model assumes.
            for pname, p in model.named_parameters():
                g = grads[f"step{step}.{pname}"]
                differing += int(np.sum(g != p.grad.numpy()))
                total += g.size
            opt.step()
            ours = float(rows[step]["loss"])
            diff = abs(ours - loss.item())
            worst = max(worst, diff)
            check(diff < 5e-5, f"seed {seed} step {step}: loss {ours:.7f} vs PyTorch "
                               f"{loss.item():.7f} (differ at 4 decimals)")
            check(rows[step]["skipped"] == "0", "no skipped steps in bf16")
    print(f"ok: worst absolute loss difference {worst:.3g}; "
          f"{differing} of {total} gradient values differ from PyTorch's")


if __name__ == "__main__":
    sys.exit(in_workdir("torch_bf16", main))
