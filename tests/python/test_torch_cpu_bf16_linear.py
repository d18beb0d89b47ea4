"""PyTorch's CPU bf16 linear layer (oneDNN) on an AVX512-BF16 machine without AMX, against
halfway's `avx512-dpbf16` accumulation model (vdpbf16ps: fmas in element pairs, odd element
first, DAZ/FTZ), bit for bit.

A bf16 GEMM's output is its fp32 accumulator rounded to bf16, which hides most of the
accumulator. So each case is run three times: the second run appends to K the first run's
output, negated, through an identity block (x_extra[m, n] = -y[m, n], w_extra = I), so that its
output is the accumulator's next 8 bits, and the third run appends the second's; every output
of the third run depends on all 24 bits of the fp32 accumulator. On this CPU class (measured on
an AMD EPYC, Zen 4, with torch 2.15.0) oneDNN splits K into chunks of 1024, accumulates each
chunk from +0 with vdpbf16ps, and adds the chunks' sums in fp32, in order: `avx512-dpbf16` per
chunk plus fp32 additions must give every output of every case, at 1 and 2 threads, and under
torch.autocast("cpu") too. Negative controls in the test: the same model without the chunks,
and the exact sum rounded once, must each miss outputs of a case with K > 1024.

A single row (M = 1, a matrix-vector product) takes another kernel and is only reported.
Skipped (exit 77) without torch, without AVX512-BF16, or on an AMX machine (where oneDNN's
bf16 kernels use the tiles: which of halfway's models they follow is not established)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import check, status  # noqa: E402

torch = hwtest.require("torch", "PyTorch's CPU bf16 linear")
import halfway  # noqa: E402

FEATURES = halfway.cpu_info()["features"].split(",")
if "avx512bf16" not in FEATURES:
    print(f"skipped: this CPU has no AVX512-BF16 ({halfway.cpu_info()['model']})")
    sys.exit(hwtest.SKIP)
if "amx_bf16" in FEATURES:
    print("skipped: an AMX-BF16 machine; oneDNN's bf16 GEMM there is not compared here")
    sys.exit(hwtest.SKIP)
if not torch.backends.mkldnn.is_available():
    print("skipped: this torch has no oneDNN")
    sys.exit(hwtest.SKIP)

CHUNK = 1024


def bf16(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(torch.bfloat16)


def enc(t):
    return t.view(torch.int16).numpy().copy()


def dot(X, W, c):
    """halfway's avx512-dpbf16 dot products of X's rows with W's rows, onto accumulators c."""
    M, K = X.shape
    N = W.shape[0]
    A = np.broadcast_to(X[:, None, :], (M, N, K))
    B = np.broadcast_to(W[None, :, :], (M, N, K))
    return halfway.dot(np.ascontiguousarray(A), np.ascontiguousarray(B), c, "bf16",
                       accumulation="avx512-dpbf16")


def model(X, W, chunk):
    """Each chunk of K from +0 under avx512-dpbf16, the chunks' sums added in fp32, in order."""
    acc = np.zeros((X.shape[0], W.shape[0]), np.float32)
    for s in range(0, X.shape[1], chunk):
        part = dot(X[:, s:s + chunk], W[:, s:s + chunk], np.zeros_like(acc))
        acc = (acc + part).astype(np.float32)
    return enc(bf16(acc))


def exact(X, W):
    return enc(bf16((X.astype(np.float64) @ W.T.astype(np.float64)).astype(np.float32)))


def residual_case(X, W, linear):
    """The third run's inputs and torch's output (see the docstring)."""
    N = W.shape[0]
    for level in range(3):
        y = linear(X, W)
        if level == 2:
            return X, W, enc(y)
        X = np.concatenate([X, -y.float().numpy()], axis=1)
        W = np.concatenate([W, np.eye(N, dtype=np.float32)], axis=1)


def plain(X, W):
    return torch.nn.functional.linear(bf16(X), bf16(W))


def autocast(X, W):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.nn.functional.linear(torch.from_numpy(X), torch.from_numpy(W))


rng = np.random.default_rng(2)
shapes = [(2, 256, 64), (64, 64, 64), (128, 256, 96), (16, 512, 16), (32, 1024, 32), (16, 1184, 16),
          (64, 2048, 64)]
for threads in (1, 2):
    torch.set_num_threads(threads)
    for M, K, N in shapes:
        X = bf16(rng.standard_normal((M, K))).float().numpy()
        W = bf16(rng.standard_normal((N, K))).float().numpy()
        for name, linear in (("F.linear", plain), ("autocast", autocast)):
            Xr, Wr, got = residual_case(X, W, linear)
            want = model(Xr, Wr, CHUNK)
            same = int((want == got).sum())
            what = f"{name} {M}x{K}x{N} ({threads} threads)"
            check(same == M * N, f"{what}: {same} of {M * N} outputs equal the chunked model")
            if K > CHUNK and name == "F.linear" and threads == 1:
                whole = int((model(Xr, Wr, 1 << 30) == got).sum())
                ex = int((exact(Xr, Wr) == got).sum())
                check(whole < M * N, f"{what}: without the chunks the model must miss outputs")
                check(ex < M * N, f"{what}: the exact sum must miss outputs")
                print(f"{what}: chunked model {same}, unchunked {whole}, exact {ex} of {M * N}")
            else:
                print(f"{what}: chunked model {same} of {M * N}")

# Reported, not compared: one row (a matrix-vector product) takes another oneDNN kernel.
torch.set_num_threads(1)
X = bf16(rng.standard_normal((1, 256))).float().numpy()
W = bf16(rng.standard_normal((64, 256))).float().numpy()
Xr, Wr, got = residual_case(X, W, plain)
print(f"reported: F.linear 1x256x64: chunked model {int((model(Xr, Wr, CHUNK) == got).sum())} of 64 "
      "(a one-row product is another kernel, not modelled)")
sys.exit(status(f"ok: PyTorch {torch.__version__}'s CPU bf16 linear is avx512-dpbf16 in "
                f"chunks of {CHUNK}, bit for bit"))
