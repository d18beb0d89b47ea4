"""halfway.torch.bisect: `halfway bisect` on a user's own PyTorch model and training loop.

    import halfway.torch as ht

    def make_model(seed):                  # a fresh model: the same weights for the same seed
        torch.manual_seed(seed)
        return Net()

    def train_fn(model, seed, em):          # the loop, unchanged; returns the metric
        ...                                 # (lower is better), e.g. the final loss
        em.log_loss(loss)                   # optional: the loss curves of bisect.json
        return float(loss)

    r = ht.bisect(make_model, train_fn, recipe="mxfp4", out="run.bisect", plot=True)
    r.culprit                               # ['fc2']

It trains the model under `against` (the reference) and under `recipe` (the original), measures
the gap in the metric, then promotes parts of the model (modules, by qualified name) to
`against` with halfway.torch.emulate's rules and trains again, until it has the smallest set of
parts whose promotion closes at least 90% of the gap. The search is the simulator's own
(sim/bisect.hpp's ddmin, through halfway._halfway._ddmin), the decisions around it and the
files are `halfway bisect`'s (tools/halfway/cmd_bisect.cpp): bisect.csv, bisect.json, runs/,
manifest.json last, and bisect.png (halfway.figures.draw_bisect). docs/bisect.md, "On your own
PyTorch model", says what is and is not the same.
"""
import contextlib
import csv
import hashlib
import inspect
import json
import math
import numbers
import os
import re
import tempfile
import types
from dataclasses import dataclass, field

import numpy as np

from . import _args, _halfway
from .emulate import _write_atomic, emulate

__all__ = ["bisect", "BisectResult", "GRANULARITIES", "THRESHOLD"]

FN = "torch.bisect"
THRESHOLD = 0.9  #: the share of the gap the answer must close (cmd_bisect.cpp's kCloseTarget)
GRANULARITIES = ("layer", "block")
#: emulate's arguments a bisection passes on to every run (the rest it sets itself).
EMULATE_KEYS = ("rules", "accumulation", "threads", "random_bits", "every")


@dataclass
class BisectResult:
    """The answer of halfway.torch.bisect (bisect.json holds the same and more)."""
    culprit: list            # the parts' names (module qualified names), 1-minimal
    closed: float            # the share of the gap the culprit closes (mean over the seeds)
    gap: float               # original - reference
    reference_metric: float
    original_metric: float
    finished: bool           # False: the budget ran out; culprit is the smallest set found
    explained: bool          # promoting every part closed at least 90% of the gap
    runs_used: int           # runs of the budget, finished ones read back included
    runs_now: int            # runs trained by this call
    parts: list = field(default_factory=list)
    paragraph: str = ""
    out: str = None


# -- numbers as halfway bisect writes them ---------------------------------------------------------

def num_str(v):
    """std::to_chars' shortest text of a binary64 (cmd_bisect.cpp's num_str): the shortest
    digits that read back to v, in fixed or scientific notation, whichever is shorter (fixed on
    a tie); empty for NaN."""
    v = float(v)
    if v != v:
        return ""
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    r = repr(v)
    sign = "-" if r.startswith("-") else ""
    mant, _, exp = r.lstrip("-").partition("e")
    whole, _, frac = mant.partition(".")
    digits = (whole + frac).lstrip("0") or "0"
    # v = 0.digits * 10^point
    point = len(whole) + int(exp or 0) - (len(whole + frac) - len((whole + frac).lstrip("0")))
    digits = digits.rstrip("0") or "0"
    if digits == "0":
        return sign + "0"
    if point <= 0:
        fixed = "0." + "0" * -point + digits
    elif point >= len(digits):
        fixed = str(int(abs(v)))  # an integer: all its digits, exactly
    else:
        fixed = digits[:point] + "." + digits[point:]
    e = point - 1
    sci = digits[0] + ("." + digits[1:] if len(digits) > 1 else "") + \
        "e" + ("-" if e < 0 else "+") + "%02d" % abs(e)
    return sign + (fixed if len(fixed) <= len(sci) else sci)


def short_num(v):
    return "%.4g" % v


def pct(f):
    return "%.0f%%" % (100 * f)


def _json_num(v):
    return float(v) if math.isfinite(v) else None


def _ratio(a, b):
    """a / b in binary64 as C++ divides (a zero or NaN gap gives NaN or an infinity)."""
    with np.errstate(all="ignore"):
        return float(np.float64(a) / np.float64(b))


# -- the parts -------------------------------------------------------------------------------------

def model_parts(model, granularity):
    """The qualified names of the modules that are the parts, in named_modules() order.

    layer: every module that holds parameters itself (nn.Linear, nn.Conv*, nn.LayerNorm,
        nn.MultiheadAttention, a custom module with an nn.Parameter), the outermost one where
        such modules nest: nn.MultiheadAttention is one part, its out_proj with it.
    block: the model's children, a container (nn.Sequential, nn.ModuleList, nn.ModuleDict)
        replaced by its own children: `blocks.0`, `blocks.1`, ...; those holding parameters.
    The model itself (the name '') is never a part: emulate's rules do not match it."""
    import torch
    if granularity == "layer":
        names = []
        for name, m in model.named_modules():
            if name and not any(name.startswith(p + ".") for p in names) \
                    and next(m.parameters(recurse=False), None) is not None:
                names.append(name)
        return names
    containers = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)
    names = []
    for name, child in model.named_children():
        kids = list(child.named_children()) if isinstance(child, containers) else []
        for n, m in ([(f"{name}.{k}", c) for k, c in kids] if kids else [(name, child)]):
            if next(m.parameters(), None) is not None:
                names.append(n)
    return names


def promotion_rule(name):
    """The emulate rule that promotes part `name`: the module and every module below it (not
    `name` followed by other characters: `fc1` does not cover `fc10`)."""
    return "^" + re.escape(name) + r"(\.|$)"


def promoted_rules(names, against, user_rules):
    """emulate's rules for a run with the parts `names` promoted: their rules first (emulate
    takes the first matching rule, so they win over the user's), then the user's own."""
    rules = {promotion_rule(n): against for n in names}
    for pattern, recipe in (user_rules or {}).items():
        rules.setdefault(pattern, recipe)
    return rules


# -- the runs --------------------------------------------------------------------------------------

def _metric_value(v):
    """The number train_fn returned (a Python or numpy number, or a one-element tensor)."""
    if hasattr(v, "detach") and hasattr(v, "numel") and v.numel() == 1:
        v = v.detach().cpu().item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Real, np.floating,
                                                              np.integer)):
        raise TypeError(f"halfway.{FN}: train_fn must return the metric (a number), not "
                        f"{type(v).__name__}")
    return float(v)


def _read_csv_rows(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _trace_totals(folder):
    """The original run's traced roundings into low precision, per tensor (trace.csv) and per
    block-scaled copy (blocks.csv, `name [gemm]`, saturated counted as overflow), summed over
    the traced steps, as cmd_bisect.cpp's train_one keeps them."""
    t = {}
    for r in _read_csv_rows(os.path.join(folder, "trace.csv")):
        if r["dtype"] == "fp32":
            continue
        x = t.setdefault(r["name"], {"op": r["op"], "gemm": "", "total": 0, "flushed": 0,
                                     "overflow": 0})
        x["total"] += int(r["total"])
        x["flushed"] += int(r["flushed"])
        x["overflow"] += int(r["overflow"])
    for r in _read_csv_rows(os.path.join(folder, "blocks.csv")):
        x = t.setdefault(f"{r['name']} [{r['gemm']}]", {"op": r["op"], "gemm": r["gemm"],
                                                        "total": 0, "flushed": 0,
                                                        "overflow": 0})
        x["total"] += int(r["elements"])
        x["flushed"] += int(r["flushed"])
        x["overflow"] += int(r["saturated"])
    return dict(sorted(t.items()))


class _Runs:
    """Each (candidate, seed) run once, read back from out/runs/KEY.json when an earlier call
    finished it, counted against the budget (cmd_bisect.cpp's RunCache)."""

    def __init__(self, folder, definition, budget):
        self.folder, self.definition, self.budget = folder, definition, budget
        self.used = {}
        self.ran = 0

    def key(self, what, seed):
        text = f"{self.definition}\n{what}\nseed {seed}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def get(self, specs):
        """specs: [(key, train)]: each result, None from the first the budget cannot pay."""
        out = [None] * len(specs)
        todo = []
        n = len(self.used)
        for i, (k, _) in enumerate(specs):
            if k in self.used:
                out[i] = self.used[k]
                continue
            if n >= self.budget:
                break
            n += 1
            f = self.folder and os.path.join(self.folder, k + ".json")
            if f and os.path.exists(f):
                with open(f) as fh:
                    out[i] = self.used[k] = _run_from_json(json.load(fh))
            else:
                todo.append(i)
        for i in todo:
            k, train = specs[i]
            r = train()
            if self.folder:
                _write_atomic(os.path.join(self.folder, k + ".json"),
                              json.dumps(_run_to_json(r)) + "\n")
            out[i] = self.used[k] = r
            self.ran += 1
        return out


def _run_to_json(r):
    return {"metric": _json_num(r["metric"]), "losses": [_json_num(v) for v in r["losses"]],
            "tensors": r["tensors"]}


def _run_from_json(j):
    num = (lambda v: float("nan") if v is None else float(v))
    return {"metric": num(j["metric"]), "losses": [num(v) for v in j["losses"]],
            "tensors": j["tensors"]}


# -- the search ------------------------------------------------------------------------------------

@dataclass
class _Tried:
    role: str                 # reference, original, candidate
    set: tuple
    runs: list                # one per seed
    mean: float = float("nan")
    closed: float = float("nan")


class _Bisection:
    def __init__(self, make_model, train_fn, recipe, against, parts, seeds, user_rules,
                 emulate_kwargs, runs, pass_em):
        self.make_model, self.train_fn = make_model, train_fn
        self.recipe, self.against, self.parts, self.seeds = recipe, against, parts, seeds
        self.user_rules, self.kwargs, self.runs, self.pass_em = \
            user_rules, emulate_kwargs, runs, pass_em
        self.tried = []
        self.ref = self.orig = self.gap = float("nan")

    def names(self, s):
        return " + ".join(self.parts[i] for i in s)

    def setting(self, i):
        return f"rules[{promotion_rule(self.parts[i])!r}] = {self.against!r}"

    def find(self, s):
        return next((t for t in self.tried if t.role == "candidate" and t.set == tuple(s)),
                    None)

    def _train(self, role, s, seed):
        model = self.make_model(seed)
        _check_model(model)
        if role == "reference":
            recipe, rules = self.against, None
        else:
            recipe = self.recipe
            rules = promoted_rules([self.parts[i] for i in s], self.against, self.user_rules)
        evidence = role == "original"  # its trace: the paragraph's evidence
        with (tempfile.TemporaryDirectory(prefix="halfway-bisect-") if evidence
              else contextlib.nullcontext()) as tmp:
            em = emulate(model, recipe=recipe, rules=rules or None, seed=seed, out=tmp,
                         **self.kwargs)
            with em:
                got = self.train_fn(model, seed, em=em) if self.pass_em \
                    else self.train_fn(model, seed)
            metric = _metric_value(got)
            tensors = _trace_totals(tmp) if evidence else {}
        return {"metric": metric, "losses": [float(v) for _, v in em.losses],
                "tensors": tensors}

    def evaluate(self, whats):
        """Run `whats` ([(role, set)]) over every seed; the _Tried rows of those paid for."""
        specs = []
        for role, s in whats:
            what = "promote " + self.names(s) if role == "candidate" else role
            for seed in self.seeds:
                specs.append((self.runs.key(what, seed),
                              lambda role=role, s=s, seed=seed: self._train(role, s, seed)))
        res = self.runs.get(specs)
        k = len(self.seeds)
        out = []
        for i, (role, s) in enumerate(whats):
            rs = res[i * k:(i + 1) * k]
            if any(r is None for r in rs):
                return out  # the budget ran out here
            t = _Tried(role, tuple(s), list(rs))
            t.mean = sum(r["metric"] for r in rs) / k
            t.closed = _ratio(self.orig - t.mean, self.gap)
            known = self.find(s) if role == "candidate" else None
            if known is None:
                self.tried.append(t)
                known = t
            out.append(known)
        return out

    def measure_gap(self):
        if len(self.evaluate([("reference", ()), ("original", ())])) < 2:
            return False
        self.ref, self.orig = self.tried[0].mean, self.tried[1].mean
        self.gap = self.orig - self.ref
        for t in self.tried:
            t.closed = _ratio(self.orig - t.mean, self.gap)
        return True

    def closed(self, sets):
        r = self.evaluate([("candidate", tuple(s)) for s in sets])
        out = [None] * len(sets)
        for i, t in enumerate(r):
            out[i] = -math.inf if math.isnan(t.closed) else t.closed
        return out


# -- what it writes and says -----------------------------------------------------------------------

def _evidence(name, orig):
    """Part `name`'s low-precision roundings in the original run, one clause."""
    total = flushed = overflow = 0
    for tensor, t in orig["tensors"].items():
        if tensor.startswith(name + "."):
            total, flushed, overflow = (total + t["total"], flushed + t["flushed"],
                                        overflow + t["overflow"])
    if total == 0:
        return f"`{name}` has no traced low-precision rounding"
    s = (f"`{name}` flushed {flushed} of {total} rounded values to zero (flushed fraction "
         f"{short_num(flushed / total)})")
    return s + (f" and overflowed {overflow}" if overflow else "")


def _paragraph(b, culprit, closed, finished, metric_name, budget):
    names = [b.parts[i] for i in culprit]
    s = "halfway.torch.bisect: promoting "
    for i, n in enumerate(names):
        s += ("" if i == 0 else " and " if i + 1 == len(names) else ", ") + f"`{n}`"
    s += f" to {b.against} (" + "; ".join(b.setting(i) for i in culprit) + ")"
    s += (" together" if len(culprit) > 1 else "") + f" closes {pct(closed)} of the gap in " \
        f"{metric_name} ({short_num(b.orig)} against the {b.against} reference's " \
        f"{short_num(b.ref)}, gap {short_num(b.gap)}" + \
        (f", the mean of {len(b.seeds)} seeds" if len(b.seeds) > 1 else "") + ")"
    if len(culprit) > 1:
        alone = []
        for i in culprit:
            t = b.find((i,))
            alone.append(f"`{b.parts[i]}` closes " + (pct(t.closed) if t else "(not run)"))
        s += "; alone, " + ", ".join(alone)
    orig = b.tried[1].runs[0]
    s += f". In the original run (seed {b.seeds[0]}), " + \
        "; ".join(_evidence(b.parts[i], orig) for i in culprit) + ". "
    s += f"{len(b.runs.used)} runs of a budget of {budget} ({b.runs.ran} run now)"
    if not finished:
        s += "; the budget ran out before the search finished: the set is the smallest found"
    return s + ".\n"


def csv_text(b):
    """bisect.csv, as cmd_bisect.cpp's csv_text writes it."""
    s = "run,role,promoted,parts,seed,metric,mean_metric,closed\n"
    run = 0
    for t in b.tried:
        promoted = b.names(t.set).replace(",", " ").replace('"', " ")
        for seed, r in zip(b.seeds, t.runs):
            s += f"{run},{t.role},{promoted},{len(t.set)},{seed},{num_str(r['metric'])}," \
                 f"{num_str(t.mean)},{num_str(t.closed)}\n"
            run += 1
    return s


def answer_json(b, culprit, closed, finished, o):
    """bisect.json: cmd_bisect.cpp's answer_json (its keys sorted, as nlohmann writes them),
    with `recipe` and `tool` added."""
    members = []
    for i in culprit:
        t = b.find((i,))
        members.append({"name": b.parts[i], "setting": b.setting(i),
                        "closed_alone": _json_num(t.closed) if t else None})
    curves = {"reference": [_json_num(v) for v in b.tried[0].runs[0]["losses"]],
              "original": [_json_num(v) for v in b.tried[1].runs[0]["losses"]]}
    t = b.find(culprit)
    if t is not None:
        curves["fixed"] = [_json_num(v) for v in t.runs[0]["losses"]]
    from . import __version__
    return {"config": o["key"], "tool": "halfway.torch.bisect", "recipe": str(b.recipe),
            "against": b.against, "metric": o["metric"], "granularity": o["granularity"],
            "seeds": list(b.seeds), "threshold": THRESHOLD,
            "reference_metric": _json_num(b.ref), "original_metric": _json_num(b.orig),
            "gap": _json_num(b.gap),
            "parts": [{"name": p, "setting": b.setting(i)} for i, p in enumerate(b.parts)],
            "culprit": members, "closed": _json_num(closed), "finished": bool(finished),
            "runs_used": len(b.runs.used), "runs_now": b.runs.ran, "budget": o["budget"],
            f"losses_seed_{b.seeds[0]}": curves, "version": __version__}


# -- arguments -------------------------------------------------------------------------------------

def _check_model(model):
    import torch
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"halfway.{FN}: make_model(seed) must return a torch.nn.Module, not "
                        f"{type(model).__name__}")


def _recipe_name(arg, v):
    if not isinstance(v, str):
        raise TypeError(f"halfway.{FN}: {arg} must be a recipe name (str), not "
                        f"{type(v).__name__}")
    names = list(_halfway._recipe_names()) + list(_halfway._custom_recipe_names())
    if v not in names:
        raise ValueError(f"halfway.{FN}: unknown {arg} {v!r} (recipes: {' '.join(names)})")
    return v


def _seeds(seeds):
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise TypeError(f"halfway.{FN}: seeds must be a sequence of integers, not "
                        f"{type(seeds).__name__}")
    out = [_args.integer(FN, "seeds", s, 0, _args.U64) for s in seeds]
    if not out:
        raise ValueError(f"halfway.{FN}: seeds is empty")
    if len(set(out)) != len(out):
        raise ValueError(f"halfway.{FN}: seeds {out} has a seed twice")
    return out


def _emulate_kwargs(kw):
    if kw is None:
        return {}
    if not isinstance(kw, dict):
        raise TypeError(f"halfway.{FN}: emulate_kwargs must be a dict, not {type(kw).__name__}")
    for k in kw:
        if k not in EMULATE_KEYS:
            raise ValueError(f"halfway.{FN}: emulate_kwargs: {k!r} is not passed on (bisect "
                             f"sets recipe, seed and out itself; it passes on "
                             f"{', '.join(EMULATE_KEYS)})")
    return dict(kw)


def _takes_em(train_fn):
    try:
        return "em" in inspect.signature(train_fn).parameters
    except (TypeError, ValueError):
        return False


def _default_key(make_model, train_fn):
    def q(f):
        return f"{getattr(f, '__module__', '')}.{getattr(f, '__qualname__', type(f).__name__)}"
    return f"make_model {q(make_model)}, train_fn {q(train_fn)}"


def _check_budget(budget, seeds):
    budget = _args.integer(FN, "budget", budget, 0, _args.I64)
    if budget < 2:
        raise ValueError(f"halfway.{FN}: budget must be at least 2 (the reference and the "
                         f"original run), got {budget}")
    if budget < 2 * len(seeds):
        raise ValueError(f"halfway.{FN}: budget {budget} cannot pay for the reference and the "
                         f"original runs of {len(seeds)} seeds")
    return budget


def _check_min_gap(min_gap):
    if min_gap is not None:
        if isinstance(min_gap, (bool, np.bool_)) or not isinstance(min_gap, numbers.Real):
            raise TypeError(f"halfway.{FN}: min_gap must be a number or None, not "
                            f"{type(min_gap).__name__}")
        if not min_gap >= 0:
            raise ValueError(f"halfway.{FN}: min_gap must be at least 0, got {min_gap!r}")
    return min_gap


def _arguments(make_model, train_fn, recipe, against, granularity, metric_name, seeds, budget,
               out, plot, emulate_kwargs, min_gap, key):
    """bisect's arguments checked, in the order of its signature, and normalised; a TypeError
    or ValueError naming the first bad one."""
    if not callable(make_model):
        raise TypeError(f"halfway.{FN}: make_model must be callable (seed -> torch.nn.Module), "
                        f"not {type(make_model).__name__}")
    if not callable(train_fn):
        raise TypeError(f"halfway.{FN}: train_fn must be callable ((model, seed) -> metric), "
                        f"not {type(train_fn).__name__}")
    a = types.SimpleNamespace(recipe=_recipe_name("recipe", recipe),
                              against=_recipe_name("against", against))
    _args.name(FN, "granularity", granularity)
    if granularity not in GRANULARITIES:
        raise ValueError(f"halfway.{FN}: unknown granularity {granularity!r} (granularities: "
                         f"{' '.join(GRANULARITIES)})")
    a.granularity = granularity
    _args.name(FN, "metric_name", metric_name)
    a.metric_name = metric_name
    a.seeds = _seeds(seeds)
    a.budget = _check_budget(budget, a.seeds)
    a.out = None if out is None else _args.path(FN, "out", out)
    a.plot = _args.flag(FN, "plot", plot)
    if a.plot and a.out is None:
        raise ValueError(f"halfway.{FN}: plot needs out (the folder bisect.png is drawn in)")
    a.kw = _emulate_kwargs(emulate_kwargs)
    a.min_gap = _check_min_gap(min_gap)
    if key is None:
        key = _default_key(make_model, train_fn)
    elif not isinstance(key, str):
        raise TypeError(f"halfway.{FN}: key must be a str or None, not {type(key).__name__}")
    a.key = key
    return a


def _listed_parts(model, a, user_rules):
    """The model's parts at the granularity that some module of does not run under `against`
    already. emulate checks the rest of its arguments (rules, accumulation, threads,
    random_bits, every) as it would, and says which recipe each module gets."""
    assigned = emulate(model, recipe=a.recipe, rules=user_rules, **a.kw)._module_recipe
    return [p for p in model_parts(model, a.granularity)
            if any(r != a.against for m, r in assigned.items() if m == p or
                   m.startswith(p + "."))]


def _open_runs(a, user_rules):
    """The run cache: out/runs for this search's definition (nothing kept without out); an
    earlier answer in out is withdrawn until this one is published."""
    definition = json.dumps({"recipe": str(a.recipe), "against": a.against,
                             "granularity": a.granularity, "metric": a.metric_name,
                             "key": a.key, "rules": list((user_rules or {}).items()),
                             "emulate": {k: repr(v) for k, v in sorted(a.kw.items())}},
                            sort_keys=True)
    runs_dir = None
    if a.out is not None:
        runs_dir = os.path.join(a.out, "runs")
        os.makedirs(runs_dir, exist_ok=True)
        _halfway._unpublish_folder(a.out, ["bisect.csv", "bisect.json"])
    return _Runs(runs_dir, definition, a.budget)


def _check_gap(b, a, parts):
    """Measures the reference and the original; a ValueError when there is no gap or no part
    to promote."""
    if not b.measure_gap():  # not reached: the budget was checked above
        raise ValueError(f"halfway.{FN}: budget {a.budget} cannot pay for the reference and "
                         f"the original runs of {len(a.seeds)} seeds")
    limit = float(a.min_gap) if a.min_gap is not None else 1e-6 + 1e-3 * abs(b.ref)
    if not abs(b.gap) > limit:
        raise ValueError(f"halfway.{FN}: no gap: {a.metric_name} {num_str(b.orig)} against the "
                         f"{a.against} reference's {num_str(b.ref)}, gap {num_str(b.gap)} (at "
                         f"most {num_str(limit)} counts as none); nothing to bisect")
    if not parts:
        raise ValueError(f"halfway.{FN}: a gap of {num_str(b.gap)} in {a.metric_name}, but no "
                         f"module of the model runs under another recipe than {a.against} at "
                         f"granularity {a.granularity}")


def _search(b, n):
    """All n parts promoted, then ddmin down to a smallest set that closes THRESHOLD of the
    gap, then each member alone: (the share all parts close or None, the culprit, whether the
    budget let the search finish)."""
    everything = tuple(range(n))
    f_all = b.closed([everything])[0]
    culprit, finished = everything, f_all is not None
    if f_all is not None and f_all >= THRESHOLD:
        found, finished = _halfway._ddmin(n, THRESHOLD, 1, b.closed)
        culprit = tuple(found)
    if finished and len(culprit) > 1:
        for r in b.closed([(i,) for i in culprit]):
            finished = finished and r is not None
    return f_all, culprit, finished


def _publish(b, a, culprit, closed, finished):
    """Writes out/bisect.csv and out/bisect.json, then manifest.json."""
    from . import __version__
    options = {"key": a.key, "metric": a.metric_name, "granularity": a.granularity,
               "budget": a.budget}
    manifest = {"tool": "halfway.torch.bisect", "config": a.key, "complete": True,
                "version": __version__, "git_revision": _halfway._git_revision()}
    _halfway._publish_texts(a.out, [
        ("bisect.csv", csv_text(b)),
        ("bisect.json", json.dumps(answer_json(b, culprit, closed, finished, options),
                                   indent=2, sort_keys=True) + "\n")],
        json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def bisect(make_model, train_fn, recipe, against="fp32", granularity="layer",
           metric_name="metric", seeds=(0,), budget=64, out=None, plot=False,
           emulate_kwargs=None, min_gap=None, key=None):
    """Which modules of a model explain the gap between its run under `recipe` and under
    `against`: `halfway bisect`'s search over the model's modules (docs/bisect.md).

    make_model(seed): a fresh torch.nn.Module, the same initial weights for the same seed (it is
        called once more, with seeds[0], to list the parts and check the arguments).
    train_fn(model, seed) or train_fn(model, seed, em): trains the model (the caller's loop, run
        inside `halfway.torch.emulate(model, recipe=..., rules=..., seed=seed)`, which bisect
        enters) and returns the metric, a number, lower is better (e.g. the final loss); NaN or
        an infinity is a run that diverged (it closes nothing). With a parameter named `em` it
        gets the emulate object: `em.log_loss(loss)` on each step gives bisect.json's curves.
    recipe: the original run's recipe (halfway.recipes(), or ht.recipe_from_toml's).
    against: the reference's recipe, "fp32" by default, or any other recipe: the reference runs
        everything under it (the user's rules dropped), and a promoted part runs under it.
    granularity: "layer" (modules holding parameters, the outermost where they nest) or "block"
        (the model's children, containers opened one level): model_parts(). Only parts with a
        module whose recipe (under recipe and the user's rules) is not `against` are listed.
    metric_name: the metric's name in the paragraph and bisect.json.
    seeds: each run is trained once per seed and the metric is the mean over them.
    budget: the most runs (one candidate on one seed is one run), at least 2; finished runs
        read back from out/runs count too, so a resumed search makes the same decisions.
    out: a folder for runs/KEY.json, bisect.csv, bisect.json and manifest.json (written last),
        or None (nothing written, nothing resumed).
    plot: also draw out/bisect.png (halfway.figures.draw_bisect; needs out).
    emulate_kwargs: emulate's rules (the user's own, after the promotions), accumulation,
        threads, random_bits (every run, the reference included), every (the original's trace).
    min_gap: a gap of at most this is no gap (ValueError); default 1e-6 + 1e-3·|reference|.
    key: a text naming the model and loop for the run cache (default: make_model's and
        train_fn's qualified names): change it when they change.

    Returns a BisectResult and prints one paragraph (the culprit, the gap it closes, the trace
    evidence of the original run, the runs used). Bad arguments are a TypeError or ValueError
    naming the argument, before anything is trained.
    """
    a = _arguments(make_model, train_fn, recipe, against, granularity, metric_name, seeds,
                   budget, out, plot, emulate_kwargs, min_gap, key)
    model = make_model(a.seeds[0])
    _check_model(model)
    user_rules = a.kw.pop("rules", None)
    parts = _listed_parts(model, a, user_rules)
    runs = _open_runs(a, user_rules)
    b = _Bisection(make_model, train_fn, a.recipe, a.against, parts, a.seeds, user_rules, a.kw,
                   runs, _takes_em(train_fn))
    _check_gap(b, a, parts)
    f_all, culprit, finished = _search(b, len(parts))
    t = b.find(culprit)
    closed = t.closed if t is not None else float("nan")
    if a.out is not None:
        _publish(b, a, culprit, closed, finished)
    text = _paragraph(b, culprit, closed, finished, a.metric_name, a.budget)
    explained = f_all is not None and f_all >= THRESHOLD
    if f_all is not None and not explained:
        text += (f"halfway.torch.bisect: promoting every part closes only {pct(f_all)} of the "
                 "gap: the parts do not explain it (seed noise, or ops outside the parts: the "
                 "loss, the model's own)\n")
    print(text, end="")
    if a.plot:
        from . import figures
        figures.draw_bisect(a.out)
    return BisectResult(culprit=[parts[i] for i in culprit], closed=closed, gap=b.gap,
                        reference_metric=b.ref, original_metric=b.orig, finished=finished,
                        explained=explained, runs_used=len(runs.used), runs_now=runs.ran,
                        parts=list(parts), paragraph=text, out=a.out)
