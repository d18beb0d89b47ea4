"""emulate_recipes: train a PyTorch nn.TransformerEncoder under halfway.torch.emulate, once per
recipe and seed of emulate.toml, into a results folder laid out as a sweep's:

    RESULTS/runs/NNNN/    one emulate run folder each (steps.csv, trace.csv, blocks.csv,
                          manifest.json), run NNNN = recipe i, seed j in file order
    RESULTS/sweep.csv     run, dir, case (the recipe), seed, steps, final_loss
    RESULTS/sweep.json    the definition (emulate.toml, its hash, the runs); written last

usage: python3 run.py RESULTS [--jobs N]      (`halfway run experiments/emulate_recipes`)

Needs torch and halfway's Python module (PYTHONPATH=build/python, or the package installed).
A run is trained into runs/.NNNN.tmp.PID and renamed into place when its manifest says
complete, so runs/ holds only finished runs; a second invocation reuses them (a resume), and
sweep.json is removed first and written last, so a folder without it is incomplete. A folder
made from another emulate.toml is refused. The outputs do not depend on --jobs.
Exit 0 done, 2 bad input, 77 torch or halfway's module missing.
"""
import argparse
import concurrent.futures
import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
DEFINITION = os.path.join(HERE, "emulate.toml")
KEYS = {"model": {"vocab", "seq_len", "d_model", "heads", "dim_feedforward", "layers"},
        "data": {"batch_size"}, "optimizer": {"lr"},
        "run": {"steps", "every", "seeds", "recipes"}}


def fail(msg, code=2):
    print("emulate_recipes: error: " + msg, file=sys.stderr)
    sys.exit(code)


def load_definition(path):
    """emulate.toml as a dict, every key checked; and its hash (16 hex digits of SHA-256)."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        d = tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        fail("%s: %s" % (path, e))
    for table, keys in KEYS.items():
        got = d.get(table)
        if not isinstance(got, dict) or set(got) != keys:
            fail("%s: [%s] needs exactly %s (has %s)" % (path, table, ", ".join(sorted(keys)),
                                                        ", ".join(sorted(got or {})) or "nothing"))
    if set(d) != set(KEYS):
        fail("%s: unknown table(s) %s" % (path, ", ".join(sorted(set(d) - set(KEYS)))))
    for table in ("model", "data"):
        for k, v in d[table].items():
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 4096:
                fail("%s: %s.%s must be an integer in 1..4096, got %r" % (path, table, k, v))
    r = d["run"]
    if not isinstance(r["steps"], int) or not 1 <= r["steps"] <= 100000:
        fail("%s: run.steps must be an integer in 1..100000, got %r" % (path, r["steps"]))
    if not isinstance(r["every"], int) or r["every"] < 1:
        fail("%s: run.every must be a positive integer, got %r" % (path, r["every"]))
    if not r["seeds"] or not all(isinstance(s, int) and 0 <= s < 2 ** 32 for s in r["seeds"]):
        fail("%s: run.seeds must be a non-empty list of integers in 0..2^32-1" % path)
    if not r["recipes"] or len(set(r["recipes"])) != len(r["recipes"]):
        fail("%s: run.recipes must be a non-empty list of distinct names" % path)
    lr = d["optimizer"]["lr"]
    if not isinstance(lr, float) or not 0 < lr < 1:
        fail("%s: optimizer.lr must be a number in (0, 1), got %r" % (path, lr))
    return d, hashlib.sha256(raw).hexdigest()[:16]


def runs_of(d):
    """[(case, seed)] in run order: recipes slowest, then seeds."""
    return [(rc, s) for rc in d["run"]["recipes"] for s in d["run"]["seeds"]]


def build(d, seed):
    """The model and its AdamW optimizer, initialised from `seed`."""
    import torch

    m = d["model"]

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(m["vocab"], m["d_model"])
            self.position = torch.nn.Parameter(0.1 * torch.randn(m["seq_len"], m["d_model"]))
            layer = torch.nn.TransformerEncoderLayer(
                m["d_model"], nhead=m["heads"], dim_feedforward=m["dim_feedforward"],
                dropout=0.0, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, num_layers=m["layers"],
                                                       enable_nested_tensor=False)
            self.head = torch.nn.Linear(m["d_model"], m["vocab"])

        def forward(self, tokens):
            return self.head(self.encoder(self.embed(tokens) + self.position).mean(dim=1))

    torch.manual_seed(seed)
    model = Encoder()
    return model, torch.optim.AdamW(model.parameters(), lr=d["optimizer"]["lr"])


def batch(d, seed, step):
    """Batch `step` of seed `seed`: batch_size sequences of uniform tokens, the first as target."""
    import torch

    g = torch.Generator().manual_seed(seed * 1000003 + step)
    x = torch.randint(0, d["model"]["vocab"], (d["data"]["batch_size"], d["model"]["seq_len"]),
                      generator=g)
    return x, x[:, 0]


def train(d, case, seed, out):
    """One run into `out` (an emulate run folder)."""
    import torch
    import halfway.torch as ht

    torch.set_num_threads(1)
    model, opt = build(d, seed)
    with ht.emulate(model, recipe=case, seed=seed, every=d["run"]["every"], out=out) as em:
        for step in range(d["run"]["steps"]):
            x, y = batch(d, seed, step)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            em.log_loss(loss)


def complete(folder):
    try:
        with open(os.path.join(folder, "manifest.json")) as f:
            return json.load(f).get("complete") is True
    except (OSError, ValueError):
        return False


def run_one(d, index, case, seed, runs):
    """Train run `index` unless runs/NNNN is already complete; its folder's name."""
    final = os.path.join(runs, "%04d" % index)
    if complete(final):
        return final
    tmp = os.path.join(runs, ".%04d.tmp.%d" % (index, os.getpid()))
    shutil.rmtree(tmp, ignore_errors=True)
    train(d, case, seed, tmp)
    if not complete(tmp):
        raise RuntimeError("run %d (%s, seed %d) ended incomplete" % (index, case, seed))
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    return final


def write_atomic(path, text):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def final_loss(folder):
    import csv

    with open(os.path.join(folder, "steps.csv")) as f:
        rows = list(csv.DictReader(f))
    return rows[-1]["loss"], len(rows)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results")
    p.add_argument("--jobs", type=int, default=1)
    a = p.parse_args(argv)
    if not 1 <= a.jobs <= 256:
        fail("--jobs must be in 1..256, got %d" % a.jobs)
    d, digest = load_definition(DEFINITION)
    try:
        import torch  # noqa: F401
        import halfway.torch  # noqa: F401
    except ImportError as e:
        print("skipped: emulate_recipes needs torch and halfway's Python module (%s)" % e)
        return 77
    import halfway
    known = set(halfway.recipes())
    for rc in d["run"]["recipes"]:
        if rc not in known:
            fail("%s: unknown recipe '%s' (recipes: %s)" % (DEFINITION, rc, " ".join(sorted(known))))
    runs = os.path.join(a.results, "runs")
    os.makedirs(runs, exist_ok=True)
    plan = os.path.join(a.results, "emulate.json")
    if os.path.exists(plan):
        with open(plan) as f:
            old = json.load(f).get("sweep_hash")
        if old != digest:
            fail("%s holds the runs of another emulate.toml (hash %s, this one %s): use another "
                 "folder" % (a.results, old, digest))
    sweep_json = os.path.join(a.results, "sweep.json")
    if os.path.exists(sweep_json):
        os.remove(sweep_json)  # incomplete until every run is there again
    definition = {"sweep_file": "emulate.toml", "sweep_hash": digest, "definition": d,
                  "axes": ["case", "seed"], "has_cases": True,
                  "halfway_version": halfway.__version__,
                  "runs": [{"case": c, "seed": s} for c, s in runs_of(d)]}
    write_atomic(plan, json.dumps({"sweep_hash": digest}) + "\n")
    for name in os.listdir(runs):  # runs a stopped invocation left half done
        if name.startswith(".") and ".tmp." in name:
            shutil.rmtree(os.path.join(runs, name), ignore_errors=True)
    todo = list(enumerate(runs_of(d)))
    print("emulate_recipes: %d runs (%d recipes x %d seeds, %d steps) -> %s"
          % (len(todo), len(d["run"]["recipes"]), len(d["run"]["seeds"]), d["run"]["steps"],
             a.results), flush=True)
    if a.jobs == 1:
        for i, (c, s) in todo:
            run_one(d, i, c, s, runs)
    else:
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(a.jobs, mp_context=ctx) as pool:
            for f in [pool.submit(run_one, d, i, c, s, runs) for i, (c, s) in todo]:
                f.result()
    lines = ["run,dir,case,seed,steps,final_loss\n"]
    for i, (c, s) in todo:
        loss, n = final_loss(os.path.join(runs, "%04d" % i))
        lines.append("%d,runs/%04d,%s,%d,%d,%s\n" % (i, i, c, s, n, loss))
    write_atomic(os.path.join(a.results, "sweep.csv"), "".join(lines))
    write_atomic(sweep_json, json.dumps(definition, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
