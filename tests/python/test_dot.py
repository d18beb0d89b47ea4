"""halfway.dot: batched dot products under every accumulation name, on cases whose answers are
worked out by hand here (docs/hardware.md, "Published tensor-core models"), with bad input
refused by name. Usage: test_dot.py"""
import struct
import sys

import numpy as np

import halfway
from hwtest import check, check_raises, status


def bits(x):
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def f16(*codes):
    return np.array(codes, dtype=np.uint16).view(np.float16).astype(np.float32)


def f32bits(code):
    return np.array([code], dtype=np.uint32).view(np.float32)[0]


def one(a, b, c, fmt, acc):
    return bits(halfway.dot(np.array([a], np.float32), np.array([b], np.float32),
                            np.array([c], np.float32), fmt, accumulation=acc)[0])


def main():
    # MMA-Sim's Volta example: its model gives 0xc0bd7513, halfway's normalised v100 0xc0bd7514.
    a = f16(0xbf25, 0x3e2b, 0xbf41, 0xbe6b)
    b = f16(0x3e6d, 0x3ef3, 0x3fc4, 0x3e69)
    c = f32bits(0x3eb941a6)
    check(one(a, b, c, "fp16", "mmasim-volta") == 0xc0bd7513, "mmasim-volta example")
    check(one(a, b, c, "fp16", "v100") == 0xc0bd7514, "v100 example")
    # FP22: products 1, 1, 2^-13 give 2.0 under mmasim-hopper-fp8, 2 + 2^-13 under h100-fp8.
    a8, b8 = [1.0, 1.0, 2.0 ** -6], [1.0, 1.0, 2.0 ** -7]
    check(one(a8, b8, 0.0, "e4m3", "mmasim-hopper-fp8") == bits(2.0), "FP22 truncation")
    check(one(a8, b8, 0.0, "e4m3", "h100-fp8") == bits(2.0 + 2.0 ** -13), "h100-fp8 keeps 2^-13")
    # fp32 accumulation of bf16 values: 1 + 2^-24 + 2^-24 in one fma chain from c = 0 rounds
    # each step to nearest even (1, then 1); AMX's two chains keep 2^-23.
    ab, bb = [1.0, 2.0 ** -24, 0.0, 2.0 ** -24], [1.0, 1.0, 1.0, 1.0]
    check(one(ab, bb, 0.0, "bf16", "fp32") == bits(1.0), "fp32 chain")
    check(one(ab, bb, 0.0, "bf16", "amx-bf16") == bits(1.0 + 2.0 ** -23), "amx-bf16 chains")
    # Batched, any leading shape; every name runs.
    rng = np.random.default_rng(0)
    A = halfway.round(rng.standard_normal((3, 5, 40)).astype(np.float32), "bf16")
    B = halfway.round(rng.standard_normal((3, 5, 40)).astype(np.float32), "bf16")
    C = np.zeros((3, 5), np.float32)
    exact = (A.astype(np.float64) * B.astype(np.float64)).sum(-1)
    for name in halfway.accumulations():
        if name in ("h100-fp8", "mmasim-hopper-fp8"):
            continue
        r = halfway.dot(A, B, C, "bf16", accumulation=name)
        check(r.shape == (3, 5) and r.dtype == np.float32, f"{name}: shape {r.shape}")
        check(np.all(np.abs(r - exact) <= 0.05 * (1 + np.abs(exact))), f"{name}: far from the sum")
    # Bad input, by name.
    for args, exc, needle in (
            ((A.astype(np.float64), B, C, "bf16"), TypeError, "a must be a float32"),
            ((A + np.float32(1e-3), B, C, "bf16"), ValueError, "not a value of bf16"),
            ((A, B[:, :, :3], C, "bf16"), ValueError, "do not match"),
            ((A, B, C[0], "bf16"), ValueError, "dimensions"),
            ((A, B, C, "fp99"), ValueError, "fp99")):
        check_raises(exc, needle, needle, halfway.dot, *args)
    check_raises(ValueError, "nope", "unknown accumulation", halfway.dot, A, B, C, "bf16",
                 accumulation="nope")
    return status("ok")


if __name__ == "__main__":
    sys.exit(main())
