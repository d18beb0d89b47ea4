"""Bring your own model: a small nn.TransformerEncoder trained on the CPU under torch.autocast
(bfloat16), traced by halfway for fp16, bf16, e4m3 and e5m2, then the figures.

    PYTHONPATH=build/python /usr/bin/python3 examples/torch_transformer.py [--out DIR]
        [--steps N] [--every N]
    ... --bench [--steps N]   the tracer's overhead: traced / untraced step time, one run

The task: read a sequence of tokens and name its first token (a copy task every encoder learns
in a few hundred steps). Output: DIR/trace.csv, scale_window.csv, steps.csv, manifest.json and
the figures fraction_lost.png, histograms.png, safe_window.png (docs/analyze.md); it prints, per
format, the tensor that loses most of its L2 norm to flushing and the safe loss scales.
"""
import argparse
import os
import statistics
import sys
import time

import torch

import halfway.figures
import halfway.torch

VOCAB, SEQ, D_MODEL, BATCH = 16, 12, 32, 32
FORMATS = ["fp16", "bf16", "e4m3", "e5m2"]


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, D_MODEL)
        self.position = torch.nn.Parameter(0.1 * torch.randn(SEQ, D_MODEL))
        layer = torch.nn.TransformerEncoderLayer(D_MODEL, nhead=2, dim_feedforward=64,
                                                 dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, num_layers=2)
        self.head = torch.nn.Linear(D_MODEL, VOCAB)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens) + self.position).mean(dim=1))


def setup(seed=0):
    torch.manual_seed(seed)
    model = Encoder()
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3)


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    return x, x[:, 0]


def train_step(model, opt, step, tr=None):
    x, y = batch(step)
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
    if tr is not None:
        tr.log_loss(loss)
    loss.backward()
    opt.step()
    return loss


def run(out, steps, every):
    model, opt = setup()
    with halfway.torch.trace(model, opt, formats=FORMATS, every=every, out=out) as tr:
        for step in range(steps):
            train_step(model, opt, step, tr)
    return halfway.figures.draw(out)


def summary(out, formats=FORMATS):
    """What the trace found at its last traced step, from its CSVs: per format, the tensor that
    loses the largest part of its L2 norm to flushing (flushed_l2_fraction), and the loss
    scales 2^k that are safe for every gradient at once (scale_window.csv's combined rows)."""
    import csv
    with open(os.path.join(out, "trace.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(out, "scale_window.csv")) as f:
        window = list(csv.DictReader(f))
    last = max(int(r["step"]) for r in rows)
    lines = ["at step %d (the last traced), for each format:" % last]
    for fmt in formats:
        rs = [r for r in rows if int(r["step"]) == last and r["dtype"] == fmt and
              r["flushed_l2_fraction"] != ""]
        worst = max(rs, key=lambda r: float(r["flushed_l2_fraction"]), default=None)
        if worst is None or float(worst["flushed_l2_fraction"]) == 0:
            what = "no tensor loses a value to flushing"
        else:
            what = "worst tensor %s: %.3g%% of its values flushed, %.3g of its L2 norm" % (
                worst["name"], 100 * int(worst["flushed"]) / int(worst["total"]),
                float(worst["flushed_l2_fraction"]))
        combined = [w for w in window if int(w["step"]) == last and w["dtype"] == fmt and
                    w["name"] == ""]
        tried = [int(w["k"]) for w in combined]
        ks = [int(w["k"]) for w in combined if w["safe"] == "1"]
        safe = "2^%d .. 2^%d" % (min(ks), max(ks)) if ks else "none"
        lines.append("  %-5s %s; safe loss scales: %s (of 2^%d .. 2^%d tried)"
                     % (fmt, what, safe, min(tried), max(tried)))
    return lines


def bench(steps, reps=5):
    """Median seconds per step untraced, traced every step and every 10th step, measured
    interleaved in one run; prints the ratios."""
    import tempfile
    times = {"untraced": [], "every=1": [], "every=10": []}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(reps):
            for mode in times:
                model, opt = setup()
                train_step(model, opt, 0)  # warm-up
                t0 = time.perf_counter()
                if mode == "untraced":
                    for s in range(steps):
                        train_step(model, opt, s)
                else:
                    every = int(mode.split("=")[1])
                    with halfway.torch.trace(model, opt, every=every, out=os.path.join(d, mode),
                                             formats=FORMATS) as tr:
                        for s in range(steps):
                            train_step(model, opt, s, tr)
                times[mode].append((time.perf_counter() - t0) / steps)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:10s} {v * 1e3:8.2f} ms/step")
    print(f"ratio traced every step / untraced: {med['every=1'] / med['untraced']:.2f}")
    print(f"ratio traced every 10th step / untraced: {med['every=10'] / med['untraced']:.2f}")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="torch_transformer_trace")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--bench", action="store_true")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    if a.bench:
        bench(a.steps)
        return
    paths = run(a.out, a.steps, a.every)
    print("\n".join(summary(a.out)))
    for path in paths:
        print(path)


if __name__ == "__main__":
    main(sys.argv[1:])
