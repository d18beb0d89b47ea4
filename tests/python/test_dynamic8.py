"""The dynamic8 optimizer state (8-bit optimizers' block-wise storage, Dettmers et al. 2021)
against definitions written here:

- the map: bitsandbytes' create_dynamic_map(signed, max_exponent_bits=7, total_bits=8)
  transcribed with torch's own float32 ops (torch.linspace, the midpoints, the 10^k scale),
  signed and unsigned, equal entry for entry to sim's;
- the storage: per block the absmax, x / absmax in float32, the nearest map entry by a full
  argmin (the first of equal distances: the lower entry), times absmax; against sim's
  store_dynamic8 on values of many magnitudes, blocks of 2048, 256 and 7, and all-zero blocks;
- a run: halfway train under Adam with exp_avg_dtype/exp_avg_sq_dtype = "dynamic8" differs from
  fp32 state and from pow2:e4m3 state, is the same twice, records dynamic8 in its manifest, and
  counts 8 bits per value plus one fp32 absmax per block in memory.csv; bad names are refused;
  the pow2:e4m3 run names its state so in the manifest and memory.csv, and the bare 8-bit name
  (renamed) is a ValueError naming pow2:e4m3, in halfway.train and ht.optimizer.
Negative control: ties to the upper entry give another storage on the tie cases planted.
Skipped (exit 77) without torch."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402
from hwtest import check, status  # noqa: E402

import halfway  # noqa: E402

# torch.linspace's float kernel with 8-lane vectors, as on AVX2 machines (AVX-512's 16 lanes
# give other last bits): the map sim builds (docs/sim.md, "Updates").
os.environ["ATEN_CPU_CAPABILITY"] = "default"
torch = hwtest.require("torch", "the map's transcription with torch's float32 ops")
F32 = np.float32


def torch_map(signed):
    data = []
    for i in range(7):
        n = 2 ** i + 1 if signed else 2 ** (i + 1) + 1
        b = torch.linspace(0.1, 1, n)
        means = (b[:-1] + b[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-6 + i)) * means).tolist()
    data += [0, 1.0]
    data.sort()
    return np.array(data, F32)


def stored(x, block, signed, upper_ties=False):
    m = torch_map(signed).astype(np.float64)
    out = x.astype(F32).copy()
    for b0 in range(0, x.size, block):
        blk = out[b0:b0 + block]
        a = np.abs(blk).max()
        if not a > 0 or not np.isfinite(a):
            continue
        y = (blk / a).astype(F32).astype(np.float64)
        d = np.abs(y[:, None] - m[None, :])
        idx = d.argmin(axis=1) if not upper_ties else d.shape[1] - 1 - d[:, ::-1].argmin(axis=1)
        out[b0:b0 + block] = (m[idx].astype(F32) * a).astype(F32)
    return out


def main():
    for signed in (True, False):
        check(np.array_equal(halfway._halfway._dynamic_map(signed).view(np.uint32),
                             torch_map(signed).view(np.uint32)), f"map signed={signed}")
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(5000) * 2.0 ** rng.integers(-30, 5, 5000)).astype(F32)
    x[100:2148] = 0  # an all-zero block of 2048
    # Ties: in a block of absmax 1 (y = x exactly), the float32 midpoints of neighbouring map
    # entries that are exact in float32.
    m = torch_map(True).astype(np.float64)
    mid = (m[:-1] + m[1:]) / 2
    exact = mid[(mid.astype(F32).astype(np.float64) == mid) & (np.abs(mid) < 1)]
    ties = np.concatenate([[1.0], exact[:255]]).astype(F32)
    check(len(exact) >= 50, f"{len(exact)} exact midpoints")
    for block in (2048, 256, 7):
        for signed in (True, False):
            v = x if signed else np.abs(x)
            got = halfway._halfway._store_dynamic8(v, block, signed)
            want = stored(v, block, signed)
            bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
            check(bad.size == 0, f"block {block} signed={signed}: {bad.size} values differ, "
                  f"first {bad[:1].tolist()}")
    got = halfway._halfway._store_dynamic8(ties, 256, True)
    check(np.array_equal(got.view(np.uint32), stored(ties, 256, True).view(np.uint32)),
          "the ties: to the lower entry")
    upper = stored(ties, 256, True, upper_ties=True)
    check(not np.array_equal(upper, got), "negative control: ties to the upper entry differ")

    import tempfile
    with tempfile.TemporaryDirectory() as d:
        cfg = {"model": {"kind": "mlp", "layers": [16, 64, 1]},
               "data": {"synthetic": "regression", "batch_size": 32, "n": 128},
               "loss": {"kind": "mse"}, "optimizer": {"kind": "adam", "lr": 0.01},
               "precision": {"policy": "fp32"}, "run": {"steps": 6, "seed": 1}}

        def run(name, **state):
            c = json.loads(json.dumps(cfg))
            c["optimizer"].update(state)
            r = halfway.train(c, out_dir=os.path.join(d, name))
            return r
        a = run("fp32")
        b = run("dyn", exp_avg_dtype="dynamic8", exp_avg_sq_dtype="dynamic8:block=256")
        b2 = run("dyn2", exp_avg_dtype="dynamic8", exp_avg_sq_dtype="dynamic8:block=256")
        e = run("e4m3", state_dtype="pow2:e4m3")
        la, lb, le = (list(r.steps.loss) for r in (a, b, e))
        check(lb != la and lb != le, f"dynamic8 changes the run: {lb} {la} {le}")
        check(lb == list(b2.steps.loss), "dynamic8 runs are the same twice")
        st = b.manifest["optimizer_state"]
        check(st == {"exp_avg": "dynamic8", "exp_avg_sq": "dynamic8:block=256"}, f"manifest {st}")
        mem = b.memory
        rows = mem[mem["category"] == "optimizer_state"]
        check(set(rows["dtype"]) == {"dynamic8", "dynamic8:block=256"} and
              (rows["bytes"] == rows["elements"]).all(),
              f"memory.csv state rows (a byte a value) {rows.to_dict('records')}")
        scales = mem[mem["category"] == "optimizer_state_scale"]
        n_params = 16 * 64 + 64 + 64 + 1
        want = sum((n + 2047) // 2048 + (n + 255) // 256 for n in (16 * 64, 64, 64, 1))
        check(int(scales["elements"].sum()) == want and
              int(scales["bytes"].sum()) == 4 * want,
              f"absmax count {scales.to_dict('records')} want {want} for {n_params} parameters")
        for bad in ("dynamic8:block=0", "dynamic8:block=", "dynamic8x", "dynamic8:block=2x"):
            try:
                run("bad", exp_avg_dtype=bad)
                check(False, f"{bad} accepted")
            except ValueError as err:
                check("exp_avg_dtype" in str(err), f"{bad}: {err}")
        # halfway's per-tensor power-of-two state is named pow2:<format>, in the manifest and
        # memory.csv too; the bare 8-bit name it had is refused, naming what to write.
        st = e.manifest["optimizer_state"]
        check(st == {"exp_avg": "pow2:e4m3", "exp_avg_sq": "pow2:e4m3"}, f"manifest {st}")
        rows = e.memory[e.memory["category"] == "optimizer_state"]
        check(set(rows["dtype"]) == {"pow2:e4m3"} and (rows["bytes"] == rows["elements"]).all(),
              f"memory.csv pow2 rows {rows.to_dict('records')}")
        try:
            run("bare", state_dtype="e4m3")
            check(False, "a bare e4m3 state accepted")
        except ValueError as err:
            check("now written 'pow2:e4m3'" in str(err) and "\n" not in str(err),
                  f"bare e4m3: {err}")
        import halfway.torch as ht
        lin = torch.nn.Linear(2, 2)
        for name, ok in (("e5m2", False), ("pow2:e5m2", True), ("dynamic8", True)):
            try:
                ht.optimizer(torch.optim.Adam(lin.parameters()), state_dtype=name)
                check(ok, f"ht.optimizer(state_dtype={name!r}) accepted")
            except ValueError as err:
                check(not ok and "pow2:e5m2" in str(err), f"ht.optimizer({name!r}): {err}")
    return status("ok: dynamic8 state matches its definitions")


if __name__ == "__main__":
    sys.exit(main())
