"""emulate on a model whose parameters and data live on a CUDA device: its operands are copied
to the host, emulated there and the results copied back, so whatever halfway computes must equal
the same run on the CPU bit for bit.

What emulate leaves to PyTorch runs on the model's device: fp32 ops with fp32 operands under a
deterministic recipe (softmax, layer norm, a loss) are PyTorch's own kernels there, and CUDA's
differ from the CPU's in the last bits. So the comparison uses models in which every value is
halfway's or exact: an MLP (Linear, ReLU, Linear) driven by a fixed upstream gradient (no loss
op) under every recipe, and a 2-block TransformerEncoder (mse) under nvfp4, whose stochastic
rounding sends every op through halfway. Three steps of SGD (learning rate 2^-4, one kernel
per parameter: the update's product is exact, so the device's fused multiply-add cannot differ
from the host's). Outputs, losses, every gradient and the final parameters must agree bit for
bit, and so must the run folders' steps.csv, trace.csv and blocks.csv and the ops each run left
to PyTorch. The comparison must be able to fail: nvfp4 on the GPU with another seed must
differ from the CPU run. The encoder under a deterministic recipe is reported, not compared: the
number of gradient elements in which PyTorch's CUDA kernels moved it. Skipped (exit 77) without
torch or without a CUDA device."""
import copy
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import check, status  # noqa: E402
from hwtest import same_runs as same, tensor_bits as bits  # noqa: E402

torch = hwtest.require("torch", "emulating a model on a CUDA device")
if not torch.cuda.is_available():
    print("skipped: no CUDA device (torch.cuda.is_available() is False)")
    sys.exit(hwtest.SKIP)
import halfway.torch as ht  # noqa: E402



def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return model, torch.randn(8, 16), torch.randn(8, 4), None  # y: the upstream gradient


def encoder():
    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    x, y = torch.randn(4, 8, 32), torch.randn(4, 8, 32)
    return model, x, y, torch.nn.functional.mse_loss


def train(build, device, recipe, accumulation, out, seed=0, steps=3):
    model, x, y, loss_fn = build()
    model = copy.deepcopy(model).to(device)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=2.0 ** -4, foreach=False)
    seen = []
    with ht.emulate(model, recipe, accumulation=accumulation, seed=seed, out=out) as em:
        for _ in range(steps):
            opt.zero_grad()
            o = model(x)
            if loss_fn is None:
                o.backward(y)
                seen.append([bits(o)] + [bits(p.grad) for p in model.parameters()])
            else:
                loss = loss_fn(o, y)
                loss.backward()
                em.log_loss(loss)
                seen.append([bits(o), bits(loss)] + [bits(p.grad) for p in model.parameters()])
            opt.step()
        on_device = o.device.type == torch.device(device).type and all(
            p.grad.device.type == torch.device(device).type for p in model.parameters())
        unemulated = dict(em.unemulated)
    seen.append([bits(p) for p in model.parameters()])
    return seen, unemulated, on_device


def folder_files(out):
    return {f: open(os.path.join(out, f), "rb").read() for f in ("steps.csv", "trace.csv",
                                                                   "blocks.csv")
            if os.path.exists(os.path.join(out, f))}


tmp = tempfile.mkdtemp(prefix="halfway-emulate-cuda-")
try:
    cases = [(mlp, r, None) for r in ("fp32", "torch-cuda-fp16", "torch-cuda-bf16",
                                      "torch-cpu-bf16", "pure-fp16", "pure-bf16", "fp8-hybrid",
                                      "fp8-current", "fp8-blockwise", "mxfp8", "mxfp4", "nvfp4")]
    cases += [(mlp, "fp8-hybrid", "mmasim-hopper"), (mlp, "torch-cuda-fp16", "a100"),
              (encoder, "nvfp4", None)]
    outputs = {}
    for build, recipe, acc in cases:
        what = f"{build.__name__} {recipe} accumulation={acc}"
        runs = {}
        for device in ("cpu", "cuda"):
            out = os.path.join(tmp, f"{build.__name__}-{recipe}-{acc}-{device}")
            runs[device] = train(build, device, recipe, acc, out) + (folder_files(out),)
        (c_seen, c_un, c_on, c_files), (g_seen, g_un, g_on, g_files) = runs["cpu"], runs["cuda"]
        check(g_on and c_on, f"{what}: outputs and gradients on the model's device")
        check(same(c_seen, g_seen), f"{what}: outputs, losses, gradients, parameters bit for bit")
        check(c_un == g_un, f"{what}: the same ops left to PyTorch ({c_un} vs {g_un})")
        check(not any("not emulated" in k for k in g_un), f"{what}: every op emulated on CUDA ({g_un})")
        check(set(c_files) == set(g_files) and all(c_files[f] == g_files[f] for f in c_files),
              f"{what}: run folder files byte for byte")
        outputs[(build.__name__, recipe, acc)] = c_seen[0][0]
        print(f"{what}: {len(c_seen) - 1} steps, CPU and CUDA identical" if same(c_seen, g_seen)
              else f"{what}: differ")
    check(not np.array_equal(outputs[("mlp", "fp32", None)], outputs[("mlp", "nvfp4", None)]),
          "nvfp4's output differs from fp32's (the recipes act)")
    # What PyTorch's own fp32 kernels do on the device (reported): the encoder under a
    # deterministic recipe, whose softmax, layer norms and loss emulate leaves to PyTorch.
    c_seen, _, _ = train(encoder, "cpu", "torch-cuda-fp16", None, None)
    g_seen, _, _ = train(encoder, "cuda", "torch-cuda-fp16", None, None)
    moved = sum(int((u != v).sum()) for a, b in zip(c_seen[:-1], g_seen[:-1])
                for u, v in zip(a[2:], b[2:]))
    total = sum(u.size for a in c_seen[:-1] for u in a[2:])
    print(f"encoder torch-cuda-fp16 (PyTorch's fp32 kernels on the device): {moved} of {total} "
          f"gradient elements differ from the CPU run over {len(c_seen) - 1} steps")
    # Negative control: the comparison sees a change in the stochastic-rounding streams.
    other, _, _ = train(mlp, "cuda", "nvfp4", None, None, seed=1)
    base, _, _ = train(mlp, "cpu", "nvfp4", None, None, seed=0)
    check(not same(other, base), "nvfp4 on CUDA with seed 1 differs from the CPU with seed 0")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

sys.exit(status("ok: emulate on CUDA equals emulate on the CPU, bit for bit"))
