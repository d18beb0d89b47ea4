"""Every one of the 2^32 float32 bit patterns through halfway.round, against numpy's float16
round trip (argument fp16) or PyTorch's bfloat16 round trip (argument bf16), bit for bit.
NaN results are checked against the quieting rule (sign, quiet bit, top payload bits), since
numpy passes signalling NaNs through and PyTorch returns one canonical NaN. Minutes, not
seconds: CTest label `exhaustive`.

    python3 test_exhaustive_f32.py fp16|bf16
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import f32, is_nan32  # noqa: E402

import halfway  # noqa: E402

CHUNK = 1 << 24


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("fp16", "bf16"):
        print("usage: test_exhaustive_f32.py fp16|bf16", file=sys.stderr)
        return 2
    fmt = sys.argv[1]
    if fmt == "fp16":
        def reference(x):
            with np.errstate(over="ignore"):
                return x.astype(np.float16).astype(np.float32).view(np.uint32)

        def quieted(b):
            h = ((b >> 16) & 0x8000) | 0x7E00 | ((b >> 13) & 0x3FF)
            return h.astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    else:
        torch = hwtest.require("torch", "the exhaustive cross-check against PyTorch's bfloat16")
        torch.set_num_threads(1)

        def reference(x):
            return torch.from_numpy(x).to(torch.bfloat16).float().numpy().view(np.uint32)

        def quieted(b):
            return (b & 0xFFFF0000) | 0x00400000

    t0 = time.time()
    mismatches = 0
    for start in range(0, 1 << 32, CHUNK):
        b = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32)
        x = f32(b)
        got = halfway.round(x, fmt).view(np.uint32)
        want = reference(x)
        nan = is_nan32(b)
        if not np.array_equal(is_nan32(got), is_nan32(want)):
            print(f"NaN results differ in chunk 0x{start:08X}")
            mismatches += 1
        want = np.where(nan, quieted(b), want)
        bad = np.flatnonzero(got != want)
        if bad.size:
            mismatches += bad.size
            for i in bad[:3]:
                print(f"input 0x{int(b[i]):08X}: got 0x{int(got[i]):08X}, want 0x{int(want[i]):08X}")
    print(f"{fmt}: 2^32 float32 inputs, {mismatches} mismatches, {time.time() - t0:.0f} s")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
