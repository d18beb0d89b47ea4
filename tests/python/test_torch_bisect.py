"""halfway.torch.bisect (python/halfway/torch_bisect.py): `halfway bisect` on a PyTorch model.

Planted culprits on a 4-layer MLP (inp, a, b, out; 8-16-16-16-1, 705 parameters; 30 steps of
Adam on a fixed regression; CPU, one thread). `inp` and `b` are custom layers whose input
carries one massive constant activation (64) read with weight 0: nothing changes in fp32 or
bf16, but under mxfp4 (blocks of 32) it sets its block's shared scale to 16 and every other
input of the layer (|x| < 4) is flushed to zero, so the layer passes no information on.
- one culprit: torch-cuda-bf16 everywhere, `b` under mxfp4 (a rule): the bisection names `b`
  alone, within 2 + 1 + 2·⌈log2 4⌉ = 7 candidate evaluations, on two seeds;
- two culprits in series: `inp` and `b` under mxfp4: either alone closes little (the other
  still blocks), both together close the gap: the answer is {inp, b} with each member's share;
- resume: a second call trains nothing and writes the same bisect.csv bytes; a smaller budget
  reads the same runs back and stops unfinished;
- every number of the printed paragraph and of bisect.json is recomputed here from
  bisect.csv (and the evidence and the reference's and original's metrics from runs of emulate
  made here), and a tampered bisect.csv must fail that check (negative control);
- nested modules: promoting a part promotes every module under it, before the user's rules,
  and not a module whose name only starts with the part's;
- _halfway._ddmin (sim's ddmin) on planted sets; num_str as std::to_chars writes numbers;
- bad arguments: a TypeError or ValueError naming the argument; no gap: a ValueError with the
  measured numbers, and the folder left without a manifest."""

import contextlib
import csv
import io
import json
import math
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

torch = hwtest.require("torch", "halfway.torch.bisect")
if not torch.__version__.startswith("2."):
    print(f"skipped: halfway.torch.bisect's test needs torch 2.x, not {torch.__version__}")
    sys.exit(hwtest.SKIP)
hwtest.require("matplotlib", "bisect.png")
import halfway  # noqa: E402

hwtest.require_sim("_ddmin")
import halfway.torch as ht  # noqa: E402
from halfway import torch_bisect as tb  # noqa: E402

F = torch.nn.functional
torch.set_num_threads(1)
STEPS = 30


class Massive(torch.nn.Module):
    """A linear layer whose input carries one massive constant activation, read with weight 0."""

    def __init__(self, n_in, n_out):
        super().__init__()
        lin = torch.nn.Linear(n_in, n_out)
        self.weight, self.bias = lin.weight, lin.bias

    def forward(self, h):
        x = torch.cat([h, torch.full_like(h[:, :1], 64.0)], 1)
        w = torch.cat([self.weight, torch.zeros_like(self.weight[:, :1])], 1)
        return F.linear(x, w, self.bias)


class Net(torch.nn.Module):
    def __init__(self, w=16):
        super().__init__()
        self.inp, self.a = Massive(8, w), torch.nn.Linear(w, w)
        self.b, self.out = Massive(w, w), torch.nn.Linear(w, 1)

    def forward(self, x):
        return self.out(torch.relu(self.b(torch.relu(self.a(torch.relu(self.inp(x)))))))


_g = torch.Generator().manual_seed(123)
X = torch.randn(64, 8, generator=_g)
Y = torch.tanh(X @ torch.randn(8, 1, generator=_g)) + 0.5 * X[:, :1] ** 2


def make_model(seed):
    torch.manual_seed(seed)
    return Net()


def train_fn(model, seed, em):
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.mse_loss(model(X), Y)
        loss.backward()
        opt.step()
        em.log_loss(loss)
    return loss.detach().item()


def train_no_curve(model, seed):
    return train_fn(model, seed, em=type("NoLog", (), {"log_loss": lambda self, v: None})())


ONE = {"rules": {"^b$": "mxfp4"}}
TWO = {"rules": {"^(inp|b)$": "mxfp4"}}
PARTS = ["inp", "a", "b", "out"]


def bisect(**kw):
    """ht.bisect with the test's model, and what it printed."""
    args = dict(recipe="torch-cuda-bf16", metric_name="final_loss")
    args.update(kw)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        r = ht.bisect(args.pop("make_model", make_model), args.pop("train_fn", train_fn), **args)
    return r, buf.getvalue()


def run_once(recipe, rules, seed, out=None):
    """One run of the test's loop under emulate, made here: (metric, emulate object)."""
    m = make_model(seed)
    with ht.emulate(m, recipe=recipe, rules=rules, seed=seed, out=out) as em:
        v = train_fn(m, seed, em)
    return v, em


# -- the recomputation: shares nothing with torch_bisect.py ----------------------------------------

def text(path):
    with open(path, newline="") as f:
        return f.read()


def rows_of(path):
    return list(csv.DictReader(io.StringIO(text(path))))


def json_of(path):
    return json.loads(text(path))


def recompute(folder, printed, seeds, budget, metric="final_loss", against="fp32"):
    """Every number of bisect.json and of the printed paragraph from bisect.csv; returns the
    list of what disagrees (empty: all agree)."""
    bad = []
    rows = rows_of(os.path.join(folder, "bisect.csv"))
    a = json_of(os.path.join(folder, "bisect.json"))
    groups = {}
    for r in rows:
        groups.setdefault((r["role"], r["promoted"]), []).append(r)
    means = {}
    for k, rs in groups.items():
        if [int(r["seed"]) for r in rs] != list(seeds):
            bad.append(f"{k}: seeds {[r['seed'] for r in rs]}")
        m = sum(float(r["metric"]) for r in rs) / len(rs)
        means[k] = m
        if any(float(r["mean_metric"]) != m for r in rs):
            bad.append(f"{k}: mean_metric")
        if any(int(r["parts"]) != (len(k[1].split(" + ")) if k[1] else 0) for r in rs):
            bad.append(f"{k}: parts")
    if [int(r["run"]) for r in rows] != list(range(len(rows))):
        bad.append("run numbers")
    ref, orig = means[("reference", "")], means[("original", "")]
    gap = orig - ref
    for k, rs in groups.items():
        if any(float(r["closed"]) != (orig - means[k]) / gap for r in rs):
            bad.append(f"{k}: closed")
    closed = {k[1]: (orig - m) / gap for k, m in means.items() if k[0] == "candidate"}
    culprit = [c["name"] for c in a["culprit"]]
    joined = " + ".join(culprit)
    want = {"reference_metric": ref, "original_metric": orig, "gap": gap,
            "closed": closed.get(joined), "runs_used": len(rows), "budget": budget,
            "threshold": 0.9, "seeds": list(seeds), "against": against, "metric": metric}
    for k, v in want.items():
        if a[k] != v:
            bad.append(f"bisect.json {k}: {a[k]!r}, recomputed {v!r}")
    for c in a["culprit"]:
        if c["closed_alone"] != closed.get(c["name"]):
            bad.append(f"bisect.json closed_alone of {c['name']}")
        rule = "^" + re.escape(c["name"]) + r"(\.|$)"
        if c["setting"] != f"rules[{rule!r}] = {against!r}":
            bad.append(f"bisect.json setting of {c['name']}: {c['setting']}")
    curves = a[f"losses_seed_{seeds[0]}"]
    first = {k[0] if k[0] != "candidate" else k[1]: rs[0] for k, rs in groups.items()}
    for name, key in (("reference", "reference"), ("original", "original"), ("fixed", joined)):
        if key in first:
            if name not in curves or len(curves[name]) != STEPS:
                bad.append(f"curve {name}")
            elif curves[name][-1] is not None and curves[name][-1] != float(first[key]["metric"]):
                bad.append(f"curve {name}: last {curves[name][-1]} is not the metric")
    # The paragraph.
    pct = lambda f: "%.0f%%" % (100 * f)  # noqa: E731
    head = ("halfway.torch.bisect: promoting " +
            " and ".join(f"`{c}`" for c in culprit) + f" to {against} (")
    if not printed.startswith(head):
        bad.append("paragraph head")
    clause = (f" closes {pct(closed[joined])} of the gap in {metric} ({'%.4g' % orig} against "
              f"the {against} reference's {'%.4g' % ref}, gap {'%.4g' % gap}" +
              (f", the mean of {len(seeds)} seeds" if len(seeds) > 1 else "") + ")")
    if clause not in printed:
        bad.append(f"paragraph: no {clause!r}")
    if len(culprit) > 1:
        alone = "; alone, " + ", ".join(
            f"`{c}` closes " + (pct(closed[c]) if c in closed else "(not run)") for c in culprit)
        if alone not in printed:
            bad.append(f"paragraph: no {alone!r}")
    runs = re.search(r"(\d+) runs of a budget of (\d+) \((\d+) run now\)", printed)
    if not runs or (int(runs[1]), int(runs[2]), int(runs[3])) != \
            (len(rows), budget, a["runs_now"]):
        bad.append("paragraph: runs")
    return bad


def evidence(folder, part):
    """Flushed, total and overflowed values of `part` in an emulate run folder (trace.csv's
    low-precision rows and blocks.csv's copies), summed here."""
    flushed = total = over = 0
    for r in rows_of(os.path.join(folder, "trace.csv")):
        if r["name"].startswith(part + ".") and r["dtype"] != "fp32":
            flushed, total, over = (flushed + int(r["flushed"]), total + int(r["total"]),
                                    over + int(r["overflow"]))
    for r in rows_of(os.path.join(folder, "blocks.csv")):
        if r["name"].startswith(part + "."):
            flushed, total, over = (flushed + int(r["flushed"]), total + int(r["elements"]),
                                    over + int(r["saturated"]))
    return flushed, total, over


class PlantedCulprits(hwtest.unittest.TestCase):
    def test_one_culprit_resume_and_budget(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "one")
            r, printed = bisect(seeds=(0, 1), out=out, plot=True, emulate_kwargs=ONE)
            print(printed, end="")
            self.assertEqual(r.parts, PARTS)
            self.assertEqual(r.culprit, ["b"])
            self.assertTrue(r.finished and r.explained)
            self.assertGreaterEqual(r.closed, 0.9)
            # one cause among 4 parts: reference, original, all parts, at most 2·⌈log2 4⌉
            # candidates, each on 2 seeds
            self.assertLessEqual(r.runs_used, 2 * (3 + 4))
            self.assertEqual(r.runs_used, r.runs_now)
            self.assertEqual(recompute(out, printed, [0, 1], 64), [])
            for f in ("bisect.csv", "bisect.json", "bisect.png", "manifest.json"):
                self.assertTrue(os.path.getsize(os.path.join(out, f)), f)
            self.assertTrue(json_of(os.path.join(out, "manifest.json"))["complete"])
            self.assertEqual(len(os.listdir(os.path.join(out, "runs"))), r.runs_used)

            # The reference and the original are emulate's runs, the evidence their trace.
            rows = rows_of(os.path.join(out, "bisect.csv"))
            ref0 = next(x for x in rows if x["role"] == "reference" and x["seed"] == "0")
            self.assertEqual(float(ref0["metric"]), run_once("fp32", None, 0)[0])
            orig0 = next(x for x in rows if x["role"] == "original" and x["seed"] == "0")
            with tempfile.TemporaryDirectory() as em_out:
                v, em = run_once("torch-cuda-bf16", ONE["rules"], 0, em_out)
                self.assertEqual(float(orig0["metric"]), v)
                fl, tot, ov = evidence(em_out, "b")
            self.assertGreater(fl, 0)
            self.assertIn(f"In the original run (seed 0), `b` flushed {fl} of {tot} rounded "
                          f"values to zero (flushed fraction {'%.4g' % (fl / tot)}) and "
                          f"overflowed {ov}.", printed)
            curves = json_of(os.path.join(out, "bisect.json"))["losses_seed_0"]
            self.assertEqual(curves["original"], [v for _, v in em.losses])

            # Negative control: a tampered bisect.csv no longer agrees with bisect.json.
            csv_before = text(os.path.join(out, "bisect.csv"))
            with tempfile.TemporaryDirectory() as t:
                with open(os.path.join(t, "bisect.json"), "w") as g:
                    g.write(text(os.path.join(out, "bisect.json")))
                lines = csv_before.splitlines(True)
                cells = lines[3].split(",")  # the original on seed 1
                cells[5] = repr(float(cells[5]) * 1.001)
                lines[3] = ",".join(cells)
                with open(os.path.join(t, "bisect.csv"), "w") as g:
                    g.write("".join(lines))
                self.assertNotEqual(recompute(t, printed, [0, 1], 64), [])

            # Resume: nothing trained again, the same bytes.
            r2, printed2 = bisect(seeds=(0, 1), out=out, emulate_kwargs=ONE)
            self.assertEqual((r2.runs_now, r2.runs_used, r2.culprit), (0, r.runs_used, ["b"]))
            self.assertEqual(text(os.path.join(out, "bisect.csv")), csv_before)
            self.assertEqual(recompute(out, printed2, [0, 1], 64), [])
            # A budget too small for the search: the same runs read back, unfinished.
            r3, printed3 = bisect(seeds=(0, 1), out=out, emulate_kwargs=ONE, budget=10)
            self.assertEqual((r3.runs_now, r3.runs_used, r3.finished), (0, 10, False))
            self.assertIn("the budget ran out before the search finished", printed3)
            self.assertFalse(json_of(os.path.join(out, "bisect.json"))["finished"])
            self.assertEqual(recompute(out, printed3, [0, 1], 10), [])
            # No gap (the same recipe as the reference): a ValueError with the numbers; the
            # folder's manifest went first, its finished runs stay.
            with self.assertRaisesRegex(ValueError, r"no gap: final_loss ([0-9.e-]+) against "
                                        r"the fp32 reference's \1, gap 0 "):
                bisect(recipe="fp32", out=out)
            self.assertFalse(os.path.exists(os.path.join(out, "manifest.json")))
            self.assertGreaterEqual(len(os.listdir(os.path.join(out, "runs"))), r.runs_used)
        print(f"one culprit: {r.runs_used} runs (2 seeds), {r2.runs_now} on resume")

    def test_two_culprits_together(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "two")
            r, printed = bisect(out=out, emulate_kwargs=TWO)
            print(printed, end="")
            self.assertEqual(r.culprit, ["inp", "b"])
            self.assertTrue(r.finished and r.explained)
            a = json_of(os.path.join(out, "bisect.json"))
            for c in a["culprit"]:
                self.assertLess(c["closed_alone"], 0.9, c)
            self.assertLessEqual(r.runs_used, 16)  # at most n² = 16 after the full set: typ. 13
            self.assertEqual(recompute(out, printed, [0], 64), [])
        print(f"two culprits: {r.runs_used} runs")

    def test_against_another_recipe(self):
        """against="torch-cuda-bf16": only `b` runs under another recipe, so it is the one part;
        the reference is the whole model under bf16, a promotion runs the part under bf16."""
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "bf16")
            r, printed = bisect(out=out, against="torch-cuda-bf16", emulate_kwargs=ONE)
            self.assertEqual((r.parts, r.culprit, r.runs_used), (["b"], ["b"], 3))
            self.assertIn("promoting `b` to torch-cuda-bf16 (rules['^b(\\\\.|$)'] = "
                          "'torch-cuda-bf16') closes", printed)
            self.assertEqual(recompute(out, printed, [0], 64, against="torch-cuda-bf16"), [])
            ref = rows_of(os.path.join(out, "bisect.csv"))[0]
            self.assertEqual(float(ref["metric"]), run_once("torch-cuda-bf16", None, 0)[0])

    def test_without_curves(self):
        """A train_fn without `em`: no loss curve (nulls), the figure still drawn; no folder."""
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "nocurve")
            r, _ = bisect(out=out, plot=True, train_fn=train_no_curve, emulate_kwargs=ONE)
            self.assertEqual(r.culprit, ["b"])
            curves = json_of(os.path.join(out, "bisect.json"))["losses_seed_0"]
            self.assertEqual(curves["reference"], [None] * STEPS)
            self.assertTrue(os.path.getsize(os.path.join(out, "bisect.png")))
        r2, _ = bisect(train_fn=train_no_curve, emulate_kwargs=ONE)  # out=None: nothing kept
        self.assertEqual((r2.culprit, r2.runs_now, r2.out), (["b"], r.runs_used, None))


class Parts(hwtest.unittest.TestCase):
    class Nested(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(4, 8)
            self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
            self.blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(8, 8),
                                                                   torch.nn.ReLU())
                                               for _ in range(2)])
            self.fc10 = torch.nn.Linear(8, 1)

    def test_parts(self):
        m = self.Nested()
        self.assertEqual(tb.model_parts(m, "layer"),
                         ["fc1", "attn", "blocks.0.0", "blocks.1.0", "fc10"])
        self.assertEqual(tb.model_parts(m, "block"),
                         ["fc1", "attn", "blocks.0", "blocks.1", "fc10"])

    def test_promotion_covers_the_part_and_only_it(self):
        m = self.Nested()
        user = {"out_proj": "mxfp4", "^fc10$": "nvfp4", r"^blocks\.0": "mxfp8"}
        for promoted, want in (
                (["attn"], {"attn": "fp32", "attn.out_proj": "fp32", "fc10": "nvfp4",
                            "fc1": "torch-cuda-bf16", "blocks.0.0": "mxfp8"}),
                (["fc1"], {"fc1": "fp32", "fc10": "nvfp4", "attn.out_proj": "mxfp4"}),
                (["blocks.0", "fc10"], {"blocks.0": "fp32", "blocks.0.0": "fp32",
                                        "blocks.0.1": "fp32", "blocks.1.0": "torch-cuda-bf16",
                                        "fc10": "fp32", "attn": "torch-cuda-bf16"})):
            rules = tb.promoted_rules(promoted, "fp32", user)
            got = ht.emulate(m, recipe="torch-cuda-bf16", rules=rules)._module_recipe
            for name, recipe in want.items():
                self.assertEqual(got[name], recipe, (promoted, name))
        # Negative control: the user's rules first would leave attn.out_proj in mxfp4.
        rules = dict(user, **{tb.promotion_rule("attn"): "fp32"})
        got = ht.emulate(m, recipe="torch-cuda-bf16", rules=rules)._module_recipe
        self.assertEqual(got["attn.out_proj"], "mxfp4")

    def test_ddmin_is_sims(self):
        def planted(culprit):
            def evaluate(sets):
                calls.append([list(s) for s in sets])
                return [1.0 if set(culprit) <= set(s) else 0.0 for s in sets]
            return evaluate
        for n, culprit in ((8, [5]), (6, [1, 3]), (9, [0, 4, 8])):
            calls = []
            got, finished = halfway._halfway._ddmin(n, 0.9, 1, planted(culprit))
            self.assertEqual((got, finished), (culprit, True))
        calls = []
        self.assertEqual(halfway._halfway._ddmin(4, 0.9, 1, lambda s: [None] * len(s)),
                         ([0, 1, 2, 3], False))
        with self.assertRaisesRegex(ValueError, "evaluate returned 0 values"):
            halfway._halfway._ddmin(4, 0.9, 1, lambda s: [])

    def test_num_str_is_to_chars(self):
        for v, s in ((0.1, "0.1"), (1e-4, "1e-04"), (1e-5, "1e-05"), (100000.0, "1e+05"),
                     (123456.0, "123456"), (1.0, "1"), (0.0, "0"), (-0.5, "-0.5"),
                     (1.2345678901234567e19, "12345678901234567168"), (math.inf, "inf"),
                     (math.nan, ""), (0.03843, "0.03843"), (1.5e-7, "1.5e-07")):
            self.assertEqual(tb.num_str(v), s, v)


class BadArguments(hwtest.unittest.TestCase):
    def test_bad(self):
        cases = [
            (dict(budget=1), ValueError, "budget must be at least 2"),
            (dict(budget=2.5), TypeError, "budget"),
            (dict(budget=3, seeds=(0, 1)), ValueError, "budget 3 cannot pay"),
            (dict(granularity="tensor"), ValueError, "unknown granularity 'tensor'"),
            (dict(make_model=42), TypeError, "make_model must be callable"),
            (dict(make_model=lambda seed: 42), TypeError, "make_model.*torch.nn.Module"),
            (dict(train_fn=None), TypeError, "train_fn must be callable"),
            (dict(recipe="fp5"), ValueError, "unknown recipe 'fp5'"),
            (dict(against=3), TypeError, "against"),
            (dict(seeds=()), ValueError, "seeds is empty"),
            (dict(seeds=(0, 0)), ValueError, "seeds"),
            (dict(seeds=(-1,)), ValueError, "seeds"),
            (dict(plot=True), ValueError, "plot needs out"),
            (dict(plot=1, out="x"), TypeError, "plot"),
            (dict(emulate_kwargs={"seed": 3}), ValueError, "emulate_kwargs: 'seed'"),
            (dict(emulate_kwargs=[1]), TypeError, "emulate_kwargs"),
            (dict(emulate_kwargs={"rules": {"^nothing$": "fp32"}}), ValueError, "matches no"),
            (dict(min_gap=-1.0), ValueError, "min_gap"),
            (dict(key=3), TypeError, "key"),
            (dict(metric_name=""), ValueError, "metric_name"),
        ]
        for kw, exc, msg in cases:
            with self.subTest(kw=kw):
                with self.assertRaisesRegex(exc, msg):
                    bisect(**kw)
        with self.assertRaisesRegex(TypeError, "train_fn must return the metric"):
            bisect(train_fn=lambda model, seed: "low", emulate_kwargs=ONE)
        with self.assertRaisesRegex(ValueError, r"no gap: final_loss .* gap 0 \(at most "):
            bisect(recipe="fp32")
        with self.assertRaisesRegex(ValueError, r"no gap: .*\(at most 1 counts as none\)"):
            bisect(emulate_kwargs=ONE, min_gap=1.0)  # the planted gap is about 0.6


if __name__ == "__main__":
    hwtest.unittest.main()
