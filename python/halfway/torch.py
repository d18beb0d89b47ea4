"""halfway.torch: trace a real PyTorch training loop with halfway's tracer (docs/analyze.md).

    import halfway.torch
    with halfway.torch.trace(model, optimizer, formats=["fp16", "bf16", "e4m3", "e5m2"],
                             every=10, out="trace", scaler=scaler):
        for x, y in data:                       # the training loop, unchanged
            ...
    halfway.figures.draw("trace")

On every `every`-th step it records, for each format, what rounding into it would do to:
  - forward activations: every module's floating-point outputs (`<module>.output`);
  - activation gradients: the gradient of each leaf module's output, through full backward
    hooks (`<module>.grad_output`), at the step's loss scale;
  - weight gradients (`<param>.grad`), when the optimizer steps, so after
    `GradScaler.unscale_` when a scaler is used (loss scale 1);
  - optimizer updates Δw = w_after - w_before (`<param>.update`).
A module called k times in a step gives `name`, `name#2`, ... `name#k`.

Statistics are computed in C++ (the same code as `halfway analyze`), fed in chunks of at most
1 Mi values copied to the host as float32 (float16 and bfloat16 exactly); whole tensors are not
kept unless save_tensors=True (then `tensors/step<N>.npz` holds them). The output folder has
`halfway train`'s schema: trace.csv, scale_window.csv, steps.csv (loss, loss scale), manifest.json.
The folder changes in one step: an older trace's manifest.json is removed before the first
file changes and the new one is written last, so the folder is the old trace or no finished
one until the block ends.

Pure Python: torch is imported when trace() is called. Works with torch 1.13 and newer.
"""
import json
import os

import numpy as np

from . import _args, _halfway, _internal
from .analysis import (CHUNK, DEFAULT_FORMATS, DEFAULT_SCALES, check_block_options,
                       check_flush_tolerance,
                       format_list, scale_range)

from .emulate import emulate, recipe_from_toml
from .optimizer import optimizer
from .torch_bisect import bisect

__all__ = ["trace", "emulate", "optimizer", "recipe_from_toml", "bisect"]

# The folders (real paths) that a trace in its with block is writing.
_writing = set()


def traceable(torch, t):
    """Whether `t` is recorded: a floating-point (not complex) tensor with values, in the
    strided layout, on a device with memory. Skipped by rule: other types, integer, bool and
    complex tensors, sparse and other layouts, and tensors on the meta device (no values)."""
    return (isinstance(t, torch.Tensor) and t.is_floating_point() and not t.is_complex()
            and t.layout == torch.strided and t.device.type != "meta")


class trace:
    """Context manager: trace `model` (and `optimizer`, `scaler`) while the block runs.

    model: a torch.nn.Module.
    optimizer: its torch.optim.Optimizer (optional): steps end when it steps (or when the
        scaler updates), and weight gradients and updates are recorded there. Without it, a
        step ends when the model's forward starts again, and at the end of the block.
    formats: format names; scales: (k_min, k_max) of the safe window.
    every: trace steps 0, every, 2·every, ...
    out: the output folder.
    scaler: a torch.cuda.amp.GradScaler (or torch.amp.GradScaler): its scale is written to
        steps.csv and activation gradients are taken to be at that scale.
    save_tensors: also save each traced step's tensors to out/tensors/step<N>.npz.
    tensor_windows: also write each tensor's rows to scale_window.csv (one per tensor, format
        and scale: large); trace.csv has each tensor's k_low and k_high anyway.
    tensorboard: a folder; at a clean exit, `out` is also exported there as a TensorBoard run
        (halfway.tensorboard).
    axis: block schemes: the axis of each tensor the blocks run along (-1: the last, as a
        linear layer's weight and input are reduced in its forward GEMM), as halfway.analyze.
    per_block: block schemes: also write blocks_detail.csv, one row per block of every traced
        tensor; a trace whose rows would pass max_rows is refused when the tensor that passes
        it is recorded (ValueError).
    loss: call `tr.log_loss(loss)` to put a loss in steps.csv; with a scaler, the loss passed
        to scaler.scale() is taken automatically.
    """

    def __init__(self, model, optimizer=None, *, formats=DEFAULT_FORMATS, every=1, out="trace",
                 scaler=None, save_tensors=False, scales=DEFAULT_SCALES, flush_tolerance=0.0,
                 tensor_windows=False, chunk=CHUNK, tensorboard=None, axis=-1, per_block=False,
                 max_rows=10_000_000):
        import torch
        if not isinstance(model, torch.nn.Module):
            raise TypeError("halfway.torch.trace: model must be a torch.nn.Module")
        every = _args.integer("torch.trace", "every", every, 1, _args.I64)
        chunk = _args.integer("torch.trace", "chunk", chunk, 1, _args.I64)
        save_tensors = _args.flag("torch.trace", "save_tensors", save_tensors)
        tensor_windows = _args.flag("torch.trace", "tensor_windows", tensor_windows)
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("halfway.torch.trace: optimizer must be a torch.optim.Optimizer or "
                            f"None, not {type(optimizer).__name__}")
        _args.scaler("torch.trace", scaler)
        self._torch = torch
        self.model, self.optimizer, self.scaler = model, optimizer, scaler
        self.every, self.out, self.chunk = every, _args.path("torch.trace", "out", out), chunk
        self.save_tensors = save_tensors
        self.tensorboard = _args.tensorboard_dir("torch.trace", tensorboard, self.out)
        k_min, k_max = scale_range(scales)
        flush_tolerance = check_flush_tolerance(flush_tolerance)
        _halfway._check_analysis_options(format_list(formats), k_min, k_max)
        axis, per_block, max_rows, _ = check_block_options(axis, per_block, max_rows, chunk)
        # The folder is opened on entry, once another trace is known not to be writing it.
        self._open_run = lambda: _halfway._AnalysisRun(
            self.out, format_list(formats), k_min, k_max, flush_tolerance, True,
            bool(tensor_windows), axis, per_block, max_rows)
        self._run = None
        self._state = "new"  # "new" -> "active" (in the with block) -> "done"
        self._formats = format_list(formats).split(",")
        self._handles, self._restore = [], []
        self.step = 0  # the index of the step in progress
        self._open = False  # the step in progress has recorded something
        self._names = {}
        self._saved = {}
        self._loss = float("nan")
        self._grads_done = False
        self._unpublished = False

    # -- recording -------------------------------------------------------------------------

    def traced(self):
        """Whether the step in progress is traced."""
        return self.step % self.every == 0

    def _scale(self):
        return _args.loss_scale(self.scaler)

    def _record(self, name, kind, op, t, loss_scale=1.0):
        with _internal.internal():  # not the model's ops, for an emulation around the model
            self._record_tensor(name, kind, op, t, loss_scale)

    def _record_tensor(self, name, kind, op, t, loss_scale):
        torch = self._torch
        if not traceable(torch, t):
            return
        n = self._names.get(name, 0) + 1
        self._names[name] = n
        if n > 1:
            name = f"{name}#{n}"
        self._open = True
        tid = self._run.tensor(name, kind, op, loss_scale, list(t.shape) or [1])
        # Any view (expanded, stride 0, transposed, sliced with steps, channels-last) is copied
        # chunk by chunk into a contiguous float32 chunk on the host.
        flat = t.detach().reshape(-1)
        for i in range(0, flat.numel(), self.chunk):
            c = flat[i:i + self.chunk].to(device="cpu", dtype=torch.float32).contiguous()
            self._run.add(tid, c.numpy())
        if self.save_tensors:
            self._saved[name] = flat.to(device="cpu", dtype=torch.float32).numpy().copy()

    def _forward_hook(self, name):
        def hook(module, inputs, output):
            # Forwards without autograd (evaluation under no_grad) are not part of a step.
            if not self.traced() or not self._torch.is_grad_enabled():
                return
            outs = output if isinstance(output, (tuple, list)) else (output,)
            tensors = [o for o in outs if isinstance(o, self._torch.Tensor)]
            for i, o in enumerate(tensors):
                suffix = ".output" if len(tensors) == 1 else f".output{i}"
                self._record(name + suffix, "activation", "forward", o)
        return hook

    def _backward_hook(self, name):
        def hook(module, grad_input, grad_output):
            if not self.traced():
                return
            g = [x for x in grad_output if x is not None]
            for i, x in enumerate(g):
                suffix = ".grad_output" if len(g) == 1 else f".grad_output{i}"
                self._record(name + suffix, "activation_grad", "backward", x, self._scale())
        return hook

    def _record_grads(self):
        if self._grads_done or not self.traced():
            return
        self._grads_done = True
        # After GradScaler.unscale_ (scaler.step unscales before it calls optimizer.step):
        # the gradients the optimizer sees.
        for name, p in self.model.named_parameters():
            if p.grad is not None:
                self._record(name + ".grad", "weight_grad", "optimizer", p.grad)

    def log_loss(self, loss):
        """The loss of the step in progress, for steps.csv (a tensor or a number)."""
        if self.traced():
            with _internal.internal():
                self._loss = float(loss.detach().float().item() if hasattr(loss, "detach")
                                   else loss)

    def end_step(self):
        """Close the step in progress (called for you when the optimizer or scaler steps)."""
        if self.traced():
            if self.optimizer is not None:  # a skipped step (inf/NaN) did not call step()
                self._record_grads()
            info = _args.scaler_outcome(self.scaler, self._step_scale)
            self._run.end_step(self.step, loss=self._loss, loss_scale=self._step_scale,
                               **info)
            if self.save_tensors and self._saved:
                self._save_tensors()
        self.step += 1
        self._begin_step()

    def _save_tensors(self):
        # The folder's old manifest goes before its first file changes (the folder is no
        # finished run until the new manifest is written); each archive is written under a
        # temporary name, flushed, and renamed into place, so a full disk leaves no truncated
        # step<N>.npz.
        folder = os.path.join(self.out, "tensors")
        if not self._unpublished:
            # An older trace's tensors go with its manifest: the folder holds one trace.
            self._run.unpublish()
            self._unpublished = True
            if os.path.isdir(folder):
                for f in os.listdir(folder):
                    if f.startswith("step") and f.endswith(".npz"):
                        os.remove(os.path.join(folder, f))
                # What a killed trace (SIGKILL) left: this host's files of dead processes.
                names = {f.split(".tmp.")[0] for f in os.listdir(folder) if ".tmp." in f}
                _halfway._remove_stale_tmp_files(folder, sorted(names))
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"step{self.step}.npz")
        tmp = path + _halfway._tmp_suffix()
        try:
            with open(tmp, "wb") as f:
                np.savez(f, **self._saved)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.remove(tmp)
            except OSError:
                pass
            raise

    def _begin_step(self):
        self._names, self._saved, self._open, self._forwarded = {}, {}, False, False
        self._loss = float("nan")
        self._grads_done = False
        self._step_scale = self._scale()

    # -- installing and removing the hooks ----------------------------------------------------

    def _wrap(self, obj, attr, make):
        original = getattr(obj, attr)
        had = attr in vars(obj)
        inner = make(original)
        tr = self

        def wrapper(*args, **kwargs):
            # After its trace ended (exited out of order, below another trace's wrapper):
            # a plain call.
            if tr._state != "active":
                return original(*args, **kwargs)
            return inner(*args, **kwargs)
        wrapper._halfway_trace = self
        wrapper._halfway_original = original if had else None
        setattr(obj, attr, wrapper)
        self._restore.append((obj, attr, wrapper))

    @staticmethod
    def _unwrap(obj, attr, wrapper):
        """Take `wrapper` off obj.attr if it is on top, and every ended trace's wrapper under
        it; a wrapper with another on top stays (as a plain call) until that one goes."""
        if vars(obj).get(attr) is not wrapper:
            return
        while True:
            top = vars(obj).get(attr)
            trace_of = getattr(top, "_halfway_trace", None)
            if trace_of is None or trace_of._state == "active":
                return
            if top._halfway_original is None:
                delattr(obj, attr)
            else:
                setattr(obj, attr, top._halfway_original)

    def __enter__(self):
        if self._state != "new":
            raise RuntimeError("halfway.torch.trace: this trace was used already (its folder "
                               f"'{self.out}' is written); make a new trace for each with block")
        key = os.path.realpath(self.out)
        if key in _writing:
            raise RuntimeError(f"halfway.torch.trace: another trace is writing to '{self.out}'; "
                               "give each trace its own out")
        self._run = self._open_run()
        _writing.add(key)
        self._key = key
        self._state = "active"
        self._install_stop_handlers()
        for name, m in self.model.named_modules():
            label = name or "model"
            self._handles.append(m.register_forward_hook(self._forward_hook(label)))
            if not any(True for _ in m.children()):
                self._handles.append(m.register_full_backward_hook(self._backward_hook(label)))
        self._handles.append(self.model.register_forward_pre_hook(self._pre_forward))
        if self.optimizer is not None:
            def make_step(original):
                def step(*args, **kwargs):
                    if not self.traced():
                        r = original(*args, **kwargs)
                        if self.scaler is None:
                            self.end_step()
                        return r
                    self._record_grads()
                    params = [(n, p) for n, p in self.model.named_parameters()
                              if p.grad is not None]
                    with _internal.internal():
                        before = [p.detach().clone() for _, p in params]
                    r = original(*args, **kwargs)
                    for (n, p), b in zip(params, before):
                        with _internal.internal():
                            delta = p.detach() - b
                        self._record(n + ".update", "update", "optimizer", delta)
                    if self.scaler is None:
                        self.end_step()
                    return r
                return step
            self._wrap(self.optimizer, "step", make_step)
        if self.scaler is not None:
            def make_scale(original):
                def scale(outputs):
                    if self.traced() and isinstance(outputs, self._torch.Tensor) \
                            and outputs.numel() == 1:
                        self.log_loss(outputs)
                    return original(outputs)
                return scale

            def make_update(original):
                def update(*args, **kwargs):
                    r = original(*args, **kwargs)
                    self.end_step()
                    return r
                return update
            self._wrap(self.scaler, "scale", make_scale)
            self._wrap(self.scaler, "update", make_update)
        self._begin_step()
        return self

    def _pre_forward(self, module, inputs):
        # Without an optimizer nothing else ends a step: a new forward with autograd does.
        if not self._torch.is_grad_enabled():
            return
        if self.optimizer is None and self._forwarded:
            self.end_step()
        self._forwarded = True

    def _install_stop_handlers(self):
        # SIGTERM and SIGHUP (a closed SSH session) end the block with SystemExit(128 + signal)
        # instead of killing the process: the folder is written with "complete": false, as
        # `halfway train` does. Only where nobody else handles them, and in the main thread.
        import signal
        import threading
        self._old_handlers = {}
        if threading.current_thread() is not threading.main_thread():
            return

        def stop(signum, frame):
            raise SystemExit(128 + signum)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) == signal.SIG_DFL:
                self._old_handlers[sig] = signal.signal(sig, stop)

    def _restore_stop_handlers(self):
        import signal
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers = {}

    def __exit__(self, exc_type, exc, tb):
        self._restore_stop_handlers()
        for h in self._handles:
            h.remove()
        try:
            if self._open and exc_type is None:
                self.end_step()
        finally:
            self._state = "done"
            _writing.discard(self._key)
            for obj, attr, wrapper in reversed(self._restore):
                self._unwrap(obj, attr, wrapper)
            self._handles, self._restore = [], []
        manifest = {"tool": "halfway.torch", "torch_version": self._torch.__version__,
                    "every": self.every, "model": type(self.model).__name__,
                    "scaler": self.scaler is not None,
                    "complete": exc_type is None}
        self._run.commit(json.dumps(manifest))
        if exc_type is None and self.tensorboard is not None:
            from . import tensorboard
            tensorboard.export([self.out], self.tensorboard)
        return False

