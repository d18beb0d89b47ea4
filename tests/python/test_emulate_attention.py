"""halfway.torch.emulate inside attention: nn.MultiheadAttention (F.multi_head_attention_forward,
run as PyTorch's own Python body with each of its calls seen) and F.scaled_dot_product_attention
(decomposed as PyTorch's math path), so that a TransformerEncoder's GEMMs are all emulated:
- recipe="fp32", accumulation="native" leaves outputs and every gradient bit-identical to plain
  PyTorch: MultiheadAttention with need_weights=True (PyTorch's own bmm path) compared with
  plain PyTorch as it is; scaled_dot_product_attention and the TransformerEncoder (which calls
  it, need_weights=False) compared with plain PyTorch under sdpa_kernel(SDPBackend.MATH), the
  math path, since PyTorch's default CPU kernel (flash attention) sums in another order and
  is not bit-identical to its own math path (negative control: a bf16 recipe must differ);
- under a block recipe the in- and out-projection copies of every layer are in blocks.csv and
  the QK^T and attention·V matmuls are counted; under torch-cuda-bf16 (whose matmuls are
  lowered) every inner GEMM's output, per batch item and head, is in trace.csv; the manifest
  lists no attention function as unemulated (negative control: without the decomposition it
  does, and no matmul is emulated)."""

import contextlib
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

np = hwtest.np
torch = hwtest.require("torch", "halfway.torch.emulate")
pd = hwtest.require("pandas", "the run folder's CSVs")
import halfway  # noqa: E402

hwtest.require_sim("_Emulator")
# torch 1.13 has no scaled_dot_product_attention: its MultiheadAttention always takes the bmm
# path, and the tests of scaled_dot_product_attention itself are skipped there
HAS_SDPA = hasattr(torch.nn.functional, "scaled_dot_product_attention")
import halfway.torch as ht  # noqa: E402
from halfway import emulate as emu_module  # noqa: E402

F = torch.nn.functional
B, T, D, H = 3, 5, 16, 4


def math_path():
    """PyTorch's math path of scaled_dot_product_attention (the reference compared with)."""
    if not HAS_SDPA:
        return contextlib.nullcontext()
    attention = getattr(torch.nn, "attention", None)
    if attention is not None and hasattr(attention, "sdpa_kernel"):
        return attention.sdpa_kernel(attention.SDPBackend.MATH)
    return torch.backends.cuda.sdp_kernel(enable_flash=False, enable_math=True,
                                          enable_mem_efficient=False)


def encoder(seed=0):
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(D, H, 32, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def run(model, forward, inputs, context=contextlib.nullcontext, **emu):
    """forward(model, *inputs) -> tensors; their sum's backward. Returns the outputs, the
    inputs' gradients and the parameters' gradients."""
    model.zero_grad()
    xs = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    with context():
        if emu:
            with ht.emulate(model, **emu):
                ys = forward(model, *xs)
                sum(y.sum() for y in ys).backward()
        else:
            ys = forward(model, *xs)
            sum(y.sum() for y in ys).backward()
    return [y.detach().clone() for y in ys] + [x.grad.clone() for x in xs if x.requires_grad] + \
        [p.grad.clone() for p in model.parameters() if p.grad is not None]


def same_bits(a, b):
    return len(a) == len(b) and all(
        np.array_equal(hwtest.bits32(u.numpy()), hwtest.bits32(v.numpy())) for u, v in zip(a, b))


class Sdpa(torch.nn.Module):
    """F.scaled_dot_product_attention called directly, on [B, H, T, E] projections."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(D, D) for _ in range(3))

    def forward(self, x, **kw):
        def heads(t):
            return t.view(B, T, H, D // H).transpose(1, 2)
        return F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)),
                                              heads(self.v(x)), **kw)


def encoder_forward(m, x):
    return [m(x)]


def mha_forward(m, x, mask):
    y, w = m(x, x, x, attn_mask=mask)
    return [y, w]


class FP32Native(hwtest.unittest.TestCase):
    def check(self, model, forward, inputs, context):
        want = run(model, forward, inputs, context)
        with tempfile.TemporaryDirectory() as d:
            got = run(model, forward, inputs, context, recipe="fp32", accumulation="native",
                      out=d)
            with open(os.path.join(d, "manifest.json")) as f:
                manifest = json.load(f)
        self.assertTrue(same_bits(got, want))
        # ... and the attention was decomposed, not run whole (which would be equal too)
        self.assertFalse([k for k in manifest["unemulated_ops"] if "attention" in k])
        self.assertIn("matmul", manifest["emulated_gemms"])
        # Negative control: the same comparison sees a bf16 recipe's roundings.
        bf = run(model, forward, inputs, context, recipe="torch-cuda-bf16",
                 accumulation="native")
        self.assertFalse(same_bits(bf, want))

    def test_transformer_encoder_equals_the_math_path(self):
        torch.manual_seed(1)
        self.check(encoder(), encoder_forward, [torch.randn(B, T, D)], math_path)

    def test_multi_head_attention_with_weights_equals_pytorch(self):
        torch.manual_seed(2)
        mha = torch.nn.MultiheadAttention(D, H)
        causal = torch.nn.Transformer.generate_square_subsequent_mask(T)
        x = torch.randn(T, B, D)
        for mask in (None, causal):
            with self.subTest(mask=mask is not None):
                self.check(mha, lambda m, x: mha_forward(m, x, mask), [x],
                           contextlib.nullcontext)

    @hwtest.unittest.skipUnless(HAS_SDPA, "this torch has no scaled_dot_product_attention")
    def test_scaled_dot_product_attention_equals_the_math_path(self):
        torch.manual_seed(3)
        model = Sdpa()
        keep = torch.rand(T, T) > 0.3
        keep[:, 0] = True  # no row masked entirely (PyTorch's math path gives 0 there)
        for kw in ({}, {"is_causal": True}, {"attn_mask": keep}, {"scale": 0.3}):
            with self.subTest(options=sorted(kw)):
                self.check(model, lambda m, x: [m(x, **kw)], [torch.randn(B, T, D)], math_path)


class Records(hwtest.unittest.TestCase):
    def emulate(self, recipe, **kw):
        d = tempfile.mkdtemp()
        torch.manual_seed(4)
        run(encoder(), encoder_forward, [torch.randn(B, T, D)], out=d, recipe=recipe, **kw)
        with open(os.path.join(d, "manifest.json")) as f:
            manifest = json.load(f)
        read = lambda n: pd.read_csv(os.path.join(d, n))  # noqa: E731
        return manifest, read("trace.csv"), read("blocks.csv")

    def test_every_inner_gemm_is_emulated(self):
        manifest, _, blocks = self.emulate("mxfp8")
        linears = {f"layers.{i}.{m}" for i in (0, 1)
                   for m in ("self_attn.in_proj", "self_attn.out_proj", "linear1", "linear2")}
        got = {n.rsplit(".", 1)[0] for n in blocks.name}
        self.assertEqual(got, linears)
        self.assertEqual(manifest["emulated_gemms"], {"linear": 8, "matmul": 4})
        self.assertFalse([k for k in manifest["unemulated_ops"] if "attention" in k],
                         manifest["unemulated_ops"])
        # torch-cuda-bf16 lowers matmuls too: every GEMM's output is in trace.csv, the
        # batched ones per batch item and head.
        _, trace, _ = self.emulate("torch-cuda-bf16")
        outputs = set(trace.name[trace.name.str.endswith(".output")])
        for i in (0, 1):
            p = f"layers.{i}.self_attn"
            want = {f"{p}.in_proj.output", f"{p}.out_proj.output"} | \
                {f"{p}.{g}[{j}].output" for g in ("scores", "context") for j in range(B * H)}
            self.assertLessEqual(want, outputs)

    def test_masked_weights_name_both_matmuls(self):
        # need_weights=True with a mask: the scores are torch.baddbmm(mask, q, kᵀ), emulated
        # as the matmul and sim's add; the weights·V bmm is still `context`
        d = tempfile.mkdtemp()
        torch.manual_seed(5)
        mha = torch.nn.MultiheadAttention(D, H)
        causal = torch.nn.Transformer.generate_square_subsequent_mask(T)
        run(mha, lambda m, x: mha_forward(m, x, causal), [torch.randn(T, B, D)], out=d,
            recipe="torch-cuda-bf16")
        trace = pd.read_csv(os.path.join(d, "trace.csv"))
        with open(os.path.join(d, "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual(manifest["emulated_gemms"]["matmul"], 2)
        self.assertIn("add", manifest["emulated_ops"])
        for g in ("scores", "context"):
            self.assertIn(f"{g}[{B * H - 1}].output", set(trace.name))

    def test_out_proj_follows_its_module_rule(self):
        _, _, blocks = self.emulate("mxfp8", rules={r"out_proj$": "fp32"})
        names = set(blocks.name)
        self.assertFalse([n for n in names if "out_proj" in n], names)
        self.assertIn("layers.0.self_attn.in_proj.weight", names)

    def test_negative_control_attention_left_whole(self):
        original = emu_module.emulate._decompositions
        emu_module.emulate._decompositions = lambda self: {}
        try:
            manifest, _, blocks = self.emulate("mxfp8")
        finally:
            emu_module.emulate._decompositions = original
        self.assertIn("F.multi_head_attention_forward", manifest["unemulated_ops"])
        self.assertNotIn("matmul", manifest["emulated_gemms"])
        self.assertFalse([n for n in blocks.name if "self_attn" in n])


if __name__ == "__main__":
    hwtest.unittest.main()
