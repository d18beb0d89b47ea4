"""A catalogue of bad arguments to the public functions of halfway: every function, and each
argument with None, a bool, a wrong type, NaN, ±inf, a huge or negative number, an empty
value, a lone surrogate, a wrong shape, a wrong dtype and a non-contiguous array, wherever that
is not a legitimate value of the argument. Each case must raise ValueError or TypeError whose
message names the function or the argument: never a crash, another exception (RuntimeError,
OverflowError, pybind's "incompatible function arguments") or a result. The legitimate values
(NaN, ±inf, negative, empty or non-contiguous data) give the right results (the negative
control: the catalogue's valid calls work).

usage: test_bad_arguments.py"""
import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
import halfway  # noqa: E402

NAN, INF = float("nan"), float("inf")
KINDS = {
    "None": None, "bool": True, "object": object(), "nan": NAN, "inf": INF, "-inf": -INF,
    "huge": 10 ** 30, "negative": -1, "fraction": 1.5, "empty str": "", "empty list": [],
    "surrogate": "\ud800", "str": "x", "complex": np.array([1 + 1j]), "bool array":
    np.array([True, False]), "2-d": np.ones((2, 2), np.float32),
}
X = np.float32([0.5, 1.0, 3.0])
BITS = np.uint16([0x3C00, 0x4000])  # fp16 1.0, 2.0
BLOCK = np.ones((2, 32), np.float32)

NAME = ["None", "bool", "object", "nan", "inf", "huge", "negative", "empty str", "empty list",
        "surrogate", "complex", "2-d"]
FLAG = ["None", "object", "nan", "inf", "huge", "negative", "fraction", "str", "empty list",
        "complex"]
SEED = ["bool", "object", "nan", "inf", "huge", "negative", "fraction", "str", "empty list"]
VALUES = ["None", "bool", "object", "str", "bool array"]
ENCODINGS = ["None", "bool", "object", "nan", "inf", "huge", "fraction", "str", "bool array"]
PATH = ["bool", "object", "huge", "empty str", "empty list", "surrogate"]
OUT = ["bool", "object", "nan", "huge", "str", "empty list", "complex", "2-d"]
ROUNDING = {"rounding": NAME, "saturate": FLAG, "subnormals": FLAG, "seed": SEED,
            "offset": SEED + ["None"], "tininess": NAME, "flags": FLAG, "counts": FLAG}


def cases():
    """(function name, call, {argument: [bad kinds]})"""
    def rnd(f, data, fmt="fp16"):
        return lambda **k: f(**{**data, "fmt": fmt, **k})
    yield "round", rnd(halfway.round, {"a": X}), {"a": VALUES, "fmt": NAME, **ROUNDING,
                                                  "random_bits": SEED + ["None"],
                                                  "pack_random_bits": FLAG, "out": OUT}
    yield "encode", rnd(halfway.encode, {"a": X}), {"a": VALUES, "fmt": NAME, **ROUNDING,
                                                    "out": OUT}
    for op, n in (("add", 2), ("sub", 2), ("mul", 2), ("div", 2), ("fma", 3), ("sqrt", 1)):
        data = dict(zip("abc", [BITS] * n))
        yield op, rnd(getattr(halfway, op), data), {
            **{k: ENCODINGS for k in data}, "fmt": NAME, **ROUNDING}
    yield "decode", rnd(halfway.decode, {"bits": BITS}), {
        "bits": ENCODINGS, "fmt": NAME, "subnormals": FLAG, "out": OUT}
    yield "finfo", lambda **k: halfway.finfo(**{"fmt": "fp16", **k}), {"fmt": NAME}
    yield "format", lambda **k: halfway.format(**{"fmt": "fp16", **k}), {"fmt": NAME}
    yield "Format", lambda **k: halfway.Format(**{"name": "fp16", **k}), {"name": NAME}
    yield "flag_names", lambda **k: halfway.flag_names(**{"flags": 1, **k}), {
        "flags": ["None", "bool", "object", "nan", "inf", "huge", "negative", "fraction", "str"]}
    axis = ["bool", "object", "nan", "inf", "huge", "fraction", "str", "empty list"]
    blocks = {"x": VALUES, "scheme": NAME, "axis": axis + ["None"], "rounding": NAME,
              "random_bits": SEED + ["None"], "pack_random_bits": FLAG, "seed": SEED,
              "offset": SEED + ["None"], "rht": FLAG, "pow2_scales": FLAG, "pad": FLAG, "counts": FLAG}
    for fn in ("encode_blocks", "quantize_blocks"):
        f = getattr(halfway, fn)
        yield fn, (lambda f: lambda **k: f(**{"x": BLOCK, "scheme": "mxfp8_e4m3", **k}))(f), \
            {**blocks, "out": OUT} if fn == "quantize_blocks" else blocks
    codes, scales, g = halfway.encode_blocks(BLOCK, "mxfp8_e4m3")
    yield "decode_blocks", lambda **k: halfway.decode_blocks(
        **{"codes": codes, "scales": scales, "global_scale": g, "scheme": "mxfp8_e4m3", **k}), {
        "codes": VALUES, "scales": VALUES, "scheme": NAME, "axis": axis, "out": OUT}
    yield "bench", lambda **k: halfway.bench(**{"n": 16, "repeats": 1, **k}), {
        "n": SEED + ["None"], "repeats": SEED + ["None"], "threads": SEED + ["None"]}
    if hasattr(halfway._halfway, "gemm"):
        mat = np.ones((2, 3), np.float32)
        yield "gemm", lambda **k: halfway.gemm(**{"a": mat, "b": mat.T.copy(), **k}), {
            "a": VALUES, "b": VALUES, "bias": ["bool", "object", "str"], "dtype": NAME,
            "accumulation": NAME, "layout": NAME, "rounding": NAME, "seed": SEED,
            "threads": SEED + ["None"]}
        vec, acc = np.ones((2, 4), np.float32), np.zeros(2, np.float32)
        yield "dot", lambda **k: halfway.dot(**{"a": vec, "b": vec, "c": acc, "fmt": "bf16",
                                                **k}), {
            "a": VALUES, "b": VALUES, "c": VALUES, "fmt": NAME, "accumulation": NAME}
    if hasattr(halfway._halfway, "_AnalysisRun"):
        yield "analyze", lambda **k: halfway.analyze(**{"arrays": {"x": X}, "formats": ["fp16"],
                                                        **k}), {
            "arrays": ["None", "bool", "object", "str", "empty list"],
            "formats": ["None", "bool", "object", "nan", "empty str", "empty list",
                        "surrogate"],
            "scales": ["None", "bool", "object", "nan", "inf", "huge", "fraction", "str",
                       "empty list"],
            "flush_tolerance": ["None", "bool", "object", "nan", "inf", "-inf", "huge",
                                "negative", "fraction", "str"],
            "axis": ["None", "bool", "object", "nan", "inf", "huge", "fraction", "str"],
            "per_block": ["None", "object", "nan", "huge", "str"],
            "max_rows": ["None", "bool", "object", "nan", "inf", "huge", "negative", "fraction",
                         "str"],
            "block_chunk": ["None", "bool", "object", "nan", "inf", "huge", "negative",
                            "fraction", "str"],
            "out_dir": PATH}
    try:
        import torch
        import halfway.torch as ht
    except ImportError:  # without torch, only halfway.torch's cases are left out
        torch = None
    if torch is not None:
        model = torch.nn.Linear(2, 2)
        modules = ["None", "bool", "object", "str"]
        count = SEED + ["None"]
        yield "torch.trace", lambda **k: ht.trace(**{"model": model, **k}), {
            "model": modules, "out": PATH + ["None"], "every": count, "chunk": count,
            "formats": ["None", "bool", "object", "nan", "empty str", "empty list", "surrogate"],
            "scales": ["None", "bool", "object", "nan", "inf", "huge", "fraction", "str",
                       "empty list"],
            "flush_tolerance": ["None", "bool", "object", "nan", "inf", "-inf", "huge",
                                "negative", "fraction", "str"],
            "save_tensors": FLAG, "tensor_windows": FLAG, "optimizer": ["bool", "object", "str"],
            "scaler": ["bool", "object", "str"]}
        yield "torch.emulate", lambda **k: ht.emulate(**{"model": model, **k}), {
            "model": modules, "out": PATH, "recipe": NAME,
            "accumulation": [n for n in NAME if n != "None"], "seed": count, "every": count,
            "threads": count, "random_bits": SEED,
            "rules": ["bool", "object", "str", "nan", "empty list"]}
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        yield "torch.optimizer", lambda **k: ht.optimizer(**{"opt": sgd, **k}), {
            "opt": modules, "weights": NAME, "update_rounding": NAME, "update": NAME,
            "state_dtype": NAME, "compensation": NAME, "seed": count,
            "model": ["bool", "object", "str"], "out": PATH}
        yield "torch.recipe_from_toml", lambda **k: ht.recipe_from_toml(**k), {"path": PATH}
    if hasattr(halfway._halfway, "_train_to_dir"):
        yield "train", lambda **k: halfway.train(**{"config": {}, **k}), {
            "config": ["None", "bool", "object", "nan", "empty list"],
            "threads": SEED + ["None"], "max_memory": ["bool", "object", "nan", "negative",
                                                      "fraction", "empty str", "str"]}


def check_rejected(fn, call, arg, kind):
    try:
        call(**{arg: KINDS[kind]})
    except (ValueError, TypeError) as e:
        msg = str(e)
        if "incompatible function arguments" in msg or "incompatible constructor" in msg:
            return f"{fn}({arg}={kind}): pybind's message, not one naming the argument"
        words = {fn, arg, arg.rstrip("s"), "config", "scheme", "format", "axis"}
        if not any(w in msg for w in words):
            return f"{fn}({arg}={kind}): {type(e).__name__} does not name it: {msg[:120]}"
        return None
    except Exception as e:  # noqa: BLE001 - the point is which exception
        return f"{fn}({arg}={kind}): {type(e).__name__}: {str(e)[:120]}"
    return f"{fn}({arg}={kind}): accepted, no error"


def check_legitimate():
    """Data that looks odd but is valid gives the right values (and the checks above are not
    refusing everything)."""
    r = halfway.round(np.float32([NAN, INF, -INF, -1.5, 1e30]), "fp16")
    assert math.isnan(r[0]) and r[1] == INF and r[2] == -INF and r[3] == -1.5 and r[4] == INF, r
    assert halfway.round(np.float32([]), "fp16").size == 0
    nc = np.arange(10, dtype=np.float32)[::2]
    assert (halfway.round(nc, "fp16") == nc).all()
    assert halfway.round(10 ** 30, "fp16") == INF and halfway.round(np.float64(3), "bf16") == 3
    assert halfway.round(2, "fp16") == 2.0
    assert halfway.round(X, halfway.Format("e4m3"), seed=0, offset=np.uint64(5)).size == 3
    assert halfway.flag_names(0) == "-" and halfway.flag_names(halfway.INEXACT) == "inexact"
    assert halfway.decode(np.uint8([0x38]), "e4m3") == 1.0
    assert halfway.add(0x3C00, 0x3C00, "fp16") == 0x4000
    assert halfway.finfo(np.str_("fp16")).max == 65504
    if hasattr(halfway._halfway, "gemm"):
        mat = np.ones((2, 3), np.float32)
        assert (halfway.gemm(mat, mat.T.copy(), np.float32([1, 2]), seed=None) ==
                np.float32([[4, 5], [4, 5]])).all()
        assert (halfway.dot(mat, mat, np.zeros(2, np.float32), halfway.Format("bf16")) == 3).all()
    if hasattr(halfway._halfway, "_AnalysisRun"):
        res = halfway.analyze({"x": X}, "fp16", "0..1", flush_tolerance=1)
        assert len(res.trace) == 1 and res.manifest["flush_tolerance"] == 1
    f = halfway.Format.__new__(halfway.Format)
    for g in (lambda: f.name, lambda: repr(f), lambda: halfway.round(X, f)):
        try:
            g()
        except TypeError as e:
            assert "never initialised" in str(e), e
        else:
            raise AssertionError("an uninitialised halfway.Format was read")


def main():
    failures = []
    n = 0
    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)  # halfway.train of a bad config must not write into the source tree
        for fn, call, args in cases():
            for arg, kinds in args.items():
                for kind in kinds:
                    n += 1
                    why = check_rejected(fn, call, arg, kind)
                    if why:
                        failures.append(why)
        if failures:
            print("\n".join(failures))
            raise AssertionError(f"{len(failures)} of {n} bad arguments were not refused "
                                 "properly")
        check_legitimate()
    print(f"ok: {n} bad arguments refused, each with ValueError or TypeError naming it")


if __name__ == "__main__":
    main()
