"""The speed of halfway.torch.emulate (python3 -m halfway.benchmark --emulate).

In one run, on the same model and batch: one training step (forward, backward, SGD step) of
PyTorch fp32, of the step under emulate (accumulation="native": PyTorch's GEMM on halfway's
rounded or quantized operands; accumulation="fp32": halfway's bit-exact GEMM), and of the same
recipe written the way torchao and microxcaling fake-quantize on the CPU (PyTorch tensor ops:
reshape into blocks, amax, scale, round, then PyTorch's own GEMM), for the default MLP, a 2-block
nn.TransformerEncoder and a small CNN, under torch-cpu-bf16, fp8-hybrid, mxfp8 and nvfp4. Each
repetition times the contenders back to back; the median of the per-repetition ratios
(contender / PyTorch fp32) is reported against the goals: with native accumulation at most 2x
for element recipes and 3x for block recipes, with fp32 accumulation 3x and 4x.
"""
import statistics
import time

import halfway

RECIPES = ("torch-cpu-bf16", "fp8-hybrid", "mxfp8", "nvfp4")
BLOCK = {"mxfp8", "nvfp4"}


def _models(torch):
    nn = torch.nn

    def mlp():
        return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1)), \
            torch.randn(64, 10), torch.randn(64, 1)

    def transformer():
        layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        return nn.Sequential(nn.TransformerEncoder(layer, 2), nn.Flatten(), nn.Linear(64 * 16, 1)), \
            torch.randn(8, 16, 64), torch.randn(8, 1)

    def cnn():
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                             nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16 * 16, 10)), \
            torch.randn(16, 3, 16, 16), torch.randn(16, 10)
    return {"mlp 10-32-1, batch 64": mlp, "TransformerEncoder 2x(d64, 4 heads), 8x16": transformer,
            "CNN 2 conv + linear, 16x3x16x16": cnn}


# -- the fake-quantization baseline, as torchao / microxcaling write it ----------------------

def _fake_round(torch, x, mbits, emin, maxval):
    """x rounded to a float format with `mbits` mantissa bits, normal exponents >= emin and
    largest value maxval, saturating (microxcaling's _quantize_elemwise_core)."""
    a = x.abs()
    e = torch.floor(torch.log2(torch.where(a > 0, a, torch.ones_like(a)))).clamp(min=emin)
    step = torch.exp2(e - mbits)
    return (torch.round(x / step) * step).clamp(-maxval, maxval)


def _fake_quant(torch, recipe, x):
    if recipe == "torch-cpu-bf16":
        return x.to(torch.bfloat16).float()
    if recipe == "fp8-hybrid":  # per-tensor current scale into e4m3
        s = 448.0 / x.abs().amax().clamp(min=1e-30)
        return _fake_round(torch, x * s, 3, -6, 448.0) / s
    size = 32 if recipe == "mxfp8" else 16
    shape = x.shape
    flat = x.reshape(-1, shape[-1])
    pad = (-flat.shape[1]) % size
    if pad:
        flat = torch.nn.functional.pad(flat, (0, pad))
    b = flat.reshape(flat.shape[0], -1, size)
    amax = b.abs().amax(-1, keepdim=True)
    if recipe == "mxfp8":  # e8m0 scale, e4m3 elements (emax 8)
        scale = torch.exp2(torch.floor(torch.log2(amax.clamp(min=2.0 ** -127))) - 8)
        q = _fake_round(torch, b / scale, 3, -6, 448.0) * scale
    else:  # nvfp4: e4m3 scale of amax/6, e2m1 elements
        scale = _fake_round(torch, amax / 6.0, 3, -6, 448.0).clamp(min=2.0 ** -9)
        q = _fake_round(torch, b / scale, 1, 0, 6.0) * scale
    q = q.reshape(flat.shape)
    return (q[:, :shape[-1]] if pad else q).reshape(shape)


def _fake_quant_mode(torch, recipe):
    from torch.overrides import TorchFunctionMode
    F = torch.nn.functional

    class Quant(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return _fake_quant(torch, recipe, x)

        @staticmethod
        def backward(ctx, g):
            return _fake_quant(torch, recipe, g)

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in (F.linear, F.conv2d):
                q = [Quant.apply(args[0]), Quant.apply(args[1])]
                return func(*q, *args[2:], **kwargs)
            return func(*args, **kwargs)
    return Mode


# -- timing ----------------------------------------------------------------------------------

def _step_fn(torch, make, recipe=None, accumulation=None, fake=False):
    """(one SGD step of a fresh copy of the model, the context it runs in)."""
    import contextlib

    import halfway.torch as ht
    torch.manual_seed(0)
    model, x, y = make()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    F = torch.nn.functional

    def step():
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    if recipe is None:
        return step, contextlib.nullcontext
    if fake:
        return step, _fake_quant_mode(torch, recipe)
    return step, lambda: ht.emulate(model, recipe=recipe, accumulation=accumulation)


def _time(fn, inner):
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def run(repeats=3, inner=5, quiet=False):
    """Measure and print; return a list of dicts (model, recipe, contender, ratio, goal, met:
    the goal, and for native also faster than fake-quant; None without a goal; fp32_step_ms,
    cpu)."""
    import torch
    torch.set_num_threads(1)
    say = (lambda *a: None) if quiet else print
    out = []
    for mname, make in _models(torch).items():
        say(f"{mname}: step time / PyTorch fp32 step time (median of {repeats})")
        for recipe in RECIPES:
            block = recipe in BLOCK
            contenders = [("native", "native", None, 3.0 if block else 2.0),
                          ("fp32 (bit-exact GEMMs)", "fp32", None, 4.0 if block else 3.0),
                          ("fake-quant (torchao/microxcaling style)", None, True, None)]
            ratios = {c[0]: [] for c in contenders}
            base_ms = []
            fns = [_step_fn(torch, make, recipe, acc, bool(fake))
                   for _, acc, fake, _ in contenders]
            ref, _ = _step_fn(torch, make)
            for _ in range(repeats):
                t_ref = _time(ref, inner)
                base_ms.append(t_ref * 1e3)
                for (label, *_), (fn, context) in zip(contenders, fns):
                    with context():
                        ratios[label].append(_time(fn, inner) / t_ref)
            fake_ratio = statistics.median(ratios[contenders[2][0]])
            for label, acc, fake, goal in contenders:
                r = statistics.median(ratios[label])
                verdict, met = "", None
                if goal is not None:
                    met = r <= goal and (acc != "native" or r < fake_ratio)
                    verdict = f"goal <= {goal:g}x: " + ("met" if r <= goal else "MISSED")
                    if acc == "native":
                        verdict += ("; faster than fake-quant" if r < fake_ratio
                                    else "; MISSED: not faster than fake-quant")
                say(f"  {recipe:15s} {label:42s} {r:7.2f}x  {verdict}")
                out.append({"model": mname, "recipe": recipe, "contender": label,
                            "ratio": r, "goal": goal, "met": met,
                            "fp32_step_ms": statistics.median(base_ms),
                            "cpu": halfway.cpu_info()["model"]})
        say(f"  (PyTorch fp32 step: {statistics.median(base_ms):.3f} ms)")
    return out
