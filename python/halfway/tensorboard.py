"""Run folders as TensorBoard logs: python3 -m halfway.tensorboard RUN_DIR... --out LOGDIR.

A run folder is any folder with halfway's run schema (halfway train, sweep members, analyze,
halfway.torch.trace and emulate): steps.csv, trace.csv, blocks.csv, each optional. A folder
without them whose subfolders have them (a sweep's runs/NNNN) is exported member by member.
Each run becomes LOGDIR/<name>/events.out.tfevents.0.halfway, <name> the folder's name (its path
under the sweep for members), and holds, per step:

- `loss`, `loss_scale`, `val_loss` (where not empty): steps.csv's columns;
- `grad/flushed_fraction`, `grad/overflow_fraction`: steps.csv's grad_flushed and
  grad_overflow over grad_values (where grad_values > 0);
- `flushed_fraction/<name>/<dtype>`, `overflow_fraction/<name>/<dtype>`: trace.csv's flushed
  and overflow over total, the rows of one step, name and dtype pooled;
- `magnitude_log2/<name>/<dtype>` (histogram, trace.csv `hist`): bucket [e, e+1) holds the
  values with magnitude in [2^e, 2^(e+1));
- `blocks/flushed_fraction/<name>/<gemm>/<scheme>`, `blocks/saturated_fraction/...`:
  blocks.csv's flushed and saturated over elements, rows pooled as above;
- `blocks/snr_db/<name>/<gemm>/<scheme>`: 10 log10(sum signal / sum noise) of the pooled rows,
  where finite;
- `blocks/scale_log2/<name>/<gemm>/<scheme>` (histogram, blocks.csv `scale_hist`): as
  `magnitude_log2`, over the blocks' scale exponents.
docs/python.md has the same table.

Scalars are float32 (TensorBoard's simple_value). Every event's wall time is 0, so the same
folder always gives the same bytes; TensorBoard's "step" axis is the run's step. The writer is
self-contained (TFRecord framing with masked CRC-32C, the Event protocol buffer written field by
field): viewing needs TensorBoard, writing does not.
"""
import csv
import math
import os
import struct
import sys

from . import _args
from .columns import parse_hist

FILES = ("steps.csv", "trace.csv", "blocks.csv")
EVENT_FILE = "events.out.tfevents.0.halfway"


# -- the file format -------------------------------------------------------------------------

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _record(data):
    """One TFRecord: length, its masked CRC, the data, its masked CRC."""
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", _masked_crc(n)) + data + struct.pack("<I", _masked_crc(data))


def _varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number, wire, payload):
    return _varint(number << 3 | wire) + payload


def _bytes(number, data):
    return _field(number, 2, _varint(len(data)) + data)


def _double(number, v):
    return _field(number, 1, struct.pack("<d", v))


def _packed_doubles(number, vs):
    return _bytes(number, b"".join(struct.pack("<d", v) for v in vs))


def _event(step, value=None, file_version=None):
    """An Event (tensorflow/core/util/event.proto): wall_time 1, step 2, file_version 3,
    summary 5; a Summary holds one Value."""
    out = _double(1, 0.0) + _field(2, 0, _varint(step))
    if file_version:
        out += _bytes(3, file_version.encode())
    if value is not None:
        out += _bytes(5, _bytes(1, value))
    return out


def _scalar(tag, v):
    """A Summary.Value: tag 1, simple_value 2 (float32)."""
    return _bytes(1, tag.encode()) + _field(2, 5, struct.pack("<f", v))


def _histogram(tag, buckets):
    """A Summary.Value with a HistogramProto (histo 5): min 1, max 2, num 3, sum 4,
    sum_squares 5, bucket_limit 6, bucket 7; `buckets` maps e to the count of [e, e+1)."""
    es = sorted(buckets)
    num = float(sum(buckets.values()))
    mid = [(e + 0.5, buckets[e]) for e in es]
    h = (_double(1, float(es[0])) + _double(2, float(es[-1] + 1)) + _double(3, num)
         + _double(4, sum(m * c for m, c in mid)) + _double(5, sum(m * m * c for m, c in mid))
         + _packed_doubles(6, [float(e + 1) for e in es])
         + _packed_doubles(7, [float(buckets[e]) for e in es]))
    return _bytes(1, tag.encode()) + _bytes(5, h)


# -- the run schema --------------------------------------------------------------------------

def _rows(folder, name):
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _num(text):
    return float(text) if text not in (None, "") else None


def _pooled(rows, key, sums, hist_col):
    """Rows grouped by key(row) in their order: the sums of `sums` and the merged histogram."""
    groups = {}
    for r in rows:
        g = groups.setdefault(key(r), {"hist": {}, **{c: 0.0 for c in sums}})
        for c in sums:
            g[c] += _num(r.get(c)) or 0.0
        for e, n in parse_hist(r.get(hist_col)).items():
            g["hist"][e] = g["hist"].get(e, 0) + n
    return groups


def run_events(folder):
    """The (step, Summary.Value) pairs of one run folder, in file order: steps, trace, blocks."""
    out = []
    for r in _rows(folder, "steps.csv"):
        step = int(r["step"])
        for col in ("loss", "loss_scale", "val_loss"):
            if _num(r.get(col)) is not None:
                out.append((step, _scalar(col, _num(r[col]))))
        values = _num(r.get("grad_values")) or 0.0
        if values > 0:
            for col in ("flushed", "overflow"):
                out.append((step, _scalar(f"grad/{col}_fraction",
                                          (_num(r.get(f"grad_{col}")) or 0.0) / values)))
    trace = _pooled(_rows(folder, "trace.csv"),
                    lambda r: (int(r["step"]), r["name"], r["dtype"]),
                    ("total", "flushed", "overflow"), "hist")
    for (step, name, dtype), g in trace.items():
        if g["total"] > 0:
            for col in ("flushed", "overflow"):
                out.append((step, _scalar(f"{col}_fraction/{name}/{dtype}", g[col] / g["total"])))
        if g["hist"]:
            out.append((step, _histogram(f"magnitude_log2/{name}/{dtype}", g["hist"])))
    blocks = _pooled(_rows(folder, "blocks.csv"),
                     lambda r: (int(r["step"]), r["name"], r["gemm"], r["scheme"]),
                     ("elements", "flushed", "saturated", "signal", "noise"), "scale_hist")
    for (step, name, gemm, scheme), g in blocks.items():
        tag = f"{name}/{gemm}/{scheme}"
        if g["elements"] > 0:
            for col in ("flushed", "saturated"):
                out.append((step, _scalar(f"blocks/{col}_fraction/{tag}",
                                          g[col] / g["elements"])))
        if g["signal"] > 0 and g["noise"] > 0 and math.isfinite(g["signal"] / g["noise"]):
            out.append((step, _scalar(f"blocks/snr_db/{tag}",
                                      10 * math.log10(g["signal"] / g["noise"]))))
        if g["hist"]:
            out.append((step, _histogram(f"blocks/scale_log2/{tag}", g["hist"])))
    return out


def _is_run(folder):
    return any(os.path.exists(os.path.join(folder, f)) for f in FILES)


def runs(folder):
    """(name, folder) of each run in `folder`: itself, or its members (a sweep)."""
    base = os.path.basename(os.path.normpath(folder))
    if _is_run(folder):
        return [(base, folder)]
    found = []
    for root, dirs, _files in os.walk(folder):
        dirs.sort()
        if root != folder and _is_run(root):
            found.append((os.path.join(base, os.path.relpath(root, folder)), root))
            dirs[:] = []
    return found


def export(run_dirs, logdir):
    """Write one event file per run of `run_dirs` under `logdir`; return their paths."""
    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    if not isinstance(logdir, (str, os.PathLike)) or not str(logdir):
        raise TypeError("logdir: a folder name (str or os.PathLike)")
    todo = []
    for d in run_dirs:
        if not isinstance(d, (str, os.PathLike)) or not os.path.isdir(d):
            raise ValueError(f"run_dirs: {d!r} is not a folder")
        found = runs(d)
        if not found:
            raise ValueError(f"run_dirs: {d!r} holds no steps.csv, trace.csv or blocks.csv, "
                             "nor any folder that does")
        todo += found
    names = [n for n, _ in todo]
    if len(set(names)) != len(names):
        raise ValueError("run_dirs: two runs have the same name "
                         f"({sorted(n for n in names if names.count(n) > 1)[0]})")
    written = []
    for name, folder in todo:
        try:
            events = run_events(folder)
        except (KeyError, ValueError) as e:
            raise ValueError(f"run_dirs: {folder!r}: a CSV file that is not halfway's run "
                             f"schema ({type(e).__name__}: {e})") from None
        data = _record(_event(0, file_version="brain.Event:2"))
        data += b"".join(_record(_event(step, v)) for step, v in events)
        target = os.path.join(logdir, name)
        os.makedirs(target, exist_ok=True)
        path = os.path.join(target, EVENT_FILE)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        written.append(path)
    return written


def main(argv=None):
    p = _args.Parser(prog="python3 -m halfway.tensorboard",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", required=True, metavar="LOGDIR")
    args = p.parse_args(argv)
    try:
        paths = export(args.run_dirs, args.out)
    except (ValueError, TypeError, OSError, KeyError) as e:
        print(f"halfway.tensorboard: error: {e}", file=sys.stderr)
        return 2
    print(f"halfway.tensorboard: {len(paths)} run(s) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
