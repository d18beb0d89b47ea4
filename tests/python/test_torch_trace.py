"""halfway.torch.trace on a real PyTorch training loop (CPU): every traced tensor's counts
equal a brute-force count with numpy's float16 and torch's bfloat16 casts of the same tensor;
the recorded tensors are the loop's own (a replay without hooks gives identical gradients and
weights); steps.csv holds the loss and a scaler's scale; activation gradients are taken at that
scale, weight gradients after unscale_."""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

pd = hwtest.require("pandas", "the trace's DataFrames")
torch = hwtest.require("torch", "tracing a PyTorch model")
hwtest.require("matplotlib", "an experiment's plot script on the trace")
hwtest.require_sim("_AnalysisRun")
import halfway  # noqa: E402
import halfway.torch  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

torch.set_num_threads(1)
STEPS = 4


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def model_and_data(seed=0):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                            torch.nn.Linear(32, 4))
    x = torch.randn(64, 8) * 1e-3
    y = torch.randn(64, 4)
    return m, x, y


class StaticScaler:
    """GradScaler's interface with a fixed scale and skipped steps on inf/NaN (the CPU build
    of torch 1.13 has no GradScaler of its own)."""

    def __init__(self, scale):
        self._scale, self._found, self._unscaled = float(scale), False, False

    def is_enabled(self):
        return True

    def get_scale(self):
        return self._scale

    def scale(self, loss):
        return loss * self._scale

    def unscale_(self, opt):
        self._found, self._unscaled = False, True
        for g in opt.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    p.grad.div_(self._scale)
                    self._found |= not bool(torch.isfinite(p.grad).all())

    def step(self, opt):
        if not self._unscaled:
            self.unscale_(opt)
        if not self._found:
            opt.step()

    def update(self):
        self._unscaled = False
        if self._found:
            self._scale /= 2


def train(model, x, y, opt, steps, tr=None, scaler=None, grads=None):
    for s in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[s * 16:(s + 1) * 16]), y[s * 16:(s + 1) * 16])
        if scaler is None:
            if tr is not None:
                tr.log_loss(loss)
            loss.backward()
            if grads is not None:
                grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            if grads is not None:
                grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
            scaler.step(opt)
            scaler.update()


def brute(x, fmt):
    x = np.asarray(x, dtype=np.float32)
    if fmt == "fp16":
        with np.errstate(over="ignore"):
            q = x.astype(np.float16).astype(np.float32)
        min_normal = 2.0 ** -14
    else:
        q = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
        min_normal = 2.0 ** -126
    fin = np.isfinite(x)
    return {"total": x.size, "zeros": int(np.sum(q == 0)),
            "flushed": int(np.sum(fin & (x != 0) & (q == 0))),
            "subnormal": int(np.sum(np.isfinite(q) & (q != 0) & (np.abs(q) < min_normal))),
            "overflow": int(np.sum(fin & np.isinf(q))), "nonfinite_in": int(np.sum(~fin))}


def check_counts(out, steps):
    t = pd.read_csv(os.path.join(out, "trace.csv"))
    check(sorted(t["step"].unique()) == steps, f"traced steps {sorted(t['step'].unique())}")
    kinds = set(t["kind"])
    check(kinds == {"activation", "activation_grad", "weight_grad", "update"}, f"kinds {kinds}")
    checked = 0
    for step in steps:
        saved = np.load(os.path.join(out, "tensors", f"step{step}.npz"))
        rows = t[t["step"] == step]
        check(set(rows["name"]) == set(saved.files), "saved tensors and trace rows differ")
        for _, r in rows.iterrows():
            b = brute(saved[r["name"]], r["dtype"])
            for k, v in b.items():
                check(int(r[k]) == v, f"step {step} {r['name']} {r['dtype']} {k}: "
                                      f"trace {r[k]}, brute force {v}")
            checked += 1
    return t, checked


def float_dtypes():
    """Every floating-point dtype this torch has on the CPU (float8 ones from torch 2.1)."""
    names = ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"]
    return [getattr(torch, n) for n in names if hasattr(torch, n)]


# name -> (tensor made from the input x [16, 8] and the module's leaf w [8], traced?)
KINDS = {
    "broadcast": (lambda x, w: x[:, :1].expand(-1, 8), True),
    "expanded_scalar": (lambda x, w: x.sum().expand(4, 4), True),
    "transposed": (lambda x, w: x.t(), True),
    "strided_slice": (lambda x, w: x[::3, ::2], True),
    "channels_last": (lambda x, w: x.reshape(4, 2, 4, 4).contiguous(
        memory_format=torch.channels_last), True),
    "empty": (lambda x, w: x[:0], True),
    "zero_d": (lambda x, w: x.sum(), True),
    "leaf": (lambda x, w: w, True),
    "meta": (lambda x, w: torch.empty(3, 2, device="meta"), False),
    "int": (lambda x, w: (x * 100).long(), False),
    "bool": (lambda x, w: x > 0, False),
    "complex": (lambda x, w: torch.complex(x, x), False),
}


class Emit(torch.nn.Module):
    """Returns x and one tensor of every kind (and dtype) as its outputs."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(-1, 1, 8))

    def forward(self, x):
        made = [make(x, self.w) for make, _ in KINDS.values()]
        made += [(x * self.w).to(dt) for dt in float_dtypes()]
        return (x * self.w, *made)


def check_tensor_kinds(d):
    """Every kind of tensor reaching a hook is traced (its values, copied from any layout,
    equal numpy's reading of the same tensor) or skipped by rule, and the loop goes on; the
    stride-0 gradient of `output.sum()` included."""
    m = Emit()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    out = os.path.join(d, "kinds")
    x = torch.randn(16, 8)
    outputs = []

    def keep(module, inputs, output):
        outputs.append([o.detach().clone() for o in output])  # w changes in place later
    h = m.register_forward_hook(keep)
    with halfway.torch.trace(m, opt, formats=["fp16"], out=out, save_tensors=True):
        for _ in range(2):
            opt.zero_grad()
            y = m(x)
            loss = y[0].sum() + sum(t.float().sum() for t in y[1:]
                                    if t.is_floating_point() and t.device.type != "meta"
                                    and t.layout == torch.strided)
            loss.backward()
            opt.step()
    h.remove()
    # A module output cannot be sparse under a full backward hook (torch's hook views it),
    # so the layouts other than strided are checked on the rule itself.
    check(not halfway.torch.traceable(torch, x.to_sparse()), "a sparse tensor is traced")
    t = pd.read_csv(os.path.join(out, "trace.csv"))
    saved = np.load(os.path.join(out, "tensors", "step0.npz"))
    names = list(KINDS) + [f"dtype_{dt}" for dt in float_dtypes()]
    traced = [v for _, v in KINDS.values()] + [True] * len(float_dtypes())
    for i, (name, want) in enumerate(zip(names, traced)):
        key = f"model.output{i + 1}"
        tensor = outputs[0][i + 1]
        rows = t[(t["step"] == 0) & (t["name"] == key)]
        check(len(rows) == (1 if want else 0), f"{name}: {len(rows)} rows in trace.csv")
        if want:
            ref = tensor.detach().to(torch.float64).numpy().astype(np.float32).ravel()
            check(int(rows["total"].iloc[0]) == ref.size, f"{name}: total")
            check(np.array_equal(saved[key], ref), f"{name}: the traced values are not the "
                                                   "tensor's")
    grad = t[(t["step"] == 0) & (t["name"] == "model.grad_output0")]
    check(len(grad) == 1 and int(grad["total"].iloc[0]) == 16 * 8,
          "the stride-0 gradient of output.sum() is not traced")
    check(np.array_equal(saved["model.grad_output0"], np.ones(16 * 8, np.float32)),
          "the gradient of a sum is ones")


def check_nesting(d):
    """A used trace cannot be entered again; a second trace writing the same folder is refused
    on entry; traces exited in any order leave optimizer.step (and the scaler's methods) as
    they were."""
    m, x, y = model_and_data()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    step = opt.step
    tr = halfway.torch.trace(m, opt, out=os.path.join(d, "used"))
    with tr:
        train(m, x, y, opt, 1, tr)
    try:
        with tr:
            pass
    except RuntimeError as e:
        check("used already" in str(e), str(e))
    else:
        raise AssertionError("a used trace was entered again")
    same = os.path.join(d, "same")
    with halfway.torch.trace(m, opt, out=same):
        try:
            with halfway.torch.trace(m, opt, out=same + "/."):
                pass
        except RuntimeError as e:
            check("another trace is writing" in str(e), str(e))
        else:
            raise AssertionError("two traces wrote one folder")
        train(m, x, y, opt, 1)
    check(json.load(open(os.path.join(same, "manifest.json")))["complete"] is True,
          "the refused trace spoiled the first one's folder")
    for order in ("inner first", "outer first"):
        scaler = StaticScaler(8)
        a = halfway.torch.trace(m, opt, out=os.path.join(d, "a"), scaler=scaler)
        b = halfway.torch.trace(m, opt, out=os.path.join(d, "b"), scaler=scaler)
        a.__enter__()
        b.__enter__()
        train(m, x, y, opt, 1, scaler=scaler)
        first, second = (b, a) if order == "inner first" else (a, b)
        first.__exit__(None, None, None)
        train(m, x, y, opt, 1, scaler=scaler)  # the one left still traces, the other not
        second.__exit__(None, None, None)
        for obj, attr in ((opt, "step"), (scaler, "scale"), (scaler, "update")):
            check(attr not in vars(obj), f"{order}: {attr} is left wrapped")
        check(opt.step == step, f"{order}: optimizer.step is not the original")
        steps = {o: len(pd.read_csv(os.path.join(d, o, "steps.csv"))) for o in "ab"}
        want = {"a": 2, "b": 1} if order == "inner first" else {"a": 1, "b": 2}
        check(steps == want, f"{order}: traced steps {steps}, expected {want}")


LOOP = """
import sys, torch, halfway.torch
torch.manual_seed(0)
m = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
with halfway.torch.trace(m, opt, out=sys.argv[1]):
    for step in range(10 ** 9):
        opt.zero_grad()
        m(torch.randn(8, 4)).sum().backward()
        opt.step()
        if step == 2:
            print("running", flush=True)
"""


def check_signals(d):
    """SIGTERM or SIGHUP to a traced loop: exit 128 + signal, the folder written with
    "complete": false, no temporary file left."""
    import signal
    for sig in (signal.SIGTERM, signal.SIGHUP):
        out = os.path.join(d, f"signal{int(sig)}")
        p = subprocess.Popen([sys.executable, "-c", LOOP, out], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            check(p.stdout.readline() == "running\n", "the traced loop did not start")
            p.send_signal(sig)
            _, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        check(p.returncode == 128 + sig, f"{sig!r}: exit {p.returncode}: {err[-500:]!r}")
        left = sorted(os.listdir(out))
        check(not [f for f in left if ".tmp" in f], f"{sig!r}: temporary files left: {left}")
        m = json.load(open(os.path.join(out, "manifest.json")))
        check(m["complete"] is False, f"{sig!r}: complete = {m['complete']!r}")
        check(len(pd.read_csv(os.path.join(out, "steps.csv"))) >= 3, f"{sig!r}: steps.csv")


def check_rerun_full_disk(d):
    """A second trace into a finished trace's folder fails on a full disk while it saves a
    step's tensors (np.savez writes part, then ENOSPC): no truncated step<N>.npz and no
    temporary file is left, and the folder is not the old trace under its old manifest."""
    import errno
    out = os.path.join(d, "rerun")
    m, x, y = model_and_data()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with halfway.torch.trace(m, opt, formats=["fp16"], out=out, save_tensors=True) as tr:
        train(m, x, y, opt, 3, tr)
    old_step1 = open(os.path.join(out, "tensors", "step1.npz"), "rb").read()
    # What a SIGKILLed trace left in tensors/ (a dead process of this host), and what it must
    # keep: another host's file, a live process's file.
    dead = subprocess.Popen(["true"])
    dead.wait()
    suffix = halfway._halfway._tmp_suffix()
    host = suffix.split("@", 1)[1]
    stale = f"step7.npz.tmp.{dead.pid}@{host}"
    kept = [f"step7.npz.tmp.{dead.pid}@x{host}", f"step8.npz{suffix}"]
    for f in [stale] + kept:
        open(os.path.join(out, "tensors", f), "w").write("partial")
    real_savez, calls = np.savez, []

    def full_disk(file, **arrays):
        calls.append(file)
        if len(calls) < 2:
            return real_savez(file, **arrays)
        f = open(file, "wb") if isinstance(file, str) else file
        f.write(b"PK\x03\x04 half an archive")
        f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    np.savez = full_disk
    try:
        m, x, y = model_and_data(seed=1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        try:
            with halfway.torch.trace(m, opt, formats=["fp16"], out=out, save_tensors=True) as tr:
                train(m, x, y, opt, 3, tr)
        except OSError as e:
            check(e.errno == errno.ENOSPC, f"{e!r}")
        else:
            raise AssertionError("the full disk was not reported")
    finally:
        np.savez = real_savez
    check(len(calls) == 2, f"{len(calls)} saves")
    tensors = sorted(os.listdir(os.path.join(out, "tensors")))
    check(tensors == sorted(["step0.npz"] + kept), f"tensors/ after the failed save: {tensors}")
    check(np.load(os.path.join(out, "tensors", "step0.npz")).files, "step0.npz is readable")
    check(old_step1 != open(os.path.join(out, "tensors", "step0.npz"), "rb").read(),
          "an old trace's tensors are left beside the new ones")
    left = [f for f in os.listdir(out) if ".tmp" in f]
    check(left == [], f"temporary files left: {left}")
    manifest = os.path.join(out, "manifest.json")
    check(not os.path.exists(manifest) or json.load(open(manifest))["complete"] is False,
          "the folder says it holds a complete trace")


def check_block_schemes(d):
    """Block schemes in a trace: each weight gradient's blocks.csv row (blocks along the last
    axis of its shape) equals halfway.analyze's row for the same gradient, taken from an
    unhooked replay of the loop."""
    m, x, y = model_and_data()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    out = os.path.join(d, "blocks")
    with halfway.torch.trace(m, opt, formats=["bf16", "nvfp4", "mxfp4"], every=2,
                             out=out) as tr:
        train(m, x, y, opt, 3, tr)
    m2, _, _ = model_and_data()
    grads = []
    train(m2, x, y, torch.optim.SGD(m2.parameters(), lr=0.1), 3, grads=grads)
    b = pd.read_csv(os.path.join(out, "blocks.csv"), dtype=str, keep_default_na=False)
    check(sorted(set(b["step"])) == ["0", "2"], f"blocks.csv steps {sorted(set(b['step']))}")
    tail = list(b.columns[b.columns.get_loc("elements"):])
    n = 0
    for step in (0, 2):
        want = halfway.analyze({k + ".grad": g.numpy() for k, g in grads[step].items()},
                               "nvfp4,mxfp4", out_dir=os.path.join(d, f"blocks-ref{step}"))
        ref = pd.read_csv(os.path.join(d, f"blocks-ref{step}", "blocks.csv"), dtype=str,
                          keep_default_na=False)
        for _, r in ref.iterrows():
            got = b[(b["step"] == str(step)) & (b["name"] == r["name"]) &
                    (b["scheme"] == r["scheme"])]
            check(len(got) == 1 and got.iloc[0]["kind"] == "weight_grad",
                  f"step {step} {r['name']} {r['scheme']}: {len(got)} rows")
            check(list(got.iloc[0][tail]) == list(r[tail]),
                  f"step {step} {r['name']} {r['scheme']}: {list(got.iloc[0][tail])} != "
                  f"{list(r[tail])}")
            n += 1
        check(want.blocks is not None and len(want.blocks) == len(ref), "AnalysisResult.blocks")
    check(n == 2 * 2 * len(grads[0]), f"{n} rows compared")
    # Block schemes alone: steps.csv keeps the loss, with empty counters of element formats.
    m, x, y = model_and_data()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    only = os.path.join(d, "blocks-only")
    with halfway.torch.trace(m, opt, formats="nvfp4", every=2, out=only) as tr:
        train(m, x, y, opt, 3, tr)
    steps = pd.read_csv(os.path.join(only, "steps.csv"))
    check(list(steps["step"]) == [0, 2] and steps["loss"].notna().all()
          and steps["grad_values"].isna().all(), f"steps.csv without element formats: {steps}")
    check(len(pd.read_csv(os.path.join(only, "blocks.csv"))) > 0, "blocks.csv without rows")
    print(f"ok   block schemes: {n} weight-gradient rows of blocks.csv equal halfway.analyze's")
    # axis= and per_block=: blocks down the first axis and one row per block, as analyze's.
    m, x, y = model_and_data()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    first = os.path.join(d, "blocks-axis0")
    with halfway.torch.trace(m, opt, formats="mxfp8_e4m3:rceil,fp8_rowwise", every=2,
                             out=first, axis=0, per_block=True) as tr:
        train(m, x, y, opt, 3, tr)
    b = pd.read_csv(os.path.join(first, "blocks.csv"), dtype=str, keep_default_na=False)
    det = pd.read_csv(os.path.join(first, "blocks_detail.csv"), dtype=str, keep_default_na=False)
    k = down = 0
    for step in (0, 2):
        ref_dir = os.path.join(d, f"axis0-ref{step}")
        halfway.analyze({k2 + ".grad": g.numpy() for k2, g in grads[step].items()},
                        "mxfp8_e4m3:rceil,fp8_rowwise", out_dir=ref_dir, axis=0, per_block=True)
        ref = pd.read_csv(os.path.join(ref_dir, "blocks.csv"), dtype=str, keep_default_na=False)
        rdet = pd.read_csv(os.path.join(ref_dir, "blocks_detail.csv"), dtype=str,
                           keep_default_na=False)
        for _, r in ref.iterrows():
            got = b[(b["step"] == str(step)) & (b["name"] == r["name"]) &
                    (b["scheme"] == r["scheme"])]
            check(len(got) == 1 and list(got.iloc[0][tail]) == list(r[tail]) and
                  got.iloc[0]["axis"] == r["axis"],
                  f"axis 0, step {step} {r['name']} {r['scheme']}")
            down += r["axis"] == "0"  # a 1-D tensor's only axis is its last
            cols = [c for c in rdet.columns if c != "step"]
            g2 = det[(det["step"] == str(step)) & (det["name"] == r["name"]) &
                     (det["scheme"] == r["scheme"])][cols].reset_index(drop=True)
            w2 = rdet[(rdet["name"] == r["name"]) &
                      (rdet["scheme"] == r["scheme"])][cols].reset_index(drop=True)
            check(len(w2) > 0 and g2.equals(w2), f"blocks_detail.csv, step {step} {r['name']} "
                  f"{r['scheme']}: {len(g2)} rows against analyze's {len(w2)}")
            k += 1
    check(k == 2 * 2 * len(grads[0]) and down > 0, f"axis 0: {k} rows compared, {down} "
          "with blocks down the first axis")
    for bad, exc in (({"axis": 1.5}, TypeError), ({"per_block": 1}, TypeError),
                     ({"max_rows": 0}, ValueError)):
        try:
            halfway.torch.trace(m, opt, formats="nvfp4", out=os.path.join(d, "bad"), **bad)
            check(False, f"trace({bad}) accepted")
        except exc as e:
            check(list(bad)[0] in str(e), f"trace({bad}): {e}")
    print(f"ok   axis=0, per_block=True: {k} rows of blocks.csv and their blocks_detail.csv "
          "rows equal halfway.analyze's")


def main():
    with tempfile.TemporaryDirectory() as d:
        check_block_schemes(d)
        check_tensor_kinds(d)
        check_nesting(d)
        check_signals(d)
        check_rerun_full_disk(d)
        # Plain loop: every 2nd step traced, tensors saved for the brute-force check.
        m, x, y = model_and_data()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        out = os.path.join(d, "plain")
        with halfway.torch.trace(m, opt, formats=["fp16", "bf16"], every=2, out=out,
                                 save_tensors=True) as tr:
            train(m, x, y, opt, STEPS, tr)
        t, n = check_counts(out, [0, 2])
        check(n > 30, f"only {n} rows checked")
        # Tiny inputs: the first layer's activation gradients must flush somewhere in fp16.
        steps = pd.read_csv(os.path.join(out, "steps.csv"))
        check(list(steps["step"]) == [0, 2] and steps["loss"].notna().all(), "steps.csv")
        # A replay without hooks: identical gradients and final weights.
        m2, _, _ = model_and_data()
        opt2 = torch.optim.SGD(m2.parameters(), lr=0.1)
        grads = []
        train(m2, x, y, opt2, STEPS, grads=grads)
        for a, b in zip(m.parameters(), m2.parameters()):
            check(torch.equal(a, b), "tracing changed the training")
        saved = np.load(os.path.join(out, "tensors", "step2.npz"))
        for name, g in grads[2].items():
            check(np.array_equal(saved[name + ".grad"], g.reshape(-1).numpy()),
                  f"{name}.grad is not the loop's gradient")

        # Without an optimizer: a forward with autograd starts the next step; evaluation under
        # no_grad is not traced and starts none.
        m, x, y = model_and_data()
        out = os.path.join(d, "noopt")
        with halfway.torch.trace(m, formats=["fp16"], every=2, out=out):
            for s in range(5):
                m.zero_grad()
                torch.nn.functional.mse_loss(m(x[:16]), y[:16]).backward()
                with torch.no_grad():
                    m(x[16:32])
        t = pd.read_csv(os.path.join(out, "trace.csv"))
        check(sorted(t["step"].unique()) == [0, 2, 4], f"steps {sorted(t['step'].unique())}")
        check(set(t["kind"]) == {"activation", "activation_grad"}, f"kinds {set(t['kind'])}")
        check((t[t["name"] == "model.output"]["total"] == 16 * 4).all(), "eval forward traced")

        # An experiment's plot script reads the run folder unchanged, given the one-row index
        # a sweep would have written (gradient_histogram: activation-gradient histograms).
        res = os.path.join(d, "results")
        os.makedirs(res)
        os.rename(out, os.path.join(res, "run"))
        with open(os.path.join(res, "sweep.csv"), "w") as f:
            f.write("dir,steps,k_low\nrun,5,\n")
        with open(os.path.join(res, "sweep.json"), "w") as f:
            json.dump({}, f)
        r = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "gradient_histogram",
                                                         "plot.py"), res],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"gradient_histogram/plot.py: {r.stderr[-2000:]}")
        check(os.path.exists(os.path.join(res, "figures", "gradient_histogram.png")), "figure")

        # With a scaler: loss and scale in steps.csv; activation gradients at the scale,
        # weight gradients unscaled.
        m, x, y = model_and_data()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = StaticScaler(1024)
        out = os.path.join(d, "scaled")
        with halfway.torch.trace(m, opt, formats=["fp16"], every=1, out=out, scaler=scaler,
                                 save_tensors=True, tensor_windows=True):
            train(m, x, y, opt, 2, scaler=scaler)
        t, _ = check_counts(out, [0, 1])
        steps = pd.read_csv(os.path.join(out, "steps.csv"))
        check((steps["loss_scale"] == 1024).all(), "loss_scale")
        check(steps["loss"].notna().all(), "loss not taken from scaler.scale")
        m2, _, _ = model_and_data()
        opt2 = torch.optim.SGD(m2.parameters(), lr=0.1)
        grads = []
        train(m2, x, y, opt2, 2, scaler=StaticScaler(1024), grads=grads)
        saved = np.load(os.path.join(out, "tensors", "step1.npz"))
        for name, g in grads[1].items():
            check(np.array_equal(saved[name + ".grad"], g.reshape(-1).numpy()),
                  f"{name}.grad is not the unscaled gradient")
        w = pd.read_csv(os.path.join(out, "scale_window.csv"), keep_default_na=False)
        ag = set(t[t["kind"] == "activation_grad"]["name"])
        per = w[w["name"].isin(ag)]
        check(len(per) and (per["loss_scale"] == 1024).all(), "activation gradients' scale")
        wg = set(t[t["kind"] == "weight_grad"]["name"])
        per = w[w["name"].isin(wg)]
        check(len(per) and (per["loss_scale"] == 1).all(), "weight gradients' scale")
        # Without tensor_windows only the combined rows (empty name) are written.
        w = pd.read_csv(os.path.join(d, "results", "run", "scale_window.csv"),
                        keep_default_na=False)
        check(len(w) and (w["name"] == "").all(), "per-tensor window rows by default")
        # Bad arguments: ValueError before anything is hooked or written.
        # flush_tolerance in the config's range [0, 1] (NaN made every scale safe, -1 none).
        for kw in ({"formats": ["fp17"]}, {"every": 0}, {"formats": ["fp16", "fp16"]},
                   {"flush_tolerance": float("nan")}, {"flush_tolerance": -1},
                   {"flush_tolerance": 2}, {"scales": (1.5, 2.5)}, {"scales": (0, 10 ** 30)}):
            try:
                halfway.torch.trace(m, out=os.path.join(d, "bad"), **kw)
            except ValueError as e:
                key = next(iter(kw))
                check(key.rstrip("s") in str(e) or key == "every" or key == "formats",
                      f"{kw}: {e} does not name {key}")
                continue
            raise AssertionError(f"{kw}: no ValueError")
        check(not os.path.exists(os.path.join(d, "bad")), "a refused trace wrote its folder")
    print("ok")


if __name__ == "__main__":
    main()
