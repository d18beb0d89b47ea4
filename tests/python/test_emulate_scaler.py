"""halfway.torch.emulate(scaler=) with the real torch.amp.GradScaler("cpu"): steps.csv's
loss_scale is, step by step, the scale the scaler had when that step's forward began, read here
from the scaler itself in the loop (independently of emulate), through steps the scaler skips
(an initial scale of 2^18 overflows fp16's gradients until it has backed off) and steps where
it grows (growth_interval=2). found_inf/skipped are compared with what the loop sees: a step
the scaler skipped leaves every parameter unchanged (SGD moves them otherwise), and next_scale
with the scale the following step starts from. Without a scaler the schema is unchanged (step,loss); a scaler of
the wrong type is a TypeError naming it. Skipped (exit 77) without torch.amp.GradScaler("cpu")."""
import csv
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import check, check_raises, status  # noqa: E402

torch = hwtest.require("torch", "a real GradScaler")
import halfway.torch as ht  # noqa: E402

try:
    torch.amp.GradScaler("cpu")
except (AttributeError, TypeError, RuntimeError) as e:
    print(f"skipped: this torch has no torch.amp.GradScaler('cpu') ({e})")
    sys.exit(hwtest.SKIP)


def run(out, scaler, steps=12):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    seen, moved = [], []
    with ht.emulate(model, "torch-cuda-fp16", out=out, scaler=scaler) as em:
        for _ in range(steps):
            opt.zero_grad()
            seen.append(float(scaler.get_scale()) if scaler is not None else None)
            before = [p.detach().clone() for p in model.parameters()]
            loss = torch.nn.functional.mse_loss(model(x), y)
            em.log_loss(loss)
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            moved.append(any(not torch.equal(a, p) for a, p in zip(before, model.parameters())))
        after = float(scaler.get_scale()) if scaler is not None else None
    with open(os.path.join(out, "steps.csv")) as f:
        return seen, moved, after, list(csv.DictReader(f))


tmp = tempfile.mkdtemp(prefix="halfway-emulate-scaler-")
try:
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 18, growth_interval=2)
    seen, moved, after, rows = run(os.path.join(tmp, "scaled"), scaler)
    got = [float(r["loss_scale"]) for r in rows]
    check(got == seen, f"loss_scale {got} != the scaler's {seen}")
    check(list(rows[0]) == ["step", "loss", "loss_scale", "found_inf", "skipped", "next_scale"],
          f"columns with a scaler: {list(rows[0])}")
    skipped = [int(r["skipped"]) for r in rows]
    check(skipped == [int(not m) for m in moved],
          f"skipped {skipped} != the steps that left the parameters unchanged {moved}")
    check([int(r["found_inf"]) for r in rows] == skipped, "found_inf differs from skipped")
    check(0 < sum(skipped) < len(rows), f"skipped {skipped}: none, or all")
    nxt = [float(r["next_scale"]) for r in rows]
    check(nxt == seen[1:] + [after], f"next_scale {nxt} != the next steps' scales")
    check(any(b < a for a, b in zip(seen, seen[1:])), f"no skipped step in {seen}")
    check(any(b > a for a, b in zip(seen, seen[1:])), f"no growth in {seen}")
    _, _, _, plain = run(os.path.join(tmp, "plain"), None)
    check(list(plain[0]) == ["step", "loss"], f"columns without a scaler: {list(plain[0])}")
    check_raises(TypeError, "scaler", "scaler=object()", ht.emulate, torch.nn.Linear(2, 2), "fp32",
                 scaler=object())
finally:
    shutil.rmtree(tmp, ignore_errors=True)

sys.exit(status(f"ok: {len(got)} steps, loss_scale {got[0]:g} .. {got[-1]:g} as the scaler had it, "
                 f"{sum(skipped)} skipped as the parameters show"))
