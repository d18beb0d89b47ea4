"""halfway against its peers (python3 -m halfway.benchmark --peers): the libraries a researcher
would use for the same rounding, timed in the same process on the same float32 array.

Rows (each peer where it is installed; a peer that cannot run is reported with the reason):
- nearest-even casts: ml_dtypes `astype` and torch `.to()` round trips (fp8 e4m3/e5m2, fp6,
  fp4, fp16, bf16) against `halfway.round`; the results are compared bit for bit (NaN with NaN);
- custom formats: QPyTorch's `float_quantize` and pychop's `Chop` (nearest and stochastic)
  against `halfway.round` with the same exponent and fraction widths;
- block formats: torchao's `to_mx` (FLOOR scales) and `nvfp4_quantize` (with its per-tensor
  scale) against `halfway.encode_blocks`; scale codes and element codes are compared.
Stochastic rows are not compared: every library draws its own random numbers.

The data of a row are normal values scaled into the format's range (standard deviation
2^(emax-3), as `halfway bench`'s rounding rows), n elements (a 2-D array of rows of 256 for the
block rows). Each repetition times halfway and the peer back to back; the ratio is peer time /
halfway time, and the median over the repetitions is reported with the goal: >= 1 (ahead of the
peer) on every row. halfway runs single-threaded, and so does torch (torch.set_num_threads).
"""
import warnings

import numpy as np

import halfway
from halfway.benchmark import measure

# name: (halfway format, exponent bits, fraction bits, emax, ml_dtypes name, torch dtype name)
CASTS = {
    "e4m3": ("e4m3", 4, 3, 8, "float8_e4m3fn", "float8_e4m3fn"),
    "e5m2": ("e5m2", 5, 2, 15, "float8_e5m2", "float8_e5m2"),
    "e2m3": ("e2m3", 2, 3, 2, "float6_e2m3fn", None),
    "e2m1": ("e2m1", 2, 1, 2, "float4_e2m1fn", None),
    "fp16": ("fp16", 5, 10, 15, None, "float16"),
    "bf16": ("bf16", 8, 7, 127, "bfloat16", "bfloat16"),
}
# The custom-format rows: formats QPyTorch and pychop describe by their widths (IEEE-style,
# with infinities: fp16, bf16 and e5m2 are those).
CUSTOM = ("fp16", "bf16", "e5m2")


def _data(n, emax, seed=2024):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 2.0 ** (emax - 3)).astype(np.float32)


def _differ(a, b):
    """The share of elements whose results differ (bits, any NaN equal to any NaN)."""
    a = np.asarray(a, dtype=np.float32).reshape(-1)
    b = np.asarray(b, dtype=np.float32).reshape(-1)
    same = (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))
    return float(1.0 - same.mean())


def _peers(threads):
    """name -> module, or name -> the reason it cannot run here."""
    found = {}
    for name, mod in (("ml_dtypes", "ml_dtypes"), ("torch", "torch"), ("qtorch", "qtorch.quant"),
                      ("pychop", "pychop"), ("torchao", "torchao.prototype.mx_formats")):
        try:
            found[name] = __import__(mod, fromlist=["_"])
        except Exception as e:  # noqa: BLE001 - any import failure is a reason to report
            found[name] = f"cannot import {mod}: {type(e).__name__}: {str(e)[:120]}"
    if not isinstance(found["torch"], str):
        found["torch"].set_num_threads(threads)
    return found


def _cast_rows(peers, n):
    torch = peers["torch"]
    for name, (fmt, _e, _m, emax, ml_name, torch_name) in CASTS.items():
        x = _data(n, emax)
        ours = (lambda x=x, fmt=fmt: halfway.round(x, fmt))
        if ml_name:
            ml = peers["ml_dtypes"]
            yield (name, "nearest", f"ml_dtypes astype({ml_name})", x, ours,
                   ml if isinstance(ml, str) else
                   (lambda x=x, t=getattr(ml, ml_name): x.astype(t).astype(np.float32)), True)
        if torch_name:
            yield (name, "nearest", f"torch .to({torch_name}).float()", x, ours,
                   torch if isinstance(torch, str) else
                   (lambda x=x, t=getattr(torch, torch_name):
                    torch.from_numpy(x).to(t).float().numpy()), True)


def _custom_rows(peers, n):
    torch, qt, pc = peers["torch"], peers["qtorch"], peers["pychop"]
    for fmt in CUSTOM:
        _f, e, m, emax, _ml, _t = CASTS[fmt]
        x = _data(n, emax)
        for rounding, qt_mode, pc_mode in (("nearest", "nearest", 1),
                                           ("stochastic", "stochastic", 5)):
            ours = (lambda x=x, fmt=fmt, r=rounding:
                    halfway.round(x, fmt, "stochastic", seed=1) if r == "stochastic"
                    else halfway.round(x, fmt))
            if isinstance(qt, str) or isinstance(torch, str):
                theirs = qt if isinstance(qt, str) else torch
            else:
                t = torch.from_numpy(x)
                theirs = (lambda t=t, e=e, m=m, mode=qt_mode:
                          qt.float_quantize(t, exp=e, man=m, rounding=mode).numpy())
            yield (fmt, rounding, f"QPyTorch float_quantize(exp={e}, man={m})", x, ours, theirs,
                   rounding == "nearest")
            if isinstance(pc, str):
                theirs = pc
            else:
                pc.backend("numpy")
                ch = pc.Chop(exp_bits=e, sig_bits=m, rmode=pc_mode, random_state=1)
                theirs = (lambda x=x, ch=ch: ch(x))
            yield (fmt, rounding, f"pychop Chop(exp_bits={e}, sig_bits={m}, rmode={pc_mode})", x,
                   ours, theirs, rounding == "nearest")


def _block_rows(peers, n):
    torch, ao = peers["torch"], peers["torchao"]
    cols = 256
    x = _data(n // cols * cols, 8).reshape(-1, cols)
    for scheme, peer_name in (("mxfp8_e4m3", "torchao to_mx(float8_e4m3fn, 32, FLOOR)"),
                              ("mxfp4", "torchao to_mx(float4_e2m1fn_x2, 32, FLOOR)"),
                              ("nvfp4", "torchao nvfp4_quantize(16, per-tensor scale)")):
        ours = (lambda s=scheme: halfway.encode_blocks(x, s))
        if isinstance(ao, str) or isinstance(torch, str):
            theirs = ao if isinstance(ao, str) else torch
        else:
            t = torch.from_numpy(x)
            if scheme == "nvfp4":
                from torchao.prototype.mx_formats.nvfp4_tensor import (nvfp4_quantize,
                                                                      per_tensor_amax_to_scale)
                theirs = (lambda: nvfp4_quantize(t, 16, per_tensor_amax_to_scale(t.abs().max())))
            else:
                from torchao.prototype.mx_formats.config import ScaleCalculationMode
                from torchao.prototype.mx_formats.mx_tensor import to_mx
                dt = torch.float8_e4m3fn if scheme == "mxfp8_e4m3" else torch.float4_e2m1fn_x2
                theirs = (lambda dt=dt: to_mx(t, dt, 32, ScaleCalculationMode.FLOOR))
        yield scheme, "nearest", peer_name, x, ours, theirs, "blocks"


def _block_differ(scheme, ours, theirs):
    """The share of scale and element codes that differ (fp4 codes unpacked, low nibble
    first, as torchao packs them)."""
    import torch
    codes, scales, _g = ours
    s, d = theirs
    ts = s.view(torch.uint8).numpy().reshape(-1)
    td = d.view(torch.uint8).numpy().reshape(codes.shape[0], -1)
    if td.shape[1] * 2 == codes.shape[1]:
        td = np.stack([td & 15, td >> 4], axis=-1).reshape(codes.shape)
    n = scales.size + codes.size
    return float(((ts != scales.reshape(-1)).sum() + (td != codes).sum()) / n)


def _row(ours, theirs, compare, fmt, repeats, inner):
    """Times and the share of differing results of one row. A peer's floating-point warnings
    (pychop's overflowing intermediates on the bf16 range) are its own and stay quiet."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        t_ours, t_ref, ratio = measure(ours, theirs, repeats, inner)
        if compare == "blocks":
            differ = _block_differ(fmt, ours(), theirs())
        elif compare:
            differ = _differ(ours(), theirs())
        else:
            differ = None  # stochastic: different random streams
    return t_ours, t_ref, ratio, differ


def run(n=1 << 20, repeats=7, threads=1, inner=3, quiet=False):
    """Measure and print; return a list of dicts, one per row."""
    say = (lambda *a: None) if quiet else print
    peers = _peers(threads)
    say(f"halfway against its peers on {n} float32 values; median of {repeats} repetitions "
        f"(each the mean of {inner} calls); goal: ratio >= 1 on every row")
    out = []
    rows = [*_cast_rows(peers, n), *_custom_rows(peers, n), *_block_rows(peers, n)]
    for fmt, rounding, peer, x, ours, theirs, compare in rows:
        r = {"format": fmt, "rounding": rounding, "reference": peer, "n": int(x.size),
             "goal": 1.0, "cpu": halfway.cpu_info()["model"]}
        if isinstance(theirs, str):
            r.update(skipped=theirs)
            say(f"  {fmt:10s} {rounding:10s} {peer}: skipped: {theirs}")
            out.append(r)
            continue
        try:
            t_ours, t_ref, ratio, differ = _row(ours, theirs, compare, fmt, repeats, inner)
        except Exception as e:  # noqa: BLE001 - a peer that fails here is reported, not fatal
            r.update(skipped=f"{type(e).__name__}: {str(e)[:160]}")
            say(f"  {fmt:10s} {rounding:10s} {peer}: skipped: {r['skipped']}")
            out.append(r)
            continue
        r.update(halfway_gelem_s=x.size / t_ours / 1e9, reference_gelem_s=x.size / t_ref / 1e9,
                 ratio=ratio, met=ratio >= 1.0, differ=differ)
        out.append(r)
        same = ("not compared (own random streams)" if differ is None else
                "identical" if differ == 0 else
                f"{differ:.4%} of results differ ({round(differ * x.size)} of {x.size})")
        say(f"  {fmt:10s} {rounding:10s} halfway {r['halfway_gelem_s']:7.4f} G/s, {peer} "
            f"{r['reference_gelem_s']:7.4f} G/s -> ratio {ratio:7.2f}x"
            f"{'' if r['met'] else ' (goal >= 1x NOT met)'}; {same}")
    return out
