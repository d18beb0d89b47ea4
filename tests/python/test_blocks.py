"""halfway.encode_blocks / decode_blocks / quantize_blocks against numpy transcriptions of the
definitions in docs/blocks.md, written here without halfway:

- NVFP4: Transformer Engine's NVFP4QuantizerRef._quantize_blockwise_reference, each step a
  numpy float32 operation in TE's order, elements by TE's cast_to_fp4x2 threshold table;
  stochastic rounding from the definition of the random stream (oracle.sr_bits) with exact
  fractions; the random Hadamard transform as a Sylvester matrix (np.kron). Row-scaled
  (nvfp4:row_scaled, TE's row_scaled_nvfp4): the same steps with each row's amax (each
  column's for blocks down the columns) broadcast in place of the tensor's, as TE's reference
  takes torch.max(abs(x), dim=1) of the rowwise and of the transposed input.
- MX: every scale rule (floor, ceil, rceil, even) from its definition, with np.frexp in exact
  float64 steps, and at every e8m0 code's boundaries in exact fractions (rceil's one fp32
  product by numpy float32), the elements x / 2^k exactly in float64 and rounded to the nearest table value, ties to the even
  code, clamped at the largest value.
- blockwise fp8: amax / 448 and x / scale in float32, e4m3 by the same table rounding.
- MXINT8: the MX scale, elements x / 2^k times 64 rounded to integers (np.rint), clamped to
  +-127, as int8 bytes.
- fp8 rowwise (torchao): elem_max / max(amax, 1e-12) in float64 then float32, x * scale in
  float32, the table rounding; decoded as element / scale.
- Block lengths other than the default, and the whole dimension (block=0), for each of these.
- Four Over Six (nvfp4_4over6): fouroversix's reference (quantize/reference.py, rule mse) in
  numpy float32 in its order, e4m3 scales by ml_dtypes, its piecewise np.round e2m1 rounding,
  and its errors summed in float32; halfway sums them in binary64, so a block whose two errors
  agree to within float32 rounding may choose the other way (a class, counted).

Codes, scales and the global scale must agree bit for bit; decoded values too. Bad input must
raise ValueError (TypeError for a wrong dtype).
"""

import sys
from fractions import Fraction

import numpy as np

import halfway
from hwtest import check, status
from oracle import sr_bits

F32 = np.float32
FMAX = np.finfo(np.float32).max

# Element formats from their definitions: (exponent bits, fraction bits, bias, has NaN at
# S.1111.111 like e4m3fn, has inf/NaN like IEEE e5m2).
ELEMENTS = {
    "e4m3": (4, 3, 7, "fn"), "e5m2": (5, 2, 15, "ieee"), "e2m3": (2, 3, 1, "none"),
    "e3m2": (3, 2, 3, "none"), "e2m1": (2, 1, 1, "none"),
    # MXINT8's grid i/64, |i| <= 127, as a float grid: used here only for its largest value
    # (emax_elem 0) and its 6 fraction bits in the scale rules; its elements are rounded as
    # integers (mxint8_ref).
    "int8": (1, 6, 1, "none"),
}
MX = {"mxfp8_e4m3": "e4m3", "mxfp8_e5m2": "e5m2", "mxfp6_e2m3": "e2m3",
      "mxfp6_e3m2": "e3m2", "mxfp4": "e2m1"}


def table(name):
    """(magnitude codes, values) of the finite non-negative values, ascending."""
    e, m, bias, specials = ELEMENTS[name]
    codes, values = [], []
    for c in range(1 << (e + m)):
        field, frac = c >> m, c & ((1 << m) - 1)
        if specials == "fn" and c == (1 << (e + m)) - 1:
            continue
        if specials == "ieee" and field == (1 << e) - 1:
            continue
        v = (frac / (1 << m)) * 2.0 ** (1 - bias) if field == 0 else \
            (1 + frac / (1 << m)) * 2.0 ** (field - bias)
        codes.append(c)
        values.append(v)
    return np.array(codes), np.array(values)


def round_table(v, name):
    """Round float64 values (exact) to the nearest element, ties to the even code, clamped to
    the largest; sign kept (also for a result of zero). Returns codes."""
    codes, vals = table(name)
    e, m = ELEMENTS[name][:2]
    sign = np.signbit(v).astype(np.int64) << (e + m)
    a = np.minimum(np.abs(v), vals[-1])
    hi = np.clip(np.searchsorted(vals, a), 0, len(vals) - 1)
    lo = np.maximum(hi - 1, 0)
    dlo, dhi = a - vals[lo], vals[hi] - a
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (codes[hi] % 2 == 0))
    idx = np.where(a == vals[hi], hi, np.where(pick_hi, hi, lo))
    return (codes[idx] | sign).astype(np.uint8)


def element_value(codes, name):
    c, vals = table(name)
    e, m = ELEMENTS[name][:2]
    lut = np.zeros(1 << (e + m + 1))
    lut[c] = vals
    lut[c | (1 << (e + m))] = -vals
    if ELEMENTS[name][3] == "fn":
        lut[0x7F] = lut[0xFF] = np.nan
    return lut[codes.astype(np.int64)]


def blocks_view(x, k, axis, two_d):
    """x as [scale_rows, scale_cols, elements of the block]."""
    r, c = x.shape
    if two_d:
        return x.reshape(r // k, k, c // k, k).transpose(0, 2, 1, 3).reshape(r // k, c // k, k * k)
    if axis == 0:
        return x.reshape(r // k, k, c).transpose(0, 2, 1)
    return x.reshape(r, c // k, k)


def unblock(b, shape, k, axis, two_d):
    r, c = shape
    if two_d:
        return b.reshape(r // k, c // k, k, k).transpose(0, 2, 1, 3).reshape(r, c)
    if axis == 0:
        return b.transpose(0, 2, 1).reshape(r, c)
    return b.reshape(r, c)


# ---------------------------------------------------------------------------------------------
# The definitions

def pow2_vs(k, v):
    """The sign of 2^k - v for a Fraction v > 0, in integers: 2^k - n/d ~ d * 2^k - n."""
    n, d = v.numerator, v.denominator
    lhs, rhs = (d << k, n) if k >= 0 else (d, n << -k)
    return (lhs > rhs) - (lhs < rhs)


def ceil_log2(v):
    """The smallest k with 2^k >= v, for a Fraction v > 0, by comparing with powers of two."""
    k = v.numerator.bit_length() - v.denominator.bit_length() - 1
    while pow2_vs(k, v) < 0:
        k += 1
    return k


def floor_log2(v):
    """The largest k with 2^k <= v, for a Fraction v > 0."""
    k = ceil_log2(v)
    return k - (pow2_vs(k, v) != 0)


def mx_exponent(amax, rule, elem):
    """The MX scale exponent of a block (before the clamp), from each rule's definition, in
    exact fractions: floor (OCP MX), ceil, rceil and even (torchao's ScaleCalculationMode)."""
    emax_val = Fraction(table(elem)[1][-1])
    emax = floor_log2(emax_val)
    a = Fraction(amax)
    if rule == "floor":
        return floor_log2(a) - emax
    if rule == "ceil":
        return ceil_log2(a) - emax
    if rule == "even":  # amax rounded to the element's m fraction bits, ties away from zero
        m, e = ELEMENTS[elem][1], floor_log2(a)
        q = a / Fraction(2) ** (e - m)
        r = (q + Fraction(1, 2)).__floor__() * Fraction(2) ** (e - m)
        return floor_log2(r) - emax
    # rceil: one fp32 product amax * fp32(1 / elem_max) (numpy's float32 multiply rounds once),
    # then the smallest power of two at or above it.
    d = F32(amax) * F32(1 / float(emax_val))
    return ceil_log2(Fraction(float(d))) if d > 0 else -1000


def mx_exponents(amax, rule, elem):
    """mx_exponent for an array of amax values (float64, exact), vectorised with np.frexp:
    amax = f * 2^e, f in [0.5, 1), every step exact in float64 (0 where amax is 0)."""
    emax_val = table(elem)[1][-1]
    emax = int(np.frexp(emax_val)[1]) - 1
    m = ELEMENTS[elem][1]
    f, e = np.frexp(amax)
    if rule == "floor":
        return e - 1 - emax
    if rule == "ceil":
        return e - 1 + (f != 0.5) - emax
    if rule == "even":  # the significand 2f to m fraction bits, ties away: carry at 2^(m+1)
        q = np.floor(2 * f * 2.0 ** m + 0.5)
        return e - 1 + (q >= 2.0 ** (m + 1)) - emax
    d = amax.astype(F32) * F32(1 / emax_val)  # rceil: one fp32 product
    fd, ed = np.frexp(d.astype(np.float64))
    return np.where(d > 0, ed - 1 + (fd != 0.5), -1000)


def mx_ref(x, scheme, axis, mode="near_even", seed=None, offset=0, bits=32, k=32):
    base, _, rule = scheme.partition(":")
    rule = rule.split(":")[0] if not rule.startswith("block=") else ""
    elem = MX[base]
    k = block_length(x, axis, k)
    b = blocks_view(x.astype(np.float64), k, axis, False)
    amax = np.abs(b).max(axis=-1)
    e = np.clip(mx_exponents(amax, rule or "floor", elem), -127, 127)
    e = np.where(amax == 0, -127, e)
    scodes = (e + 127).astype(np.uint8)
    if mode != "near_even":  # x / 2^k exactly in float64
        v = x.astype(np.float64) / np.ldexp(1.0, per_element(e, x.shape, k, axis, False))
        return round_flat(v, elem, mode, seed, offset, bits), scodes, None
    codes = round_table(b / np.ldexp(1.0, e)[..., None], elem)
    return unblock(codes, x.shape, k, axis, False), scodes, None


def te_fp4_codes(y):
    """Transformer Engine's cast_to_fp4x2 table (before packing two per byte)."""
    r = np.zeros(y.shape, dtype=np.uint8)
    r[(y >= 0.0) & (y <= 0.25)] = 0
    r[(y > 0.25) & (y < 0.75)] = 1
    r[(y >= 0.75) & (y <= 1.25)] = 2
    r[(y > 1.25) & (y < 1.75)] = 3
    r[(y >= 1.75) & (y <= 2.5)] = 4
    r[(y > 2.5) & (y < 3.5)] = 5
    r[(y >= 3.5) & (y <= 5.0)] = 6
    r[y > 5.0] = 7
    r[(y >= -0.25) & (y < -0.0)] = 8
    r[(y < -0.25) & (y > -0.75)] = 9
    r[(y <= -0.75) & (y >= -1.25)] = 10
    r[(y < -1.25) & (y > -1.75)] = 11
    r[(y <= -1.75) & (y >= -2.5)] = 12
    r[(y < -2.5) & (y > -3.5)] = 13
    r[(y <= -3.5) & (y >= -5.0)] = 14
    r[y < -5.0] = 15
    return r


def round_flat(y, elem, mode, seed=None, offset=0, bits=32, zero_code_zero=False):
    """Round exact values (float64, or float32 for the fp32 definitions) into an element
    format in `mode`, after clamping to +-max (saturation in every direction), from the value
    table: near_maxMag the nearer neighbour, ties away from zero; minMag, min, max directed;
    odd the neighbour with the odd code; stochastic up iff floor(frac * 2^32) plus the top
    `bits` of the random bits of stream position offset + i carry past 2^32. A zero result
    keeps the sign (zero_code_zero: NVFP4's rule, an input zero gets code 0)."""
    codes_tbl, vals = table(elem)
    e, m = ELEMENTS[elem][:2]
    sign_bit = 1 << (e + m)
    mask = ((1 << bits) - 1) << (32 - bits)
    flat = y.ravel()
    out = np.zeros(flat.shape, dtype=np.uint8)
    for i, v in enumerate(flat):
        v = float(v)
        neg = np.signbit(v)
        if v == 0 and zero_code_zero:
            continue
        a = min(Fraction(abs(v)), Fraction(vals[-1]))
        j = int(np.searchsorted(vals, float(a), side="right")) - 1
        if Fraction(vals[j]) == a:
            c = codes_tbl[j]
        else:
            lo, hi = Fraction(vals[j]), Fraction(vals[j + 1])
            if mode == "near_maxMag":
                up = a - lo >= hi - a
            elif mode == "minMag":
                up = False
            elif mode == "max":
                up = not neg
            elif mode == "min":
                up = neg
            elif mode == "odd":
                up = codes_tbl[j + 1] % 2 == 1
            elif mode == "stochastic":
                t = int((a - lo) / (hi - lo) * (1 << 32))
                up = t + (sr_bits(seed, offset + i) & mask) >= (1 << 32)
            else:
                raise AssertionError(mode)
            c = codes_tbl[j + 1] if up else codes_tbl[j]
        out[i] = c | (sign_bit if neg else 0)
    return out.reshape(y.shape)


def per_element(v, shape, k, axis, two_d):
    """A per-block array as the per-element array of x's shape."""
    b = np.broadcast_to(v[..., None], v.shape + (k * k if two_d else k,))
    return unblock(b, shape, k, axis, two_d)


def rht_ref(x, axis):
    h = np.array([[1.0]])
    while h.shape[0] < 16:
        h = np.kron(np.array([[1.0, 1.0], [1.0, -1.0]]), h)
    signs = np.array([1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1], dtype=np.float64)
    t = (signs[:, None] * h * 0.25).astype(F32)
    b = blocks_view(x, 16, axis, False)
    out = np.empty_like(b)
    for j in range(16):
        acc = b[..., 0] * t[0, j]
        for k in range(1, 16):
            acc = acc + b[..., k] * t[k, j]
        out[..., j] = acc
    return unblock(out, x.shape, 16, axis, False)


def nvfp4_ref(x, two_d, axis, rht=False, seed=None, offset=0, mode=None, bits=32,
              row_scaled=False):
    if rht:
        x = rht_ref(x, axis)
    b = blocks_view(x, 16, axis, two_d)
    vec_max = np.abs(b).max(axis=-1).astype(F32)
    if row_scaled:
        # One amax per line along the blocks, shaped to broadcast over blocks_view's
        # [scale_rows, scale_cols]: rows for axis -1, columns for axis 0.
        line = np.abs(x).max(axis=1 if axis == -1 else 0).astype(F32)
        global_amax = line[:, None] if axis == -1 else line[None, :]
    else:
        global_amax = F32(np.abs(x).max())
    with np.errstate(divide="ignore", over="ignore"):
        g = F32(F32(448.0) * F32(6.0)) / global_amax
    g = np.minimum(g, FMAX)
    if row_scaled:
        g = np.where(g == 0, F32(1.0), g).astype(F32)
    elif g == 0:
        g = F32(1.0)
    gd = F32(1.0) / g
    mult = g * (F32(1.0) / F32(6.0))
    ds = np.minimum(vec_max * mult, FMAX)
    ds = np.clip(ds, F32(-448.0), F32(448.0))
    scode = round_table(ds.astype(np.float64), "e4m3")
    sval = element_value(scode, "e4m3").astype(F32)
    with np.errstate(divide="ignore"):
        enc = np.minimum(F32(1.0) / (sval * gd), FMAX)
    with np.errstate(over="ignore"):  # x * fp32 max where a block's scale is 0, as in TE
        y = np.clip(b * enc[..., None], F32(-6.0), F32(6.0))
    if mode is None and seed is not None:
        mode = "stochastic"
    if row_scaled:  # the global scales as encode_blocks returns them: one per line
        g = g[:, 0] if axis == -1 else g[0, :]
    if mode in (None, "near_even"):
        codes = te_fp4_codes(y)
    else:
        yy = unblock(y, x.shape, 16, axis, two_d)
        return round_flat(yy, "e2m1", mode, seed, offset, bits, zero_code_zero=True), scode, g
    return unblock(codes, x.shape, 16, axis, two_d), scode, g


def block_length(x, axis, k):
    """A 1-D block length as the scheme names it: 0 is the whole dimension along the axis."""
    return k or x.shape[1 if axis == -1 else 0]


def mxint8_ref(x, rule, axis, k=32):
    """OCP MX v1.0's MXINT8 from its definition: the scale as for any MX scheme (emax_elem 0,
    6 fraction bits), each element x / 2^k times 64 rounded to the nearest integer (ties to
    even), clamped to +-127, as an int8 byte in two's complement."""
    k = block_length(x, axis, k)
    b = blocks_view(x.astype(np.float64), k, axis, False)
    amax = np.abs(b).max(axis=-1)
    e = np.clip(mx_exponents(amax, rule, "int8"), -127, 127)
    e = np.where(amax == 0, -127, e)
    i = np.clip(np.rint(b / np.ldexp(1.0, e)[..., None] * 64), -127, 127).astype(np.int8)
    return unblock(i.view(np.uint8), x.shape, k, axis, False), (e + 127).astype(np.uint8), None


def rowwise_ref(x, elem, axis, pow2, k=0):
    """torchao's float8 rowwise (float8_utils.amax_to_scale, hp_tensor_and_scale_to_float8):
    scale = elem_max / max(amax, 1e-12) in float64, then float32 (pow2: 2^floor(log2) by
    np.frexp), elements float32(x * scale) clamped and rounded to the table, nearest even."""
    k = block_length(x, axis, k)
    b = blocks_view(x, k, axis, False)
    elem_max = table(elem)[1][-1]
    amax = np.abs(b).max(axis=-1).astype(np.float64)
    q = (elem_max / np.maximum(amax, 1e-12)).astype(F32)
    if pow2:
        q = np.ldexp(F32(1.0), np.frexp(q)[1] - 1).astype(F32)
    y = np.clip(b * q[..., None], -elem_max, elem_max).astype(F32)
    codes = round_table(y.astype(np.float64), elem)
    return unblock(codes, x.shape, k, axis, False), q, None


def fouroversix_ref(x, axis, two_d):
    """fouroversix's reference quantize_to_fp4 (nvfp4, rule mse, nearest) in numpy float32:
    (codes, e4m3 scale codes, amax, the two candidates' float32 errors per block)."""
    import ml_dtypes
    b = blocks_view(x, 16, axis, two_d)
    a_all = np.abs(x).max().astype(F32)
    hp = (np.abs(b).max(axis=-1) * F32(256)) / a_all
    cand = []
    for factor in (F32(1), F32(1.5)):
        sc = (hp * factor).astype(F32).astype(ml_dtypes.float8_e4m3fn)
        sv = sc.astype(F32)[..., None]
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(sv != 0, ((b * F32(6)) * F32(256)) / (a_all * sv), F32(0)).astype(F32)
        m = np.abs(y)
        q = np.sign(y) * np.where(m < 2, np.round(2 * m) / 2,
                                  np.where(m < 4, np.round(m), 2 * np.round(m / 2)))
        q = q.astype(F32)
        deq = ((q * sv) * a_all) / F32(1536)
        err = np.sum(((deq - b) ** 2).astype(F32), axis=-1, dtype=F32)
        cand.append((sc.view(np.uint8), q, err))
    four = cand[1][2] < cand[0][2]
    q = np.where(four[..., None], cand[1][1], cand[0][1])
    scodes = np.where(four, cand[1][0], cand[0][0])
    mag = np.searchsorted(np.array([0, .5, 1, 1.5, 2, 3, 4, 6], F32), np.abs(q))
    codes = (mag | np.where(np.signbit(q), 8, 0)).astype(np.uint8)
    k = 16
    return unblock(codes, x.shape, k, axis, two_d), scodes, a_all, cand[0][2], cand[1][2], q


def four_over_six():
    """halfway's nvfp4_4over6 against fouroversix's reference: every code and scale, but for
    the blocks whose float32 errors are within float32 rounding of each other."""
    ties = beyond = 0
    for seed, lo, hi in ((10, -6, 6), (11, -20, 20)):
        x = mixed((128, 256), seed, lo, hi)
        for axis in (-1, 0):
            for two_d, name in ((False, "nvfp4_4over6"), (True, "nvfp4_4over6_2d")):
                codes, scales, g = halfway.encode_blocks(x, name, axis=axis)
                wc, ws, wa, e6, e4, q = fouroversix_ref(x, axis, two_d)
                tag = f"{name} axis {axis} seed {seed}"
                check(np.float32(g) == wa, f"{tag}: amax {g} want {wa}")
                # Class 2: a candidate whose e4m3 scale rounded far down (a subnormal scale)
                # leaves an element at 7 or more, which the reference rounds to 8, not an e2m1
                # value; halfway saturates it to 6. Those blocks are not compared.
                eight = (np.abs(q) > 6).any(axis=-1)
                beyond += int(eight.sum())
                differ = scales != ws
                near = np.abs(e4 - e6) <= 4 * np.spacing(np.maximum(e4, e6))
                check(not (differ & ~near & ~eight).any(),
                      f"{tag}: {int((differ & ~near & ~eight).sum())} block scales differ "
                      "beyond a tie")
                ties += int((differ & ~eight).sum())
                differ = differ | eight
                keep = per_element(~differ, x.shape, 16, axis, two_d) if not two_d else \
                    unblock(np.broadcast_to((~differ)[..., None], differ.shape + (256,)),
                            x.shape, 16, axis, True)
                bad = keep & (codes != wc)
                check(not bad.any(), f"{tag}: {int(bad.sum())} codes differ, first at "
                      f"{np.argwhere(bad)[:1].tolist()}")
                y = halfway.decode_blocks(codes, scales, g, name)
                check(same(y, halfway.quantize_blocks(x, name, axis=axis)), f"{tag}: decode")
    print(f"four over six: {ties} blocks chose the other candidate at a float32 near-tie, "
          f"{beyond} blocks with an element the reference rounds to 8")
    raises(ValueError, halfway.encode_blocks, mixed((16, 16), 1, 0, 0) * F32(1e37), "nvfp4_4over6")
    raises(ValueError, halfway.encode_blocks, mixed((16, 16), 1, 0, 0), "nvfp4_4over6",
           rounding="stochastic", seed=1)


def fp8_ref(x, two_d, axis, pow2, mode="near_even", seed=None, offset=0, bits=32, k=128):
    k = block_length(x, axis, k)
    b = blocks_view(x, k, axis, two_d)
    amax = np.abs(b).max(axis=-1).astype(F32)
    if pow2:
        with np.errstate(divide="ignore"):
            q = F32(448.0) / amax
        q = np.where(np.isinf(q), FMAX, q)
        _, e = np.frexp(q)
        s = np.ldexp(F32(1.0), -(e - 1)).astype(F32)
    else:
        s = amax / F32(448.0)
        s = np.where(s == 0, np.finfo(np.float32).smallest_subnormal, s)
    s = np.where(amax == 0, F32(1.0), s).astype(F32)
    if mode != "near_even":  # fp32(x / s)
        y = x / per_element(s, x.shape, k, axis, two_d)
        return round_flat(y.astype(F32), "e4m3", mode, seed, offset, bits), s, None
    codes = round_table((b / s[..., None]).astype(np.float64), "e4m3")
    return unblock(codes, x.shape, k, axis, two_d), s, None


# ---------------------------------------------------------------------------------------------

def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f":
        return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.astype(F32).view(np.uint32))
    return a.shape == b.shape and np.array_equal(a, b)


def mixed(shape, seed, lo, hi):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape) * 2.0 ** rng.integers(lo, hi + 1, size=shape)
    x[rng.random(shape) < 0.05] = 0.0
    sub = rng.random(shape) < 0.03
    x[sub] = rng.integers(1, 1 << 23, size=sub.sum()) * 2.0 ** -149
    return x.astype(F32)


def raises(exc, f, *a, **kw):
    try:
        f(*a, **kw)
    except exc as e:
        check("\n" not in str(e), f"multi-line message: {e}")
        return
    except Exception as e:  # noqa: BLE001
        check(False, f"{f.__name__}{a[1:]} {kw}: {type(e).__name__} {e}, want {exc.__name__}")
        return
    check(False, f"{f.__name__}{a[1:]} {kw}: no {exc.__name__}")


def compare(x, scheme, want, **kw):
    codes, scales, g = halfway.encode_blocks(x, scheme, **kw)
    wc, ws, wg = want
    tag = f"{scheme} {x.shape} {kw}"
    check(same(codes, wc), f"{tag}: codes differ at {np.argwhere(codes != wc)[:3].tolist()}")
    check(same(scales, ws), f"{tag}: scales differ")
    check((g is None) == (wg is None) and (g is None or same(g if np.ndim(g) else F32(g),
                                                             np.asarray(wg, dtype=F32))),
          f"{tag}: global scale {g} want {wg}")
    return codes, scales, g


def nvfp4_harmless_clamps():
    """NVFP4's clamped scales split: harmless where the fp32 decode scale amax_b · fp32(g · 1/6)
    (g = fp32(448 · 6 / amax), TE's reference, in numpy's float32 arithmetic here) was above
    448 and at most 464, so that e4m3's own rounding gives 448 too; every other clamp (a
    non-zero block whose scale rounded to 0) is real. Tensors whose blocks span a wide range
    have both kinds."""
    f = np.float32
    seen = {"harmless": 0, "real": 0}
    for seed in range(8):
        x = mixed((64, 64), seed, -30, 30)
        _, scales, g, c = halfway.encode_blocks(x, "nvfp4", counts=True)
        amax_b = np.abs(x).reshape(64, 4, 16).max(axis=2).astype(f)
        g_ref = f(448.0 * 6.0) / f(np.abs(x).max())
        d = amax_b * (g_ref * (f(1.0) / f(6.0)))
        harmless = (d > f(448.0)) & (d <= f(464.0))
        real = (element_value(scales, "e4m3") == 0) & (amax_b > 0)
        check(np.array_equal(c["block_scales_clamped_harmless"], harmless),
              f"nvfp4 seed {seed}: harmless clamps at {np.argwhere(harmless).tolist()}, got "
              f"{np.argwhere(c['block_scales_clamped_harmless']).tolist()}")
        check(np.array_equal(c["block_scales_clamped"], harmless | real),
              f"nvfp4 seed {seed}: clamped blocks")
        check(c["scales_clamped_harmless"] == int(harmless.sum()) and
              c["scales_clamped"] == int((harmless | real).sum()), f"nvfp4 seed {seed}: totals")
        seen["harmless"] += int(harmless.sum())
        seen["real"] += int(real.sum())
    check(seen["harmless"] > 0 and seen["real"] > 0, f"nvfp4 clamps: both kinds needed, {seen}")


def counts_summary():
    """counts=True prints as one short table; every number in it recomputed from the per-block
    arrays and the shapes (not from the totals it prints)."""
    x = mixed((64, 128), 13, -40, 40)
    x[3, 5] = np.nan
    for scheme in ("mxfp4", "mxfp8_e4m3:rceil", "fp8_block"):
        if scheme == "fp8_block":
            x = np.nan_to_num(x)
        codes, scales, _, c = halfway.encode_blocks(x, scheme, counts=True)
        text = repr(c)
        lines = text.splitlines()
        check(len(lines) == 7, f"{scheme}: {len(lines)} lines: {text!r}")
        check(lines[0] == f"{x.size} elements in {scales.size} blocks "
              f"({scales.shape[0]}x{scales.shape[1]})", f"{scheme}: {lines[0]!r}")
        nan_blocks = int((scales == 0xFF).sum()) if scales.dtype == np.uint8 else 0
        want = {"saturated": c["block_saturated"], "flushed": c["block_flushed"],
                "scales_clamped": c["block_scales_clamped"],
                "scales_clamped_harmless": c["block_scales_clamped_harmless"]}
        for line in lines[2:]:
            name, total, blocks = line.split()
            if name == "nan_scales":
                check((int(total), int(blocks)) == (nan_blocks, nan_blocks), f"{scheme}: {line}")
                continue
            a = want[name]
            check((int(total), int(blocks)) == (int(a.astype(np.int64).sum()),
                                                int(np.count_nonzero(a))), f"{scheme}: {line}")
        check(str(c) == text and isinstance(c, dict) and c["elements"] == x.size,
              f"{scheme}: BlockCounts is a dict printed as the table")
        q, cq = halfway.quantize_blocks(x, scheme, counts=True)
        check(repr(cq) == text, f"{scheme}: quantize_blocks' counts")


MODES = (("near_maxMag", 32), ("minMag", 32), ("min", 32), ("max", 32), ("odd", 32),
         ("stochastic", 1), ("stochastic", 5), ("stochastic", 32))


def element_rounding():
    """Every scheme in every element rounding against round_flat; the negative control: each
    mode's reference differs from near_even's codes, so a mode the library ignored fails."""
    x = mixed((32, 32), 8, -30, 30)
    narrow = mixed((16, 64), 9, -5, 5)
    for mode, bits in MODES:
        kw = dict(rounding=mode, random_bits=bits, seed=11, offset=3)
        for axis in (-1, 0):
            for scheme in MX:
                want = mx_ref(x, scheme + ":rceil", axis, mode, 11, 3, bits)
                compare(x, scheme + ":rceil", want, axis=axis, **kw)
            compare(narrow, "nvfp4", nvfp4_ref(narrow, False, axis, seed=11, offset=3,
                                               mode=mode, bits=bits), axis=axis, **kw)
            compare(narrow, "nvfp4:row_scaled",
                    nvfp4_ref(narrow, False, axis, seed=11, offset=3, mode=mode, bits=bits,
                              row_scaled=True), axis=axis, **kw)
        xb = mixed((8, 256), 10, -5, 5)
        for pow2 in (False, True):
            want = fp8_ref(xb, False, -1, pow2, mode, 11, 3, bits)
            compare(xb, "fp8_block", want, pow2_scales=pow2, **kw)
        # Ties planted (random values have none): mxfp4's first block amax 6 (scale 1) with
        # the tie 1.25 of 1 and 1.5; nvfp4's tensor amax 2688 (global scale 1), then a block
        # of amax 6 (scale 1) with 1.25.
        xt, nt = x.copy(), narrow.copy()
        xt[0, :32] = 0
        xt[0, :2] = (6.0, 1.25)
        nt[0, :32] = 0
        nt[0, 0], nt[0, 16], nt[0, 17] = 2688.0, 6.0, 1.25
        for scheme, v, ref in (("mxfp4", xt, mx_ref(xt, "mxfp4", -1)[0]),
                               ("nvfp4", nt, nvfp4_ref(nt, False, -1)[0])):
            got = halfway.encode_blocks(v, scheme, **kw)[0]
            check(not same(got, ref), f"{scheme} {mode} {bits}: same codes as near_even")
    # Hand-derived: mxfp4, amax 6 (scale 2^0); 5 is the tie of 4 and 6: ties away from zero
    # (microxcaling's 'nearest') gives 6 (code 7), near_even 4 (code 6); -2.5: -3 (0xD), -2.
    v = np.zeros((1, 32), dtype=F32)
    v[0, :3] = (6.0, 5.0, -2.5)
    for mode, want in (("near_maxMag", [7, 7, 0xD]), ("near_even", [7, 6, 0xC])):
        got = halfway.encode_blocks(v, "mxfp4", rounding=mode)[0][0, :3].tolist()
        check(got == want, f"mxfp4 {mode}: codes {got} want {want}")
    raises(ValueError, halfway.encode_blocks, v, "mxfp4", rounding="stochastic", seed=1,
           random_bits=0)
    raises(ValueError, halfway.encode_blocks, v, "mxfp4", rounding="stochastic", seed=1,
           random_bits=33)
    raises(TypeError, halfway.encode_blocks, v, "mxfp4", random_bits=2.0)
    raises(ValueError, halfway.encode_blocks, v, "mxfp4", rounding="up")


def scale_rule_boundaries():
    """Every e8m0 code: blocks whose amax is the float32 number below, at and above each scale
    rule's boundary, against mx_exponent's exact fractions, every MX scheme and rule. The
    worked example from torchao: amax 150 in e4m3 gives codes 126 (floor), 127 (ceil), 126
    (rceil), 126 (even)."""
    for rule, want in (("", 126), (":floor", 126), (":ceil", 127), (":rceil", 126),
                       (":even", 126)):
        v = np.zeros((1, 32), dtype=F32)
        v[0, 0] = 150.0
        got = int(halfway.encode_blocks(v, "mxfp8_e4m3" + rule)[1][0, 0])
        check(got == want, f"mxfp8_e4m3{rule} amax 150: scale code {got} want {want}")
    for scheme, elem in MX.items():
        emax_val = table(elem)[1][-1]
        emax = floor_log2(Fraction(emax_val))
        m = ELEMENTS[elem][1]
        amax = set()
        for k in range(-127 - emax - 3, 128):
            for b in (2.0 ** (k + emax), emax_val * 2.0 ** k,
                      (2 - 2.0 ** -(m + 1)) * 2.0 ** (k + emax)):
                if b > float(FMAX) or F32(b) == 0:
                    continue
                f = F32(b)
                amax.update({np.nextafter(f, F32(0)), f, np.nextafter(f, F32(np.inf))})
        amax = sorted(a for a in amax if 0 < a <= FMAX)
        x = np.zeros((len(amax), 32), dtype=F32)
        x[:, 0] = amax
        for rule in ("floor", "ceil", "rceil", "even"):
            got = halfway.encode_blocks(x, f"{scheme}:{rule}")[1][:, 0]
            want = [min(max(mx_exponent(float(a), rule, elem), -127), 127) + 127 for a in amax]
            bad = [(float(a), int(g), w) for a, g, w in zip(amax, got, want) if g != w]
            check(not bad, f"{scheme}:{rule}: {len(bad)} scale codes differ, first {bad[:2]}")


def padding():
    """pad=True: zeros appended at the end of each dimension up to whole blocks (the rule of
    the simulator's block-scaled GEMMs), against numpy's np.pad; pad=False refuses."""
    x = mixed((33, 70), 12, -4, 4)
    for scheme, axis in (("mxfp4", -1), ("mxfp8_e4m3:rceil", 0), ("nvfp4", -1),
                         ("nvfp4_2d", -1), ("fp8_block", 0), ("fp8_block_2d", -1),
                         ("nvfp4:row_scaled", 0)):
        tr, tc = {"mxfp4": (1, 32), "mxfp8_e4m3:rceil": (32, 1), "nvfp4": (1, 16),
                  "nvfp4_2d": (16, 16), "fp8_block": (128, 1), "fp8_block_2d": (128, 128),
                  "nvfp4:row_scaled": (16, 1)}[scheme]
        pr, pc = -(-33 // tr) * tr, -(-70 // tc) * tc
        xp = np.pad(x, ((0, pr - 33), (0, pc - 70)))
        codes, scales, g = halfway.encode_blocks(x, scheme, axis=axis, pad=True)
        wc, ws, wg = halfway.encode_blocks(xp, scheme, axis=axis)
        # (row-scaled: a global scale per padded column, 70 of them)
        check(codes.shape == (pr, pc) and same(codes, wc) and same(scales, ws)
              and same(np.float32(0) if g is None else g, np.float32(0) if wg is None else wg),
              f"{scheme} pad: encoding")
        q = halfway.quantize_blocks(x, scheme, axis=axis, pad=True)
        wq = halfway.quantize_blocks(xp, scheme, axis=axis)[:33, :70]
        check(q.shape == x.shape and same(q, wq), f"{scheme} pad: quantized values")
        raises(ValueError, halfway.encode_blocks, x, scheme, axis=axis)
        raises(ValueError, halfway.quantize_blocks, x, scheme, axis=axis, pad=False)
    raises(TypeError, halfway.encode_blocks, x, "mxfp4", pad=1)


def microxcaling_differences():
    """docs/blocks.md, "What microxcaling does differently": the shared exponent of a block whose
    amax is the largest fp32 below 2^67, ties away from zero as `near_maxMag`, and -0 kept."""
    below = np.nextafter(F32(2.0 ** 67), F32(0))  # 2^67 (1 - 2^-24)
    x = np.zeros((1, 32), F32)
    x[0, 0] = below
    _, scales, _ = halfway.encode_blocks(x, "mxfp8_e4m3")
    # Exact: floor(log2 amax) = 66, e4m3's emax 8, bias 127.
    check(int(scales[0, 0]) == 66 - 8 + 127, f"amax 2^67(1-2^-24): code {int(scales[0, 0])}, want 185")
    mx_log2 = int(np.floor(np.log2(below)))  # microxcaling: torch.log2 in fp32
    check(mx_log2 - 8 + 127 == 186, f"fp32 log2 of 2^67(1-2^-24) floors to {mx_log2}, want 67")
    # Scale 2^0 (amax 256: floor(log2) 8 - emax 8); 1.0625 is the tie between e4m3's 1 and 1.125.
    y = np.zeros((1, 32), F32)
    y[0, :4] = [256.0, 1.0625, -1.0625, -0.0]
    even = halfway.quantize_blocks(y, "mxfp8_e4m3")
    away = halfway.quantize_blocks(y, "mxfp8_e4m3", rounding="near_maxMag")
    check(list(even[0, 1:3]) == [1.0, -1.0], f"near_even ties: {even[0, 1:3]}")
    check(list(away[0, 1:3]) == [1.125, -1.125], f"near_maxMag ties: {away[0, 1:3]}")
    check(np.signbit(even[0, 3]) and even[0, 3] == 0, "-0 keeps its sign")


def block_options():
    """Block lengths (the whole dimension included), MXINT8 and torchao's float8 rowwise
    against their numpy definitions, on a tensor that is not square, both axes."""
    x = mixed((160, 480), 8, -6, 6)
    for axis in (-1, 0):
        for scheme, rule, k in (("mxfp8_e4m3", "", 8), ("mxfp4", ":rceil", 40),
                                ("mxfp6_e3m2", ":even", 0), ("mxfp8_e5m2", ":ceil", 160)):
            compare(x, f"{scheme}{rule}:block={k}", mx_ref(x, scheme + rule, axis, k=k),
                    axis=axis)
        for rule in ("", ":ceil", ":rceil", ":even"):
            for k in (32, 0, 40):
                name = "mxint8" + rule + ("" if k == 32 else f":block={k}")
                compare(x, name, mxint8_ref(x, rule[1:] or "floor", axis, k), axis=axis)
        for pow2 in (False, True):
            for scheme, elem in (("fp8_rowwise", "e4m3"), ("fp8_rowwise_e5m2", "e5m2")):
                compare(x, scheme, rowwise_ref(x, elem, axis, pow2), axis=axis, pow2_scales=pow2)
            compare(x, "fp8_rowwise:block=20", rowwise_ref(x, "e4m3", axis, pow2, k=20),
                    axis=axis, pow2_scales=pow2)
            for k in (0, 80):
                compare(x, f"fp8_block:block={k}", fp8_ref(x, False, axis, pow2, k=k), axis=axis,
                        pow2_scales=pow2)
        # Decoding: MXINT8 elements i/64 times 2^k; rowwise elements divided by the scale.
        codes, scales, _ = halfway.encode_blocks(x, "mxint8", axis=axis)
        v = codes.view(np.int8).astype(np.float64) / 64
        full = per_element(np.ldexp(1.0, scales.astype(int) - 127), x.shape, 32, axis, False)
        check(same(halfway.decode_blocks(codes, scales, None, "mxint8"), (v * full).astype(F32)),
              f"mxint8 axis {axis}: decoded values")
        codes, scales, _ = halfway.encode_blocks(x, "fp8_rowwise", axis=axis)
        k = block_length(x, axis, 0)
        q = per_element(scales, x.shape, k, axis, False)
        want = element_value(codes, "e4m3").astype(F32) / q
        check(same(halfway.decode_blocks(codes, scales, None, "fp8_rowwise"), want),
              f"fp8_rowwise axis {axis}: decoded values")
        check(same(halfway.quantize_blocks(x, "fp8_rowwise", axis=axis), want),
              f"fp8_rowwise axis {axis}: quantize_blocks")
        check(scales.shape == ((160, 1) if axis == -1 else (1, 480)),
              f"fp8_rowwise axis {axis}: scales shape {scales.shape}")
    for bad in ("mxfp4:block=-1", "mxfp4:block=x", "nvfp4_2d:block=8", "mxfp4:tile=4x4",
                "mxfp4:even:even", "fp8_rowwise:floor"):
        raises(ValueError, halfway.encode_blocks, x, bad)
    raises(ValueError, halfway.encode_blocks, x, "mxint8", pow2_scales=True)


def row_scaled():
    """nvfp4:row_scaled (Transformer Engine's row-scaled NVFP4) by hand and against nvfp4_ref's
    per-line transcription: decoding with each line's global scale, the global scales' shape,
    and bad input."""
    # By hand (tests/lib/test_blocks.cpp derives each number): rows 6, 3, -1.5, 0.5 and the same
    # times 2^-20. Per tensor the second row's block scale rounds to 0 and its values flush;
    # row-scaled, its global scale is 448 * 2^20 and it decodes exactly.
    x = np.zeros((2, 16), dtype=F32)
    x[0, :4] = (6.0, 3.0, -1.5, 0.5)
    x[1] = x[0] * F32(2.0 ** -20)
    for axis, v in ((-1, x), (0, np.ascontiguousarray(x.T))):
        codes, scales, g = halfway.encode_blocks(v, "nvfp4:row_scaled", axis=axis)
        check(g.dtype == F32 and g.shape == (2,)
              and g.view(np.uint32).tolist() == [0x43E00000, 0x4DE00000],
              f"row-scaled axis {axis}: global scales {g}")
        check(scales.ravel().tolist() == [0x7E, 0x7E], f"row-scaled axis {axis}: scales {scales}")
        check(same(halfway.quantize_blocks(v, "nvfp4:row_scaled", axis=axis), v),
              f"row-scaled axis {axis}: values back exactly")
        flushed = halfway.quantize_blocks(v, "nvfp4", axis=axis)
        check(not flushed[(1 if axis == -1 else slice(None)), (slice(None) if axis == -1 else 1)]
              .any(), f"per tensor axis {axis}: the small line flushes")
    for seed, lo, hi in ((1, -6, 6), (2, -40, 40)):
        x = mixed((128, 256), seed, lo, hi)
        for axis in (-1, 0):
            compare(x, "nvfp4:row_scaled", nvfp4_ref(x, False, axis, row_scaled=True),
                    axis=axis)
            compare(x, "nvfp4:row_scaled", nvfp4_ref(x, False, axis, rht=True, row_scaled=True),
                    axis=axis, rht=True)
            codes, scales, g = halfway.encode_blocks(x, "nvfp4:row_scaled", axis=axis)
            check(g.shape == (x.shape[0 if axis == -1 else 1],), f"global scales {g.shape}")
            y = halfway.decode_blocks(codes, scales, g, "nvfp4:row_scaled")
            gd = (F32(1.0) / g)[:, None] if axis == -1 else (F32(1.0) / g)[None, :]
            sv = element_value(scales, "e4m3").astype(F32) * gd
            want = element_value(codes, "e2m1").astype(F32) * per_element(sv, x.shape, 16, axis,
                                                                          False)
            check(same(y, want), f"row-scaled axis {axis}: decoded values")
            check(same(y, halfway.quantize_blocks(x, "nvfp4:row_scaled", axis=axis)),
                  f"row-scaled axis {axis}: quantize_blocks != decode(encode)")
            raises(ValueError, halfway.decode_blocks, codes, scales, g[1:], "nvfp4:row_scaled")
            raises(ValueError, halfway.decode_blocks, codes, scales, g[0], "nvfp4:row_scaled")
            raises(ValueError, halfway.decode_blocks, codes, scales, g.astype(np.float64),
                   "nvfp4:row_scaled")
            raises(ValueError, halfway.decode_blocks, codes, scales, None, "nvfp4:row_scaled")
            raises(ValueError, halfway.decode_blocks, codes, scales, g, "nvfp4")
    x = mixed((32, 64), 3, -3, 3)
    compare(x, "nvfp4:row_scaled", nvfp4_ref(x, False, 0, seed=7, offset=5, row_scaled=True),
            axis=0, rounding="stochastic", seed=7, offset=5)
    for bad in ("nvfp4_2d:row_scaled", "nvfp4_4over6:row_scaled", "mxfp4:row_scaled",
                "fp8_block:row_scaled", "nvfp4:row_scaled:row_scaled"):
        raises(ValueError, halfway.encode_blocks, x, bad)


def main():
    row_scaled()
    microxcaling_differences()
    block_options()
    four_over_six()
    for seed, lo, hi in ((1, -6, 6), (2, -40, 40)):
        x = mixed((256, 256), seed, lo, hi)
        for axis in (-1, 0):
            for scheme in MX:
                for rule in ("", ":ceil", ":rceil", ":even"):
                    compare(x, scheme + rule, mx_ref(x, scheme + rule, axis), axis=axis)
            compare(x, "nvfp4", nvfp4_ref(x, False, axis), axis=axis)
            compare(x, "nvfp4_2d", nvfp4_ref(x, True, axis), axis=axis)
            compare(x, "nvfp4", nvfp4_ref(x, False, axis, rht=True), axis=axis, rht=True)
            for pow2 in (False, True):
                compare(x, "fp8_block", fp8_ref(x, False, axis, pow2), axis=axis,
                        pow2_scales=pow2)
                compare(x, "fp8_block_2d", fp8_ref(x, True, axis, pow2), axis=axis,
                        pow2_scales=pow2)
    # Stochastic rounding of NVFP4 elements, element (r, c) at stream position offset + r*cols + c.
    x = mixed((32, 64), 3, -3, 3)
    compare(x, "nvfp4", nvfp4_ref(x, False, -1, seed=7, offset=5), rounding="stochastic", seed=7,
            offset=5)

    element_rounding()
    scale_rule_boundaries()
    padding()
    counts_summary()

    # Decoding: element x scale in fp32 (NVFP4: element x fp32(scale x fp32(1/g))).
    x = mixed((128, 128), 4, -5, 5)
    for scheme in list(MX) + ["nvfp4", "nvfp4_2d", "fp8_block", "fp8_block_2d"]:
        for axis in (-1, 0):
            codes, scales, g = halfway.encode_blocks(x, scheme, axis=axis)
            y = halfway.decode_blocks(codes, scales, g, scheme)
            check(same(y, halfway.quantize_blocks(x, scheme, axis=axis)),
                  f"{scheme}: quantize_blocks != decode(encode)")
            elem = MX.get(scheme, "e2m1" if scheme.startswith("nvfp4") else "e4m3")
            k = 16 if scheme.startswith("nvfp4") else 32 if scheme in MX else 128
            two_d = scheme.endswith("_2d")
            v = element_value(codes, elem).astype(F32)
            if scheme in MX:
                sv = np.ldexp(F32(1.0), scales.astype(int) - 127).astype(F32)
            elif scheme.startswith("nvfp4"):
                sv = element_value(scales, "e4m3").astype(F32) * (F32(1.0) / g)
            else:
                sv = scales
            full = unblock(np.broadcast_to(sv[..., None], sv.shape + (k * k if two_d else k,)),
                           x.shape, k, axis if not two_d else -1, two_d)
            check(same(y, (v * full).astype(F32)), f"{scheme} axis {axis}: decoded values differ")
            check((g is None) == (not scheme.startswith("nvfp4")), f"{scheme}: global scale {g}")
            check(codes.dtype == np.uint8 and codes.shape == x.shape, f"{scheme}: codes {codes.dtype}")
            check(scales.dtype == (F32 if scheme.startswith("fp8") else np.uint8),
                  f"{scheme}: scales dtype {scales.dtype}")

    # Counts: the per-block arrays add up to the call's totals.
    _, _, _, c = halfway.encode_blocks(mixed((64, 64), 5, -20, 20), "nvfp4", counts=True)
    check(c["block_saturated"].sum() == c["saturated"] and c["block_flushed"].sum() == c["flushed"]
          and c["block_scales_clamped"].sum() == c["scales_clamped"], f"counts {c}")
    check(c["elements"] == 64 * 64 and c["blocks"] == 64 * 4, f"counts {c}")
    nvfp4_harmless_clamps()

    # MX: NaN and infinity give the block a NaN scale (e8m0 0xFF).
    x = np.ones((1, 64), dtype=F32)
    x[0, 3] = np.inf
    codes, scales, _ = halfway.encode_blocks(x, "mxfp8_e4m3")
    check(scales[0, 0] == 0xFF and scales[0, 1] == 127 - 8, f"NaN scale {scales}")
    check(np.isnan(halfway.quantize_blocks(x, "mxfp8_e4m3")[0, :32]).all(), "NaN block values")

    # Bad input.
    ok = np.ones((32, 32), dtype=F32)
    raises(ValueError, halfway.encode_blocks, np.ones((32, 48), dtype=F32), "mxfp4")
    raises(ValueError, halfway.encode_blocks, ok, "mxfp5")
    raises(ValueError, halfway.encode_blocks, ok, "nvfp4:ceil")
    raises(ValueError, halfway.encode_blocks, ok, "mxfp4:round")
    raises(ValueError, halfway.encode_blocks, np.ones((8, 32), dtype=F32), "nvfp4_2d")
    raises(ValueError, halfway.encode_blocks, np.ones((32,), dtype=F32), "mxfp4")
    nan = ok.copy()
    nan[1, 1] = np.nan
    raises(ValueError, halfway.encode_blocks, nan, "nvfp4")
    raises(ValueError, halfway.quantize_blocks, np.full((128, 128), np.inf, dtype=F32), "fp8_block")
    raises(ValueError, halfway.encode_blocks, ok, "nvfp4", rounding="stochastic")
    raises(ValueError, halfway.encode_blocks, ok, "mxfp4", rht=True)
    raises(ValueError, halfway.encode_blocks, ok, "mxfp4", axis=2)
    raises(TypeError, halfway.encode_blocks, ok.astype(np.float64), "mxfp4")
    codes, scales, g = halfway.encode_blocks(ok, "nvfp4")
    raises(ValueError, halfway.decode_blocks, codes, scales, None, "nvfp4")
    raises(ValueError, halfway.decode_blocks, codes, scales[:, :1], g, "nvfp4")
    raises(ValueError, halfway.decode_blocks, codes | 0x10, scales, g, "nvfp4")
    raises(ValueError, halfway.decode_blocks, codes, scales, 1.0, "mxfp4")
    check(halfway.block_schemes() == ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2",
                                      "mxfp4", "mxint8", "nvfp4", "nvfp4_2d", "nvfp4_4over6",
                                      "nvfp4_4over6_2d", "fp8_block", "fp8_block_2d",
                                      "fp8_rowwise", "fp8_rowwise_e5m2"],
          "scheme names")

    return status("ok: block quantization matches the numpy definitions")


if __name__ == "__main__":
    sys.exit(main())
