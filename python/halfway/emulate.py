"""halfway.torch.emulate: run a real PyTorch model's GEMMs under a recipe of `halfway train`.

    import halfway.torch as ht
    with ht.emulate(model, recipe="mxfp8", out="run") as em:
        for x, y in data:                       # the training loop, unchanged
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            em.log_loss(loss)

Every GEMM of nn.Linear (F.linear), nn.Conv1d/2d (a GEMM over unfolded patches) and
torch.matmul / mm / bmm / addmm / @ runs as the simulator runs the same op under the recipe:
its operands rounded, per-tensor scaled into fp8 or block-quantized as sim/'s policy says
(forward, dgrad and wgrad each reading its own copy), the product accumulated by halfway's GEMM
under the accumulation model, the output rounded into the op's dtype, and the backward likewise.
The numbers all come from the compiled simulator (halfway._halfway): this file only decides
which operand goes where. docs/emulate.md says what is and is not emulated.

Tensors keep float32 storage: an fp16 output is a float32 tensor holding fp16 values (its
logical dtype rides along on the tensor, so the next GEMM does not cast it again).
"""
import json
import math
import os
import re
import tempfile
import types

import numpy as np

from . import _args, _halfway, _internal

__all__ = ["emulate", "recipe_from_toml"]

_PRESERVING = ("relu", "reshape", "view", "flatten", "unflatten", "transpose", "permute",
               "contiguous", "clone", "t", "squeeze", "unsqueeze", "detach", "expand",
               "__getitem__", "select", "narrow", "view_as")
_TAG = "_halfway_dtype"


def _widest(dtypes):
    """PyTorch's promotion among fp32 and low-precision dtypes: two different lows give fp32."""
    ds = set(dtypes)
    return ds.pop() if len(ds) == 1 else "fp32"


def _padded(n, a, b=1):
    m = np.lcm(a, b)
    return int((n + m - 1) // m * m)


def _f32(t):
    """A tensor's values as a float32 array on the host (a CUDA tensor is copied)."""
    return np.ascontiguousarray(t.detach().cpu().numpy(), dtype=np.float32)


def _on(y, device):
    """A result computed on the host (a numpy array, or None) as a tensor on the device its
    operands came from: CUDA operands are copied to the host, emulated there, and their results
    copied back."""
    if y is None:
        return None
    import torch
    t = torch.from_numpy(np.ascontiguousarray(y))
    return t if device.type == "cpu" else t.to(device)


def _write_atomic(path, text):
    """text to path through a temporary file in the same folder, then a rename."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class Recipe:
    """A preset policy of `halfway train` as the emulation applies it (read from sim/)."""

    def __init__(self, name):
        self.name = name
        self.table = _halfway._recipe(name)
        t = self.table
        self.fp8, self.blocks = t["fp8"], t["blocks"]
        self.block_layers = t.get("block_layers", [])
        self.forward_rounding = t["rounding"]["forward"] or t["run_rounding"]
        self.backward_rounding = t["rounding"]["backward"] or t["run_rounding"]
        # Stochastic rounding anywhere (nvfp4's gradients): every rounding call then takes the
        # next stream of sim's runtime, so fp32 ops too run as sim's ops (below).
        recipes = [self.blocks] + [r for _, r in self.block_layers]
        self.stochastic = any(r and (r["input_sr"] or r["weight_sr"] or r["grad_sr"])
                              for r in recipes) or "stochastic" in (
            self.forward_rounding, self.backward_rounding)

    def blocks_for(self, scope):
        """The block recipe of the linear layers under `scope` (sim's Policy::blocks_in): the
        first [[precision.blocks.layer]] entry that matches (None for a layer kept
        unquantized), else the policy's."""
        for match, recipe in self.block_layers:
            if _halfway._scope_matches(match, scope):
                return recipe
        return self.blocks

    def scaled(self, op, scope=""):
        """'fp8' or 'blocks' when this op's GEMMs are scaled copies, else None."""
        if self.table["rules"][op] != "lower":
            return None
        return "fp8" if self.fp8 else "blocks" if self.blocks_for(scope) else None

    def gemm_dtype(self, op, dtypes):
        """The dtype an element-recipe GEMM computes in (sim/'s prepare())."""
        rule = self.table["rules"][op]
        if rule == "lower":
            return self.table["low"]
        if rule == "fp32":
            return "fp32"
        return _widest(dtypes)

    def default_dtype(self, is_param):
        """The logical dtype of a tensor nothing emulated produced (pure-* keep both low)."""
        return self.table["param_dtype" if is_param else "input_dtype"]


class TomlRecipe(str):
    """A recipe read from the [precision] table of a TOML file (recipe_from_toml): a str, the
    name emulate knows it by (`<file name>#<n>`), usable wherever a recipe name is; `path`
    and `table` (the recipe as data, as for a preset) say what it is."""

    def __new__(cls, name, path, table):
        self = super().__new__(cls, name)
        self.path, self.table = path, table
        return self


_toml_recipes = [0]


def recipe_from_toml(path):
    """The recipe of the [precision] table of the config file `path` (a `halfway train`
    config, or a file with only that table), read by the simulator's own config parser: every
    key `halfway train` accepts there (a preset or `custom` policy, low, params, accumulation,
    rounding, sr_random_bits, ops, the fp8 options, ...), checked as it checks them.

    An unreadable path is an OSError naming it; a file that is not TOML, lacks [precision] or
    holds an unknown or invalid key is a ValueError naming the file and the key."""
    p = _args.path("torch.recipe_from_toml", "path", path)
    if not os.path.isfile(p):
        raise FileNotFoundError(2, "halfway.torch.recipe_from_toml: no such file", p)
    with open(p, "rb"):
        pass  # unreadable: OSError naming the file
    _toml_recipes[0] += 1
    name = f"{os.path.basename(p)}#{_toml_recipes[0]}"
    try:
        table = _halfway._register_toml_recipe(name, p)
    except ValueError as e:
        raise ValueError(f"halfway.torch.recipe_from_toml: {e}") from None
    return TomlRecipe(name, p, table)


class _Gemm:
    """One GEMM call of the model (forward, dgrad, wgrad), as sim/'s linear or matmul.

    a: [M, K]; b: [N, K] for op 'linear' (a weight), [K, N] for 'matmul'; bias: [N] or None.
    """

    def __init__(self, em, recipe, accumulation, name, op, dtypes, b_is_param):
        self.em, self.r, self.name, self.op = em, recipe, name, op
        self.native = accumulation == "native"
        self.acc = "fp32" if self.native else accumulation or recipe.table["accumulation"]
        self.dtypes = dtypes  # logical dtypes of a, b, bias
        self.b_is_param = b_is_param
        self.scaled = recipe.scaled(op, name)
        self.blk = recipe.blocks_for(name) if self.scaled == "blocks" else None
        self.dt = "fp32" if self.scaled else recipe.gemm_dtype(op, [d for d in dtypes if d])
        self.linear = op == "linear"
        self.b_role = "weight" if self.linear else "other"
        self.grad_enabled = em._torch.is_grad_enabled()  # the caller's mode, not forward()'s

    # -- primitives ------------------------------------------------------------------------

    def _gemm(self, A, B, bias, dt, layout, alpha=None, fp8=None):
        """fp8: (role, format of A, format of B) of an fp8 linear's GEMM: sim's gemm_fp8 picks
        Transformer Engine's accumulation for it (fast fprop, split dgrad/wgrad under Hopper)."""
        if not self.native:
            return self.em.core.gemm(A, B, bias, dt, layout, self.acc, alpha, fp8)
        import torch
        c = torch.from_numpy(A) @ torch.from_numpy(B)
        if alpha is not None:
            c = c * np.float32(alpha)
        if bias is not None:
            c = c + torch.from_numpy(bias)
        return np.ascontiguousarray(c.numpy())

    def _round(self, x, dt, backward, suffix="", kind="activation", op=None, draw=True):
        rounding = self.r.backward_rounding if backward else self.r.forward_rounding
        name = f"{self.name}.{suffix}" if suffix else ""
        return self.em.core.round(x, dt, rounding, name, op or self.op, kind, draw)

    def _cast(self, x, src, role, kind):
        """x (logical dtype src) cast into the GEMM's dtype, traced as sim's cast node."""
        if x is None or src == self.dt:
            return x
        return self._round(x, self.dt, False, role, kind, "cast")

    def _kind(self, role):
        return "weight" if (role != "input" and self.b_is_param) else "activation"

    def _gkind(self, role):
        return "weight_grad" if (role != "input" and self.b_is_param) else "activation_grad"

    # -- forward and backward ----------------------------------------------------------------

    def forward(self, a, b, bias, need_a=True, need_b=True):
        """need_a, need_b: whether a and b need gradients (the block recipes' backward copies
        of W and X are made only for the gradients they serve, as sim's linear_blocks)."""
        if self.scaled == "fp8":
            return self._fp8_forward(a, b, bias)
        if self.scaled == "blocks":
            return self._blocks_forward(a, b, bias, need_a, need_b)
        da, db, dbias = self.dtypes
        aq = self._cast(a, da, "input", "activation")
        bq = self._cast(b, db, self.b_role, self._kind(self.b_role))
        biasq = self._cast(bias, dbias, "bias", "weight")
        B = np.ascontiguousarray(bq.T) if self.linear else bq
        c = self._gemm(aq, B, biasq, self.dt, "nt" if self.linear else "nn")
        self.saved = (aq, bq)
        return self._round(c, self.dt, False, "output")

    def backward(self, g, need_a, need_b, need_bias):
        if self.scaled == "fp8":
            return self._fp8_backward(g, need_a, need_b, need_bias)
        if self.scaled == "blocks":
            return self._blocks_backward(g, need_a, need_b, need_bias)
        aq, bq = self.saved
        dt = self.dt
        # The gradient of a tensor of dtype dt is a tensor of dtype dt: rounded into it,
        # traced; one that is already (a sim op sent it) draws no stream, as in the simulator.
        exact = dt == "fp32" or np.array_equal(_halfway.round(g, dt).view(np.uint32),
                                               g.view(np.uint32))
        G = self._round(g, dt, True, "grad_output", "activation_grad", draw=not exact)
        ga = gb = gbias = None
        if need_a:  # dgrad
            Bd = bq if self.linear else np.ascontiguousarray(bq.T)
            ga = self._back_to(self._round(self._gemm(G, Bd, None, dt, "nn" if self.linear else "nt"),
                                           dt, True, "grad_input", "activation_grad"),
                               self.dtypes[0])
        if need_b:  # wgrad
            if self.linear:
                c = self._gemm(np.ascontiguousarray(G.T), aq, None, dt, "tn")
                suffix = "weight.grad"
            else:
                c = self._gemm(np.ascontiguousarray(aq.T), G, None, dt, "tn")
                suffix = "grad_other"
            gb = self._back_to(self._round(c, dt, True, suffix, self._gkind(self.b_role)),
                               self.dtypes[1])
        if need_bias:
            gbias = self._back_to(self.em.core.bias_grad(G, dt, self.r.backward_rounding,
                                                         f"{self.name}.bias.grad", self.op),
                                  self.dtypes[2])
        return ga, gb, gbias

    # -- a batched matmul's items at once (element recipes, nothing stochastic, untraced) ------

    def forward_items(self, A, B):
        """forward() of every item of A [I, M, K] · B [I, K, N] ('matmul', no bias), each
        rounding one call over all items: the same values as item by item, since rounding is
        elementwise. Only where no rounding of the emulation draws a stream and the step is not
        traced (emulate._items_at_once), for then neither the stream counter nor the per-item
        trace names are seen."""
        da, db, _ = self.dtypes
        aq = self._cast(A, da, "input", "activation")
        bq = self._cast(B, db, self.b_role, self._kind(self.b_role))
        c = self._gemm_each(aq, bq, "nn")
        self.saved = (aq, bq)
        return self._round(c, self.dt, False, "output")

    def backward_items(self, g, need_a, need_b):
        """backward() of forward_items' items (no bias gradient)."""
        aq, bq = self.saved
        dt = self.dt
        G = self._round(g, dt, True, "grad_output", "activation_grad")
        ga = gb = None
        if need_a:
            c = self._gemm_each(G, bq.transpose(0, 2, 1), "nt")
            ga = self._back_to(self._round(c, dt, True, "grad_input", "activation_grad"),
                               self.dtypes[0])
        if need_b:
            c = self._gemm_each(aq.transpose(0, 2, 1), G, "tn")
            gb = self._back_to(self._round(c, dt, True, "grad_other", self._gkind(self.b_role)),
                               self.dtypes[1])
        return ga, gb

    def _gemm_each(self, X, Y, layout):
        """_gemm of every item pair X[i] · Y[i] (no bias, this site's dtype), stacked."""
        return np.stack([self._gemm(np.ascontiguousarray(x), np.ascontiguousarray(y), None,
                                    self.dt, layout) for x, y in zip(X, Y)])

    def _back_to(self, g, src):
        """A cast's backward: the gradient rounded back into the source dtype."""
        if src == self.dt:
            return g
        return self._round(g, src, True)

    # fp8 (Transformer Engine's per-tensor scaling: sim/'s linear_fp8)

    def _fp8(self, suffix, backward, x, kind):
        return self.em.core.fp8_quantize(self.r.name, f"{self.name}.{suffix}", backward, x,
                                         self.op, kind)

    def _fp8_forward(self, a, w, bias):
        xq, ix = self._fp8("input", False, a, "activation")
        wq, iw = self._fp8("weight", False, w, "weight")
        self.saved = (xq, ix, wq, iw)
        alpha = np.float32(ix) * np.float32(iw)
        fwd = self.r.fp8["fwd"]
        return self._gemm(xq, np.ascontiguousarray(wq.T), bias, "fp32", "nt", alpha,
                          ("fprop", fwd, fwd))

    def _fp8_backward(self, g, need_a, need_b, need_bias):
        xq, ix, wq, iw = self.saved
        gq, ig = self._fp8("grad_output", True, g, "activation_grad")
        ga = gb = gbias = None
        fwd, bwd = self.r.fp8["fwd"], self.r.fp8["bwd"]
        if need_a:
            ga = self._gemm(gq, wq, None, "fp32", "nn", np.float32(ig) * np.float32(iw),
                            ("dgrad", bwd, fwd))
        if need_b:
            gb = self._gemm(np.ascontiguousarray(gq.T), xq, None, "fp32", "tn",
                            np.float32(ig) * np.float32(ix), ("wgrad", bwd, fwd))
        if need_bias:
            gbias = self.em.core.bias_grad(g, "fp32", self.r.backward_rounding,
                                           f"{self.name}.bias.grad", self.op)
        return ga, gb, gbias

    # block-scaled copies (sim/'s linear_blocks: each GEMM blocks its reduction dimension)

    def _copy(self, x, scheme_key, axis, gemm, rows, cols, suffix, kind, rht=False):
        """The copy of operand `scheme_key` (input, weight, grad): its scheme, its stochastic
        rounding (`<key>_sr`), and the Hadamard transform where `rht`."""
        blk = self.blk
        return self.em.core.block_copy(x, blk[scheme_key], axis, gemm, blk[scheme_key + "_sr"],
                                       rht, blk["pow2_scales"], rows, cols,
                                       f"{self.name}.{suffix}", self.op, kind)

    def _tile(self, key, axis):
        return _halfway._block_tile(self.blk[key], axis)

    def _blocks_gemm(self, A, B, m, n, layout, bias=None):
        """The padded copies' product (fp32 accumulation), its leading m×n, + bias in fp32."""
        pb = None
        if bias is not None:
            pb = np.zeros(B.shape[1], np.float32)
            pb[:bias.size] = bias
        c = self._gemm(A, B, pb, "fp32", layout, 1.0)
        return np.ascontiguousarray(c[:m, :n])

    def _blocks_forward(self, x, w, bias, need_x, need_w):
        blk = self.blk
        M, K = x.shape
        N = w.shape[0]
        xr, xc = self._tile("input", 1)
        wr, wc = self._tile("weight", 1)
        Mp, Np, Kp = _padded(M, xr), _padded(N, wr), _padded(K, xc, wc)
        xq = self._copy(x, "input", 1, "fprop", Mp, Kp, "input", "activation")
        wq = self._copy(w, "weight", 1, "fprop", Np, Kp, "weight", "weight")
        y = self._blocks_gemm(xq, np.ascontiguousarray(wq.T), M, N, "nt", bias)
        y = self._round(y, "fp32", False, "output")
        # The backward's copies of X and W are made now, as TE quantizes both usages forward.
        gdr, gdc = self._tile("grad", 1)
        wdr, wdc = self._tile("weight", 0)
        gwr, gwc = self._tile("grad", 0)
        xwr, xwc = self._tile("input", 0)
        self.dims = dict(M=M, N=N, K=K, Md=_padded(M, gdr), Nd=_padded(N, gdc, wdr),
                         Kd=_padded(K, wdc), Mw=_padded(M, gwr, xwr), Nw=_padded(N, gwc),
                         Kw=_padded(K, xwc))
        d = self.dims
        # Each copy takes the next stochastic-rounding stream of sim's runtime (as every
        # rounding does), so the copies are made exactly when and in the order sim makes them.
        wd = xw = None
        if need_x:
            wd = self._copy(w, "weight", 0, "dgrad", d["Nd"], d["Kd"], "weight", "weight")
        if need_w:
            xw = self._copy(x, "input", 0, "wgrad", d["Mw"], d["Kw"], "input", "activation",
                            rht=blk["input_rht"])
        self.saved = (wd, xw)
        return y

    def _blocks_backward(self, g, need_a, need_b, need_bias):
        blk = self.blk
        wd, xw = self.saved
        d = self.dims
        ga = gb = gbias = None
        if need_a:
            gq = self._copy(g, "grad", 1, "dgrad", d["Md"], d["Nd"], "grad_output",
                            "activation_grad")
            ga = self._round(self._blocks_gemm(gq, wd, d["M"], d["K"], "nn"), "fp32", True,
                             "grad_input", "activation_grad")
        if need_b:
            gq = self._copy(g, "grad", 0, "wgrad", d["Mw"], d["Nw"], "grad_output",
                            "activation_grad", rht=blk["grad_rht"])
            gb = self._round(self._blocks_gemm(np.ascontiguousarray(gq.T), xw, d["N"], d["K"],
                                               "tn"), "fp32", True, "weight.grad", "weight_grad")
        if need_bias:
            gbias = self.em.core.bias_grad(g, "fp32", self.r.backward_rounding,
                                           f"{self.name}.bias.grad", self.op)
        return ga, gb, gbias


class _Attention:
    """The GEMMs of one attention call (nn.MultiheadAttention or scaled_dot_product_attention)
    named by their role: `<m>.in_proj` (`q_proj`, `k_proj`, `v_proj`: separate weights),
    `<m>.scores` (QKᵀ), `<m>.context` (attention·V), `<m>.out_proj` (its module's own name and
    recipe), m the module the attention runs in (sim's scaled_dot_product_attention names its
    matmuls `scores` and `context` too)."""

    def __init__(self, em, module):
        self.module = module
        self.matmuls = 0
        mod = em.model.get_submodule(module) if module else em.model
        self.weights = []
        for attr in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"):
            w = getattr(mod, attr, None)
            if w is not None:
                self.weights.append((w, attr[:-len("_weight")], module))
        out = getattr(mod, "out_proj", None)
        if out is not None and getattr(out, "weight", None) is not None:
            name = f"{module}.out_proj" if module else "out_proj"
            self.weights.append((out.weight, None, name))

    def _at(self, role):
        return f"{self.module}.{role}" if self.module else role

    def gemm_name(self, op, b, base, module):
        """(trace name base, module whose recipe applies) of a GEMM inside this attention."""
        if op == "matmul":
            self.matmuls += 1
            return self._at("scores" if self.matmuls % 2 else "context"), module
        for w, role, owner in self.weights:
            if b is w or (b is not None and getattr(b, "_base", None) is w):
                return (self._at(role), module) if role else (owner, owner)
        return base, module


def _function_class(torch):
    class GemmFunction(torch.autograd.Function):
        """a [B, M, K] (or [M, K]), b matching, bias [N] or None: one _Gemm per batch item."""

        @staticmethod
        def forward(ctx, sites, a, b, bias):
            batched = a.dim() == 3
            need = [n and sites[0].grad_enabled for n in ctx.needs_input_grad]
            A = _f32(a)
            Bv = _f32(b)
            bias_v = None if bias is None else _f32(bias)
            ctx.at_once = batched and bias_v is None and not sites[0].scaled \
                and sites[0].em._items_at_once()
            if ctx.at_once:
                y = sites[0].forward_items(A, Bv)
            elif batched:
                ys = [s.forward(A[i], Bv[i], bias_v, need[1], need[2])
                      for i, s in enumerate(sites)]
                y = np.stack(ys)
            else:
                y = sites[0].forward(A, Bv, bias_v, need[1], need[2])
            ctx.sites, ctx.batched, ctx.device = sites, batched, a.device
            return _on(y, a.device)

        @staticmethod
        def backward(ctx, g):
            need = ctx.needs_input_grad
            G = _f32(g)
            t = lambda v: _on(v, ctx.device)  # noqa: E731
            with ctx.sites[0].em.busy():
                if not ctx.batched:
                    ga, gb, gbias = ctx.sites[0].backward(G, need[1], need[2], need[3])
                    return None, t(ga), t(gb), t(gbias)
                if ctx.at_once:
                    ga, gb = ctx.sites[0].backward_items(G, need[1], need[2])
                    return None, t(ga), t(gb), None
                parts = [s.backward(G[i], need[1], need[2], False)
                         for i, s in enumerate(ctx.sites)]
                ga = np.stack([p[0] for p in parts]) if need[1] else None
                gb = np.stack([p[1] for p in parts]) if need[2] else None
                return None, t(ga), t(gb), None

    return GemmFunction


def _sim_function_class(torch):
    class SimFunction(torch.autograd.Function):
        """One of the model's ops run by sim's own op (halfway._halfway._Emulator.op)."""

        @staticmethod
        def forward(ctx, em, call, *tensors):
            recipe, op, dtypes, weights, scope, attrs = call
            arrays = [None if t is None else _f32(t) for t in tensors]
            needs = [t is not None and t.requires_grad for t in tensors]
            y, dt, handle = em.core.op(recipe.name, op, arrays, dtypes, needs, weights, scope,
                                       recipe.forward_rounding, attrs)
            ctx.em, ctx.handle, ctx.rounding = em, handle, recipe.backward_rounding
            ctx.device = next(t.device for t in tensors if t is not None)
            em._last_dtype = dt
            return _on(y, ctx.device)

        @staticmethod
        def backward(ctx, g):
            with ctx.em.busy():
                grads = ctx.handle.backward(_f32(g), ctx.rounding)
                return (None, None) + tuple(_on(v, ctx.device) for v in grads)

    class Declare(torch.autograd.Function):
        """A tensor of fp32 values entering a recipe that keeps it in a low dtype (pure-*'s
        parameters and data), rounded into it; the gradient passes unchanged (it is the
        gradient of a tensor of that dtype, rounded into it by the op that sent it)."""

        @staticmethod
        def forward(ctx, em, t, dt, rounding, name, kind):
            if not name:  # a parameter: sim holds it in dt, rounded once to nearest when made,
                # drawing no stochastic-rounding stream
                return _on(_halfway.round(_f32(t), dt), t.device)
            return _on(em.core.round(_f32(t), dt, rounding, name, "cast", kind), t.device)

        @staticmethod
        def backward(ctx, g):
            return None, g, None, None, None, None

    return SimFunction, Declare


class emulate:
    """Context manager: run `model`'s GEMMs under `recipe` while the block runs.

    model: a torch.nn.Module (its floating parameters float32; integer or complex ones are a
        TypeError). Nothing of the model is changed: only hooks are added, and removed at exit.
    recipe: a `halfway train` policy preset (halfway.recipes()).
    accumulation: an accumulation name (halfway.accumulations()), 'native' for PyTorch's own
        GEMM on the rounded operands, or None (default) for the recipe's own: fp32, except
        torch-cpu-bf16's torch-cpu.
    seed: the stochastic-rounding seed (nvfp4's gradients).
    out: a folder for manifest.json, steps.csv, trace.csv and blocks.csv, or None.
    rules: {regex: recipe}, matched (re.search) against each module's qualified name, the first
        match winning; a GEMM runs under the recipe of the innermost module around it.
    every: trace steps 0, every, 2·every, ... (emulation itself happens on every step).
    threads: GEMM threads (no result depends on them).
    tensorboard: a folder; at a clean exit, `out` is also exported there as a TensorBoard run
        (halfway.tensorboard; needs `out`).
    scaler: the loop's torch.amp.GradScaler, or None: steps.csv then has each step's
        loss_scale, the scale in effect when the step's forward began (1 while disabled).

    A step ends when the model's forward starts again with autograd on, and at the exit.
    """

    def __init__(self, model, recipe="fp32", accumulation=None, seed=0, out=None, rules=None,
                 every=1, threads=1, random_bits=None, tensorboard=None, scaler=None):
        import torch
        self._torch = torch
        if not isinstance(model, torch.nn.Module):
            raise TypeError("halfway.torch.emulate: model must be a torch.nn.Module, not "
                            f"{type(model).__name__}")
        for pname, p in model.named_parameters():
            if p.is_complex() or not p.is_floating_point():
                raise TypeError(f"halfway.torch.emulate: parameter '{pname}' has dtype "
                                f"{p.dtype}; only floating-point parameters can be emulated")
        names = list(_halfway._recipe_names()) + list(_halfway._custom_recipe_names())
        self.recipe = self._check_recipe(recipe, names, "recipe")
        accs = list(_halfway._accumulation_names()) + ["fp32-sequential"]
        if accumulation is not None:
            _args.name("torch.emulate", "accumulation", accumulation)
        if accumulation is not None and accumulation != "native" and accumulation not in accs:
            raise ValueError(f"halfway.torch.emulate: unknown accumulation {accumulation!r} "
                             f"(accumulations: {' '.join(accs)} native)")
        every = _args.integer("torch.emulate", "every", every, 1, _args.I64)
        seed = _args.integer("torch.emulate", "seed", seed, 0, _args.U64)
        threads = _args.integer("torch.emulate", "threads", threads, 1, 256)
        if random_bits is None:  # the recipe's (sr_random_bits of a TOML recipe), else 32
            random_bits = _halfway._recipe(self.recipe)["sr_random_bits"]
        if not isinstance(random_bits, int) or isinstance(random_bits, bool) \
                or not 1 <= random_bits <= 32:
            raise ValueError(f"halfway.torch.emulate: random_bits must be an integer in 1..32, "
                             f"not {random_bits!r}")
        self.random_bits = random_bits
        self.scaler = _args.scaler("torch.emulate", scaler)
        self.model, self.accumulation, self.seed, self.every = model, accumulation, seed, every
        self.rules = self._check_rules(rules, names)
        self._module_recipe = self._assign(model)
        self.out = None if out is None else _args.path("torch.emulate", "out", out)
        self.tensorboard = _args.tensorboard_dir("torch.emulate", tensorboard, self.out)
        if self.out is not None:
            os.makedirs(self.out, exist_ok=True)  # OSError names the folder
        self.core = _halfway._Emulator(
            seed, threads, self.out or "", random_bits,
            pack_random_bits=_halfway._recipe(self.recipe)["sr_pack_random_bits"])
        self._recipes = {}
        self._stochastic = None  # any recipe of the emulation stochastic (_items_at_once)
        self._handles = []
        self._stack = []
        self.step = 0
        self._forwarded = False
        self._calls = {}
        self.unemulated = {}
        self.emulated = {}
        self.losses = []
        self._loss = float("nan")
        self._scale, self._scales = 1.0, []
        self._Function = _function_class(torch)
        self._SimFunction, self._Declare = _sim_function_class(torch)
        self.emulated_ops = {}
        self.fp32_ops = {}
        self._last_dtype = None
        self._mode = None
        self._attention = []
        self._untouched = False

    # -- checks -------------------------------------------------------------------------------

    @staticmethod
    def _check_recipe(recipe, names, what):
        if not isinstance(recipe, str) or recipe not in names:
            raise ValueError(f"halfway.torch.emulate: unknown {what} {recipe!r} "
                             f"(recipes: {' '.join(names)})")
        return recipe

    def _check_rules(self, rules, names):
        if rules is None:
            return []
        if not isinstance(rules, dict):
            raise TypeError("halfway.torch.emulate: rules must be a dict {regex: recipe}")
        out = []
        modules = [n for n, _ in self.model.named_modules()]
        for pattern, recipe in rules.items():
            try:
                rx = re.compile(pattern)
            except (re.error, TypeError) as e:
                raise ValueError(f"halfway.torch.emulate: rules pattern {pattern!r} is not a "
                                 f"regular expression ({e})") from None
            self._check_recipe(recipe, names, f"recipe for rule {pattern!r}:")
            if not any(rx.search(n) for n in modules if n):
                raise ValueError(f"halfway.torch.emulate: rules pattern {pattern!r} matches no "
                                 "module of the model")
            out.append((pattern, rx, recipe))
        return out

    def _assign(self, model):
        """Each module's recipe: the first rule whose pattern it matches, else `recipe`."""
        assigned = {}
        for name, _ in model.named_modules():
            recipe = self.recipe
            for _, rx, r in self.rules:
                if name and rx.search(name):
                    recipe = r
                    break
            assigned[name] = recipe
        return assigned

    # -- the block ------------------------------------------------------------------------------

    def __enter__(self):
        from torch.overrides import TorchFunctionMode
        em = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                return em._dispatch(func, args, kwargs or {})

        for name, m in self.model.named_modules():
            self._handles.append(m.register_forward_pre_hook(self._enter_module(name)))
            self._handles.append(m.register_forward_hook(self._leave_module()))
        self._begin_step()
        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        self._mode.__exit__(exc_type, exc, tb)
        for h in self._handles:
            h.remove()
        self._handles, self._stack = [], []
        self._end_step()
        if self.out is not None:
            self._write_files(complete=exc_type is None)
            if exc_type is None and self.tensorboard is not None:
                from . import tensorboard
                tensorboard.export([self.out], self.tensorboard)
        return False

    def log_loss(self, loss):
        """The loss of the step in progress, for steps.csv (a tensor or a number)."""
        with self.busy():
            self._loss = float(loss.detach().float().item() if hasattr(loss, "detach") else loss)

    # -- steps ------------------------------------------------------------------------------------

    def _traced(self):
        return self.step % self.every == 0

    def _begin_step(self):
        self._calls = {}
        self._loss = float("nan")
        self._scale = _args.loss_scale(self.scaler)
        self.core.begin_step(self.step, self._traced() and self.out is not None, 1.0)

    def _end_step(self):
        self.core.end_step()
        self.losses.append((self.step, self._loss))
        self._scales.append((self._scale, _args.scaler_outcome(self.scaler, self._scale)))

    def _enter_module(self, name):
        def hook(module, inputs):
            if not name:
                self._stack = []  # a forward that raised left its modules behind
            if not self._stack and self._torch.is_grad_enabled():
                if self._forwarded:
                    self._end_step()
                    self.step += 1
                    self._begin_step()
                self._forwarded = True
            self._stack.append(name)
            if not name:
                return self._data_in(inputs)
        return hook

    def _data_in(self, inputs):
        """The model's float32 inputs under a recipe whose data are a low dtype (pure-*),
        rounded into it as sim casts the data before the model (traced as `input`)."""
        recipe = self._recipe_for("")
        if recipe.default_dtype(False) == "fp32":
            return None
        with self.busy():
            return tuple(self._declared(a, recipe, "", "input", False)[0]
                         if self._emulable(a) and isinstance(a, self._torch.Tensor) else a
                         for a in inputs)

    def _leave_module(self):
        def hook(module, inputs, output):
            if self._stack:
                self._stack.pop()
        return hook

    @staticmethod
    def busy():
        """Torch calls made by the emulation itself are not the model's ops (nor are a nested
        ht.trace's: halfway._internal)."""
        return _internal.internal()

    # -- dispatch ---------------------------------------------------------------------------------

    def _dispatch(self, func, args, kwargs):
        if _internal.active():  # ours, or a nested ht.trace's
            return func(*args, **kwargs)
        torch = self._torch
        if func is torch.Tensor.backward and args:
            with self.busy():
                self._backward_seed(args[0])
        decomposed = self._decompositions().get(func)
        if decomposed is not None:
            r = decomposed(args, kwargs)
            if r is not NotImplemented:
                return r
            name = _op_name(func)
            key = f"{name} (not emulated: operands)"
            self.unemulated[key] = self.unemulated.get(key, 0) + 1
            with self.busy():
                return func(*args, **kwargs)
        handler = self._handlers().get(func)
        why = None
        if handler is not None:
            with self.busy():
                r = handler(func, args, kwargs)
            if r is not NotImplemented:
                return r
            why = "operands"
        reader = self._sim_ops().get(func)
        if reader is not None:
            with self.busy():
                r, why = self._sim_call(func, reader, args, kwargs)
            if why is None:
                return r
        name = _op_name(func)
        if name is not None:
            key = name if why is None else f"{name} (not emulated: {why})"
            self.unemulated[key] = self.unemulated.get(key, 0) + 1
        with self.busy():
            r = func(*args, **kwargs)
        short = getattr(func, "__name__", "")
        if short in _PRESERVING and isinstance(r, torch.Tensor) and args \
                and isinstance(args[0], torch.Tensor) and hasattr(args[0], _TAG):
            setattr(r, _TAG, getattr(args[0], _TAG))
        return r

    def _backward_seed(self, root):
        """sim's Tensor::backward rounds its seed gradient into the root's dtype, untraced: so
        does `loss.backward()` here, so that the stochastic-rounding streams of the backward
        are the ones the simulator's take (the seed 1 is a value of every dtype: the gradient
        PyTorch sends is unchanged)."""
        recipe = self._recipe_for("")
        dt = getattr(root, _TAG, None) or "fp32"
        self.core.round(np.ones(1, np.float32), dt, recipe.backward_rounding)

    def _handlers(self):
        h = getattr(self, "_handler_table", None)
        if h is None:
            torch = self._torch
            F = torch.nn.functional
            h = {F.linear: self._linear, torch.matmul: self._matmul,
                 torch.Tensor.matmul: self._matmul, torch.Tensor.__matmul__: self._matmul,
                 torch.Tensor.__rmatmul__: self._rmatmul, torch.mm: self._matmul,
                 torch.Tensor.mm: self._matmul, torch.bmm: self._matmul,
                 torch.Tensor.bmm: self._matmul, torch.addmm: self._addmm,
                 torch.Tensor.addmm: self._addmm, torch.baddbmm: self._baddbmm,
                 torch.Tensor.baddbmm: self._baddbmm,
                 F.conv1d: self._conv, F.conv2d: self._conv,
                 torch.conv1d: self._conv, torch.conv2d: self._conv}
            self._handler_table = h
        return h

    def _decompositions(self):
        """Functions emulated as the ops they are made of (attention): each runs unbusy, its
        parts dispatched as the model's own calls."""
        d = getattr(self, "_decomposition_table", None)
        if d is None:
            F = self._torch.nn.functional
            d = {F.multi_head_attention_forward: self._multi_head_attention}
            if hasattr(F, "scaled_dot_product_attention"):
                d[F.scaled_dot_product_attention] = self._scaled_dot_product_attention
            self._decomposition_table = d
        return d

    def _call(self, func, *args, **kwargs):
        """A call the emulation makes on the model's behalf, dispatched as the model's own."""
        return self._dispatch(func, args, kwargs)

    def _multi_head_attention(self, args, kwargs):
        """F.multi_head_attention_forward: PyTorch's own Python body (the in-projection, the
        QK^T and attention·V bmm or scaled_dot_product_attention, the out-projection), run
        with this mode active so that each of its calls is seen. A copy of the function whose
        globals say no argument has a __torch_function__ keeps it from dispatching itself to
        this mode again."""
        torch = self._torch
        F = torch.nn.functional
        tensors = [a for a in list(args[:3]) + [kwargs.get(k) for k in ("query", "key", "value")]
                   if isinstance(a, torch.Tensor)]
        if not self._emulable(*tensors):
            return NotImplemented
        fn = getattr(self, "_mha_body", None)
        if fn is None:
            f = F.multi_head_attention_forward
            g = dict(f.__globals__)
            g["has_torch_function"] = lambda *a, **k: False
            fn = types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
            fn.__kwdefaults__ = f.__kwdefaults__
            self._mha_body = fn
        module = self._stack[-1] if self._stack else ""
        self._attention.append(_Attention(self, module))
        try:
            with self._mode:
                return fn(*args, **kwargs)
        finally:
            self._attention.pop()

    def _scaled_dot_product_attention(self, args, kwargs):
        """F.scaled_dot_product_attention as PyTorch's math path computes it
        (_scaled_dot_product_attention_math): q·√s, (kᵀ·√s), their matmul, + the mask (a
        boolean or causal mask as 0 / -inf), softmax over the last dimension, dropout, matmul
        with v; s = scale or 1/√E. enable_gqa and a negative scale run as PyTorch runs them."""
        torch = self._torch
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                 "enable_gqa")
        if len(args) > len(names):
            return NotImplemented
        p = dict(zip(names, args))
        p.update(kwargs)
        q, k, v, mask = p.get("query"), p.get("key"), p.get("value"), p.get("attn_mask")
        scale, causal = p.get("scale"), bool(p.get("is_causal", False))
        if set(p) - set(names) or p.get("enable_gqa") or (scale is not None and scale < 0) \
                or (causal and mask is not None) or not self._emulable(q, k, v) \
                or any(not isinstance(t, torch.Tensor) or t.dim() < 2 for t in (q, k, v)) \
                or (mask is not None and not (isinstance(mask, torch.Tensor) and (
                    mask.dtype == torch.bool or self._emulable(mask)))):
            return NotImplemented
        with self.busy():
            if causal:
                mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool,
                                  device=q.device).tril()
            if mask is not None and mask.dtype == torch.bool:
                mask = torch.where(mask.logical_not(), -math.inf, 0.0)
        sf = math.sqrt(1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
        module = self._stack[-1] if self._stack else ""
        pushed = not self._attention
        if pushed:
            self._attention.append(_Attention(self, module))
        try:
            call = self._call
            attn = call(torch.matmul, call(torch.mul, q, sf),
                        call(torch.mul, call(torch.Tensor.transpose, k, -2, -1), sf))
            if mask is not None:
                attn = call(torch.add, attn, mask)
            attn = call(torch.softmax, attn, -1)
            dropout_p = p.get("dropout_p", 0.0)
            if dropout_p > 0.0:
                attn = call(torch.dropout, attn, dropout_p, True)
            return call(torch.matmul, attn, v)
        finally:
            if pushed:
                self._attention.pop()

    def _sim_ops(self):
        t = getattr(self, "_sim_op_table", None)
        if t is None:
            t = self._sim_op_table = _sim_op_table(self._torch)
        return t

    def _sim_call(self, func, reader, args, kwargs):
        """An op sim computes, under the recipe of the module it runs in: (result, None), or
        (NotImplemented, why) when it runs as PyTorch runs it, unemulated. An op whose inputs
        are all fp32 and that the recipe does not lower computes in fp32: that is PyTorch's
        own fp32 op (so recipe="fp32" changes nothing), counted under `fp32_ops`."""
        try:
            read = reader(args, kwargs)
        except (TypeError, KeyError, AttributeError, IndexError, ValueError):
            read = None
        if read is None:
            return NotImplemented, "options"
        op, tensors, roles, attrs = read
        if not self._emulable(*tensors) or not isinstance(tensors[0], self._torch.Tensor):
            return NotImplemented, "operands"
        module = self._stack[-1] if self._stack else ""
        recipe = self._recipe_for(module)
        rule = recipe.table["rules"]["mul" if op == "mul_scalar" else op]
        if rule != "lower" and not recipe.stochastic \
                and all(self._dtype_of(t, recipe) in (None, "fp32") for t in tensors):
            key = _op_name(func)
            self.fp32_ops[key] = self.fp32_ops.get(key, 0) + 1
            return func(*args, **kwargs), None
        scope = self._op_scope(op, module)
        weights = [isinstance(t, self._torch.nn.Parameter) for t in tensors]
        declared = [self._declared(t, recipe, scope, role) for t, role in zip(tensors, roles)]
        ts = [t for t, _ in declared]
        dtypes = [d for _, d in declared]
        y = self._SimFunction.apply(self, (recipe, op, dtypes, weights, scope, attrs), *ts)
        setattr(y, _TAG, self._last_dtype)
        self.emulated_ops[op] = self.emulated_ops.get(op, 0) + 1
        return y, None

    def _op_scope(self, op, module):
        """sim's name scope of an op: its module's for a leaf module (nn.ReLU, nn.LayerNorm),
        else module.op; a loss outside the model is sim's `loss`; a second call gets #2, ..."""
        if module and next(self.model.get_submodule(module).children(), None) is None:
            base = module
        elif module:
            base = f"{module}.{op}"
        else:
            base = "loss" if op in ("mse", "cross_entropy") else op
        n = self._calls.get(base, 0) + 1
        self._calls[base] = n
        return base if n == 1 else f"{base}#{n}"

    def _declared(self, t, recipe, scope, role, is_param=None):
        """(t, its logical dtype). A tensor nothing emulated produced holds fp32 values; where
        the recipe keeps such tensors in a low dtype (pure-*: parameters and data, as sim's
        param_dtype and input_dtype) it is first rounded into it: a parameter silently, as sim
        keeps its parameters in that dtype, any other tensor as sim's cast `<scope>.<role>`."""
        if t is None:
            return None, None
        tag = getattr(t, _TAG, None)
        if tag is not None:
            return t, tag
        if is_param is None:
            is_param = isinstance(t, self._torch.nn.Parameter)
        dt = recipe.default_dtype(is_param)
        if dt == "fp32":
            return t, dt
        name = "" if is_param else (f"{scope}.{role}" if scope else role)
        y = self._Declare.apply(self, t, dt, recipe.forward_rounding, name,
                                "weight" if is_param else "activation")
        setattr(y, _TAG, dt)
        return y, dt

    def _site_name(self, op, b=None):
        """The GEMM's trace name: its module's for a module's own layer, else module.op; inside
        attention (_Attention) the role of the GEMM; a second call in a step gets #2, ..."""
        module = self._stack[-1] if self._stack else ""
        mod = self.model.get_submodule(module) if module else self.model
        torch = self._torch
        own = (op == "linear" and isinstance(mod, torch.nn.Linear)) or \
              (op == "conv" and isinstance(mod, (torch.nn.Conv1d, torch.nn.Conv2d)))
        base = (module or "model") if own else (f"{module}.{op}" if module else op)
        if self._attention and not own:
            base, module = self._attention[-1].gemm_name(op, b, base, module)
        n = self._calls.get(base, 0) + 1
        self._calls[base] = n
        return base if n == 1 else f"{base}#{n}", module

    def _items_at_once(self):
        """Whether a batched matmul's items may be rounded and multiplied in one pass: no
        recipe of this emulation rounds stochastically (so no call's stream index matters) and
        the step in progress is not traced (so no per-item trace name is written)."""
        if self._stochastic is None:
            names = {self.recipe, *self._module_recipe.values()}
            self._stochastic = any(self._recipe_for_name(n).stochastic for n in names)
        return not self._stochastic and not (self.out is not None and self._traced())

    def _recipe_for(self, module):
        return self._recipe_for_name(self._module_recipe.get(module, self.recipe))

    def _recipe_for_name(self, name):
        if name not in self._recipes:
            self._recipes[name] = Recipe(name)
        return self._recipes[name]

    def _dtype_of(self, t, recipe, is_param=None):
        if t is None:
            return None
        tag = getattr(t, _TAG, None)
        if is_param is None:
            is_param = isinstance(t, self._torch.nn.Parameter)
        return tag if tag is not None else recipe.default_dtype(is_param)

    @staticmethod
    def _keep_tag(src, dst):
        """dst (a reshaped view or copy of src) has src's logical dtype."""
        if hasattr(src, _TAG):
            setattr(dst, _TAG, getattr(src, _TAG))
        return dst

    @staticmethod
    def _emulable(*ts):
        import torch
        ts = [t for t in ts if t is not None]
        return all(isinstance(t, torch.Tensor) and t.dtype == torch.float32
                   and t.device.type in ("cpu", "cuda") for t in ts) \
            and len({t.device for t in ts}) <= 1

    def _run(self, op, a, b, bias, stat, b_is_param=None):
        """a [M, K] or [B, M, K]; b [N, K] (linear) or [K, N] / [B, K, N]; bias [N] or None."""
        recipe_site, module = self._site_name(stat, b)
        recipe = self._recipe_for(module)
        if b_is_param is None:  # a parameter, or a view of one (attention's chunked in_proj)
            P = self._torch.nn.Parameter
            b_is_param = isinstance(b, P) or isinstance(getattr(b, "_base", None), P)
        is_param = b_is_param
        a, da = self._declared(a, recipe, recipe_site, "input")
        b, db = self._declared(b, recipe, recipe_site, "other", is_param)
        bias, dbias = self._declared(bias, recipe, recipe_site, "bias")
        dtypes = [da, db, dbias]
        batch = a.shape[0] if a.dim() == 3 else 1
        sites = [_Gemm(self, recipe, self.accumulation,
                       recipe_site if batch == 1 else f"{recipe_site}[{i}]", op, dtypes, is_param)
                 for i in range(batch)]
        if self.accumulation == "native" and not sites[0].scaled and sites[0].dt == "fp32" \
                and all(d in (None, "fp32") for d in dtypes):
            y = None  # nothing to round: PyTorch's own op, untouched
            self._untouched = True
        else:
            y = self._Function.apply(sites, a, b, bias)
            if sites[0].dt != "fp32":
                setattr(y, _TAG, sites[0].dt)
        self.emulated[stat] = self.emulated.get(stat, 0) + 1
        return y

    def _linear(self, func, args, kwargs):
        x, w = args[0], args[1]
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        if not self._emulable(x, w, bias) or x.dim() < 1 or w.dim() != 2:
            return NotImplemented
        x2 = self._keep_tag(x, x.reshape(-1, x.shape[-1]))
        y = self._run("linear", x2, w, bias, "linear")
        if y is None:
            return func(*args, **kwargs)
        out = y.reshape(*x.shape[:-1], w.shape[0])
        if hasattr(y, _TAG):
            setattr(out, _TAG, getattr(y, _TAG))
        return out

    def _matmul_core(self, func, a, b, args, kwargs, bias=None):
        torch = self._torch
        if not self._emulable(a, b, bias) or a.dim() < 2 or b.dim() < 2:
            return NotImplemented
        if b.dim() == 2:
            a2 = self._keep_tag(a, a.reshape(-1, a.shape[-1]))
            y = self._run("matmul", a2, b, bias, "matmul")
            if y is None:
                return func(*args, **kwargs)
            out = y.reshape(*a.shape[:-1], b.shape[-1])
        else:
            batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
            A = self._keep_tag(a, a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:]))
            B = self._keep_tag(b, b.expand(*batch, *b.shape[-2:]).reshape(-1, *b.shape[-2:]))
            y = self._run("matmul", A, B, bias, "matmul")
            if y is None:
                return func(*args, **kwargs)
            out = y.reshape(*batch, a.shape[-2], b.shape[-1])
        if hasattr(y, _TAG):
            setattr(out, _TAG, getattr(y, _TAG))
        return out

    def _matmul(self, func, args, kwargs):
        if kwargs or len(args) != 2:
            return NotImplemented
        return self._matmul_core(func, args[0], args[1], args, kwargs)

    def _rmatmul(self, func, args, kwargs):
        if kwargs or len(args) != 2:
            return NotImplemented
        return self._matmul_core(func, args[1], args[0], args, kwargs)

    def _addmm(self, func, args, kwargs):
        if len(args) != 3 or any(kwargs.get(k, 1) != 1 for k in ("beta", "alpha")) \
                or set(kwargs) - {"beta", "alpha"}:
            return NotImplemented
        bias, a, b = args
        if not isinstance(bias, self._torch.Tensor) or bias.dim() != 1 \
                or bias.shape[0] != b.shape[-1]:
            return NotImplemented
        return self._matmul_core(func, a, b, args, kwargs, bias=bias)

    def _baddbmm(self, func, args, kwargs):
        """torch.baddbmm(c, a, b) (beta = alpha = 1; MultiheadAttention's masked scores) as
        the matmul a·b, then sim's add of c (in the recipe's dtype of an add); under fp32 with
        native accumulation PyTorch's own fused call."""
        if len(args) != 3 or any(kwargs.get(k, 1) != 1 for k in ("beta", "alpha")) \
                or set(kwargs) - {"beta", "alpha"}:
            return NotImplemented
        c, a, b = args
        if not self._emulable(c) or not isinstance(c, self._torch.Tensor):
            return NotImplemented
        self._untouched = False
        y = self._matmul_core(func, a, b, args, kwargs)
        if y is NotImplemented or self._untouched:
            return y  # the fused call's own result: nothing to round
        add = self._torch.add
        r, why = self._sim_call(add, self._sim_ops()[add], (y, c), {})
        return add(y, c) if why else r

    def _conv(self, func, args, kwargs):
        torch = self._torch
        F = torch.nn.functional
        names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
        p = dict(zip(names, args))
        p.update(kwargs)
        x, w, bias = p["input"], p["weight"], p.get("bias")
        groups = p.get("groups", 1)
        padding = p.get("padding", 0)
        if not self._emulable(x, w, bias) or groups != 1 or isinstance(padding, str):
            return NotImplemented
        one_d = w.dim() == 3

        def pair(v, fill):
            v = v if isinstance(v, (tuple, list)) else (v,) * (1 if one_d else 2)
            return (fill,) + tuple(v) if one_d else tuple(v)
        stride, dil = pair(p.get("stride", 1), 1), pair(p.get("dilation", 1), 1)
        pad = pair(padding, 0)
        batched = x.dim() == w.dim()
        if not batched:
            x = x.unsqueeze(0)
        if one_d:
            x, w = x.unsqueeze(-2), w.unsqueeze(-2)
        n, c, h, wd = x.shape
        o, _, kh, kw = w.shape
        cols = F.unfold(x, (kh, kw), dilation=dil, padding=pad, stride=stride)
        hout = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
        wout = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
        X = self._keep_tag(x, cols.transpose(1, 2).reshape(-1, c * kh * kw))
        W = w.reshape(o, -1)
        y = self._run("linear", X, W, bias, "conv", b_is_param=isinstance(w, torch.nn.Parameter))
        if y is None:
            return func(*args, **kwargs)
        tag = getattr(y, _TAG, None)
        y = y.reshape(n, hout * wout, o).transpose(1, 2).reshape(n, o, hout, wout)
        if one_d:
            y = y.squeeze(-2)
        if not batched:
            y = y.squeeze(0)
        if tag is not None:
            setattr(y, _TAG, tag)
        return y

    # -- the run folder ---------------------------------------------------------------------------

    def _write_files(self, complete):
        """The run folder, published by the simulator as `halfway train` publishes its own:
        every file finished under a temporary name, the old manifest removed, the files
        renamed into place, manifest.json last (io.hpp's publish_folder)."""
        from . import __version__
        def cell(v):
            return "" if v != v else repr(float(np.float32(v)))
        if self.scaler is None:
            rows = ["step,loss\n"] + [f"{s},{cell(v)}\n" for s, v in self.losses]
        else:  # a disabled scaler: scale 1, nothing found, nothing skipped, as halfway train
            rows = ["step,loss,loss_scale,found_inf,skipped,next_scale\n"]
            for (s, v), (sc, o) in zip(self.losses, self._scales):
                o = o or {"found_inf": 0, "skipped": 0, "next_scale": sc}
                rows.append(f"{s},{cell(v)},{sc!r},{o['found_inf']},{o['skipped']},"
                            f"{o['next_scale']!r}\n")
        manifest = {
            "tool": "halfway.torch.emulate",
            "recipe": str(self.recipe),
            "recipe_file": getattr(self.recipe, "path", None),
            "random_bits": self.random_bits,
            "rules": [[p, r] for p, _, r in self.rules],
            "accumulation": self.accumulation or "recipe",
            "seed": self.seed,
            "every": self.every,
            "scaler": self.scaler is not None,
            "steps": len(self.losses),
            "torch_version": self._torch.__version__,
            "halfway_version": __version__,
            "git_revision": _halfway._git_revision(),
            "model": type(self.model).__name__,
            "emulated_gemms": dict(sorted(self.emulated.items())),
            "emulated_ops": dict(sorted(self.emulated_ops.items())),
            "fp32_ops": dict(sorted(self.fp32_ops.items())),
            "unemulated_ops": dict(sorted(self.unemulated.items())),
            "outputs": ["steps.csv", "trace.csv", "blocks.csv"],
            "complete": bool(complete),
        }
        self.core.commit("".join(rows), json.dumps(manifest, indent=2) + "\n")



# -- the other ops: PyTorch functions read as sim's ops ----------------------------------------
#
# Each reader takes a call's (args, kwargs) and returns (sim op, tensors, roles, attrs), or None
# when the call is one sim's op does not compute (an option it lacks): that call runs as PyTorch
# runs it and is counted. `roles` are sim's names of the inputs (the casts' trace names).

def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _read_unary(op, option=None, allowed=(False,)):
    """A one-tensor op; `option` (F.relu's inplace, F.gelu's approximate) one of `allowed`."""
    def read(args, kwargs):
        if len(args) > (2 if option else 1) or set(kwargs) - ({option} if option else set()):
            return None
        value = args[1] if len(args) > 1 else kwargs.get(option, allowed[0])
        if option and value not in allowed:
            return None
        return op, [args[0]], ["input"], {"approximate": value} if option == "approximate" else {}
    return read


def _pow2(c):
    m, _ = np.frexp(c)
    return c != 0 and np.isfinite(c) and abs(m) == 0.5


def _read_binary(op, swapped=False):
    def read(args, kwargs):
        if kwargs or len(args) != 2:
            return None  # alpha=, rounding_mode=, out=
        a, b = (args[1], args[0]) if swapped else args
        if _number(b) and op in ("mul", "div") and not _number(a):
            c = float(b)
            if op == "div":
                if not _pow2(c):
                    return None  # x / c is not x · (1/c) unless 1/c is exact
                c = 1.0 / c
            return "mul_scalar", [a], ["input"], {"scalar": c}
        if _number(a) and op == "mul" and not _number(b):
            return "mul_scalar", [b], ["input"], {"scalar": float(a)}
        if _number(a) or _number(b):
            return None
        return op, [a, b], ["input", "other"], {}
    return read


def _last_dim(x, dim):
    return dim is not None and isinstance(dim, int) and dim in (-1, x.dim() - 1)


def _read_softmax(op):
    def read(args, kwargs):
        names = ("input", "dim", "_stacklevel", "dtype")
        p = dict(zip(names, args))
        p.update(kwargs)
        if p.get("dtype") is not None or not _last_dim(p["input"], p.get("dim")):
            return None
        return op, [p["input"]], ["input"], {}
    return read


def _read_reduction(op):
    def read(args, kwargs):
        names = ("input", "dim", "keepdim")
        p = dict(zip(names, args))
        p.update(kwargs)
        if set(p) - set(names) or p.get("keepdim", False):
            return None
        dim = p.get("dim")
        if isinstance(dim, (tuple, list)):
            if len(dim) != 1:
                return None
            dim = dim[0]
        if dim is not None and not isinstance(dim, int):
            return None
        return op, [p["input"]], ["input"], {"dim": dim}
    return read


def _read_mse(args, kwargs):
    names = ("input", "target", "size_average", "reduce", "reduction")
    p = dict(zip(names, args))
    p.update(kwargs)
    if p.get("size_average") is not None or p.get("reduce") is not None \
            or p.get("reduction", "mean") != "mean" or p["input"].shape != p["target"].shape:
        return None
    return "mse", [p["input"], p["target"]], ["input", "target"], {}


def _read_cross_entropy(args, kwargs):
    names = ("input", "target", "weight", "size_average", "ignore_index", "reduce",
             "reduction", "label_smoothing")
    p = dict(zip(names, args))
    p.update(kwargs)
    x, t = p["input"], p["target"]
    if any(p.get(k) is not None for k in ("weight", "size_average", "reduce")) \
            or p.get("reduction", "mean") != "mean" or p.get("label_smoothing", 0.0) != 0.0 \
            or x.dim() != 2 or t.dim() != 1 or t.is_floating_point() \
            or bool((t == p.get("ignore_index", -100)).any()):
        return None
    return "cross_entropy", [x], ["input"], {"target": t.detach().cpu().numpy()}


def _read_layer_norm(args, kwargs):
    names = ("input", "normalized_shape", "weight", "bias", "eps")
    p = dict(zip(names, args))
    p.update(kwargs)
    x = p["input"]
    if tuple(p["normalized_shape"]) != (x.shape[-1],):
        return None
    return "layer_norm", [x, p.get("weight"), p.get("bias")], ["input", "weight", "bias"], \
        {"eps": float(p.get("eps", 1e-5))}


def _sim_op_table(torch):
    """{PyTorch function: reader} for every function emulate computes with sim's ops."""
    F, T = torch.nn.functional, torch.Tensor
    table = {}

    def put(funcs, reader):
        for f in funcs:
            table[f] = reader
    put([F.relu], _read_unary("relu", "inplace"))
    put([torch.relu, T.relu], _read_unary("relu"))
    put([F.gelu], _read_unary("gelu", "approximate", ("none", "tanh")))
    for name in ("tanh", "sigmoid", "exp", "log"):
        put([getattr(torch, name), getattr(T, name)], _read_unary(name))
    put([F.tanh], _read_unary("tanh"))
    put([F.sigmoid], _read_unary("sigmoid"))
    for name in ("add", "sub", "mul", "div"):
        put([getattr(torch, name), getattr(T, name), getattr(T, f"__{name}__")
             if name != "div" else T.__truediv__], _read_binary(name))
    put([T.__radd__], _read_binary("add", swapped=True))
    put([T.__rmul__], _read_binary("mul", swapped=True))
    put([F.softmax, torch.softmax, T.softmax], _read_softmax("softmax"))
    put([F.log_softmax, torch.log_softmax, T.log_softmax], _read_softmax("log_softmax"))
    put([torch.sum, T.sum], _read_reduction("sum"))
    put([torch.mean, T.mean], _read_reduction("mean"))
    put([F.mse_loss], _read_mse)
    put([F.cross_entropy], _read_cross_entropy)
    put([F.layer_norm], _read_layer_norm)
    return table


def _op_name(func):
    """A stable name for an op PyTorch dispatched (None for attribute reads and writes)."""
    name = getattr(func, "__name__", None) or repr(func)
    qual = getattr(func, "__qualname__", "") or ""
    if name in ("__get__", "__set__", "__delete__", "backward"):
        return None  # attribute access, and backward() itself (its ops are the GEMMs')
    owner = qual.rsplit(".", 1)[0] if "." in qual else ""
    if owner in ("_TensorBase", "TensorBase", "Tensor"):
        return "Tensor." + name
    if owner == "_VariableFunctionsClass":
        return "torch." + name
    module = getattr(func, "__module__", None) or ""
    if module.startswith("torch.nn.functional"):
        return "F." + name
    if module.startswith("torch._C._nn"):
        return "F." + name
    return (module + "." if module else "") + name
