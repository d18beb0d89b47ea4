"""Throughput of halfway.round against the references people use, measured in one run.

    python3 -m halfway.benchmark [--n N] [--repeats R] [--threads T] [--json]
    python3 -m halfway.benchmark --emulate [--repeats R] [--inner I] [--json]
    python3 -m halfway.benchmark --peers [--n N] [--repeats R] [--threads T] [--json]

For each data set, every repetition times the contenders back to back on the same array;
the ratio of each repetition is reference time / halfway time, and the median ratio over the
repetitions is reported (absolute times drift on shared machines, ratios much less). The goals
are a report, not a test: halfway.round(x, "fp16") >= 10x numpy's astype(float16) round trip,
halfway.round(x, "bf16") >= 1x PyTorch's .to(torch.bfloat16).float() round trip. PyTorch runs
with `threads` intra-op threads (default 1: halfway.round is single-threaded).
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

import halfway
from halfway import _args


def _datasets(n, seed=2024):
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal(n).astype(np.float32)
    # Magnitudes from 2^-30 to 2^20 and both signs: fp16 subnormals, flushes to zero, overflow.
    wide = (np.exp2(rng.uniform(-30, 20, n)) * rng.choice([-1.0, 1.0], n)).astype(np.float32)
    return {"normal(0,1)": normal, "wide 2^-30..2^20": wide}


def _time(fn, inner):
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def measure(ours, theirs, repeats, inner):
    """Time two contenders back to back on the same data after one warm-up call each:
    (median time of ours, median time of theirs, median of the per-repetition ratios theirs /
    ours), so that machine drift during the run cancels out."""
    ours(), theirs()  # warm up (allocations, lazy initialisation, JIT builds)
    ratios, t_ours, t_ref = [], [], []
    for _ in range(repeats):
        a = _time(ours, inner)
        b = _time(theirs, inner)
        t_ours.append(a)
        t_ref.append(b)
        ratios.append(b / a)
    return statistics.median(t_ours), statistics.median(t_ref), statistics.median(ratios)


def _same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def run(n=1 << 20, repeats=7, threads=1, inner=3, quiet=False):
    """Measure and print; return a list of dicts (one per data set and comparison)."""
    # numpy's overflow warnings would slow its conversion of the wide data set (a warning per
    # call); they are silenced so that only the conversion is timed.
    with np.errstate(over="ignore"):
        return _run(n, repeats, threads, inner, quiet)


def _run(n, repeats, threads, inner, quiet):
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        torch = None

    contenders = [
        ("fp16", "numpy astype(float16).astype(float32)",
         lambda x: x.astype(np.float16).astype(np.float32), 10.0),
    ]
    if torch is not None:
        contenders.append(
            ("bf16", f"torch .to(bfloat16).float() ({threads} thread{'s' if threads > 1 else ''})",
             lambda x: torch.from_numpy(x).to(torch.bfloat16).float().numpy(), 1.0))

    out = []
    say = (lambda *a: None) if quiet else print
    say(f"halfway.round on {n} float32 values; median of {repeats} repetitions "
        f"(each the mean of {inner} calls)")
    for name, x in _datasets(n).items():
        for fmt, ref_name, ref, goal in contenders:
            ours = lambda: halfway.round(x, fmt)  # noqa: E731
            theirs = lambda: ref(x)  # noqa: E731
            t_ours, t_ref, ratio = measure(ours, theirs, repeats, inner)
            # The bench data have no NaN, so the results must agree bit for bit.
            same = _same_bits(ours(), theirs())
            r = {
                "data": name,
                "format": fmt,
                "reference": ref_name,
                "halfway_gelem_s": n / t_ours / 1e9,
                "reference_gelem_s": n / t_ref / 1e9,
                "ratio": ratio,
                "goal": goal,
                "identical": same,
            }
            out.append(r)
            say(f"  {name:18s} {fmt}: halfway {r['halfway_gelem_s']:6.3f} G/s, "
                f"{ref_name} {r['reference_gelem_s']:6.3f} G/s -> ratio {r['ratio']:6.2f}x "
                f"(goal >= {goal:g}x{'' if r['ratio'] >= goal else ', NOT met'})"
                f"{'' if same else '  RESULTS DIFFER'}")
    if torch is None:
        say("  skipped: the bf16 comparison (torch is not importable)")
    return out


def main(argv=None):
    p = _args.Parser(prog="python3 -m halfway.benchmark", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1 << 20, help="elements (default 2^20)")
    p.add_argument("--repeats", type=int, default=7, help="repetitions (default 7)")
    p.add_argument("--inner", type=int, default=3, help="calls per timing (default 3)")
    p.add_argument("--threads", type=int, default=1, help="PyTorch threads (default 1)")
    p.add_argument("--json", action="store_true", help="print the results as JSON only")
    p.add_argument("--emulate", action="store_true",
                   help="time halfway.torch.emulate's training steps instead (see "
                        "halfway.emulate_bench)")
    p.add_argument("--peers", action="store_true",
                   help="time halfway against ml_dtypes, torch, QPyTorch, pychop and torchao "
                        "instead (see halfway.peer_bench)")
    args = p.parse_args(argv)
    if args.n < 1 or args.repeats < 1 or args.inner < 1 or args.threads < 1:
        print("halfway.benchmark: error: --n, --repeats, --inner and --threads must be >= 1",
              file=sys.stderr)
        return 2
    if args.emulate and args.peers:
        print("halfway.benchmark: error: --emulate and --peers are two benchmarks: give one",
              file=sys.stderr)
        return 2
    if args.peers:
        from . import peer_bench
        res = peer_bench.run(args.n, args.repeats, args.threads, args.inner, quiet=args.json)
    elif args.emulate:
        from . import emulate_bench
        res = emulate_bench.run(repeats=args.repeats, inner=args.inner, quiet=args.json)
    else:
        res = run(args.n, args.repeats, args.threads, args.inner, quiet=args.json)
    if args.json:
        print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
