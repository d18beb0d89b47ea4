"""halfway.torch.optimizer: a torch.optim optimizer's step with the simulator's update numerics.

    import halfway.torch as ht
    opt = ht.optimizer(torch.optim.SGD(model.parameters(), lr=0.01), weights="bf16",
                       update_rounding="stochastic", model=model, out="run")
    ...                                  # the training loop, unchanged: opt.zero_grad(), opt.step()

The weights are kept as `halfway train` keeps them (fp32, or a low dtype without a master copy)
and each step is sim/'s optimizer (sim/include/halfway/sim/optim.hpp): PyTorch's SGD, Adam or
AdamW arithmetic in fp32, the result rounded into the weight's dtype plainly or
Kahan-compensated in the update rounding, the state in its dtype, and per parameter the exact
count of non-zero updates that left the stored weight unchanged (`vanished`), written to
`updates.csv` with `halfway train`'s columns. The model's parameters hold the stored weights
(float32 tensors holding values of the weight dtype) after every step.
"""
import os

import numpy as np

from . import _args, _halfway
from .emulate import _write_atomic

__all__ = ["optimizer"]

_ROUNDINGS = ("near_even", "stochastic", "toward_zero", "up", "down", "near_away")


def _config(opt, state_dtype):
    import torch
    kinds = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}
    kind = kinds.get(type(opt))
    if kind is None:
        raise TypeError("halfway.torch.optimizer: opt must be a torch.optim.SGD, Adam or AdamW, "
                        f"not {type(opt).__name__}")
    if len(opt.param_groups) != 1:
        raise ValueError("halfway.torch.optimizer: opt must have one parameter group, not "
                         f"{len(opt.param_groups)}")
    g = opt.param_groups[0]
    for flag in ("amsgrad", "maximize", "capturable", "differentiable"):
        if g.get(flag):
            raise ValueError(f"halfway.torch.optimizer: {flag}=True is not simulated")
    betas = g.get("betas", (0.9, 0.999))
    return {"kind": kind, "lr": float(g["lr"]), "momentum": float(g.get("momentum", 0.0)),
            "dampening": float(g.get("dampening", 0.0)), "nesterov": bool(g.get("nesterov")),
            "weight_decay": float(g.get("weight_decay", 0.0)), "beta1": float(betas[0]),
            "beta2": float(betas[1]), "eps": float(g.get("eps", 1e-8)),
            "exp_avg_dtype": state_dtype, "exp_avg_sq_dtype": state_dtype,
            "momentum_buffer_dtype": state_dtype}


class optimizer:
    """Wrap `opt` (torch.optim.SGD, Adam or AdamW, one parameter group) with sim's updates.

    weights: the dtype the weights are stored in: "fp32" (the master copy itself) or a
        low-precision dtype (halfway.formats() names: "bf16", "fp16", ...), no master copy.
    update_rounding: the rounding of the writes into the weights and the state
        ("near_even", "stochastic", ...; precision.update_rounding).
    update: "plain" (the fp32 result rounded) or "kahan" (a compensation buffer per weight;
        needs low-precision weights).
    compensation: the Kahan buffer's dtype, "fp32" or "low" (the weight dtype).
    state_dtype: the dtype of the optimizer state (fp32, bf16, fp16, pow2:<an 8-bit format>
        such as pow2:e4m3: halfway's own per-tensor power-of-two scale, or dynamic8[:block=N]:
        8-bit optimizers' block-wise dynamic quantization). A bare 8-bit name ("e4m3") is
        refused with a ValueError naming pow2:e4m3.
    seed: the seed of the stochastic rounding's streams.
    random_bits: the random bits of each stochastic rounding (1-32, as
        `precision.sr_random_bits`): a value at fraction f of the spacing rounds up with
        probability floor(f * 2^random_bits) / 2^random_bits.
    model: names the parameters (model.named_parameters()) in updates.csv; else param0, ...
    out: a folder for updates.csv (written after every step), or None.

    `opt`'s own step is not called: its hyperparameters are read once, here.
    """

    def __init__(self, opt, weights="fp32", update_rounding="near_even", update="plain",
                 state_dtype="fp32", compensation="fp32", seed=0, model=None, out=None,
                 random_bits=32):
        import torch
        self._torch = torch
        for arg, v in (("weights", weights), ("update_rounding", update_rounding),
                       ("update", update), ("state_dtype", state_dtype),
                       ("compensation", compensation)):
            _args.name("torch.optimizer", arg, v)
        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError("halfway.torch.optimizer: model must be a torch.nn.Module or None, "
                            f"not {type(model).__name__}")
        self.config = _config(opt, state_dtype)
        if update_rounding not in _ROUNDINGS:
            raise ValueError(f"halfway.torch.optimizer: unknown update_rounding "
                             f"{update_rounding!r} ({' '.join(_ROUNDINGS)})")
        if update not in ("plain", "kahan"):
            raise ValueError(f"halfway.torch.optimizer: update must be 'plain' or 'kahan', not "
                             f"{update!r}")
        if compensation not in ("fp32", "low"):
            raise ValueError("halfway.torch.optimizer: compensation must be 'fp32' or 'low', "
                             f"not {compensation!r}")
        seed = _args.integer("torch.optimizer", "seed", seed, 0, _args.U64)
        random_bits = _args.integer("torch.optimizer", "random_bits", random_bits, 1, 32)
        self.opt = opt
        self.params = list(opt.param_groups[0]["params"])
        for i, p in enumerate(self.params):
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise TypeError(f"halfway.torch.optimizer: parameter {i} is {p.dtype} on "
                                f"{p.device}; only CPU float32 parameters are simulated")
        names = {id(p): n for n, p in model.named_parameters()} if model is not None else {}
        self.names = [names.get(id(p), f"param{i}") for i, p in enumerate(self.params)]
        self.update_rounding = update_rounding
        self.out = None if out is None else _args.path("torch.optimizer", "out", out)
        if self.out is not None:
            os.makedirs(self.out, exist_ok=True)
        # sim's own checks (a Kahan update of fp32 weights, an lr that overflows, a state
        # dtype it cannot keep) are ValueErrors naming the option.
        self.core = _halfway._Optimizer(
            self.config, self.names, [p.detach().numpy() for p in self.params], weights,
            update, compensation, seed, random_bits)
        self.step_count = 0
        self.rows = []
        self._write_weights()

    @property
    def param_groups(self):
        return self.opt.param_groups

    def zero_grad(self, set_to_none=True):
        self.opt.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        """One update from the parameters' .grad (absent: zero), as `halfway train` steps."""
        if closure is not None:
            raise ValueError("halfway.torch.optimizer: step(closure) is not supported")
        grads = [np.zeros(tuple(p.shape), np.float32) if p.grad is None
                 else np.ascontiguousarray(p.grad.detach().numpy(), dtype=np.float32)
                 for p in self.params]
        self.core.step(grads, self.step_count, self.update_rounding)
        self._write_weights()
        for i, (elements, nonzero, vanished) in enumerate(self.core.stats()):
            self.rows.append((self.step_count, self.names[i], self.core.dtype(i), elements,
                              nonzero, vanished))
        self.step_count += 1
        if self.out is not None:
            self._write_updates()

    def vanished(self):
        """The last step's vanished updates per parameter name."""
        last = self.step_count - 1
        return {r[1]: r[5] for r in self.rows if r[0] == last}

    def _write_weights(self):
        with self._torch.no_grad():
            for i, p in enumerate(self.params):
                p.copy_(self._torch.from_numpy(self.core.weight(i)).reshape(p.shape))

    def _write_updates(self):
        lines = ["step,name,dtype,elements,nonzero,vanished,drift\n"]
        lines += [f"{s},{n},{d},{e},{nz},{v},\n" for s, n, d, e, nz, v in self.rows]
        _write_atomic(os.path.join(self.out, "updates.csv"), "".join(lines))
