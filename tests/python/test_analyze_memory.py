"""halfway.analyze in bounded memory whatever the number of arrays: 100,000 one-value arrays
in a child process under a 512 MiB address-space limit give the right row for each.

usage: test_analyze_memory.py"""
import os
import resource
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

hwtest.require("pandas", "halfway.analyze's DataFrames")
import halfway  # noqa: E402

hwtest.require_sim("_AnalysisRun")

LIMIT = 512 << 20
# e4m3 (smallest subnormal 2^-9, largest finite 448): flushed, exact subnormal, exact, overflow.
CHILD = r'''
import numpy as np, halfway
n = 100000
vals = np.array([2.0 ** -12, 2.0 ** -8, 1.5, 1000.0], np.float32)
r = halfway.analyze({f"a{i:06d}": vals[i % 4:i % 4 + 1] for i in range(n)}, ["e4m3"], (0, 0))
t = r.trace
assert len(t) == n, len(t)
assert list(t["name"]) == [f"a{i:06d}" for i in range(n)]
i = np.arange(n) % 4
assert (t["flushed"].to_numpy() == (i == 0)).all()
assert (t["subnormal"].to_numpy() == (i == 1)).all()
assert (t["overflow"].to_numpy() == (i == 3)).all()
assert (t["total"] == 1).all()
w = r.scale_window
assert len(w) == n + 1 and w["values"].iloc[0] == n and w["flushed"].iloc[0] == n // 4
print("ok child")
'''


def limited():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def run(code):
    # One BLAS thread: each thread's arena would count against the address space.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, preexec_fn=limited)


def main():
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        print("skipped: an AddressSanitizer build cannot run under an address-space limit")
        sys.exit(hwtest.SKIP)
    # The limit is real: a child that needs more than it fails (the negative control).
    r = run("b = bytearray(600 << 20)")
    if r.returncode == 0 or "MemoryError" not in r.stderr:
        raise AssertionError(f"600 MiB under a {LIMIT >> 20} MiB limit did not fail: {r!r}")
    r = run(CHILD)
    if r.returncode != 0 or "ok child" not in r.stdout:
        raise AssertionError(f"100,000 arrays under {LIMIT >> 20} MiB: {r.returncode} "
                             f"{r.stderr[-2000:]}")
    print("ok")


if __name__ == "__main__":
    main()
