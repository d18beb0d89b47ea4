"""halfway: bit-exact low-precision floating point for numpy.

Round float32/float64 arrays into fp16, bf16, fp8, MX and custom formats, convert to and from
their encodings, do correctly rounded arithmetic on encodings, and count what happened
(values flushed to zero, overflows, subnormals, inexact results, IEEE flags) -- all
bit-identical to the C++ library.

    >>> import numpy as np, halfway
    >>> halfway.round(np.float32([0.1, 1e-8, 70000.0]), "fp16")
    array([0.09997559, 0.        ,        inf], dtype=float32)
    >>> halfway.encode(np.float32([1.0, 448.0]), "e4m3")
    array([ 56, 126], dtype=uint8)
    >>> print(halfway.finfo("bf16").max)
    3.3895314e+38

Rounding directions are named as in Berkeley TestFloat: near_even, near_maxMag, minMag, min,
max, odd, stochastic (short names rne rna rtz rd ru rto sr). Errors in arguments raise
ValueError (unknown format or rounding) or TypeError (wrong dtype). See docs/python.md.
"""

import numpy as _np

from . import _halfway, _args
from ._halfway import Counts, Format, cpu_info, formats, roundings
from ._halfway import INEXACT, UNDERFLOW, OVERFLOW, INFINITE, INVALID
from .analysis import AnalysisResult, analyze

__version__ = "0.1.0"

__all__ = [
    "round", "encode", "decode", "add", "sub", "mul", "div", "fma", "sqrt", "finfo", "format",
    "formats", "roundings", "Format", "Counts", "flag_names", "bench", "train", "TrainResult",
    "encode_blocks", "decode_blocks", "quantize_blocks", "block_schemes", "BlockCounts", "gemm",
    "dot", "accumulations", "recipes", "analyze", "AnalysisResult", "cpu_info",
    "INEXACT", "UNDERFLOW", "OVERFLOW", "INFINITE", "INVALID",
]

_COMMON = """
    fmt: a format name ('fp16', 'bf16', 'e4m3', 'e5m2', 'e2m1', 'e5m10:bias=14', ...) or a
        halfway.Format. halfway.formats() lists the presets.
    rounding: 'near_even' (default), 'near_maxMag', 'minMag', 'min', 'max', 'odd' or
        'stochastic' (or rne, rna, rtz, rd, ru, rto, sr).
    saturate: True gives the largest finite value wherever the result would be infinite
        (overflow, and ±inf inputs, which raise invalid), as NVIDIA's SATFINITE does;
        False keeps the format's own behaviour ('e4m3:sat' is saturating anyway).
    subnormals: False flushes tiny results to zero and reads subnormal inputs as zero
        (ftz + daz); True keeps the format's own setting ('fp16:ftz' flushes anyway).
    seed: required for stochastic rounding; element i uses the random bits of stream
        position offset + i, so a result never depends on how an array is split.
    offset: stream position of element 0 (stochastic rounding), to continue a stream.
    tininess: 'after' (x86, default) or 'before' (ARM) rounding, for the underflow flag.
    flags: also return the IEEE flags of every element as a uint8 array of the result's shape
        (bits INEXACT=0x01, UNDERFLOW=0x02, OVERFLOW=0x04, INFINITE=0x08, INVALID=0x10).
    counts: also return a halfway.Counts (total, inexact, zero, flushed, subnormal,
        overflow, nan, and flags = the OR of all elements' flags).

    Returns the result alone, or a tuple (result, flags), (result, counts) or
    (result, flags, counts). A Python or numpy scalar argument gives scalar results.
"""


def round(a, fmt, rounding="near_even", *, saturate=False, subnormals=True, seed=None,
          offset=0, tininess="after", flags=False, counts=False, random_bits=32,
          pack_random_bits=False, out=None):
    """Round values into `fmt`; return them as float32 values exactly representable in it.

    a: float32 or float64 values (array, scalar or sequence of numbers). float64 values are
        rounded in one step from binary64, never through float32 (no double rounding).
    random_bits: the random bits of each stochastic rounding (1-32), the top ones of each
        draw, as `precision.sr_random_bits` of `halfway train` (docs/semantics.md).
    pack_random_bits: one 32-bit draw serves floor(32 / random_bits) consecutive elements
        (random_bits 1-16), field by field from its top; opt-in, since it changes which bits
        an element reads (docs/semantics.md, "Packed draws").
    out: a C-contiguous, writeable float32 array of a's shape to write the result into (a
        itself included), as numpy's out=; it is returned. Saves the new array's page faults.
    """
    _args.values("round", "a", a)
    _args.name("round", "fmt", fmt, allow=Format)
    _args.rounding_options("round", rounding, saturate, subnormals, seed, offset, tininess,
                           flags, counts)
    _args.integer("round", "random_bits", random_bits, 1, 32)
    _args.flag("round", "pack_random_bits", pack_random_bits)
    return _halfway.round(a, fmt, rounding, saturate=saturate, subnormals=subnormals, seed=seed,
                          offset=offset, tininess=tininess, flags=flags, counts=counts,
                          random_bits=random_bits, pack_random_bits=pack_random_bits, out=out)


def encode(a, fmt, rounding="near_even", *, saturate=False, subnormals=True, seed=None,
           offset=0, tininess="after", flags=False, counts=False, out=None):
    """Round values into `fmt` and return their encodings: uint8 for formats of up to 8 bits,
    uint16 up to 16 bits, uint32 beyond (the encoding is in the low bits).

    a: float32 or float64 values, as for halfway.round.
    out: a C-contiguous, writeable array of a's shape and exactly the encodings' dtype
        (halfway.finfo(fmt).encoding_dtype) to write them into, as numpy's out=; it is
        returned. Saves the new array's page faults.
    """
    _args.values("encode", "a", a)
    _args.name("encode", "fmt", fmt, allow=Format)
    _args.rounding_options("encode", rounding, saturate, subnormals, seed, offset, tininess,
                           flags, counts)
    return _halfway.encode(a, fmt, rounding, saturate=saturate, subnormals=subnormals,
                           seed=seed, offset=offset, tininess=tininess, flags=flags,
                           counts=counts, out=out)


def decode(bits, fmt, *, subnormals=True, out=None):
    """Encodings of `fmt` -> float32 values (exact: every format value is a float32).

    bits: unsigned (or non-negative signed) integers below 2**fmt.nbits; anything else is a
        ValueError, a non-integer dtype a TypeError.
    subnormals: False reads subnormal encodings as zero (daz).
    out: a C-contiguous, writeable float32 array of bits' shape to write the values into, as
        numpy's out=; it is returned. Saves the new array's page faults.
    """
    _args.encodings("decode", "bits", bits)
    _args.name("decode", "fmt", fmt, allow=Format)
    _args.flag("decode", "subnormals", subnormals)
    return _halfway.decode(bits, fmt, subnormals=subnormals, out=out)


def _arith(op, operands, fmt, rounding, saturate, subnormals, seed, offset, tininess, flags,
           counts):
    """Checks an arithmetic function's arguments (its operands are named a, b, c) and calls it."""
    for name, x in zip("abc", operands):
        _args.encodings(op, name, x)
    _args.name(op, "fmt", fmt, allow=Format)
    _args.rounding_options(op, rounding, saturate, subnormals, seed, offset, tininess, flags,
                           counts)
    return getattr(_halfway, op)(*operands, fmt, rounding, saturate=saturate,
                                 subnormals=subnormals, seed=seed, offset=offset,
                                 tininess=tininess, flags=flags, counts=counts)


def add(a, b, fmt, rounding="near_even", *, saturate=False, subnormals=True, seed=None,
        offset=0, tininess="after", flags=False, counts=False):
    """a + b on encodings of `fmt`, correctly rounded; numpy broadcasting applies."""
    return _arith("add", (a, b), fmt, rounding, saturate, subnormals, seed, offset, tininess,
                  flags, counts)


def sub(a, b, fmt, rounding="near_even", *, saturate=False, subnormals=True, seed=None,
        offset=0, tininess="after", flags=False, counts=False):
    """a - b on encodings of `fmt`, correctly rounded; numpy broadcasting applies."""
    return _arith("sub", (a, b), fmt, rounding, saturate, subnormals, seed, offset, tininess,
                  flags, counts)


def mul(a, b, fmt, rounding="near_even", *, saturate=False, subnormals=True, seed=None,
        offset=0, tininess="after", flags=False, counts=False):
    """a * b on encodings of `fmt`, correctly rounded; numpy broadcasting applies."""
    return _arith("mul", (a, b), fmt, rounding, saturate, subnormals, seed, offset, tininess,
                  flags, counts)


def div(a, b, fmt, rounding="near_even", *, saturate=False, subnormals=True, seed=None,
        offset=0, tininess="after", flags=False, counts=False):
    """a / b on encodings of `fmt`, correctly rounded; numpy broadcasting applies."""
    return _arith("div", (a, b), fmt, rounding, saturate, subnormals, seed, offset, tininess,
                  flags, counts)


def fma(a, b, c, fmt, rounding="near_even", *, saturate=False, subnormals=True, seed=None,
        offset=0, tininess="after", flags=False, counts=False):
    """a * b + c on encodings of `fmt` with a single rounding; numpy broadcasting applies."""
    return _arith("fma", (a, b, c), fmt, rounding, saturate, subnormals, seed, offset, tininess,
                  flags, counts)


def sqrt(a, fmt, rounding="near_even", *, saturate=False, subnormals=True, seed=None, offset=0,
         tininess="after", flags=False, counts=False):
    """Square root on encodings of `fmt`, correctly rounded."""
    return _arith("sqrt", (a,), fmt, rounding, saturate, subnormals, seed, offset, tininess,
                  flags, counts)


for _f in (round, encode, add, sub, mul, div, fma, sqrt):
    _f.__doc__ += _COMMON
del _f


_BLOCK_OPTIONS = """
    scheme: mxfp8_e4m3, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4 (each optionally with an
        e8m0 scale rule, torchao's names: ':floor' the default (OCP MX), ':ceil', ':rceil'
        (cuBLAS, Transformer Engine's MXFP8; the old ':ceil' is now ':rceil'), ':even'),
        mxint8, nvfp4, nvfp4_2d, nvfp4_4over6 and nvfp4_4over6_2d (Four Over Six),
        fp8_block, fp8_block_2d, fp8_rowwise and fp8_rowwise_e5m2 (torchao's float8 rowwise:
        one scale per row). Options after colons: ':block=N' (1-D
        schemes: N elements per block, 0 the whole dimension), ':tile=RxC' (2-D schemes),
        ':row_scaled' (nvfp4: Transformer Engine's row-scaled NVFP4, a global scale per row,
        or per column with axis=0). docs/blocks.md defines each one bit for bit.
    axis: -1 (default): 1 x k blocks along each row; 0: k x 1 blocks down each column (the
        operand whose reduction dimension is its first). The 2-D schemes use their tiles.
    rounding: the rounding of the elements, any scheme: 'near_even' (default),
        'near_maxMag' (ties away from zero, microxcaling's 'nearest'), 'minMag', 'min', 'max',
        'odd', or 'stochastic' (needs seed; element (r, c) uses the random bits of stream
        position offset + r * cols + c).
    random_bits: stochastic rounding's random bits per element, 1..32 (default 32).
    rht: nvfp4 only: Transformer Engine's 16-point random Hadamard transform of each block
        first (codes, scales and values are then those of the transformed tensor).
    pow2_scales: fp8_block: power-of-two scales (TE's force_pow_2_scales); fp8_rowwise: scales
        rounded down to a power of two (torchao's round_scales_to_power_of_2).
    pad: False (default): a shape that does not divide into blocks is refused. True: x is
        zero-padded at the end of each dimension to whole blocks, as the simulator pads its
        GEMM operands; encode_blocks returns the padded shape's codes and scales,
        quantize_blocks x's shape.
    counts: also return a dict: elements, blocks, saturated, flushed, scales_clamped (of which
        scales_clamped_harmless: NVFP4 scales a few ulps above 448 clamped to it, the scale
        e4m3 gives them anyway), nan_scales, and per-block arrays block_saturated,
        block_flushed, block_scales_clamped, block_scales_clamped_harmless shaped like the
        scales.

    Bad input raises ValueError: a shape that does not divide into blocks, an unknown scheme,
    a NaN or infinity with nvfp4/fp8_block (MX gives such a block a NaN scale), an option the
    scheme does not have. x must be a 2-D float32 array (TypeError otherwise).
"""


def encode_blocks(x, scheme, *, axis=-1, rounding="near_even", random_bits=32,
                  pack_random_bits=False, seed=None, offset=0, rht=False, pow2_scales=False,
                  pad=False, counts=False):
    """Quantize a 2-D float32 array into block-scaled codes.

    Returns (codes, scales, global_scale): codes is uint8 with x's shape (element encodings);
    scales is shaped [rows / tile_rows, cols / tile_cols] and holds uint8 codes (e8m0 for MX,
    e4m3 for NVFP4) or float32 values (fp8_block*); global_scale is NVFP4's fp32 global encode
    scale (a numpy float32; row-scaled nvfp4: a float32 array, one per row, or per column
    with axis=0) and None otherwise. With counts=True a dict is appended.
    random_bits, pack_random_bits: as for halfway.round (stochastic rounding of the elements).
    """
    _block_args("encode_blocks", x, scheme, axis, rounding, random_bits, pack_random_bits, seed,
                offset, rht, pow2_scales, pad, counts)
    r = _halfway.encode_blocks(x, scheme, axis=axis, rounding=rounding,
                               random_bits=random_bits, pack_random_bits=pack_random_bits,
                               seed=seed, offset=offset, rht=rht, pow2_scales=pow2_scales,
                               pad=pad, counts=counts)
    return r[:3] + (BlockCounts(r[3]),) if counts else r


def decode_blocks(codes, scales, global_scale, scheme, *, axis=None, out=None):
    """The float32 values of block-scaled codes: element x scale, rounded once in fp32
    (NVFP4: element x fp32(e4m3 scale x fp32(1 / global_scale)), row-scaled with each row's
    or column's global_scale). The blocks' axis is read from the scales' shape unless given.
    Shapes that do not match raise ValueError.

    out: a C-contiguous, writeable float32 array of codes' shape to write the values into, as
        numpy's out=; it is returned. Saves the new array's page faults.
    """
    _args.values("decode_blocks", "codes", codes)
    _args.values("decode_blocks", "scales", scales)
    if global_scale is not None:
        _args.values("decode_blocks", "global_scale", global_scale)
    _args.name("decode_blocks", "scheme", scheme)
    _args.integer("decode_blocks", "axis", axis, -2, 1, none=True)
    return _halfway.decode_blocks(codes, scales, global_scale, scheme, axis=axis, out=out)


def quantize_blocks(x, scheme, *, axis=-1, rounding="near_even", random_bits=32,
                    pack_random_bits=False, seed=None, offset=0, rht=False, pow2_scales=False,
                    pad=False, counts=False, out=None):
    """encode_blocks then decode_blocks: x's values after block quantization, float32.

    out: a C-contiguous, writeable float32 array of x's shape to write the result into (x
        itself included), as numpy's out=; it is returned. Saves the new array's page faults.
    """
    _block_args("quantize_blocks", x, scheme, axis, rounding, random_bits, pack_random_bits,
                seed, offset, rht, pow2_scales, pad, counts)
    r = _halfway.quantize_blocks(x, scheme, axis=axis, rounding=rounding,
                                 random_bits=random_bits, pack_random_bits=pack_random_bits,
                                 seed=seed, offset=offset, rht=rht, pow2_scales=pow2_scales,
                                 pad=pad, counts=counts, out=out)
    return (r[0], BlockCounts(r[1])) if counts else r


class BlockCounts(dict):
    """The event counts of a block quantization (counts=True), a dict: the totals elements,
    blocks, saturated, flushed, scales_clamped, scales_clamped_harmless (the part of
    scales_clamped that changed no scale), nan_scales, and the per-block arrays
    block_saturated, block_flushed, block_scales_clamped, block_scales_clamped_harmless shaped
    like the scales. Printed as one short table: each total with the number of blocks it
    occurs in, not the arrays."""

    _PER_BLOCK = {"saturated": "block_saturated", "flushed": "block_flushed",
                  "scales_clamped": "block_scales_clamped",
                  "scales_clamped_harmless": "block_scales_clamped_harmless", "nan_scales": None}

    def __repr__(self):
        shape = "x".join(str(n) for n in _np.shape(self["block_saturated"]))
        lines = [f"{self['elements']} elements in {self['blocks']} blocks ({shape})",
                 f"{'count':<24}{'total':>10}{'in blocks':>11}"]
        for name, arr in self._PER_BLOCK.items():
            # nan_scales counts blocks already
            where = self[name] if arr is None else int(_np.count_nonzero(self[arr]))
            lines.append(f"{name:<24}{self[name]:>10}{where:>11}")
        return "\n".join(lines)

    __str__ = __repr__


def _block_args(fn, x, scheme, axis, rounding, random_bits, pack_random_bits, seed, offset, rht,
                pow2_scales, pad, counts):
    _args.values(fn, "x", x)
    _args.name(fn, "scheme", scheme)
    _args.integer(fn, "axis", axis, -2, 1)
    _args.name(fn, "rounding", rounding)
    _args.integer(fn, "random_bits", random_bits, 1, 32)
    _args.integer(fn, "seed", seed, 0, _args.U64, none=True)
    _args.integer(fn, "offset", offset, 0, _args.U64)
    for arg, v in (("pack_random_bits", pack_random_bits), ("rht", rht),
                   ("pow2_scales", pow2_scales), ("pad", pad), ("counts", counts)):
        _args.flag(fn, arg, v)


def block_schemes():
    """Names of the block quantization schemes (the MX ones also take a scale rule:
    ':floor', ':ceil', ':rceil', ':even')."""
    return _halfway.block_schemes()


for _f in (encode_blocks, quantize_blocks):
    _f.__doc__ += _BLOCK_OPTIONS
del _f


def gemm(a, b, bias=None, *, dtype="fp32", accumulation="fp32", layout="nn",
         rounding="near_even", seed=None, threads=1):
    """C = a·b (+ bias) as `halfway train` computes a matmul or linear layer of dtype `dtype`,
    rounded into `dtype`: a [m, k] and b [k, n] are float32 arrays of values of `dtype`
    (bias: [n], added inside the accumulation as the model says), accumulated by the model
    `accumulation` names (halfway.accumulations(): fp32, in-format, torch-cpu, a100, ...).

    layout: 'nn', 'nt' (a linear layer's forward: b is a transposed weight) or 'tn' (a weight
        gradient): how a framework holds the operands; only 'torch-cpu' depends on it.
    rounding, seed: the direction of the output rounding (and of stochastic accumulations).
    threads: rows are split over the threads; no result depends on how many.

    Not available without the simulator in the build (halfway.train tells the same)."""
    if not hasattr(_halfway, "gemm"):
        raise RuntimeError("halfway.gemm: this build of the Python module has no simulator (sim/)")
    _args.values("gemm", "a", a)
    _args.values("gemm", "b", b)
    if bias is not None and not isinstance(bias, _np.ndarray):
        raise TypeError(f"halfway.gemm: bias must be a 1-D float32 array or None, not "
                        f"{type(bias).__name__}")
    for arg, v in (("dtype", dtype), ("accumulation", accumulation), ("layout", layout),
                   ("rounding", rounding)):
        _args.name("gemm", arg, v)
    _args.integer("gemm", "seed", seed, 0, _args.U64, none=True)
    _args.integer("gemm", "threads", threads, 1, 256)
    return _halfway.gemm(a, b, bias, dtype=dtype, accumulation=accumulation, layout=layout,
                         rounding=rounding, seed=seed, threads=threads)


def dot(a, b, c, fmt, *, accumulation="fp32"):
    """Batched dot products c + sum_k a[..., k]·b[..., k] as lib's dot computes them under the
    model an accumulation name resolves to for `fmt` operands: a and b are float32 arrays
    [..., K] holding values of `fmt`, c a float32 array [...] of the model's accumulator
    (fp32, or fp16 for 'h100-fp16' / 'mmasim-hopper-fp16'); returns float32 [...].
    Block models chain instructions for longer K as D = mma(A_block, B_block, D), e.g.

        halfway.dot(a, b, c, "e4m3", accumulation="mmasim-hopper-fp8")   # FP22 per 32 products

    A value that is not exactly of its format is a ValueError naming the argument."""
    if not hasattr(_halfway, "dot"):
        raise RuntimeError("halfway.dot: this build of the Python module has no simulator (sim/)")
    for arg, v in (("a", a), ("b", b), ("c", c)):
        _args.values("dot", arg, v)
    _args.name("dot", "fmt", fmt, allow=Format)
    _args.name("dot", "accumulation", accumulation)
    return _halfway.dot(a, b, c, fmt, accumulation=accumulation)


def flag_names(flags):
    """'inexact|underflow' style names of IEEE flag bits (an int in [0, 31], or
    halfway.INEXACT | ...), '-' for none."""
    _args.integer("flag_names", "flags", flags, 0, 0x1F)
    return _halfway.flag_names(flags)


def accumulations():
    """The accumulation names halfway.gemm, halfway.torch.emulate and `halfway train` accept."""
    return list(_halfway._accumulation_names())


def recipes():
    """The recipe (policy preset) names halfway.torch.emulate and `halfway train` accept."""
    return list(_halfway._recipe_names())


def format(fmt):
    """The halfway.Format named by `fmt` ('fp16', 'e4m3:sat', 'e5m10:bias=14:ftz', ...)."""
    _args.name("format", "fmt", fmt, allow=Format)
    return _halfway.format(fmt)


class finfo:
    """Machine limits of a format, with numpy.finfo's fields and the special encodings.

    numpy.finfo fields (values are float32 scalars, all exact): bits, eps, epsneg, max, min,
    tiny, smallest_normal, smallest_subnormal (None without subnormals), nmant, nexp, iexp,
    machep, negep, maxexp, minexp, precision, resolution, dtype (float32, the type of the
    values).

    Format fields: name, encoding_dtype (what halfway.encode returns), bias, emin, emax,
    specials ('ieee', 'fn', 'fnuz', 'none'), overflow ('inf', 'saturate', 'nan'), ftz, daz,
    signed, has_zero, has_inf, has_nan.

    Encodings (int, or None where the format has none): inf_bits, neg_inf_bits, nan_bits (the
    NaN of an invalid operation), max_bits, min_bits (most negative finite value; the
    smallest value for unsigned formats), smallest_normal_bits, smallest_subnormal_bits,
    zero_bits, neg_zero_bits, one_bits.

    For a format without a sign bit, min is its smallest value. eps is 2**-nmant and epsneg
    2**-(nmant+1), as numpy defines them. Subnormal fields describe the encodings even for a
    format that flushes them (ftz/daz).
    """

    _numpy_fields = ("bits", "dtype", "eps", "epsneg", "iexp", "machep", "max", "maxexp", "min",
                     "minexp", "negep", "nexp", "nmant", "precision", "resolution",
                     "smallest_normal", "smallest_subnormal", "tiny")

    def __init__(self, fmt):
        _args.name("finfo", "fmt", fmt, allow=Format)
        for key, value in _halfway._finfo_fields(fmt).items():
            setattr(self, key, value)

    def __repr__(self):
        return (f"halfway.finfo(name={self.name}, bits={self.bits}, eps={self.eps}, "
                f"max={self.max}, smallest_normal={self.smallest_normal}, "
                f"smallest_subnormal={self.smallest_subnormal})")

    def __str__(self):
        def enc(v):
            return "-" if v is None else f"0x{v:0{(self.bits + 3) // 4}X}"
        lines = [
            f"Machine parameters for {self.name} ({self.bits} bits: sign "
            f"{int(self.signed)}, exponent {self.nexp}, fraction {self.nmant}; bias {self.bias})",
            "-" * 76,
            f"precision = {self.precision:3d}   resolution = {self.resolution}",
            f"machep = {self.machep:6d}   eps = {self.eps}",
            f"negep = {self.negep:7d}   epsneg = {self.epsneg}",
            f"minexp = {self.minexp:6d}   tiny = {self.tiny}",
            f"maxexp = {self.maxexp:6d}   max = {self.max}",
            f"nexp = {self.nexp:8d}   min = {self.min}",
            f"smallest_normal = {self.smallest_normal}   "
            f"smallest_subnormal = {self.smallest_subnormal}",
            f"specials = {self.specials}   overflow = {self.overflow}   ftz = {self.ftz}   "
            f"daz = {self.daz}",
            f"encodings: inf {enc(self.inf_bits)}  nan {enc(self.nan_bits)}  "
            f"max {enc(self.max_bits)}  min {enc(self.min_bits)}  "
            f"smallest_normal {enc(self.smallest_normal_bits)}  "
            f"smallest_subnormal {enc(self.smallest_subnormal_bits)}",
            "-" * 76,
        ]
        return "\n".join(lines)


class TrainResult:
    """What halfway.train returns: the run's result files as pandas DataFrames.

    steps: one row per step (loss, loss_scale, found_inf, skipped, growth_tracker,
        next_scale, grad_values, grad_flushed, grad_overflow, k_low, k_high, val_loss: the
        validation loss of [data] text runs on the steps that measure it, else NaN).
    trace: the tracer's records, one row per (step, tensor): event counts of every rounding.
    scale_window: per step, the gradient values predicted flushed or overflowing at scales 2^k.
    memory: bytes per category and dtype.
    blocks: the block-scaled GEMM operand copies, one row per (step, tensor, copy): event
        counts, SNR and block-scale histogram (no rows unless the policy is block-scaled).
    manifest: the run's manifest (config, seed, version, summary) as a dict.
    out_dir: where the files are, or None when they were written to a temporary directory.
    """

    def __init__(self, steps, trace, scale_window, memory, manifest, out_dir, blocks=None):
        self.steps, self.trace, self.scale_window = steps, trace, scale_window
        self.memory, self.manifest, self.out_dir = memory, manifest, out_dir
        self.blocks = blocks

    def __repr__(self):
        return (f"halfway.TrainResult(steps={len(self.steps)} rows, trace={len(self.trace)} rows, "
                f"scale_window={len(self.scale_window)} rows, out_dir={self.out_dir!r})")


def _toml_value(v):
    import json
    import math
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"halfway.train: cannot write {type(v).__name__} value {v!r} to a config")


def _toml(config, prefix=""):
    """A config dict {table: {key: value, sub-table or list of tables}} as TOML text (a list of
    dicts is an array of tables, [[table.key]])."""
    lines = []
    for name, table in config.items():
        if not isinstance(table, dict):
            raise TypeError(f"halfway.train: config entry '{prefix}{name}' must be a table (dict)")
        lines.append(f"[{prefix}{name}]")
        subtables, arrays = {}, {}
        for key, value in table.items():
            if isinstance(value, dict):
                subtables[key] = value
            elif isinstance(value, (list, tuple)) and value and \
                    all(isinstance(x, dict) for x in value):
                arrays[key] = value
            else:
                lines.append(f"{key} = {_toml_value(value)}")
        if subtables:
            lines.append(_toml(subtables, f"{prefix}{name}."))
        for key, entries in arrays.items():
            for entry in entries:
                lines.append(f"[[{prefix}{name}.{key}]]")
                lines += [f"{k} = {_toml_value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"


def train(config, out_dir=None, *, threads=1, max_memory=None):
    """Run one simulator configuration and return its results as pandas DataFrames.

    config: a path to a TOML config file, the TOML text itself, or a dict of tables
        ({"model": {"kind": "mlp", ...}, "run": {"steps": 10}, ...}).
    out_dir: also keep the result files (steps.csv, trace.csv, scale_window.csv, updates.csv,
        blocks.csv, memory.csv, manifest.json) there; by default they go to a temporary directory.
    threads: worker threads; results do not depend on it.
    max_memory: refuse (ValueError) a run whose estimated peak memory is over this many bytes
        (an int, or a string such as "2G" or "512M"); default 80% of the physical memory.

    Returns a halfway.TrainResult (steps, trace, scale_window, memory, manifest, out_dir).
    Errors in the config raise ValueError with a one-line message.
    """
    import json
    import os
    import tempfile

    import pandas as pd

    if not hasattr(_halfway, "_train_to_dir"):
        raise RuntimeError("halfway.train: this build of halfway has no simulator (sim/)")
    _args.integer("train", "threads", threads, 1, 256)
    if isinstance(config, dict):
        text, is_text = _toml(config), True
    elif isinstance(config, (str, os.PathLike)):
        text = os.fspath(config)
        is_text = not os.path.isfile(text)
        if is_text and "[" not in text:
            raise ValueError(f"halfway.train: no such config file: '{text}'")
    else:
        raise TypeError("halfway.train: config must be a path, TOML text or a dict, not "
                        f"{type(config).__name__}")
    tmp = None
    if out_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="halfway-train-")
        directory = tmp.name
    else:
        directory = os.fspath(out_dir)
    try:
        if max_memory is not None and not isinstance(max_memory, (int, str)):
            raise TypeError("halfway.train: max_memory must be a number of bytes or a string "
                            f"such as '2G', not {type(max_memory).__name__}")
        if isinstance(max_memory, str) and not max_memory.strip():
            raise ValueError("halfway.train: max_memory must be a size such as '2G', not an "
                             "empty string (None for the default)")
        if isinstance(max_memory, bool) or isinstance(max_memory, int) and max_memory < 1:
            raise ValueError("halfway.train: max_memory must be at least 1 byte, got "
                             f"{max_memory!r}")
        _halfway._train_to_dir(text, is_text, os.getcwd(), directory, threads,
                               "" if max_memory is None else str(max_memory))

        def read(name):
            return pd.read_csv(os.path.join(directory, name))

        with open(os.path.join(directory, "manifest.json")) as f:
            manifest = json.load(f)
        return TrainResult(read("steps.csv"), read("trace.csv"), read("scale_window.csv"),
                           read("memory.csv"), manifest, None if tmp else directory,
                           read("blocks.csv"))
    finally:
        if tmp is not None:
            tmp.cleanup()


def bench(n=1 << 20, repeats=7, threads=1):
    """Time halfway.round on n float32 values against numpy's astype(float16) round trip and
    PyTorch's bfloat16 round trip, in one run; print and return the median ratios."""
    _args.integer("bench", "n", n, 1, 1 << 31)
    _args.integer("bench", "repeats", repeats, 1, 1000)
    _args.integer("bench", "threads", threads, 1, 256)
    from . import benchmark
    return benchmark.run(n=n, repeats=repeats, threads=threads)



def __getattr__(name):
    # halfway.torch: imported when first used (and torch only then).
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'halfway' has no attribute {name!r}")
