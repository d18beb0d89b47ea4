""".npz input that is hostile or merely unusual, through `halfway train` (argument: the CLI) or
through the Python module's `halfway.train` (argument: --python; the module on PYTHONPATH).

Hostile input must end in one error line and exit code 2 (from Python: a ValueError), within
bounded time and memory, never in a signal: an overflowing Fortran-order shape, ZIP64 offsets
that wrap around, sizes declared far beyond what the file holds, a FIFO or a device instead of a
file. Every dtype the docs promise (f2/f4/f8, ints, bool), C and Fortran order, stored and
deflated, loads to the same values: the runs' steps.csv are byte-identical. Needs numpy."""
import io
import os
import resource
import struct
import subprocess
import sys
import tempfile
import threading
import zipfile
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from simtest import ISSUE_CONFIG, SKIP, Workdir, check  # noqa: E402

AS_LIMIT = 3 << 30      # address space of each run: a 4 GiB allocation cannot succeed
RSS_LIMIT_KB = 400_000  # peak resident memory of each run
TIMEOUT = 60


# ---------------------------------------------------------------------------------------------
# Building files.

def npy(descr, fortran, shape_text, data, major=1):
    """A .npy image with a header written by hand (numpy would refuse some of these)."""
    h = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape_text)
    pre = 10 if major == 1 else 12
    h += " " * ((64 - (pre + len(h) + 1) % 64) % 64) + "\n"
    hl = struct.pack("<H", len(h)) if major == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes([major, 0]) + hl + h.encode() + data


def zip_of(members, method=zipfile.ZIP_STORED):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return b.getvalue()


def eocd(entries, cd_size, cd_off):
    return struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, entries, entries, cd_size, cd_off, 0)


def central_entry(name, method, crc, csize, usize, loff, extra=b""):
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, method, 0, 0x21, crc, csize,
                       usize, len(name), len(extra), 0, 0, 0, 0, loff) + name + extra


def local_entry(name, method, crc, csize, usize):
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, method, 0, 0x21, crc, csize, usize,
                       len(name), 0) + name


def hostile_cases():
    """name -> (file bytes, fragments of which the error line must hold one)."""
    cases = {}
    zerr = ("not an .npz (zip) file",)
    # (a) Fortran order, shape product 3 * 6148914691236517206 = 2^64 + 2: wraps to 2 elements,
    # whose 16 bytes are present; the old reader then indexed 6e18 elements past its buffer.
    a = npy("<f8", "True", "(6148914691236517206, 3)", b"\0" * 16)
    cases["fortran_overflow"] = (zip_of({"x.npy": a, "y.npy": a}), ("too many elements",))
    # A product that wraps to 0, and a dimension beyond int64.
    cases["shape_wraps_to_zero"] = (
        zip_of({"x.npy": npy("<f4", "False", "(4294967296, 4294967296)", b"")}),
        ("too many elements",))
    cases["dimension_beyond_int64"] = (
        zip_of({"x.npy": npy("<f4", "False", "(18446744073709551617,)", b"")}),
        ("dimension too large",))
    cases["negative_dimension"] = (
        zip_of({"x.npy": npy("<f4", "False", "(-3, 2)", b"\0" * 24)}), ("malformed shape",))
    # (b) ZIP64 offsets near 2^64: the old bounds check (off + n > size) wrapped and passed.
    name = b"x.npy"
    loc = struct.pack("<IIQI", 0x07064B50, 0, 2**64 - 2, 1)
    cases["zip64_locator_wraps"] = (b"\0" * 64 + loc + eocd(0xFFFF, 0, 0xFFFFFFFF), zerr)
    rec = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, 1, 1, 46, 2**64 - 2)
    loc0 = struct.pack("<IIQI", 0x07064B50, 0, 0, 1)
    cases["zip64_directory_offset_wraps"] = (rec + loc0 + eocd(0xFFFF, 0, 0xFFFFFFFF), zerr)
    rec = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, 2**62, 2**62, 46, 0)
    cases["zip64_entry_count_huge"] = (rec + loc0 + eocd(0xFFFF, 0, 0xFFFFFFFF), zerr)
    body = npy("<f4", "False", "(2,)", b"\0" * 8)
    crc = zlib.crc32(body)
    local = local_entry(name, 0, crc, len(body), len(body)) + body
    ext = struct.pack("<HHQ", 1, 8, 2**64 - 2)
    cd = central_entry(name, 0, crc, len(body), len(body), 0xFFFFFFFF, ext)
    cases["zip64_local_offset_wraps"] = (local + cd + eocd(1, len(cd), len(local)), zerr)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflated = comp.compress(body) + comp.flush()
    local = local_entry(name, 8, crc, len(deflated), len(body)) + deflated
    data_off = 30 + len(name)
    ext = struct.pack("<HHQ", 1, 8, 2**64 - data_off + 8)
    cd = central_entry(name, 8, crc, 0xFFFFFFFF, len(body), 0, ext)
    cases["zip64_compressed_size_wraps"] = (local + cd + eocd(1, len(cd), len(local)), zerr)
    # (c) A few hundred bytes declaring a 4 GiB member: the old reader allocated it first.
    huge = 0xFFFFFFF0
    local = local_entry(name, 8, crc, len(deflated), huge) + deflated
    cd = central_entry(name, 8, crc, len(deflated), huge, 0)
    cases["declared_size_4gib"] = (local + cd + eocd(1, len(cd), len(local)),
                                   ("declared size",) + zerr)
    local = local_entry(name, 0, crc, huge, huge) + body
    cd = central_entry(name, 0, crc, huge, huge, 0)
    cases["stored_size_4gib"] = (local + cd + eocd(1, len(cd), len(local)),
                                 ("declared size",) + zerr)
    # A header promising 2^29 doubles (4 GiB) in a member that holds 16 bytes.
    cases["header_claims_4gib"] = (
        zip_of({"x.npy": npy("<f8", "False", "(536870912,)", b"\0" * 16)}, zipfile.ZIP_DEFLATED),
        ("truncated data",))
    # Members that are not what their header says.
    cases["trailing_bytes"] = (zip_of({"x.npy": npy("<f4", "False", "(2,)", b"\0" * 12)}),
                               ("data continue", "implies"))
    cases["bad_crc"] = (zip_of({"x.npy": body}).replace(body, body[:-8] + b"\1" * 8), ("CRC",))
    cases["huge_header_length"] = (zip_of({"x.npy": b"\x93NUMPY\x02\x00" +
                                          struct.pack("<I", 2**32 - 1) + b"{}"}),
                                   ("npy header of",))
    # Bytes from the file in the message: escaped, never raw control or non-UTF-8 bytes.
    raw = npy("<fZ4", "False", "(2,)", b"\0" * 8).replace(b"<fZ4", b"<f\x8a\x1b4")
    cases["dtype_bytes"] = (zip_of({"x.npy": raw}), ("unsupported dtype '<f\\x8a\\x1b4'",))
    cases["name_bytes"] = (zip_of({"q\x07\x1bZ.npy": raw}).replace(b"Z.npy", b"\x8a.npy"),
                           ("member 'q\\x",))  # as CP437 (libzip's guess), escaped
    cases["not_a_zip"] = (b"PK\x03\x04 not really a zip", zerr)
    cases["empty"] = (b"", zerr)
    return cases


# ---------------------------------------------------------------------------------------------
# Running with bounded time and memory.

def sanitized(halfway):
    """AddressSanitizer reserves terabytes of address space and inflates memory use: under it,
    neither the address-space limit nor the memory bound applies."""
    if halfway == "--python":
        import halfway as hw
        paths = [os.environ.get("LD_PRELOAD", ""), hw._halfway.__file__]
    else:
        paths = [halfway]
    for p in paths:
        if "asan" in p:
            return True
        if os.path.isfile(p) and b"__asan_init" in open(p, "rb").read():
            return True
    return False


SANITIZED = False


def limits():
    if not SANITIZED:
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_bounded(args, timeout=TIMEOUT):
    """(exit code or -signal, stdout, stderr, peak RSS in KiB, timed out)."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        p = subprocess.Popen(args, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                             preexec_fn=limits)
        timed_out = []
        t = threading.Timer(timeout, lambda: (timed_out.append(1), os.kill(p.pid, 9)))
        t.start()
        _, status, ru = os.wait4(p.pid, 0)
        t.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        return (p.returncode, fo.read().decode(errors="replace"),
                fe.read().decode(errors="replace"), ru.ru_maxrss, bool(timed_out))


# The Python side: every case in one interpreter (importing halfway and pandas once); a line
# before each case names the one that was running if the interpreter dies.
PY_TRAIN = """
import sys, halfway
for arg in sys.argv[1:]:
    name, config, out = arg.split("\\t")
    print("CASE " + name, flush=True)
    try:
        halfway.train(config, out)
        print("OK", flush=True)
    except ValueError as e:
        print("ValueError: " + str(e).replace("\\n", "\\\\n"), flush=True)
"""


class Case:
    def __init__(self, name, config, fragments=None):
        self.name, self.config, self.fragments = name, config, fragments


def run_cases(halfway, w, cases):
    """name -> (ok, error line, peak RSS in KiB); fails on a signal, a hang or a crash."""
    results = {}
    if halfway == "--python":
        args = [f"{c.name}\t{c.config}\t{w.file('out_' + c.name)}" for c in cases]
        rc, out, err, rss, timed_out = run_bounded([sys.executable, "-c", PY_TRAIN, *args],
                                                   timeout=4 * TIMEOUT)
        name = None
        for line in out.splitlines():
            if line.startswith("CASE "):
                name = line[5:]
            elif name is not None:
                results[name] = (line == "OK", line, rss)
                name = None
        check(not timed_out, f"halfway.train: no answer within {4 * TIMEOUT} s (case {name})")
        check(rc == 0, f"halfway.train: the interpreter exited {rc} in case {name}: "
                       f"{err[-3000:]}")
        return results
    for c in cases:
        rc, _, err, rss, timed_out = run_bounded(
            [halfway, "train", c.config, "--out", w.file("out_" + c.name)])
        check(not timed_out, f"{c.name}: no answer within {TIMEOUT} s")
        lines = err.strip().splitlines()
        if rc == 0:
            results[c.name] = (True, "", rss)
            continue
        check(rc == 2, f"{c.name}: expected exit 2, got {rc}: {err!r}")
        check(len(lines) == 1 and lines[0].startswith("halfway train: error: "),
              f"{c.name}: expected one error line, got {err!r}")
        results[c.name] = (False, lines[0], rss)
    return results


def main(halfway):
    if halfway == "--python":
        try:
            import halfway as hw
        except ImportError as e:
            print(f"skipped: the Python module is not importable ({e})")
            return SKIP
        if not hasattr(hw._halfway, "_train_to_dir"):
            print("skipped: this build of the Python module has no simulator (sim/)")
            return SKIP
    global SANITIZED
    SANITIZED = sanitized(halfway)
    w = Workdir("npz")
    try:
        cases = []

        def config(name, data="data.npz", init="init.npz"):
            text = ISSUE_CONFIG.replace('"data.npz"', f'"{data}"').replace('"init.npz"',
                                                                          f'"{init}"')
            return w.write(f"{name}.toml", text)

        g = np.random.default_rng(0)
        # Values every dtype holds exactly (bool too): all dtypes train identically.
        x = g.integers(0, 2, (256, 10))
        y = (x[:, :1] * 0.5).astype(np.float32)
        init = {"0.weight": g.uniform(-0.3, 0.3, (32, 10)), "0.bias": g.uniform(-0.3, 0.3, 32),
                "2.weight": g.uniform(-0.17, 0.17, (1, 32)), "2.bias": g.uniform(-0.17, 0.17, 1)}
        np.savez(w.file("init.npz"), **{k: v.astype(np.float32) for k, v in init.items()})
        np.savez(w.file("data.npz"), x=x.astype(np.float64), y=y)
        cases.append(Case("base", config("base")))
        good = []
        for dt in ["f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1"]:
            for order in ("C", "F"):
                for save in (np.savez, np.savez_compressed):
                    xa = np.asarray(x.astype(np.dtype(dt)), order=order)
                    check(order == "C" or (xa.flags.f_contiguous and not xa.flags.c_contiguous),
                          "Fortran-order array expected")
                    name = f"{dt}_{order}_{save.__name__}"
                    save(w.file(f"data_{name}.npz"), x=xa, y=y)
                    cases.append(Case(name, config(name, data=f"data_{name}.npz")))
                    good.append(name)

        # Hostile files, as data and (a few) as initial weights.
        hostile = hostile_cases()
        for name, (data, fragments) in hostile.items():
            with open(w.file(f"data_{name}.npz"), "wb") as f:
                f.write(data)
            cases.append(Case(name, config(name, data=f"data_{name}.npz"), fragments))
        for name in ("fortran_overflow", "zip64_locator_wraps", "declared_size_4gib"):
            cases.append(Case("init_" + name, config("init_" + name, init=f"data_{name}.npz"),
                              hostile[name][1]))
        # Not a regular file: a FIFO (nobody writes to it), a directory, a device.
        os.mkfifo(w.file("fifo.npz"))
        os.mkdir(w.file("dir.npz"))
        for name, path in (("fifo", "fifo.npz"), ("directory", "dir.npz"),
                           ("dev_zero", "/dev/zero")):
            cases.append(Case(name, config(name, data=path), ("not a regular file",)))
        cases.append(Case("missing", config("missing", data="nope.npz"), ("cannot read",)))

        results = run_cases(halfway, w, cases)
        for c in cases:
            check(c.name in results, f"{c.name}: no result")
            ok, line, rss = results[c.name]
            check(SANITIZED or rss < RSS_LIMIT_KB, f"{c.name}: peak memory {rss} KiB")
            if c.fragments is None:
                check(ok, f"{c.name}: failed: {line}")
                continue
            check(not ok, f"{c.name}: accepted")
            check(line.isprintable(), f"{c.name}: unescaped characters in {line!r}")
            check(any(f in line for f in c.fragments), f"{c.name}: none of {c.fragments} in "
                                                       f"{line!r}")
            check(not os.path.exists(w.file("out_" + c.name)),
                  f"{c.name}: left an output directory behind")
        base = open(os.path.join(w.file("out_base"), "steps.csv")).read()
        for name in good:
            steps = open(os.path.join(w.file("out_" + name), "steps.csv")).read()
            check(steps == base, f"{name}: steps.csv differs from the f8 data's")
        print(f"ok ({len(cases)} cases)")
        return 0
    finally:
        w.cleanup()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
