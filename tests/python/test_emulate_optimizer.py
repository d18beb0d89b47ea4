"""halfway.torch.optimizer against `halfway train`: the default MLP ([10, 32, 1], ReLU, MSE,
batch 64) trained three steps by the simulator and by PyTorch under emulate with the wrapper,
from the same weights and data, ends with bit-identical weights and the same updates.csv rows
(nonzero and vanished per parameter and step), for pure-bf16 with plain and Kahan updates
(SGD with momentum, Adam, AdamW with bf16 state), and for torch-cuda-fp16 with an fp32 master
copy. Negative control: updating the bf16 weights in fp32 and rounding only at the end (what
torch.optim does on a bf16 model's fp32 copy) must disagree. Stochastic update rounding is
reproducible from its seed and differs with another; bad arguments are ValueError/TypeError."""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

np = hwtest.np
torch = hwtest.require("torch", "halfway.torch.optimizer")
pd = hwtest.require("pandas", "halfway.train's result frames")
import halfway  # noqa: E402

hwtest.require_sim("_Optimizer")
import halfway.torch as ht  # noqa: E402
import test_emulate  # noqa: E402  (the default MLP's weights, data and config)

F = torch.nn.functional
STEPS = 3


def mlp(init):
    m = test_emulate.mlp()
    m.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    return m


OPTS = {  # name: (torch.optim constructor, halfway train's [optimizer] table)
    "sgd": (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
            {"kind": "sgd", "lr": 0.05, "momentum": 0.9}),
    "adam": (lambda p: torch.optim.Adam(p, lr=0.01), {"kind": "adam", "lr": 0.01}),
    "adamw": (lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
              {"kind": "adamw", "lr": 0.01, "weight_decay": 0.1}),
}


class AgainstSimulator(test_emulate.DefaultMlp, hwtest.unittest.TestCase):
    def simulate(self, tag, recipe, opt, precision):
        out = os.path.join(self.dir.name, "sim-" + tag)
        precision = dict(precision)
        optimizer = dict(OPTS[opt][1])
        if "state_dtype" in precision:
            optimizer["state_dtype"] = precision.pop("state_dtype")
        cfg = self.config(recipe, optimizer, STEPS, {"weights": True}, precision)
        halfway.train(cfg, out_dir=out)
        w = np.load(os.path.join(out, "weights.npz"))
        return {k: w[k] for k in w.files}, pd.read_csv(os.path.join(out, "updates.csv"))

    def emulate(self, tag, recipe, opt, weights, **kw):
        model = mlp(self.init)
        out = os.path.join(self.dir.name, "emu-" + tag)
        o = ht.optimizer(OPTS[opt][0](model.parameters()), weights=weights, model=model,
                         out=out, **kw)
        x, y = torch.from_numpy(self.x), torch.from_numpy(self.y)
        with ht.emulate(model, recipe=recipe):
            for _ in range(STEPS):
                o.zero_grad()
                F.mse_loss(model(x), y).backward()
                o.step()
        return {k: p.detach().numpy() for k, p in model.named_parameters()}, \
            pd.read_csv(os.path.join(out, "updates.csv"))

    def compare(self, tag, recipe, opt, precision, weights, **kw):
        sw, su = self.simulate(tag, recipe, opt, precision)
        ew, eu = self.emulate(tag, recipe, opt, weights, **kw)
        diffs = [k for k in sw if not np.array_equal(hwtest.bits32(sw[k]),
                                                     hwtest.bits32(ew[k].astype(np.float32)))]
        cols = ["step", "name", "dtype", "elements", "nonzero", "vanished"]
        return diffs, su[cols].equals(eu[cols]), su

    def test_weights_and_vanished_counts_match_the_simulator(self):
        cases = [
            ("sgd-plain", "pure-bf16", "sgd", {}, "bf16", {}),
            ("sgd-kahan", "pure-bf16", "sgd", {"update": "kahan", "compensation": "fp32"},
             "bf16", {"update": "kahan"}),
            ("sgd-kahan-low", "pure-bf16", "sgd", {"update": "kahan", "compensation": "low"},
             "bf16", {"update": "kahan", "compensation": "low"}),
            ("adam-plain", "pure-bf16", "adam", {}, "bf16", {}),
            ("adamw-state", "pure-fp16", "adamw", {"state_dtype": "bf16"}, "fp16",
             {"state_dtype": "bf16"}),
            ("adam-master", "torch-cuda-fp16", "adam", {}, "fp32", {}),
        ]
        for tag, recipe, opt, precision, weights, kw in cases:
            with self.subTest(case=tag):
                diffs, same_rows, rows = self.compare(tag, recipe, opt, precision, weights, **kw)
                self.assertEqual(diffs, [], f"{tag}: weights differ after {STEPS} steps")
                self.assertTrue(same_rows, f"{tag}: updates.csv rows differ")
                if recipe.startswith("pure-") and opt == "sgd" and "kahan" not in tag:
                    # the test means something: bf16 weights lose some updates
                    self.assertGreater(rows.vanished.sum(), 0)

    def test_negative_control_rounding_only_at_the_end(self):
        sw, _ = self.simulate("neg", "pure-bf16", "sgd", {})
        model = mlp(self.init)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.from_numpy(halfway.round(p.numpy(), "bf16")))
        opt = OPTS["sgd"][0](model.parameters())
        x, y = torch.from_numpy(self.x), torch.from_numpy(self.y)
        with ht.emulate(model, recipe="pure-bf16"):
            for _ in range(STEPS):
                opt.zero_grad()
                F.mse_loss(model(x), y).backward()
                opt.step()  # fp32 updates of the fp32 copy
        ew = {k: halfway.round(p.detach().numpy(), "bf16") for k, p in model.named_parameters()}
        diffs = [k for k in sw if not np.array_equal(hwtest.bits32(sw[k]), hwtest.bits32(ew[k]))]
        self.assertNotEqual(diffs, [])


class Stochastic(hwtest.unittest.TestCase):
    def run_steps(self, seed, lr=1e-3, **kw):
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 4)
        o = ht.optimizer(torch.optim.SGD(model.parameters(), lr=lr), weights="bf16",
                         update_rounding="stochastic", seed=seed, **kw)
        x = torch.randn(8, 16)
        for _ in range(3):
            o.zero_grad()
            model(x).square().mean().backward()
            o.step()
        return [p.detach().clone() for p in model.parameters()], o

    def test_reproducible_and_seeded(self):
        a, o = self.run_steps(1)
        b, _ = self.run_steps(1)
        c, _ = self.run_steps(2)
        self.assertTrue(all(torch.equal(u, v) for u, v in zip(a, b)))
        self.assertFalse(all(torch.equal(u, v) for u, v in zip(a, c)))
        for p in a:  # the stored weights are bf16 values
            self.assertTrue(np.array_equal(halfway.round(p.numpy(), "bf16"), p.numpy()))
        self.assertEqual(set(o.vanished()), {"param0", "param1"})

    def test_random_bits(self):
        """With b random bits a value at fraction f of the spacing from its smaller-magnitude
        neighbour rounds away from zero with probability floor(f·2^b)/2^b: with every weight
        at 1.0 (bf16 spacing 2^-7 above) and every update positive and below 2^-10 (f < 1/8),
        3 bits can never move a weight, while 32 bits move some of the 2080 x 3 roundings.
        32 is the default."""
        a, _ = self.run_steps(1)
        b, _ = self.run_steps(1, random_bits=32)
        self.assertTrue(all(torch.equal(u, v) for u, v in zip(a, b)))

        def ones(random_bits):
            torch.manual_seed(0)
            model = torch.nn.Linear(64, 32)
            for p in model.parameters():
                torch.nn.init.constant_(p, 1.0)
            lr = 0.01
            o = ht.optimizer(torch.optim.SGD(model.parameters(), lr=lr), weights="bf16",
                             update_rounding="stochastic", seed=3, random_bits=random_bits)
            x = torch.rand(8, 64)  # positive: -mean(y) has negative gradients, w grows
            largest, smallest = -1.0, 1.0
            for _ in range(3):
                o.zero_grad()
                (-model(x).mean()).backward()
                for p in model.parameters():
                    largest = max(largest, lr * float(p.grad.max()))
                    smallest = min(smallest, lr * float(p.grad.min()))
                o.step()
            return [p.detach().clone() for p in model.parameters()], largest, smallest

        few, largest, smallest = ones(3)
        many, _, _ = ones(32)
        # The premise: every update -lr·g positive and below 2^-10.
        self.assertLess(largest, 0.0)
        self.assertGreater(smallest, -(2.0 ** -10))
        self.assertTrue(all(bool((p == 1.0).all()) for p in few))
        self.assertFalse(all(bool((p == 1.0).all()) for p in many))
        with self.assertRaisesRegex(ValueError, "random_bits"):
            self.run_steps(1, random_bits=0)
        with self.assertRaisesRegex(ValueError, "random_bits"):
            self.run_steps(1, random_bits=33)

    def test_bad_arguments(self):
        model = torch.nn.Linear(2, 2)
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        cases = [
            (TypeError, "RMSprop", dict(opt=torch.optim.RMSprop(model.parameters()))),
            (ValueError, "update_rounding", dict(update_rounding="sideways")),
            (ValueError, "update must be", dict(update="fancy")),
            (ValueError, "Kahan", dict(update="kahan")),  # fp32 weights: sim refuses
            (ValueError, "bf17", dict(weights="bf17")),
            (ValueError, "amsgrad", dict(opt=torch.optim.Adam(model.parameters(), amsgrad=True))),
            (ValueError, "seed", dict(seed=-1)),
        ]
        for exc, text, kw in cases:
            with self.subTest(kw=kw):
                args = dict(opt=sgd)
                args.update(kw)
                with self.assertRaisesRegex(exc, text):
                    ht.optimizer(args.pop("opt"), **args)


if __name__ == "__main__":
    hwtest.unittest.main()
