"""A batched matmul's items in one pass (emulate's _Gemm.forward_items / backward_items) give
the same bits as item by item.

emulate rounds and multiplies the items of a batched matmul (attention's scores and context)
in one pass where nothing can tell the difference: no recipe of the emulation rounds
stochastically and the step is not traced. Traced steps (out=, every=1) take the item-by-item
path. Here a 2-block TransformerEncoder trains four steps both ways, under element recipes and
accumulation models, and the losses, outputs, gradients and final parameters must agree bit for
bit; the one-pass path must have run on every untraced step and never under a stochastic
recipe (nvfp4) or on a traced step. Skipped (exit 77) without torch."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import check, status  # noqa: E402
from hwtest import same_runs as same, tensor_bits as bits  # noqa: E402

torch = hwtest.require("torch", "emulating a TransformerEncoder")
import halfway.torch as ht  # noqa: E402
from halfway import emulate as emu_module  # noqa: E402

calls = {"items": 0}
_forward_items = emu_module._Gemm.forward_items


def counted(self, A, B):
    calls["items"] += 1
    return _forward_items(self, A, B)


emu_module._Gemm.forward_items = counted


def train(recipe, accumulation, out, steps=4):
    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(4, 8, 32), torch.randn(4, 8, 32)
    seen = []
    calls["items"] = 0
    with ht.emulate(model, recipe, accumulation=accumulation, out=out):
        for _ in range(steps):
            opt.zero_grad()
            o = model(x)
            loss = torch.nn.functional.mse_loss(o, y)
            loss.backward()
            seen.append([bits(o), bits(loss)] + [bits(p.grad) for p in model.parameters()])
            opt.step()
    seen.append([bits(p) for p in model.parameters()])
    return seen, calls["items"]


tmp = tempfile.mkdtemp(prefix="halfway-emulate-items-")
try:
    cases = [("torch-cpu-bf16", None), ("torch-cuda-fp16", "fp32"), ("torch-cuda-bf16", "a100"),
             ("pure-bf16", None), ("torch-cuda-fp16", "native")]
    for recipe, acc in cases:
        what = f"{recipe} accumulation={acc}"
        fast, n_fast = train(recipe, acc, None)
        slow, n_slow = train(recipe, acc, os.path.join(tmp, recipe))
        check(n_fast > 0, f"{what}: the one-pass path never ran")
        check(n_slow == 0, f"{what}: the one-pass path ran {n_slow} times on traced steps")
        check(same(fast, slow), f"{what}: one pass and item by item differ")
    _, n = train("nvfp4", None, None, steps=1)
    check(n == 0, f"nvfp4 (stochastic gradients): the one-pass path ran {n} times")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

sys.exit(status(f"ok: {len(cases)} recipes, a batched matmul's items in one pass equal item by "
                 "item"))
