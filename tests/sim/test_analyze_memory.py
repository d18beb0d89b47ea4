"""`halfway analyze` in bounded memory whatever the number of arrays: 100,000 one-value members
under a 512 MiB address-space limit give the right row for every member; --max-memory refuses,
in one line naming the option, what would need more; running out of memory anyway is an
internal error (exit 70). Skipped under AddressSanitizer, whose shadow memory needs terabytes
of address space.

usage: test_analyze_memory.py HALFWAY_BINARY"""
import csv
import os
import resource
import subprocess
import sys
import zipfile

sys.path.insert(0, os.path.dirname(__file__))
from simtest import SKIP, Workdir, check  # noqa: E402

MEMBERS = 100_000
LIMIT = 512 << 20  # bytes of address space

# One float32 value a member, cycling through what rounding into e4m3 (smallest subnormal
# 2^-9, largest finite 448) does to it: flushed to zero, exact subnormal, exact normal,
# overflow. The expected counts are the format's definition, not the program's (inexact is
# not compared for the overflow, whose result e4m3's NaN is a choice of docs/semantics.md).
VALUES = [2.0 ** -12, 2.0 ** -8, 1.5, 1000.0]
EXPECT = [  # zeros, flushed, subnormal, overflow, inexact
    ("1", "1", "0", "0", "1"),
    ("0", "0", "1", "0", "0"),
    ("0", "0", "0", "0", "0"),
    ("0", "0", "0", "1", None),
]


def npy_f4(v):
    """A one-value float32 .npy image, as numpy.save writes it."""
    import struct
    h = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }"
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + struct.pack("<f", v)


def write_members(path, n):
    images = [npy_f4(v) for v in VALUES]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for i in range(n):
            z.writestr(f"a{i:06d}.npy", images[i % 4])


def limited(limit):
    def pre():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return pre


def analyze(halfway, *args, limit=LIMIT):
    return subprocess.run([halfway, "analyze", *args], capture_output=True, text=True,
                          preexec_fn=limited(limit))


def one_line_refusal(r, what, *words):
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(lines) == 1 and all(w in lines[0] for w in words),
          f"{what}: expected one error line with {words}, exit 2; got {r.returncode} {r.stderr!r}")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    halfway = sys.argv[1]
    with open(halfway, "rb") as f:
        if b"__asan_init" in f.read():
            print("skipped: an AddressSanitizer build cannot run under an address-space limit")
            return SKIP
    w = Workdir("analyze_memory")
    try:
        # The limit is real: a child that needs more than it fails (the negative control).
        r = subprocess.run([sys.executable, "-c", "b = bytearray(600 << 20)"],
                           capture_output=True, preexec_fn=limited(LIMIT))
        check(r.returncode != 0 and b"MemoryError" in r.stderr,
              f"a 600 MiB allocation under the {LIMIT >> 20} MiB limit did not fail: {r!r}")

        npz = w.file("many.npz")
        write_members(npz, MEMBERS)
        out = w.file("out")
        r = analyze(halfway, npz, "--formats", "e4m3", "--scales", "0..0", "--out", out)
        check(r.returncode == 0, f"{MEMBERS} members under {LIMIT >> 20} MiB: {r.returncode} "
              f"{r.stderr.strip()!r}")
        with open(os.path.join(out, "trace.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        check(len(rows) == MEMBERS, f"trace.csv has {len(rows)} rows, not {MEMBERS}")
        for i, row in enumerate(rows):
            got = (row["zeros"], row["flushed"], row["subnormal"], row["overflow"],
                   row["inexact"] if i % 4 != 3 else None)
            check(row["name"] == f"a{i:06d}" and row["step"] == "0" and row["total"] == "1" and
                  row["dtype"] == "e4m3" and got == EXPECT[i % 4],
                  f"trace.csv row {i}: {row}, expected a{i:06d} with {EXPECT[i % 4]}")
        with open(os.path.join(out, "scale_window.csv"), newline="") as f:
            win = list(csv.DictReader(f))
        # The members together at 2^0 (one row, empty name), then each member's own row.
        check(len(win) == MEMBERS + 1, f"scale_window.csv has {len(win)} rows")
        check(win[0]["name"] == "" and win[0]["values"] == str(MEMBERS) and
              win[0]["flushed"] == str(MEMBERS // 4) and win[0]["overflow"] == "1",
              f"the combined window row: {win[0]}")
        for i, row in enumerate(win[1:]):
            check(row["name"] == f"a{i:06d}" and row["values"] == "1" and
                  row["flushed"] == EXPECT[i % 4][1] and row["overflow"] == EXPECT[i % 4][3],
                  f"scale_window.csv row of member {i}: {row}")
        check(not [f for f in os.listdir(out) if ".tmp." in f], f"temporary files left in {out}")

        # Out of memory that no limit caught is an internal error, exit 70, never bad input's 2
        # nor a crash: under address-space limits too small for the analysis (where the
        # allocation fails depends on the libraries' sizes; most of these limits hit the
        # analysis itself).
        internal = 0
        for mib in (60, 80):
            r = analyze(halfway, npz, "--formats", "e4m3", "--scales", "0..0", "--out",
                        w.file("tight"), "--max-memory", "1T", limit=mib << 20)
            lines = r.stderr.strip().splitlines()
            check(r.returncode in (0, 70) and len(lines) == 1,
                  f"under {mib} MiB: exit {r.returncode}, {r.stderr!r}")
            if r.returncode == 70:
                check("internal error: out of memory" in lines[0], f"under {mib} MiB: {lines}")
                internal += 1
        check(internal >= 1, "neither 60 nor 80 MiB ran out of memory")

        # --max-memory: the working set alone, then the arrays' bookkeeping, over the limit.
        one_line_refusal(analyze(halfway, npz, "--out", w.file("o1"), "--max-memory", "1M"),
                         "--max-memory 1M", "--max-memory", "working set")
        r = analyze(halfway, npz, "--formats", "e4m3", "--scales", "0..0", "--out",
                    w.file("o2"), "--max-memory", "16M")
        one_line_refusal(r, "--max-memory 16M", "--max-memory", "at array", "raise the limit")
        check(not os.path.exists(os.path.join(w.file("o2"), "manifest.json")),
              "a refused analysis left a manifest")
        for bad in ("", "x", "0"):
            one_line_refusal(analyze(halfway, npz, "--out", w.file("o3"), "--max-memory", bad),
                             f"--max-memory {bad!r}", "memory size")
        print(f"ok: {MEMBERS} members under a {LIMIT >> 20} MiB address-space limit")
        return 0
    finally:
        w.cleanup()


if __name__ == "__main__":
    sys.exit(main())
