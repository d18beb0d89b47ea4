"""Torch calls that halfway's own tools make are not the model's ops.

An emulation (halfway.torch.emulate) sees every torch function the Python thread calls while
its block runs. A trace nested with it (halfway.torch.trace) copies tensors to the host, clones
parameters and subtracts them: those calls must neither be rounded by the emulation nor listed
in its manifest as the model's unemulated ops. Each tool runs its own torch calls inside
`internal()`, and an emulation passes every call made there straight to PyTorch.
"""
import threading


class _Depth(threading.local):
    depth = 0


_state = _Depth()


def active():
    """Whether the calling thread is inside internal()."""
    return _state.depth > 0


class _Internal:
    """A context manager (nestable; a class rather than a generator, since an emulation enters
    it on nearly every call it handles)."""
    __slots__ = ()

    def __enter__(self):
        _state.depth += 1

    def __exit__(self, *exc):
        _state.depth -= 1
        return False


_INTERNAL = _Internal()


def internal():
    """Torch calls made in this block are halfway's own."""
    return _INTERNAL
