"""halfway.torch.emulate nested with halfway.torch.trace, in both orders: the trace watches the
emulated run without changing it.

For each recipe (pure-bf16: every op rounded to bf16; nvfp4: block copies and stochastic
gradients; torch-cpu-bf16: autocast's op lists), three SGD steps of an MLP run under emulate
alone, then under emulate and trace nested each way. The nested runs must give:
  - the same losses and final parameters, bit for bit;
  - the same emulation folder, byte for byte (trace.csv, blocks.csv, steps.csv) and the same
    manifest counts, except the Tensor.view_as calls PyTorch's own full-backward-hook machinery
    makes for the trace's hooks (listed, as every op PyTorch runs unemulated);
  - a trace of the emulated values: its saved model output of step 0 equals, bit for bit, the
    output the loop got, and its `.update` tensors equal the parameters' float32 differences
    computed here after the block (a trace whose own subtraction the emulation rounded, as
    pure-bf16 rounds every op, would differ).
Skipped (exit 77) without torch."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import check, status  # noqa: E402

torch = hwtest.require("torch", "nesting emulate with trace")
import halfway.torch as ht  # noqa: E402

STEPS = 3


def run(recipe, folder, nest):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 8), torch.randn(64, 4)
    em = ht.emulate(model, recipe, out=os.path.join(folder, "em"), seed=3)
    tr = ht.trace(model, opt, out=os.path.join(folder, "tr"), formats=["fp16", "e4m3"],
                  save_tensors=True)
    blocks = {None: [em], "emulate outside": [em, tr], "trace outside": [tr, em]}[nest]
    losses, outs, params = [], [], []
    for b in blocks:
        b.__enter__()
    try:
        for _ in range(STEPS):
            params.append([p.detach().clone() for p in model.parameters()])
            opt.zero_grad()
            out = model(x)
            outs.append(out.detach().clone())
            loss = torch.nn.functional.mse_loss(out, y)
            em.log_loss(loss)
            losses.append(loss.item())
            loss.backward()
            opt.step()
    finally:
        for b in reversed(blocks):
            b.__exit__(None, None, None)
    params.append([p.detach().clone() for p in model.parameters()])
    names = [n for n, _ in model.named_parameters()]
    return losses, outs, params, names


def read(path):
    with open(path, "rb") as f:
        return f.read()


def manifest_counts(folder):
    m = json.loads(read(os.path.join(folder, "em", "manifest.json")))
    return {k: m[k] for k in ("emulated_gemms", "emulated_ops", "fp32_ops", "unemulated_ops",
                              "steps", "complete")}


def bits(t):
    return np.ascontiguousarray(t.numpy(), dtype=np.float32).view(np.uint32)


tmp = tempfile.mkdtemp(prefix="halfway-emulate-nesting-")
cases = 0
try:
    for recipe in ("pure-bf16", "nvfp4", "torch-cpu-bf16"):
        base = os.path.join(tmp, recipe, "alone")
        l0, _, p0, names = run(recipe, base, None)
        want = manifest_counts(base)
        for nest in ("emulate outside", "trace outside"):
            what = f"{recipe}, {nest}"
            folder = os.path.join(tmp, recipe, nest.split()[0])
            l1, outs, p1, _ = run(recipe, folder, nest)
            check(l1 == l0, f"{what}: losses {l1} != {l0} without the trace")
            check(all(np.array_equal(bits(a), bits(b)) for a, b in zip(p0[-1], p1[-1])),
                  f"{what}: final parameters differ")
            for f in ("trace.csv", "blocks.csv", "steps.csv"):
                check(read(os.path.join(folder, "em", f)) == read(os.path.join(base, "em", f)),
                      f"{what}: emulate's {f} differs")
            got = manifest_counts(folder)
            hooks = got["unemulated_ops"].pop("Tensor.view_as", 0)
            check(hooks > 0, f"{what}: no Tensor.view_as of the trace's backward hooks")
            check(got == want, f"{what}: manifest {got} != {want}")
            check(json.loads(read(os.path.join(folder, "tr", "manifest.json"))).get("complete",
                                                                                 True),
                  f"{what}: the trace is incomplete")
            saved = np.load(os.path.join(folder, "tr", "tensors", "step0.npz"))
            check(np.array_equal(bits32 := saved["2.output"].view(np.uint32),
                                 bits(outs[0]).reshape(bits32.shape)),
                  f"{what}: the trace's step-0 output is not the emulated output")
            for s in range(STEPS):
                npz = np.load(os.path.join(folder, "tr", "tensors", f"step{s}.npz"))
                for i, n in enumerate(names):
                    delta = (p1[s + 1][i] - p1[s][i]).reshape(-1)
                    check(np.array_equal(npz[n + ".update"].view(np.uint32), bits(delta)),
                          f"{what}: step {s} {n}.update is not the float32 difference")
            cases += 1
finally:
    shutil.rmtree(tmp, ignore_errors=True)

sys.exit(status(f"ok: {cases} nestings of 3 recipes, emulation unchanged and traced bit for bit"))
