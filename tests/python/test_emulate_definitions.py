"""halfway.torch.emulate against the definitions: every emulated GEMM of an nn.Linear (forward,
dgrad, wgrad) equals, bit for bit, the recipe's quantized operands accumulated as the model
defines it, recomputed here element by element: operands rounded by halfway.round or block-
quantized by halfway.quantize_blocks (lib), then the sequential fp32 model's chain
acc = fma(a_k, b_k, acc) (or in-format-unfused's acc = add(mul(a_k, b_k), acc) in the format)
with lib's scalar fma/mul/add on encodings, the bias added after, and the output rounded into
the op's dtype. Shapes that fill whole blocks and shapes that do not, NaN, infinities and
subnormals in the operands, at 1 and 2 threads. Each recipe also has a negative control: the
same expectation with one planted fault (a wrong rounding direction, an operand left
unquantized) must disagree."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

np = hwtest.np
torch = hwtest.require("torch", "halfway.torch.emulate")
import halfway  # noqa: E402

hwtest.require_sim("_Emulator")
import halfway.torch as ht  # noqa: E402


def enc32(x):
    return halfway.encode(np.asarray(x, np.float32), "fp32")


def chain(A, B, model="fp32", fmt="fp32"):
    """C[i, j] = the model's sum over k of A[i, k]·B[k, j], in the order k = 0, 1, ..."""
    m, k = A.shape
    n = B.shape[1]
    if model == "fp32":
        acc = np.zeros((m, n), np.uint32)
        ea, eb = enc32(A), enc32(B)
        for t in range(k):
            acc = halfway.fma(ea[:, t:t + 1], eb[t:t + 1, :], acc, "fp32")
        return halfway.decode(acc, "fp32")
    ea, eb = halfway.encode(A, fmt), halfway.encode(B, fmt)
    acc = np.zeros((m, n), ea.dtype)
    for t in range(k):
        acc = halfway.add(halfway.mul(ea[:, t:t + 1], eb[t:t + 1, :], fmt), acc, fmt)
    return halfway.decode(acc, fmt)


def add_bias(C, bias, fmt="fp32"):
    return halfway.decode(halfway.add(halfway.encode(C, fmt), halfway.encode(bias[None, :], fmt),
                                      fmt), fmt)


def nan_equal(got, want):
    """Bits equal, or both NaN (payloads are not specified across kernels)."""
    g, w = hwtest.bits32(got), hwtest.bits32(want)
    return bool(np.all((g == w) | (hwtest.is_nan32(g) & hwtest.is_nan32(w))))


def operands(M, K, N, specials, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = (rng.standard_normal((N, K)) * 0.3).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    g = rng.standard_normal((M, N)).astype(np.float32)
    if specials:
        x[0, 0] = np.nan
        x[1 % M, 1 % K] = np.inf
        x[-1, -1] = np.float32(3e-41)        # fp32 subnormal
        w[0, -1] = np.float32(-1e-40)
        w[-1, 0] = np.float32(2 ** -20)      # fp16 subnormal
        g[-1, 0] = np.float32(6e-8)          # fp16 subnormal
    return x, w, b, g


def run_emulated(recipe, x, w, b, g, threads, accumulation=None):
    lin = torch.nn.Linear(w.shape[1], w.shape[0])
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w))
        lin.bias.copy_(torch.from_numpy(b))
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    with ht.emulate(lin, recipe=recipe, accumulation=accumulation, threads=threads):
        y = lin(xt)
        y.backward(torch.from_numpy(g))
    return (y.detach().numpy(), xt.grad.numpy(), lin.weight.grad.numpy(),
            lin.bias.grad.numpy())


def bias_sum(G, fmt):
    """sim's bias gradient: column sums in binary64 in row order, rounded to fp32, then fmt."""
    s = np.zeros(G.shape[1], np.float64)
    for row in G.astype(np.float64):
        s = s + row
    return halfway.round(halfway.round(s, "fp32"), fmt)


def expect_element(fmt, x, w, b, g, model="fp32", fault=None):
    """torch-cuda-fp16/bf16 (lower: every GEMM operand and output in fmt, fp32 accumulate)."""
    rnd = "minMag" if fault == "rounding" else "near_even"
    q = lambda v: halfway.round(v, fmt, rnd)  # noqa: E731
    # Planted fault "weight": the weight alone rounded up instead of to nearest.
    xq, wq, bq = q(x), (halfway.round(w, fmt, "max") if fault == "weight" else q(w)), q(b)
    wt = wq.T.copy()
    if model == "fp32":
        y = q(add_bias(chain(xq, wt), bq))
    else:
        y = add_bias(chain(xq, wt, model, fmt), bq, fmt)
    G = q(g)
    dx = q(chain(G, wq, model, fmt))
    dw = q(chain(G.T.copy(), xq, model, fmt))
    db = bias_sum(G, fmt)
    return y, dx, dw, db


def pad(a, rows, cols):
    p = np.zeros((rows, cols), np.float32)
    p[:a.shape[0], :a.shape[1]] = a
    return p


def up(n, t):
    return (n + t - 1) // t * t


def expect_mxfp8(x, w, b, g, fault=None):
    """mxfp8 (sim's linear_blocks): 1×32 blocks along each GEMM's reduction dimension."""
    # Planted fault: OCP's floor rule for the scales instead of TE's rounding up.
    s = "mxfp8_e4m3" if fault == "rounding" else "mxfp8_e4m3:rceil"
    M, K = x.shape
    N = w.shape[0]
    Kp, Np, Mp = up(K, 32), up(N, 32), up(M, 32)
    qb = lambda a, axis: halfway.quantize_blocks(a, s, axis=axis)  # noqa: E731
    xq = qb(pad(x, M, Kp), -1)
    wq = pad(w, N, Kp) if fault == "weight" else qb(pad(w, N, Kp), -1)
    y = add_bias(chain(xq, wq.T.copy())[:M, :N], b)
    gd = qb(pad(g, M, Np), -1)
    wd = qb(pad(w, Np, K), 0)
    dx = chain(gd, wd)[:M, :K]
    gw = qb(pad(g, Mp, N), 0)
    xw = qb(pad(x, Mp, K), 0)
    dw = chain(gw.T.copy(), xw)[:N, :K]
    return y, dx, dw, bias_sum(g, "fp32")


def expect_fp8_current(x, w, b, g, fault=None):
    """fp8-current (sim's linear_fp8, Float8CurrentScaling): q = e4m3:sat(fl32(x·s)) with
    s = fl32(448 / amax), the GEMM in fp32, then fl32(acc·fl32(1/sx·1/sw)) + bias."""
    rnd = "minMag" if fault == "rounding" else "near_even"

    def quant(a, fmt, fmax):
        # amax over |a| without NaN (fmaxf); an infinite or zero amax keeps the scale 1.
        vals = np.abs(a[~np.isnan(a)])
        amax = np.float32(vals.max()) if vals.size else np.float32(0)
        s = np.float32(1) if amax == 0 or not np.isfinite(amax) else \
            np.float32(np.float32(fmax) / amax)
        with np.errstate(over="ignore", invalid="ignore"):
            return halfway.round((a * s).astype(np.float32), fmt, rnd), np.float32(1) / s

    xq, ix = quant(x, "e4m3:sat", 448)
    wq, iw = (w, np.float32(1)) if fault == "weight" else quant(w, "e4m3:sat", 448)
    with np.errstate(over="ignore", invalid="ignore"):
        y = add_bias((chain(xq, wq.T.copy()) * (ix * iw)).astype(np.float32), b)
        gq, ig = quant(g, "e5m2:sat", 57344)
        dx = (chain(gq, wq) * (ig * iw)).astype(np.float32)
        dw = (chain(gq.T.copy(), xq) * (ig * ix)).astype(np.float32)
    return y, dx, dw, bias_sum(g, "fp32")


CASES = [  # (M, K, N): whole blocks of 32 and ragged
    (32, 64, 32), (5, 37, 3), (33, 40, 7), (160, 96, 130)]  # the last splits over threads
RECIPES = {
    "torch-cuda-fp16": lambda *a, **k: expect_element("fp16", *a, **k),
    "torch-cuda-bf16": lambda *a, **k: expect_element("bf16", *a, **k),
    "mxfp8": expect_mxfp8,
    "fp8-current": expect_fp8_current,
}
PARTS = ("output", "dgrad", "wgrad", "bias grad")


class Definitions(hwtest.unittest.TestCase):
    def check(self, recipe, expect, accumulation=None, **kw):
        for M, K, N in CASES:
            for specials in (False, True):
                x, w, b, g = operands(M, K, N, specials, seed=M * 1000 + K)
                want = expect(x, w, b, g, **kw)
                for threads in (1, 2):
                    got = run_emulated(recipe, x, w, b, g, threads, accumulation)
                    for part, gv, wv in zip(PARTS, got, want):
                        self.assertTrue(nan_equal(gv, wv),
                                        f"{recipe} {part} [{M}x{K}x{N}] specials={specials} "
                                        f"threads={threads}:\n" + hwtest.first_mismatches(
                                            np.asarray(gv).reshape(-1), hwtest.bits32(gv),
                                            hwtest.bits32(wv)))
                # Negative controls: one planted fault in the expectation must be seen.
                if not specials:
                    for fault in ("rounding", "weight"):
                        bad = expect(x, w, b, g, fault=fault, **kw)
                        self.assertFalse(all(nan_equal(gv, wv) for gv, wv in zip(got, bad)),
                                         f"{recipe}: planted fault '{fault}' went unseen")

    def test_element_recipes_fp32_accumulation(self):
        for recipe in ("torch-cuda-fp16", "torch-cuda-bf16"):
            with self.subTest(recipe=recipe):
                self.check(recipe, RECIPES[recipe])

    def test_in_format_unfused(self):
        fmt = "fp16"
        self.check("torch-cuda-fp16",
                   lambda *a, **k: expect_element(fmt, *a, model="unfused", **k),
                   accumulation="in-format-unfused")

    def test_mxfp8(self):
        self.check("mxfp8", expect_mxfp8)

    def test_fp8_current(self):
        self.check("fp8-current", expect_fp8_current)


if __name__ == "__main__":
    hwtest.unittest.main()
