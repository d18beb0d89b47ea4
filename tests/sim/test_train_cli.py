"""`halfway train` from the command line: the issue's config verbatim (numpy-written .npz,
deflated and stored), the output files, byte-identical reruns at any thread count, and the
bad inputs that must give one line on stderr and exit code 2. Needs numpy, not torch."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from simtest import ISSUE_CONFIG, check, in_workdir, read_csv, run  # noqa: E402


def write_inputs(w, x=None, y=None, compressed=True):
    g = np.random.default_rng(0)
    if x is None:
        x = g.standard_normal((256, 10)).astype(np.float32)
    if y is None:
        y = (x[:, :1] * 0.5).astype(np.float32)
    (np.savez_compressed if compressed else np.savez)(w.file("data.npz"), x=x, y=y)
    init = {"0.weight": g.uniform(-0.3, 0.3, (32, 10)), "0.bias": g.uniform(-0.3, 0.3, 32),
            "2.weight": g.uniform(-0.17, 0.17, (1, 32)), "2.bias": g.uniform(-0.17, 0.17, 1)}
    np.savez(w.file("init.npz"), **{k: v.astype(np.float32) for k, v in init.items()})


def expect_bad(halfway, w, config_text, what, fragment, args=None):
    cfg = w.write("bad.toml", config_text)
    r = run(halfway, "train", *(args if args is not None else [cfg, "--out", w.file("bad_out")]))
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2, f"{what}: exit code {r.returncode}, stderr {r.stderr!r}")
    check(len(lines) == 1 and lines[0].startswith("halfway train: error:"),
          f"{what}: expected one error line, got {r.stderr!r}")
    check(fragment in lines[0], f"{what}: {fragment!r} not in {lines[0]!r}")
    check(not os.path.exists(w.file("bad_out")), f"{what}: left an output directory behind")
    return lines[0]


def main(halfway, w):
    write_inputs(w)
    cfg = w.write("run.toml", ISSUE_CONFIG)
    out = w.file("out")
    r = run(halfway, "train", cfg, "--out", out)
    check(r.returncode == 0, f"issue config failed: {r.stderr}")
    for f in ("steps.csv", "trace.csv", "scale_window.csv", "memory.csv", "manifest.json"):
        check(os.path.isfile(os.path.join(out, f)), f"{f} missing")
    check(not [f for f in os.listdir(out) if ".tmp" in f], "temporary files left behind")
    steps = read_csv(os.path.join(out, "steps.csv"))
    check(len(steps) == 5, "5 steps expected")
    for col in ("step", "loss", "loss_scale", "found_inf", "skipped", "growth_tracker"):
        check(col in steps[0], f"steps.csv lacks column {col}")
    check([int(s["step"]) for s in steps] == list(range(5)), "step numbers")
    check(all(float(s["loss_scale"]) == 65536.0 for s in steps), "bf16 never overflows here")
    check([int(s["growth_tracker"]) for s in steps] == [1, 2, 3, 4, 5], "growth tracker")
    trace = read_csv(os.path.join(out, "trace.csv"))
    names = {t["name"] for t in trace if t["step"] == "0"}
    for n in ("0.input", "0.weight", "0.output", "1.output", "1.grad_input", "0.weight.grad",
              "2.weight.grad", "loss.grad_input"):
        check(n in names, f"trace.csv lacks {n}: {sorted(names)}")
    check(all(t["dtype"] == "bf16" for t in trace), "torch-cpu-bf16 rounds into bf16 only")
    window = read_csv(os.path.join(out, "scale_window.csv"))
    check(len(window) == 5 * 61, "61 scales per step")
    m = json.load(open(os.path.join(out, "manifest.json")))
    for k in ("config", "seed", "halfway_version", "git_revision"):
        check(k in m, f"manifest lacks {k}")
    check(m["config"]["precision"]["policy"] == "torch-cpu-bf16", "config in manifest")
    check(m["seed"] == 0, "seed in manifest")

    # Same config, same seed: byte-identical files, whatever the thread count.
    out2 = w.file("out2")
    r = run(halfway, "train", cfg, "--out", out2, "--threads", "2")
    check(r.returncode == 0, r.stderr)
    for f in ("steps.csv", "trace.csv", "scale_window.csv", "memory.csv", "manifest.json"):
        a = open(os.path.join(out, f), "rb").read()
        b = open(os.path.join(out2, f), "rb").read()
        check(a == b, f"{f} differs between runs")

    # Stored (numpy.savez) data load the same as deflated (savez_compressed).
    write_inputs(w, compressed=False)
    out3 = w.file("out3")
    r = run(halfway, "train", cfg, "--out", out3)
    check(r.returncode == 0, r.stderr)
    check(open(os.path.join(out, "steps.csv")).read() ==
          open(os.path.join(out3, "steps.csv")).read(), "savez vs savez_compressed")

    # Low-precision optimizer state and updates.csv: the manifest's state underflow and
    # overflow are trace.csv's optimizer_state rows summed; one updates.csv row per step and
    # parameter, vanished <= nonzero <= elements.
    cfg_s = w.write("state.toml", ISSUE_CONFIG.replace('policy = "torch-cpu-bf16"',
                                                       'policy = "pure-bf16"')
                    .replace("lr = 0.01", 'lr = 0.01\nexp_avg_sq_dtype = "fp16"'))
    out_s = w.file("out_state")
    r = run(halfway, "train", cfg_s, "--out", out_s)
    check(r.returncode == 0, r.stderr)
    tr = [t for t in read_csv(os.path.join(out_s, "trace.csv")) if t["kind"] == "optimizer_state"]
    check({t["name"] for t in tr} == {"0.weight.exp_avg_sq", "0.bias.exp_avg_sq",
                                      "2.weight.exp_avg_sq", "2.bias.exp_avg_sq"},
          f"optimizer_state rows: {sorted({t['name'] for t in tr})}")
    ms = json.load(open(os.path.join(out_s, "manifest.json")))["summary"]["optimizer_state"]
    check(ms == {"values": sum(int(t["total"]) for t in tr),
                 "flushed": sum(int(t["flushed"]) for t in tr),
                 "overflow": sum(int(t["overflow"]) for t in tr)}, f"summary {ms}")
    check(ms["values"] == 5 * (32 * 10 + 32 + 32 + 1), f"state values {ms}")
    up = read_csv(os.path.join(out_s, "updates.csv"))
    check(len(up) == 5 * 4 and all(int(u["vanished"]) <= int(u["nonzero"]) <=
                                   int(u["elements"]) for u in up), "updates.csv rows")
    check(all(u["drift"] == "" for u in up), "no drift without a reference")

    # Bad input: one line, exit code 2. Each case: the issue config with one text replaced.
    base = ISSUE_CONFIG
    scaler = base[base.index("[scaler]"):base.index("[run]")]
    prec = 'policy = "torch-cpu-bf16"'
    pure = 'policy = "pure-bf16"'
    lr = "lr = 0.01"
    cases = [  # (old, new, what, fragment)
        ("torch-cpu-bf16", "torch-cpu-fp15", "unknown policy", "unknown policy 'torch-cpu-fp15'"),
        (prec, prec + '\n[precision.ops]\nconv = "lower"', "unknown op", "unknown op 'conv'"),
        (lr, lr + "\nlearning_rate = 1", "unknown option",
         "unknown option 'optimizer.learning_rate'"),
        (lr, "", "missing field", "missing field 'optimizer.lr'"),
        ('kind = "mse"', "", "missing loss kind", "missing field 'loss.kind'"),
    ]
    cases += [(scaler, f'[scaler]\nkind = "static"\nscale = {v}\n', f"static scale {v}",
               "scaler.scale must be positive and finite") for v in ("0.0", "-1.0", "inf", "nan")]
    cases += [
        ("growth_factor = 2.0", "growth_factor = 1.0", "growth 1", "growth_factor must be > 1"),
        ("growth_factor = 2.0", "growth_factor = 0.5", "growth<1", "growth_factor must be > 1"),
        ("backoff_factor = 0.5", "backoff_factor = 1.0", "backoff 1",
         "backoff_factor must be in (0, 1)"),
        ("backoff_factor = 0.5", "backoff_factor = 2.0", "backoff 2",
         "backoff_factor must be in (0, 1)"),
        # Update numerics: Kahan needs weights without an fp32 master copy; unknown roles,
        # directions, dtypes and references are named.
        (prec, prec + '\nupdate = "kahan"\ncompensation = "fp32"', "kahan with master weights",
         'update = "kahan" needs low-precision weights'),
        (prec, pure + '\nupdate = "kahan"', "kahan without compensation",
         "needs precision.compensation"),
        (prec, pure + '\nupdate = "kahan"\ncompensation = "fp8"', "bad compensation",
         "'precision.compensation' must be"),
        (prec, pure + '\ncompensation = "fp32"', "compensation without kahan",
         "needs precision.update"),
        (prec, pure + '\nupdate = "compensated"', "unknown update", "'precision.update' must be"),
        (prec, pure + '\nsideways_rounding = "sr"', "unknown role",
         "unknown option 'precision.sideways_rounding'"),
        (prec, pure + '\nupdate_rounding = "sideways"', "unknown direction", "sideways"),
        (lr, lr + '\nstate_dtype = "fp7"', "unknown state dtype", "fp7"),
        (lr, lr + '\nexp_avg_sq_dtype = "e2m1"', "fp4 state",
         "'optimizer.exp_avg_sq_dtype' must be fp32, bf16, fp16, pow2:"),
    ]
    # Renamed: a bare 8-bit name was halfway's per-tensor pow2 state; one line says what to
    # write instead (docs/sim.md, "Updates").
    cases += [(lr, lr + f'\n{key} = "{bare}"', f"bare {bare} state",
               f"'optimizer.{key}': '{bare}' as an optimizer state is now written 'pow2:{bare}'")
              for key, bare in (("state_dtype", "e4m3"), ("exp_avg_dtype", "e5m2"),
                                ("exp_avg_sq_dtype", "e4m3fnuz"))]
    cases += [
        (lr, lr + '\nstate_dtype = "pow2:bf16"', "pow2 of a 16-bit format",
         "pow2: takes an 8-bit format"),
        (lr, lr + '\nstate_dtype = "pow2:e8m0"', "pow2 of e8m0", "cannot be e8m0"),
        (lr, lr + '\nmomentum_buffer_dtype = "bf16"', "momentum state for adam",
         "momentum_buffer_dtype is an SGD option"),
        ("seed = 0", 'seed = 0\nreference = "fp64"', "unknown reference",
         "'run.reference' must be \"fp32\""),
    ]
    for old, new, what, fragment in cases:
        check(old in base, f"{what}: the issue config has no {old!r} to replace")
        expect_bad(halfway, w, base.replace(old, new), what, fragment)
    expect_bad(halfway, w, base, "missing config file", "cannot read", [w.file("nope.toml")])
    expect_bad(halfway, w, base, "unknown CLI option", "frobnicate", [cfg, "--frobnicate"])
    # .npz problems
    g = np.random.default_rng(1)
    x = g.standard_normal((64, 10)).astype(np.float32)
    np.savez(w.file("data.npz"), x=x)
    expect_bad(halfway, w, base, "missing array y", "array 'y' is missing")
    np.savez(w.file("data.npz"), x=x[:, :9], y=x[:, :1])
    expect_bad(halfway, w, base, "wrong x shape", "array 'x' has shape [64, 9]")
    np.savez(w.file("data.npz"), x=x, y=x[:, :2])
    expect_bad(halfway, w, base, "wrong y shape", "array 'y' has shape [64, 2]")
    bad = x.copy()
    bad[3, 4] = np.nan
    np.savez(w.file("data.npz"), x=bad, y=x[:, :1])
    expect_bad(halfway, w, base, "NaN in data", "array 'x' has NaN or inf")
    bad[3, 4] = np.inf
    np.savez(w.file("data.npz"), x=bad, y=x[:, :1])
    expect_bad(halfway, w, base, "inf in data", "array 'x' has NaN or inf")
    np.savez(w.file("data.npz"), x=x, y=x[:, :1])
    np.savez(w.file("init.npz"), **{"0.weight": np.zeros((32, 10), np.float32)})
    expect_bad(halfway, w, base, "init arrays missing", "array '0.bias' is missing")
    np.savez(w.file("init.npz"), **{"0.weight": np.zeros((10, 32), np.float32)})
    expect_bad(halfway, w, base, "init wrong shape", "array '0.weight' has shape [10, 32]")
    write_inputs(w)
    with open(w.file("data.npz"), "wb") as f:
        f.write(b"PK\x03\x04 not really a zip")
    expect_bad(halfway, w, base, "corrupt npz", "not an .npz")
    # [data] text: a byte-level language model; bad corpora are one line and exit 2.
    text = ("[model]\nkind = \"transformer\"\nvocab = 256\nseq_len = 8\nd_model = 8\n"
            "causal = true\n[data]\ntext = \"corpus.txt\"\nbatch_size = 4\nval_every = 2\n"
            "[loss]\nkind = \"cross_entropy\"\n[optimizer]\nkind = \"adam\"\nlr = 0.01\n"
            "[precision]\npolicy = \"torch-cuda-bf16\"\n[run]\nsteps = 3\n")
    expect_bad(halfway, w, text, "text: missing file", "corpus.txt")
    for content, fragment in ((b"", "the corpus is empty"),
                              (b"12345678", "fewer than model.seq_len + 1 = 9"),
                              (b"123456789abc", "training and validation need two")):
        with open(w.file("corpus.txt"), "wb") as f:
            f.write(content)
        expect_bad(halfway, w, text, "text: %r" % content, fragment)
    with open(w.file("corpus.txt"), "wb") as f:
        f.write(bytes(range(256)) * 4)
    cfg = w.write("text.toml", text)
    r = run(halfway, "train", cfg, "--out", w.file("text_out"))
    check(r.returncode == 0, f"text run failed: {r.stderr}")
    steps = read_csv(os.path.join(w.file("text_out"), "steps.csv"))
    check([s["val_loss"] != "" for s in steps] == [True, False, True],
          "val_loss at steps 0 and 2 (every 2, and the last)")
    print("ok")


if __name__ == "__main__":
    sys.exit(in_workdir("train_cli", main))
