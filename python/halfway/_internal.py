"""Torch calls that halfway's own tools make are not the model's ops.

An emulation (halfway.torch.emulate) sees every torch function the Python thread calls while
its block runs. A trace nested with it (halfway.torch.trace) copies tensors to the host, clones
parameters and subtracts them: those calls must neither be rounded by the emulation nor listed
in its manifest as the model's unemulated ops. Each tool runs its own torch calls inside
`internal()`, and an emulation passes every call made there straight to PyTorch.
"""
import contextlib
import threading

_state = threading.local()


def active():
    """Whether the calling thread is inside internal()."""
    return getattr(_state, "depth", 0) > 0


@contextlib.contextmanager
def internal():
    """Torch calls made in this block are halfway's own (nestable)."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1
