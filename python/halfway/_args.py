"""Checks of the public functions' arguments, before the C++ layer sees them: each bad
argument is a TypeError (wrong type) or ValueError (wrong value) that names the function and
the argument, never pybind's "incompatible function arguments", a RuntimeError, an
OverflowError, or a value silently taken for another (True for 1, None for NaN)."""
import argparse
import numbers
import os

import numpy as np

from . import _internal

U64 = (1 << 64) - 1
I64 = (1 << 63) - 1


def _type_name(v):
    return type(v).__name__


def name(fn, arg, v, *, allow=()):
    """A name (format, rounding, scheme, ...): a non-empty str that UTF-8 can encode, or an
    instance of one of the types in `allow` (halfway.Format for a format)."""
    if allow and isinstance(v, allow):
        getattr(v, "name")  # a halfway.Format never initialised raises TypeError here
        return v
    if not isinstance(v, str):
        if allow:  # a format: the C++ layer's words
            raise TypeError(f"halfway.{fn}: {arg}: format must be a name such as 'fp16' or a "
                            f"halfway.Format, not {_type_name(v)}")
        raise TypeError(f"halfway.{fn}: {arg} must be a name (str), not {_type_name(v)}")
    if not v:
        raise ValueError(f"halfway.{fn}: {arg} is empty")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"halfway.{fn}: {arg} {v!r} is not valid text (a lone surrogate)") \
            from None
    return v


def path(fn, arg, v, *, any_bytes=False):
    """A file or folder name: a non-empty str, bytes or os.PathLike, returned as a str. The
    name must be one UTF-8 can encode (a lone surrogate cannot be), as the C++ layer takes
    it; with any_bytes, where the caller hands the C++ layer os.fsencode's bytes, any name the
    file system can hold (os.fsdecode's surrogate escapes too)."""
    p = os.fspath(v) if isinstance(v, (str, bytes, os.PathLike)) else v
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not isinstance(p, str):
        raise TypeError(f"halfway.{fn}: {arg} must be a path (str, bytes or os.PathLike), "
                        f"not {_type_name(v)}")
    if not p:
        raise ValueError(f"halfway.{fn}: {arg} is empty")
    try:
        os.fsencode(p) if any_bytes else p.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"halfway.{fn}: {arg} {p!r} cannot be a file name (a lone "
                         "surrogate)") from None
    return p


def flag(fn, arg, v):
    """A switch: True or False (numpy.bool_ too); 1, None or 'yes' are not taken for one."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise TypeError(f"halfway.{fn}: {arg} must be True or False, not {v!r}")


def integer(fn, arg, v, lo, hi, *, none=False):
    """An int (numpy integers too, never a bool or a float) in [lo, hi], or None if allowed."""
    if v is None and none:
        return None
    rng = "[0, 2**64)" if (lo, hi) == (0, U64) else f"[{lo}, {hi}]"
    what = f"halfway.{fn}: {arg} must be an integer in {rng}{' or None' if none else ''}"
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer)):
        raise TypeError(f"{what}, not {_type_name(v)}")
    if not lo <= int(v) <= hi:
        raise ValueError(f"{what}, got {v!r}")
    return int(v)


def values(fn, arg, v):
    """Numbers: an array, a sequence or a scalar. None, a bool (True is no 1.0) and a string
    are a TypeError here; an array's dtype is checked by the C++ layer ("got bool")."""
    if v is None or isinstance(v, (bool, np.bool_, str, bytes)):
        raise TypeError(f"halfway.{fn}: {arg} must be numbers (an array or a scalar), not "
                        f"{_type_name(v)}")
    return v


def encodings(fn, arg, v):
    """Encodings: integers (an array of an integer dtype, or int scalars and sequences). A
    Python float, bool or None is a TypeError, an int beyond 64 bits a ValueError."""
    if isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)):
        if not -(1 << 63) <= int(v) <= U64:
            raise ValueError(f"halfway.{fn}: {arg} = {v} is no encoding (beyond 64 bits)")
        return v
    if not isinstance(v, (np.ndarray, np.integer, list, tuple)) or isinstance(v, np.bool_):
        raise TypeError(f"halfway.{fn}: {arg} must be encodings (integers), not "
                        f"{_type_name(v)}")
    if isinstance(v, (list, tuple)):
        for x in v:
            if isinstance(x, numbers.Integral) and not -(1 << 63) <= int(x) <= U64:
                raise ValueError(f"halfway.{fn}: {arg} holds {x}, no encoding (beyond 64 "
                                 "bits)")
    return v


def rounding_options(fn, rounding, saturate, subnormals, seed, offset, tininess, flags,
                     counts):
    """The options every rounding function takes (halfway.round's)."""
    name(fn, "rounding", rounding)
    flag(fn, "saturate", saturate)
    flag(fn, "subnormals", subnormals)
    integer(fn, "seed", seed, 0, U64, none=True)
    integer(fn, "offset", offset, 0, U64)
    name(fn, "tininess", tininess)
    flag(fn, "flags", flags)
    flag(fn, "counts", counts)


def tensorboard_dir(fn, logdir, out):
    """The `tensorboard=` folder of a context manager that writes the run folder `out`."""
    if logdir is None:
        return None
    logdir = path(fn, "tensorboard", logdir)
    if out is None:
        raise ValueError(f"halfway.{fn}: tensorboard needs out (the run folder it exports)")
    return logdir


def scaler(fn, s):
    """A torch.amp.GradScaler (anything with its scale/update/is_enabled/get_scale) or None."""
    if s is not None and not all(callable(getattr(s, m, None))
                                 for m in ("scale", "update", "is_enabled", "get_scale")):
        raise TypeError(f"halfway.{fn}: scaler must be a torch.amp.GradScaler or None, not "
                        f"{type(s).__name__}")
    return s


def loss_scale(s):
    """The scale a GradScaler applies now: 1.0 without one or when it is disabled."""
    if s is None or not s.is_enabled():
        return 1.0
    with _internal.internal():  # get_scale reads the scaler's tensor: not the model's op
        return float(s.get_scale())


def scaler_outcome(s, step_scale):
    """What a GradScaler did at the end of a step whose forward ran at `step_scale`, read after
    its update(): {"found_inf", "skipped", "next_scale"} as steps.csv has them, or {} without an
    enabled scaler. update() backs the scale off (backoff_factor < 1) exactly when it found inf
    or NaN in the gradients, and then scaler.step skipped optimizer.step; otherwise the scale is
    kept or grown."""
    if s is None or not s.is_enabled():
        return {}
    nxt = loss_scale(s)
    found = int(nxt < step_scale)
    return {"found_inf": found, "skipped": found, "next_scale": nxt}


class Parser(argparse.ArgumentParser):
    """argparse for the package's `python3 -m halfway.X` commands: a usage error is one line on
    stderr and exit status 2, as every other bad input."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")
