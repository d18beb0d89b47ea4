"""halfway.torch.emulate on whole models:
- recipe="fp32", accumulation="native" leaves every output and gradient of an MLP, a CNN and an
  attention block bit-identical to plain PyTorch (negative control: bf16 must change them);
- the default MLP of `halfway train` ([10, 32, 1], ReLU, MSE, batch 64), run one step by the
  simulator (halfway.train, grads.npz) and by PyTorch under emulate from the same weights and
  data, gives bit-identical weight and bias gradients for element recipes and block-scaled ones,
  and identical trace.csv rows for every GEMM output (negative control: an emulation that skips
  the weight's quantization must disagree);
- bad input is a ValueError/TypeError naming it, with the model unchanged; leaving the block,
  normally or by an exception, restores the model exactly; the run folder says which.
Under every recipe but fp32 the ReLU and the MSE loss run as the simulator's ops (pure-*: in
the low dtype, the data and target cast into it), so the loss itself is bit-identical too and
so is every trace record both runs write. Under fp32 (every input fp32) PyTorch's own mse_loss
runs, which sums in another order than the simulator's binary64 sum: there the loss is
compared through its gradient, 2/64·(p - t), exact in both. Negative control: a sim op left
to PyTorch (pure-bf16's MSE) must disagree."""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

np = hwtest.np
torch = hwtest.require("torch", "halfway.torch.emulate")
pd = hwtest.require("pandas", "halfway.train's result frames")
import halfway  # noqa: E402

hwtest.require_sim("_Emulator")
import halfway.torch as ht  # noqa: E402
from halfway import emulate as emu_module  # noqa: E402

F = torch.nn.functional


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


class Attention(torch.nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))

    def forward(self, x):
        a = torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2) / 8 ** 0.5, dim=-1)
        return torch.bmm(a, self.v(x)).sum()


def cnn(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2))


def outputs_and_grads(model, x, **emu):
    model.zero_grad()
    xt = x.clone().requires_grad_(True)
    if emu:
        with ht.emulate(model, **emu):
            y = model(xt)
            y.sum().backward()
    else:
        y = model(xt)
        y.sum().backward()
    return [y.detach().clone(), xt.grad.clone()] + [p.grad.clone() for p in model.parameters()]


def read_json(path):
    with open(path) as f:
        return json.load(f)


def bits(t):
    return t.detach().numpy().astype(np.float32).view(np.uint32)


def same_bits(a, b):
    return all(np.array_equal(bits(u), bits(v)) for u, v in zip(a, b))


MODELS = {"mlp": (mlp, (64, 10)), "cnn": (cnn, (2, 3, 6, 6)),
          "attention": (lambda seed=0: (torch.manual_seed(seed), Attention())[1], (2, 5, 8))}


def state(model):
    """Everything leaving the block must restore: parameters' bits, hooks, attributes."""
    s = {k: v.detach().clone() for k, v in model.state_dict().items()}
    hooks = [(n, dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m._backward_hooks),
              sorted(vars(m))) for n, m in model.named_modules()]
    return s, hooks


def same_state(a, b):
    return a[1] == b[1] and a[0].keys() == b[0].keys() and \
        all(torch.equal(a[0][k], b[0][k]) for k in a[0])


class Native(hwtest.unittest.TestCase):
    def test_fp32_native_is_pytorch_bit_for_bit(self):
        for name, (make, shape) in MODELS.items():
            with self.subTest(model=name):
                torch.manual_seed(1)
                x = torch.randn(*shape)
                model = make()
                want = outputs_and_grads(model, x)
                got = outputs_and_grads(model, x, recipe="fp32", accumulation="native")
                self.assertTrue(same_bits(got, want), name)
                # Negative control: the same comparison sees a bf16 recipe's roundings.
                bf = outputs_and_grads(model, x, recipe="torch-cuda-bf16",
                                       accumulation="native")
                self.assertFalse(same_bits(bf, want), f"{name}: bf16 changed nothing")

    def test_every_recipe_and_accumulation_runs(self):
        x = torch.randn(4, 3, 6, 6)
        for recipe in halfway.recipes():
            for acc in [None, "native"] + halfway.accumulations():
                with self.subTest(recipe=recipe, accumulation=acc):
                    r = outputs_and_grads(cnn(), x, recipe=recipe, accumulation=acc)
                    self.assertTrue(all(t.dtype == torch.float32 for t in r))


class DefaultMlp:
    """halfway train's default MLP from weights and data written here (init.npz, data.npz):
    setUpClass writes them, config(...) is the simulator's config reading them."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        d = cls.dir.name
        model = mlp(3)
        cls.init = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        np.savez(os.path.join(d, "init.npz"), **cls.init)
        rng = np.random.default_rng(5)
        cls.x = rng.standard_normal((64, 10)).astype(np.float32)
        cls.y = rng.standard_normal((64, 1)).astype(np.float32)
        np.savez(os.path.join(d, "data.npz"), x=cls.x, y=cls.y)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def config(self, recipe, optimizer, steps, output, precision=None):
        d = self.dir.name
        return {"model": {"kind": "mlp", "layers": [10, 32, 1], "activation": "relu",
                          "init": os.path.join(d, "init.npz")},
                "data": {"npz": os.path.join(d, "data.npz"), "batch_size": 64},
                "loss": {"kind": "mse"}, "optimizer": optimizer,
                "precision": dict(policy=recipe, **(precision or {})),
                "scaler": {"kind": "none"}, "run": {"steps": steps, "seed": 0},
                "output": output}


class AgainstSimulator(DefaultMlp, hwtest.unittest.TestCase):
    """One step of halfway train's default MLP and the same step under emulate."""

    def simulate(self, recipe, accumulation=None):
        out = os.path.join(self.dir.name, "sim-" + recipe + "-" + str(accumulation))
        precision = {"accumulation": accumulation} if accumulation else None
        cfg = self.config(recipe, {"kind": "sgd", "lr": 0.01}, 1, {"grads": True}, precision)
        r = halfway.train(cfg, out_dir=out)
        grads = np.load(os.path.join(out, "grads.npz"))
        g = {k[len("step0."):]: grads[k] for k in grads.files}
        g["loss"] = np.float32(r.steps.loss[0])
        return g, r.trace, r.blocks

    def emulate(self, recipe, accumulation=None, **options):
        model = mlp()
        model.load_state_dict({k: torch.from_numpy(v) for k, v in self.init.items()})
        out = os.path.join(self.dir.name, "emu-" + recipe + "-" + str(accumulation))
        with ht.emulate(model, recipe=recipe, out=out, accumulation=accumulation, **options):
            loss = F.mse_loss(model(torch.from_numpy(self.x)), torch.from_numpy(self.y))
            loss.backward()
        trace = pd.read_csv(os.path.join(out, "trace.csv"), keep_default_na=False,
                            dtype={"hist": str})
        blocks = pd.read_csv(os.path.join(out, "blocks.csv"), keep_default_na=False,
                             dtype={"scale_hist": str})
        g = {k: p.grad.numpy() for k, p in model.named_parameters()}
        g["loss"] = np.float32(loss.item())
        return g, trace, blocks

    def compare(self, recipe, accumulation=None):
        """(parameters whose gradients differ, or "loss"; whether the records both runs write
        are identical; the names of those records)."""
        sim, sim_trace, sim_blocks = self.simulate(recipe, accumulation)
        emu, emu_trace, emu_blocks = self.emulate(recipe, accumulation)
        diffs = [k for k in sim if not np.array_equal(hwtest.bits32(sim[k]), hwtest.bits32(emu[k]))]
        # Every trace.csv record both write (pre-rounding statistics and counts of each
        # rounding). Only the simulator has the optimizer's (*.update); only emulate has
        # `<layer>.grad_output`, a GEMM's rounding of its incoming gradient, which the
        # simulator records under the op that sent it (loss.grad_input, 1.grad_input).
        cols = ["name", "dtype", "total", "zeros", "flushed", "subnormal", "overflow", "inexact",
                "min_exp", "max_exp", "max_abs", "hist"]
        names = sorted(set(emu_trace.name) & set(sim_trace.name))
        pick = lambda t: t[t.name.isin(names)][cols].astype(str) \
            .sort_values("name").reset_index(drop=True)  # noqa: E731
        same = pick(sim_trace).equals(pick(emu_trace))
        # Every blocks.csv record (the block recipes' copies, which trace.csv does not list),
        # in the order they were made: all of them, both ways, with the same statistics (the
        # quantization noise of nvfp4's stochastically rounded gradients included).
        bcols = [c for c in sim_blocks.columns if c != "step"]
        sb, eb = (t[bcols].astype(str).reset_index(drop=True) for t in (sim_blocks, emu_blocks))
        same = same and sb.equals(eb)
        return diffs, same, names + [f"{n} ({g})" for n, g in zip(sb.name, sb.gemm)]

    def test_gradients_loss_and_records_match_the_simulator(self):
        for recipe in halfway.recipes():
            with self.subTest(recipe=recipe):
                diffs, records_same, names = self.compare(recipe)
                if recipe == "fp32":  # PyTorch's own fp32 mse_loss (see above)
                    diffs = [d for d in diffs if d != "loss"]
                self.assertEqual(diffs, [], f"{recipe}: gradients or loss differ")
                self.assertTrue(records_same, f"{recipe}: trace records differ")
                if recipe != "fp32":  # fp32 roundings are traced only into a low dtype
                    self.assertTrue(names, f"{recipe}: no record compared")
                if halfway._halfway._recipe(recipe)["blocks"]:
                    # the four copies of each layer's forward, the gradients' (layer 0 needs
                    # no dgrad: its input needs no gradient, so neither copy is made)
                    self.assertEqual(len(names), 10, names)
                if recipe.startswith("torch-"):
                    # both layers, the ReLU (sim's op on the low dtype) and the loss's
                    # gradient rounded back into the low dtype
                    self.assertTrue({"0.output", "1.output", "2.output",
                                     "loss.grad_input"} <= set(names), names)
                if recipe.startswith("pure-"):
                    # the data and the target cast into the low dtype, the loss computed in it
                    self.assertTrue({"input", "loss.target", "loss.output", "1.output",
                                     "2.weight.grad"} <= set(names), names)

    def test_fp8_recipes_accumulate_as_transformer_engine_under_hopper_names(self):
        # fprop in the fast fp8 accumulator, dgrad and wgrad split (sim's fp8_gemm_model): the
        # simulator and emulate agree bit for bit, and the gradients differ from exact fp32's.
        for recipe in ("fp8-hybrid", "fp8-current"):
            exact = self.simulate(recipe, "fp32")[0]
            for acc in ("h100", "mmasim-hopper"):
                with self.subTest(recipe=recipe, accumulation=acc):
                    diffs, records_same, _ = self.compare(recipe, acc)
                    # The loss of fp32 outputs is PyTorch's own mse_loss (another summation
                    # order, as under fp32 above); its gradient is exact in both.
                    diffs = [d for d in diffs if d != "loss"]
                    self.assertEqual(diffs, [], f"{recipe} under {acc}: gradients differ")
                    self.assertTrue(records_same, f"{recipe} under {acc}: records differ")
                    hopper = self.simulate(recipe, acc)[0]
                    changed = [k for k in exact if not np.array_equal(
                        hwtest.bits32(exact[k]), hwtest.bits32(hopper[k]))]
                    self.assertTrue(changed, f"{recipe}: {acc} accumulates as exact fp32")

    def test_negative_control_fp8_gemm_left_in_fp32(self):
        original = emu_module._Gemm._gemm

        def faulty(self, A, B, bias, dt, layout, alpha=None, fp8=None):
            return original(self, A, B, bias, dt, layout, alpha, None)
        emu_module._Gemm._gemm = faulty
        try:
            diffs, _, _ = self.compare("fp8-hybrid", "h100")
        finally:
            emu_module._Gemm._gemm = original
        self.assertTrue(diffs, "an fp8 GEMM accumulated in exact fp32 must be caught")

    def test_negative_control_nvfp4_streams(self):
        # nvfp4's stochastic rounding of dY draws sim's streams in sim's order: a step that
        # draws one stream fewer (no rounding of the backward's seed), or one more (the dgrad
        # copy of W for layer 0, whose input needs no gradient), rounds dY differently.
        faults = {
            "seed": (emu_module.emulate, "_backward_seed", lambda self, root: None),
            "copies": (emu_module._Gemm, "forward",
                       lambda orig: lambda self, a, b, bias, need_a=True, need_b=True:
                       orig(self, a, b, bias, True, True)),
        }
        for name, (owner, attr, fault) in faults.items():
            with self.subTest(fault=name):
                original = getattr(owner, attr)
                setattr(owner, attr, fault(original) if name == "copies" else fault)
                try:
                    diffs, records_same, _ = self.compare("nvfp4")
                finally:
                    setattr(owner, attr, original)
                self.assertIn("2.weight", diffs)
                self.assertFalse(records_same)

    def test_negative_control_loss_left_to_pytorch(self):
        original = emu_module._read_mse
        emu_module._read_mse = lambda args, kwargs: None
        try:
            diffs, records_same, _ = self.compare("pure-bf16")
        finally:
            emu_module._read_mse = original
        self.assertIn("loss", diffs)
        self.assertIn("2.weight", diffs)

    def test_negative_control_skipped_weight_quantization(self):
        original = emu_module._Gemm._cast

        def faulty(self, x, src, role, kind):
            return x if role == "weight" else original(self, x, src, role, kind)

        emu_module._Gemm._cast = faulty
        try:
            diffs, outputs_same, _ = self.compare("torch-cuda-fp16")
        finally:
            emu_module._Gemm._cast = original
        self.assertIn("0.weight", diffs)
        self.assertFalse(outputs_same)


class BadInputAndRestoration(hwtest.unittest.TestCase):
    def assertUnchanged(self, model, before):
        self.assertTrue(same_state(state(model), before))

    def test_bad_input(self):
        model = mlp()
        before = state(model)
        cases = [
            (TypeError, "model must be", dict(model=[1, 2])),
            (ValueError, "'fp7'", dict(recipe="fp7")),
            (ValueError, "'a200'", dict(accumulation="a200")),
            (ValueError, "matches no module", dict(rules={r"attn": "fp32"})),
            (ValueError, "not a regular expression", dict(rules={"(": "fp32"})),
            (ValueError, "'bf17'", dict(rules={"0": "bf17"})),
            (ValueError, "every", dict(every=0)),
            (ValueError, "seed", dict(seed=-1)),
        ]
        for exc, text, kw in cases:
            with self.subTest(kw=kw):
                args = dict(model=model)
                args.update(kw)
                m = args.pop("model")
                with self.assertRaisesRegex(exc, text):
                    ht.emulate(m, **args)
                self.assertUnchanged(model, before)
        for dtype in (torch.int32, torch.complex64):
            m = torch.nn.Linear(2, 2)
            m.register_parameter("odd", torch.nn.Parameter(torch.zeros(2, dtype=dtype),
                                                           requires_grad=False))
            with self.assertRaisesRegex(TypeError, "'odd'"):
                ht.emulate(m)
        with tempfile.TemporaryDirectory() as d:
            blocker = os.path.join(d, "file")
            open(blocker, "w").close()
            with self.assertRaises(OSError):
                ht.emulate(model, out=os.path.join(blocker, "run"))
        self.assertUnchanged(model, before)

    def test_a_second_run_replaces_the_folder_at_its_end(self):
        # The run folder is published as halfway train's (publish_folder): while a second run
        # into the same folder is in progress the first run's files are there unchanged,
        # complete; at its end every file and the manifest are the second run's, with no
        # temporary file left.
        model = mlp()
        x = torch.randn(8, 10)
        files = ("manifest.json", "steps.csv", "trace.csv", "blocks.csv")

        def contents(d):
            out = {}
            for n in files:
                with open(os.path.join(d, n), "rb") as f:
                    out[n] = f.read()
            return out
        with tempfile.TemporaryDirectory() as d:
            with ht.emulate(model, recipe="torch-cuda-fp16", out=d) as em:
                em.log_loss(model(x).square().mean())
            first = contents(d)
            with ht.emulate(model, recipe="mxfp8", out=d) as em:
                for _ in range(2):
                    model(x).sum().backward()
                self.assertEqual(contents(d), first)
            second = contents(d)
            self.assertTrue(all(second[n] != first[n] for n in files), "a file was not replaced")
            m = json.loads(second["manifest.json"])
            self.assertEqual((m["recipe"], m["steps"], m["complete"]), ("mxfp8", 2, True))
            self.assertEqual(sorted(os.listdir(d)), sorted(files))

    def test_exit_restores_the_model_and_marks_the_folder(self):
        model = mlp()
        x = torch.randn(8, 10)
        before = state(model)
        plain = model(x)
        with tempfile.TemporaryDirectory() as d:
            with ht.emulate(model, recipe="torch-cuda-fp16", out=d) as em:
                for _ in range(2):
                    loss = model(x).square().mean()
                    em.log_loss(loss)
            self.assertUnchanged(model, before)
            self.assertTrue(torch.equal(model(x), plain))
            m = read_json(os.path.join(d, "manifest.json"))
            self.assertTrue(m["complete"])
            self.assertEqual(m["steps"], 2)
            self.assertEqual(m["recipe"], "torch-cuda-fp16")
            self.assertEqual(m["emulated_gemms"], {"linear": 4})
            # the ReLU on fp16 outputs is sim's op; square is not one: PyTorch's, counted
            self.assertEqual(m["emulated_ops"], {"relu": 2})
            self.assertNotIn("F.relu", m["unemulated_ops"])
            self.assertEqual(m["unemulated_ops"].get("Tensor.square"), 2)
            steps = pd.read_csv(os.path.join(d, "steps.csv"))
            self.assertEqual(list(steps.step), [0, 1])
            with self.assertRaisesRegex(RuntimeError, "planted"):
                with ht.emulate(model, recipe="mxfp8", out=d, rules={"^2$": "fp32"}):
                    model(x).sum().backward()
                    raise RuntimeError("planted")
            self.assertUnchanged(model, before)
            self.assertTrue(torch.equal(model(x), plain))
            m = read_json(os.path.join(d, "manifest.json"))
            self.assertFalse(m["complete"])
            self.assertEqual(m["rules"], [["^2$", "fp32"]])
            blocks = pd.read_csv(os.path.join(d, "blocks.csv"))
            # the rule keeps layer 2 in fp32: only layer 0's copies are block-scaled
            self.assertEqual(set(blocks.name), {"0.input", "0.weight", "0.grad_output"})
            self.assertEqual([f for f in os.listdir(d) if f.startswith(".")], [])


if __name__ == "__main__":
    hwtest.unittest.main()
