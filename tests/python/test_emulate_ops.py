"""halfway.torch.emulate's other ops (elementwise, activations, softmax, layer norm, reductions,
losses) run as the simulator's ops under the recipe's policy:
- under pure-bf16 every op's output equals an independent recomputation: the inputs rounded into
  bf16 by halfway.round, the op in float64 by PyTorch, the result rounded to binary32 and then
  into bf16 (sim's one rounding of an opmath result); the input gradients of the ops whose
  derivative reads only the inputs likewise;
- under torch-cuda-fp16 (autocast's lists) ops on fp16 tensors keep fp16 (relu, add) or run in
  fp32 (softmax, exp, layer_norm, the losses), and their outputs say so;
- an op whose inputs are fp32 under a recipe that does not lower it is PyTorch's own (counted as
  fp32_ops), and options sim's op lacks run as PyTorch runs them, counted as not emulated.
Negative control: an op table that leaves softmax to PyTorch must fail the comparison."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

np = hwtest.np
torch = hwtest.require("torch", "halfway.torch.emulate")
import halfway  # noqa: E402

hwtest.require_sim("_Emulator")
import halfway.torch as ht  # noqa: E402
from halfway import emulate as emu_module  # noqa: E402

F = torch.nn.functional


class Apply(torch.nn.Module):
    """A model whose forward is one op on its inputs (its only module: the op's scope is `op`)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def bf16(x):
    return torch.from_numpy(halfway.round(np.asarray(x, np.float32), "bf16"))


def rounded_once(y64):
    """sim's rounding of a binary64 result into bf16: to binary32 first, then into bf16."""
    return bf16(y64.detach().to(torch.float32).numpy())


LABELS = torch.tensor([0, 2, 1, 3, 3])
OPS = {  # name: (fn, number of inputs, positive inputs, check the input gradients)
    "relu": (F.relu, 1, False, True),
    "gelu": (F.gelu, 1, False, False),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), 1, False, False),
    "tanh": (torch.tanh, 1, False, False),
    "sigmoid": (torch.sigmoid, 1, False, False),
    "exp": (torch.exp, 1, False, False),
    "log": (torch.log, 1, True, True),
    "softmax": (lambda x: torch.softmax(x, -1), 1, False, False),
    "log_softmax": (lambda x: F.log_softmax(x, dim=-1), 1, False, False),
    "add": (lambda a, b: a + b, 2, False, True),
    "sub": (lambda a, b: a - b, 2, False, True),
    "mul": (lambda a, b: a * b, 2, False, True),
    "div": (lambda a, b: a / b, 2, True, True),
    "mul_scalar": (lambda a: 0.3 * a, 1, False, True),
    "div_pow2": (lambda a: a / 4, 1, False, True),
    "sum": (lambda a: a.sum(), 1, False, True),
    "sum_dim": (lambda a: a.sum(dim=0), 1, False, True),
    "mean": (lambda a: torch.mean(a), 1, False, True),
    "mse": (F.mse_loss, 2, False, True),
    "cross_entropy": (lambda a: F.cross_entropy(a, LABELS), 1, False, False),
    "layer_norm": (lambda a: F.layer_norm(a, (4,)), 1, False, False),
}


def inputs(n, positive, seed):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(5, 4, generator=g) * 3 for _ in range(n)]
    return [x.abs() + 0.1 if positive else x for x in xs]


def emulated(fn, xs, recipe):
    model = Apply(fn)
    leaves = [x.clone().requires_grad_(True) for x in xs]
    with ht.emulate(model, recipe=recipe) as em:
        y = model(*leaves)
        g = torch.ones_like(y) if y.dim() else torch.tensor(1.0)
        y.backward(g)
    return y.detach(), [x.grad for x in leaves], getattr(y, "_halfway_dtype", None), em


def oracle(fn, xs):
    leaves = [bf16(x.numpy()).double().requires_grad_(True) for x in xs]
    y = fn(*leaves)
    y.backward(torch.ones_like(y))
    return rounded_once(y), [rounded_once(x.grad) for x in leaves]


def same(a, b):
    return np.array_equal(hwtest.bits32(a.numpy().astype(np.float32)),
                          hwtest.bits32(b.numpy().astype(np.float32)))


class PureBf16(hwtest.unittest.TestCase):
    def check(self, name, fn, n, positive, grads):
        xs = inputs(n, positive, seed=len(name))
        y, gx, dt, em = emulated(fn, xs, "pure-bf16")
        want_y, want_g = oracle(fn, xs)
        self.assertEqual(dt, "bf16", name)
        self.assertTrue(same(y, want_y), f"{name}: output differs from the oracle")
        if grads:
            for i, (g, w) in enumerate(zip(gx, want_g)):
                self.assertTrue(same(g, w), f"{name}: gradient of input {i} differs")
        self.assertEqual(sum(em.emulated_ops.values()), 1, (name, em.unemulated))
        return em

    def test_every_op_matches_the_oracle(self):
        for name, (fn, n, positive, grads) in OPS.items():
            with self.subTest(op=name):
                self.check(name, fn, n, positive, grads)

    def test_negative_control_softmax_left_to_pytorch(self):
        original = emu_module._read_softmax
        emu_module._read_softmax = lambda op: (lambda args, kwargs: None)
        try:
            fn, n, positive, grads = OPS["softmax"]
            with self.assertRaises(AssertionError):
                self.check("softmax", fn, n, positive, grads)
        finally:
            emu_module._read_softmax = original


class AutocastLists(hwtest.unittest.TestCase):
    def test_torch_cuda_fp16_dtypes(self):
        fp16 = lambda x: x.half().float()  # noqa: E731  values of fp16
        cases = {"relu": "fp16", "add": "fp16", "softmax": "fp32", "exp": "fp32",
                 "layer_norm": "fp32", "mse": "fp32", "log_softmax": "fp32"}
        for name, want in cases.items():
            fn, n, positive, _ = OPS[name]
            with self.subTest(op=name):
                lin = torch.nn.Linear(4, 4)  # its fp16 output feeds the op
                model = torch.nn.Sequential(lin, Apply(fn if n == 1 else lambda h: fn(h, h)))
                x = fp16(inputs(1, positive, 3)[0])
                with ht.emulate(model, recipe="torch-cuda-fp16") as em:
                    y = model(x)
                self.assertEqual(getattr(y, "_halfway_dtype", None), want, name)
                self.assertEqual(em.emulated_ops, {"mse" if name == "mse" else name: 1})

    def test_fp32_inputs_run_as_pytorch_and_options_are_counted(self):
        model = Apply(lambda x: (torch.softmax(x, 0) + x.exp()).sum())
        x = torch.randn(3, 4)
        with ht.emulate(model, recipe="torch-cuda-bf16") as em:
            y = model(x)
        self.assertTrue(torch.equal(y, model(x)))
        self.assertEqual(em.emulated_ops, {})
        self.assertEqual(em.fp32_ops, {"Tensor.exp": 1, "Tensor.add": 1, "Tensor.sum": 1})
        # softmax over dim 0 is not sim's (it normalizes the last dimension)
        self.assertEqual(em.unemulated, {"torch.softmax (not emulated: options)": 1})


if __name__ == "__main__":
    hwtest.unittest.main()
