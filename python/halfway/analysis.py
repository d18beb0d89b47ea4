"""halfway.analyze: the tracer's per-tensor answers for arrays from anywhere (docs/analyze.md).

The statistics are computed in C++ (halfway._halfway._AnalysisRun, the same code as
`halfway analyze`), fed in chunks; this module only converts dtypes and reads the result files.
"""
import json
import os
import tempfile

import numpy as np

from . import _args, _halfway
from .columns import upgrade

DEFAULT_FORMATS = ("fp16", "bf16", "e4m3", "e5m2")
DEFAULT_SCALES = (-20, 40)
CHUNK = 1 << 20  # values fed to C++ at a time


class AnalysisResult:
    """The result files of an analysis as pandas DataFrames: trace (one row per step, tensor and
    format: trace.csv), scale_window (scale_window.csv), steps (steps.csv, or None), blocks
    (one row per step, tensor and block scheme: blocks.csv, or None without block schemes),
    blocks_detail (one row per block: blocks_detail.csv, or None without per_block), manifest
    (a dict), and out_dir (None when they were written to a temporary folder)."""

    def __init__(self, trace, scale_window, steps, manifest, out_dir, blocks=None,
                 blocks_detail=None):
        self.trace, self.scale_window, self.steps = trace, scale_window, steps
        self.blocks, self.blocks_detail = blocks, blocks_detail
        self.manifest, self.out_dir = manifest, out_dir

    def __repr__(self):
        return (f"halfway.AnalysisResult(trace={len(self.trace)} rows, "
                f"scale_window={len(self.scale_window)} rows, out_dir={self.out_dir!r})")


def format_list(formats):
    """'fp16,bf16' or ['fp16', 'bf16'] -> 'fp16,bf16' (checked by the C++ side)."""
    if isinstance(formats, str):
        return _args.name("analyze", "formats", formats)
    try:
        items = [_args.name("analyze", "formats", f) for f in formats]
    except TypeError:
        raise TypeError(f"formats must be a string or a list of names, not {formats!r}") from None
    if not items:
        raise ValueError("no formats to analyse")
    return ",".join(items)


def scale_range(scales):
    """(k_min, k_max) or 'K_MIN..K_MAX' -> (k_min, k_max): integers in [-300, 300] (a float
    with a fraction, a bool or anything else is a ValueError or TypeError naming scales)."""
    def k(v):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            if isinstance(v, (float, np.floating)) and float(v).is_integer():
                v = int(v)
            else:
                raise ValueError(f"scales {scales!r}: expected (k_min, k_max), integers") \
                    from None
        if not -300 <= int(v) <= 300:
            raise ValueError(f"scales {scales!r}: k_min and k_max must be in [-300, 300]")
        return int(v)

    if isinstance(scales, str):
        lo, sep, hi = scales.partition("..")
        try:
            pair = int(lo), int(hi)
        except ValueError:
            raise ValueError(f"scales {scales!r}: expected 'K_MIN..K_MAX'") from None
    else:
        try:
            pair = tuple(scales)
        except TypeError:
            raise TypeError(f"scales must be (k_min, k_max) or 'K_MIN..K_MAX', not "
                            f"{type(scales).__name__}") from None
        if len(pair) != 2:
            raise ValueError(f"scales {scales!r}: expected (k_min, k_max)")
    lo, hi = k(pair[0]), k(pair[1])
    if lo > hi:
        raise ValueError(f"scales {scales!r}: k_min is above k_max")
    return lo, hi


def check_flush_tolerance(value):
    """flush_tolerance as a float in [0, 1], the config's range: NaN, a bool, a string or
    anything else is a ValueError or TypeError naming flush_tolerance."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"flush_tolerance must be a number in [0, 1], not "
                        f"{type(value).__name__}")
    v = float(value)
    if not 0.0 <= v <= 1.0:  # NaN fails both
        raise ValueError(f"flush_tolerance must be in [0, 1], got {value!r}")
    return v


def check_block_options(axis, per_block, max_rows, block_chunk):
    """The block schemes' options, as `halfway analyze`'s --axis, --per-block, --max-rows and
    --block-chunk: a ValueError or TypeError naming the argument."""
    def integer(arg, v, lo):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{arg} must be an integer, not {type(v).__name__}")
        if int(v) < lo or int(v) >= 2**63:
            raise ValueError(f"{arg} must be at least {lo}, got {v!r}")
        return int(v)

    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an integer, not {type(axis).__name__}")
    if not -64 <= int(axis) < 64:
        raise ValueError(f"axis {axis!r} is out of range")
    if not isinstance(per_block, bool):
        raise TypeError(f"per_block must be True or False, not {type(per_block).__name__}")
    return int(axis), per_block, integer("max_rows", max_rows, 1), \
        integer("block_chunk", block_chunk, 1)


def float32_chunks(name, a, chunk=CHUNK):
    """The values of numpy array `a` as contiguous float32 chunks, in C order. float16 and
    uint16 (bfloat16 bit patterns) widen exactly, float64 rounds to nearest even (as
    `halfway analyze` reads them); any other dtype is a ValueError."""
    a = np.asarray(a)
    kind = a.dtype.kind + str(a.dtype.itemsize)
    if kind not in ("f4", "f2", "f8", "u2"):
        raise ValueError(f"array '{name}': unsupported dtype {a.dtype} (float32, float16, "
                         "float64, or uint16 holding bfloat16 bit patterns)")
    flat = a.reshape(-1)
    for i in range(0, flat.size, chunk):
        c = flat[i:i + chunk]
        if kind == "u2":
            c = (c.astype(np.uint32) << 16).view(np.float32)
        else:
            with np.errstate(over="ignore"):
                c = c.astype(np.float32)
        yield np.ascontiguousarray(c)


def read_result(directory, keep):
    import pandas as pd

    def read(name):
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            return None
        return upgrade(pd.read_csv(
            path, dtype={"hist": str, "name": str}, keep_default_na=False,
            float_precision="round_trip",
            na_values={"snr_db": [""], "flushed_l2_fraction": [""], "min_exp": [""],
                       "max_exp": [""], "loss": [""], "k_low": [""], "k_high": [""],
                       "found_inf": [""], "skipped": [""], "growth_tracker": [""],
                       "next_scale": [""], "clipped_fraction": [""], "scale_exp_mean": [""],
                       "scale_exp_std": [""], "scale_min_exp": [""], "scale_max_exp": [""],
                       "scale_hist": [""]}))

    with open(os.path.join(directory, "manifest.json")) as f:
        manifest = json.load(f)
    return AnalysisResult(read("trace.csv"), read("scale_window.csv"), read("steps.csv"),
                          manifest, directory if keep else None, read("blocks.csv"),
                          read("blocks_detail.csv"))


def analyze(arrays, formats=DEFAULT_FORMATS, scales=DEFAULT_SCALES, *, out_dir=None,
            flush_tolerance=0.0, axis=-1, per_block=False, max_rows=10_000_000,
            block_chunk=1 << 18):
    """What rounding each array into each format would do: the same numbers and columns as
    `halfway analyze` on an .npz holding the same arrays.

    arrays: a dict {name: numpy array} of float32, float16, float64 or uint16 (bfloat16 bit
        patterns) values; names must be unique and hold no comma, quote or line break.
    formats: format names (a list, or 'fp16,bf16,e4m3,e5m2'), each a low-precision format
        halfway knows or a block scheme ('mxfp8_e4m3', 'mxfp4', 'nvfp4', 'fp8_block', ...).
    scales: (k_min, k_max), the loss scales 2^k of the safe window (or 'K_MIN..K_MAX').
    out_dir: also keep the files (trace.csv, scale_window.csv, manifest.json) there.
    flush_tolerance: a scale is safe when at most this fraction of the values is flushed to zero.
    axis: block schemes: the axis the blocks run along, as a GEMM reduces it (-1: the last).
    per_block: block schemes: also write blocks_detail.csv, one row per block, refused beyond
        max_rows rows.
    block_chunk: block schemes: values quantized in one call (no result depends on it).

    Returns a halfway.AnalysisResult (trace, scale_window, manifest, out_dir). Bad input (an
    unknown format, an unsupported dtype, a bad name) raises ValueError.
    """
    if not isinstance(arrays, dict):
        raise TypeError("halfway.analyze: arrays must be a dict {name: ndarray}")
    for name in arrays:
        if not isinstance(name, str):
            raise ValueError(f"halfway.analyze: array names must be strings, not {name!r}")
        _args.name("analyze", "an array's name", name)
    k_min, k_max = scale_range(scales)
    flush_tolerance = check_flush_tolerance(flush_tolerance)
    axis, per_block, max_rows, block_chunk = check_block_options(axis, per_block, max_rows,
                                                                 block_chunk)
    tmp = None
    if out_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="halfway-analyze-")
        directory = tmp.name
    else:
        directory = _args.path("analyze", "out_dir", out_dir, any_bytes=True)
    try:
        # As bytes: a path may hold any bytes (os.fsencode), which a str of C++ cannot.
        run = _halfway._AnalysisRun(os.fsencode(directory), format_list(formats), k_min, k_max,
                                    flush_tolerance, False, True, axis, per_block, max_rows,
                                    block_chunk)
        tensors = []
        for name, a in arrays.items():
            a = np.asarray(a)
            chunks = float32_chunks(name, a)  # checks the dtype before the tensor is begun
            tid = run.tensor(name, "tensor", "analyze", 1.0, list(a.shape) or [1])
            for c in chunks:
                run.add(tid, c)
            tensors.append({"name": name, "dtype": a.dtype.str[1:], "shape": list(a.shape)})
        run.end_step(0)
        run.commit(json.dumps({"tool": "halfway.analyze", "tensors": tensors}))
        return read_result(directory, tmp is None)
    finally:
        if tmp is not None:
            tmp.cleanup()
