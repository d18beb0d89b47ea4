"""torchao as a peer of halfway's fp8_rowwise: torchao's own float8 rowwise cast
(float8_scaling_utils.hp_tensor_to_float8_dynamic with ScalingGranularity.AXISWISE, eager, on
the CPU) against halfway.encode_blocks(scheme "fp8_rowwise" / "fp8_rowwise_e5m2"), with and
without power-of-two scales, per row (axiswise_dim=-1, halfway axis=-1) and per column
(axiswise_dim=0, axis=0): every scale bit for bit, every element code, and every value of
torchao's to_original_precision against halfway.decode_blocks.

Inputs: rows whose amax is the float32 number below, at and above elem_max * 2^-j for every j
that keeps the scale finite and normal (there the scale elem_max / amax crosses a power of
two), amax values below torchao's clamp of 1e-12, all-zero rows, and rows of random values
over many binades; each row also holds -amax, amax's neighbour and random values of its range.

The one difference allowed is a class of torchao 0.18's code (the venv's pin), checked member
by member and counted: with round_scales_to_power_of_2, torchao takes 2^floor(log2(scale))
with an fp32 log2, which rounds to the integer j where the scale lies just below 2^j, so its
scale is twice the definition's (halfway's: the power of two read from the scale's exponent
bits); those rows' elements are not compared. Every other difference fails, and with torchao
0.18.0 so does a class count other than the one recorded. Negative control: halfway without
power-of-two scales must differ from torchao with them. Skipped (exit 77) without torch or
torchao."""

import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

import halfway  # noqa: E402

torch = hwtest.require("torch", "the comparison with torchao's float8 rowwise scaling")
warnings.filterwarnings("ignore")
scaling = hwtest.require("torchao.float8.float8_scaling_utils", "the comparison with torchao")
f8config = hwtest.require("torchao.float8.config", "the comparison with torchao")
training = hwtest.require("torchao.float8.float8_training_tensor", "the comparison with torchao")

F32 = np.float32
COLS = 48
SCHEMES = {"fp8_rowwise": (torch.float8_e4m3fn, 448.0),
           "fp8_rowwise_e5m2": (torch.float8_e5m2, 57344.0)}
# The class count of this input with torchao 0.18.0, per scheme and axis (pow2 only): the
# rows whose scale lies just below a power of two (of 914 rows or columns per case).
RECORDED = {(s, a, True): 164 for s in SCHEMES for a in (-1, 0)}


def rows_for(elem_max, rng):
    amaxes = set()
    for j in range(-120, 140):
        b = F32(elem_max * 2.0 ** -j)
        if not np.isfinite(b) or b == 0:
            continue
        amaxes.update((np.nextafter(b, F32(0)), b, np.nextafter(b, F32(np.inf))))
    amaxes.update(F32(v) for v in (1e-12, 9.999e-13, 1e-20, 1e-45, 3e-39))
    amaxes.update(F32(10.0 ** e) * F32(rng.uniform(1, 10)) for e in range(-30, 36))
    out = []
    for a in sorted(amaxes):
        row = (rng.uniform(-1, 1, COLS) * a).astype(F32)
        row[0], row[1], row[2] = a, -a, np.nextafter(a, F32(0))
        out.append(row)
    out.append(np.zeros(COLS, F32))
    out.append(np.full(COLS, -0.0, F32))
    wide = (rng.standard_normal((64, COLS)) * 2.0 ** rng.integers(-40, 40, (64, 1))).astype(F32)
    return np.vstack(out + [wide])


def torchao_cast(x, dtype, dim, pow2):
    t = scaling.hp_tensor_to_float8_dynamic(
        torch.from_numpy(x), dtype, training.LinearMMConfig(),
        scaling_granularity=f8config.ScalingGranularity.AXISWISE, axiswise_dim=dim,
        round_scales_to_power_of_2=pow2)
    codes = t._data.view(torch.uint8).numpy()
    return codes, t._scale.numpy().astype(F32), t.to_original_precision().numpy()


def compare(fails, scheme, x, axis, pow2, counts):
    dtype, _ = SCHEMES[scheme]
    codes_t, scale_t, dec_t = torchao_cast(x, dtype, axis, pow2)
    codes, scales, _ = halfway.encode_blocks(x, scheme, axis=axis, pow2_scales=pow2)
    dec = halfway.decode_blocks(codes, scales, None, scheme)
    what = f"{scheme} axis={axis} pow2={pow2}"
    if scales.shape != scale_t.shape:
        fails.append(f"{what}: scale shape {scales.shape} vs torchao's {scale_t.shape}")
        return
    sh, st = scales.view(np.uint32).ravel(), scale_t.view(np.uint32).ravel()
    differ = np.flatnonzero(sh != st)
    log2 = 0
    for i in differ:
        h, t = float(scales.ravel()[i]), float(scale_t.ravel()[i])
        # The class: pow2, torchao's scale twice halfway's, and the unrounded scale q (the
        # definition's, from the same amax) below torchao's power of two, its fp32 log2 that
        # power's exponent.
        amax = float(np.max(np.abs(x[i] if axis == -1 else x[:, i])))
        q = F32(SCHEMES[scheme][1] / max(amax, 1e-12))
        if pow2 and t == 2 * h and h <= q < t and \
                np.log2(np.float32(q)) == np.float32(np.log2(t)):
            log2 += 1
            continue
        fails.append(f"{what}: scale {i} halfway {h!r} torchao {t!r} (amax {amax!r})")
        if len(fails) > 20:
            return
    keep = np.ones(sh.size, bool)
    keep[differ] = False
    mask = np.broadcast_to(keep.reshape(scales.shape), x.shape)
    bad = np.flatnonzero(mask & (codes != codes_t))
    if bad.size:
        i = bad[0]
        fails.append(f"{what}: {bad.size} element codes differ, first at {np.unravel_index(i, x.shape)}"
                     f": x {x.ravel()[i]!r} halfway {codes.ravel()[i]} torchao {codes_t.ravel()[i]}")
    bad = np.flatnonzero(mask & (dec.view(np.uint32) != dec_t.view(np.uint32)))
    if bad.size:
        fails.append(f"{what}: {bad.size} decoded values differ")
    counts[(scheme, axis, pow2)] = log2


def main():
    rng = np.random.default_rng(5)
    fails, counts = [], {}
    for scheme, (_, elem_max) in SCHEMES.items():
        x = rows_for(elem_max, rng)
        for axis, xs in ((-1, x), (0, np.ascontiguousarray(x.T))):
            for pow2 in (False, True):
                compare(fails, scheme, xs, axis, pow2, counts)
    for key, n in sorted(counts.items(), key=str):
        print(f"{key[0]} axis={key[1]} pow2={key[2]}: {n} rows in the fp32-log2 class")
    if any(n for (s, a, p), n in counts.items() if not p):
        fails.append("the log2 class appeared without power-of-two scales")
    import torchao
    if torchao.__version__.startswith("0.18.0"):
        for key, n in counts.items():
            want = RECORDED.get(key, 0)
            if key[2] and n != want:
                fails.append(f"{key}: {n} rows in the log2 class, recorded {want}")
    # Negative control: without power-of-two scales halfway differs from torchao with them.
    x = rows_for(448.0, np.random.default_rng(6))
    _, scale_t, _ = torchao_cast(x, torch.float8_e4m3fn, -1, True)
    _, scales, _ = halfway.encode_blocks(x, "fp8_rowwise", axis=-1)
    if np.array_equal(scales.view(np.uint32), scale_t.view(np.uint32)):
        fails.append("negative control: plain scales equal torchao's power-of-two ones")
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
