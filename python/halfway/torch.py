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

Pure Python: torch is imported when trace() is called. Works with torch 1.13 and newer.
"""
import json
import os

import numpy as np

from . import _halfway
from .analysis import CHUNK, DEFAULT_FORMATS, DEFAULT_SCALES, format_list, scale_range

from .emulate import emulate
from .optimizer import optimizer

__all__ = ["trace", "emulate", "optimizer"]


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
    loss: call `tr.log_loss(loss)` to put a loss in steps.csv; with a scaler, the loss passed
        to scaler.scale() is taken automatically.
    """

    def __init__(self, model, optimizer=None, *, formats=DEFAULT_FORMATS, every=1, out="trace",
                 scaler=None, save_tensors=False, scales=DEFAULT_SCALES, flush_tolerance=0.0,
                 tensor_windows=False, chunk=CHUNK):
        import torch
        if not isinstance(model, torch.nn.Module):
            raise TypeError("halfway.torch.trace: model must be a torch.nn.Module")
        if not isinstance(every, int) or every < 1:
            raise ValueError("halfway.torch.trace: every must be a positive integer, "
                             f"not {every!r}")
        if not isinstance(chunk, int) or chunk < 1:
            raise ValueError("halfway.torch.trace: chunk must be a positive integer, "
                             f"not {chunk!r}")
        self._torch = torch
        self.model, self.optimizer, self.scaler = model, optimizer, scaler
        self.every, self.out, self.chunk = every, os.fspath(out), chunk
        self.save_tensors = save_tensors
        k_min, k_max = scale_range(scales)
        self._run = _halfway._AnalysisRun(self.out, format_list(formats), k_min, k_max,
                                          float(flush_tolerance), True,
                                          bool(tensor_windows))
        self._formats = format_list(formats).split(",")
        self._handles, self._restore = [], []
        self.step = 0  # the index of the step in progress
        self._open = False  # the step in progress has recorded something
        self._names = {}
        self._saved = {}
        self._loss = float("nan")
        self._grads_done = False

    # -- recording -------------------------------------------------------------------------

    def traced(self):
        """Whether the step in progress is traced."""
        return self.step % self.every == 0

    def _scale(self):
        if self.scaler is not None and self.scaler.is_enabled():
            return float(self.scaler.get_scale())
        return 1.0

    def _record(self, name, kind, op, t, loss_scale=1.0):
        torch = self._torch
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.is_complex():
            return
        n = self._names.get(name, 0) + 1
        self._names[name] = n
        if n > 1:
            name = f"{name}#{n}"
        self._open = True
        tid = self._run.tensor(name, kind, op, loss_scale)
        flat = t.detach().reshape(-1)
        for i in range(0, flat.numel(), self.chunk):
            c = flat[i:i + self.chunk].to(device="cpu", dtype=torch.float32)
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
            self._loss = float(loss.detach().float().item() if hasattr(loss, "detach") else loss)

    def end_step(self):
        """Close the step in progress (called for you when the optimizer or scaler steps)."""
        if self.traced():
            if self.optimizer is not None:  # a skipped step (inf/NaN) did not call step()
                self._record_grads()
            info = {}
            if self.scaler is not None and self.scaler.is_enabled():
                # GradScaler.update backs the scale off exactly when it found inf/NaN (and the
                # optimizer step was skipped); otherwise it keeps or grows it.
                info["next_scale"] = float(self.scaler.get_scale())
                info["found_inf"] = info["skipped"] = int(info["next_scale"] < self._step_scale)
            self._run.end_step(self.step, loss=self._loss, loss_scale=self._step_scale,
                               **info)
            if self.save_tensors and self._saved:
                os.makedirs(os.path.join(self.out, "tensors"), exist_ok=True)
                np.savez(os.path.join(self.out, "tensors", f"step{self.step}.npz"), **self._saved)
        self.step += 1
        self._begin_step()

    def _begin_step(self):
        self._names, self._saved, self._open, self._forwarded = {}, {}, False, False
        self._loss = float("nan")
        self._grads_done = False
        self._step_scale = self._scale()

    # -- installing and removing the hooks ----------------------------------------------------

    def _wrap(self, obj, attr, make):
        original = getattr(obj, attr)
        had = attr in vars(obj)
        setattr(obj, attr, make(original))
        self._restore.append((obj, attr, original if had else None))

    def __enter__(self):
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
                    before = [p.detach().clone() for _, p in params]
                    r = original(*args, **kwargs)
                    for (n, p), b in zip(params, before):
                        self._record(n + ".update", "update", "optimizer", p.detach() - b)
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

    def __exit__(self, exc_type, exc, tb):
        for h in self._handles:
            h.remove()
        for obj, attr, original in reversed(self._restore):
            if original is None:
                delattr(obj, attr)
            else:
                setattr(obj, attr, original)
        self._handles, self._restore = [], []
        if self._open and exc_type is None:
            self.end_step()
        manifest = {"tool": "halfway.torch", "torch_version": self._torch.__version__,
                    "every": self.every, "model": type(self.model).__name__,
                    "scaler": self.scaler is not None,
                    "complete": exc_type is None}
        self._run.commit(json.dumps(manifest))
        return False

