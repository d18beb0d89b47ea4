"""Hostile configs for `halfway train` (and `halfway round --seed`, `halfway sweep`): sizes
that overflow, runs too large for memory, values that cannot train, devices and FIFOs. Each
must end in one line `halfway <cmd>: error: ...` and exit code 2 (never a signal, a hang or
an unbounded allocation), and the memory estimate must be an upper bound of the measured
peak RSS within a factor of 3. Needs numpy."""
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from simtest import check, in_workdir, read_csv, run  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import Raw, config  # noqa: E402

def mlp(layers="10, 32, 1", n=256, batch=64, steps=2):
    return config("mlp", model={"layers": Raw(f"[{layers}]")}, data={"n": n, "batch_size": batch},
                  run={"steps": steps, "seed": None})


def transformer(vocab=16, seq=8, dmodel=32, blocks=1, ratio=4, batch=16, steps=2):
    return config("transformer", model={"vocab": vocab, "seq_len": seq, "d_model": dmodel,
                                        "blocks": blocks, "mlp_ratio": ratio},
                  data={"batch_size": batch}, run={"steps": steps})


def one_error_line(r, cmd, what):
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2, f"{what}: exit code {r.returncode} (a signal is negative), "
                             f"stderr {r.stderr[-300:]!r}")
    check(len(lines) == 1 and lines[0].startswith(f"halfway {cmd}: error:"),
          f"{what}: expected one error line, got {r.stderr[-300:]!r}")
    return lines[0]


def expect_bad(halfway, w, text, what, fragment, *extra, config=None):
    """`halfway train` of `text` (or of the file `config`) fails with one line and exit 2."""
    cfg = config or w.write("bad.toml", text)
    out = w.file("bad_out")
    r = subprocess.run([halfway, "train", cfg, "--out", out, *extra], capture_output=True,
                       text=True, timeout=60)
    line = one_error_line(r, "train", what)
    check(fragment in line, f"{what}: {fragment!r} not in {line!r}")
    check(not os.path.exists(out), f"{what}: left an output directory behind")
    return line


def estimated_bytes(halfway, w, text, what, option, fragment, pattern):
    """The byte count of the refusal of `text` under a 1-byte `option` (the group of `pattern`)."""
    line = expect_bad(halfway, w, text, what, fragment, option, "1")
    m = re.search(pattern, line)
    check(m, f"no byte count in {line!r}")
    return int(m.group(1))


def estimate(halfway, w, text):
    """The run's memory estimate in bytes, read from the refusal under a 1-byte limit."""
    return estimated_bytes(halfway, w, text, "estimate", "--max-memory", "estimated",
                           r"\((\d+) bytes: ")


# Measures the peak RSS of one command in a small child: a process spawned straight from this
# (large) Python would count this interpreter's pages in its ru_maxrss before exec.
RSS_PROBE = """
import os, sys
pid = os.fork()
if pid == 0:
    os.closerange(3, 1 << 16)
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024)
"""


def peak_rss(halfway, w, text):
    """Peak resident set of one `halfway train` process, in bytes (wait4's ru_maxrss)."""
    cfg = w.write("rss.toml", text)
    r = subprocess.run([sys.executable, "-S", "-c", RSS_PROBE, halfway, "train", cfg, "--out",
                        w.file("rss_out")], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"rss probe failed: {r.stderr}")
    code, rss = map(int, r.stdout.split())
    check(code == 0, f"run failed ({code}): {r.stderr}")
    return rss


def disk_estimate(halfway, w, text):
    """The run's disk estimate in bytes, read from the refusal under a 1-byte --max-disk."""
    return estimated_bytes(halfway, w, text, "disk estimate", "--max-disk", "(--max-disk)",
                           r"\((\d+) bytes: CSV files")


def folder_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def check_disk_limits(halfway, w):
    """Disk use is estimated from the config and bounded, before anything is written: the
    estimate is an upper bound of what the run leaves, within a factor of 3; a run over the
    free space or --max-disk is refused in one line naming the option to change."""
    outputs = "[output]\ngrads = true\nweights = true\n"
    every = "[trace]\nevery = 10\n[run]"
    for name, text in (("mlp", mlp(steps=50)), ("mlp grads", mlp(steps=50) + outputs),
                       ("transformer grads", transformer(steps=20) + outputs),
                       ("mlp trace.every", mlp(steps=100).replace("[run]", every))):
        est = disk_estimate(halfway, w, text)
        cfg = w.write("disk.toml", text)
        out = w.file("disk_out")
        r = run(halfway, "train", cfg, "--out", out)
        check(r.returncode == 0, f"{name}: {r.stderr}")
        actual = folder_bytes(out)
        check(actual <= est <= 3 * actual,
              f"{name}: disk estimate {est} bytes for {actual} written")
    # The fuzzed sweep's case: 2^31 - 1 steps with every gradient kept.
    line = expect_bad(halfway, w, mlp(steps=(1 << 31) - 1) + outputs, "2^31-1 steps",
                      "free where")
    check("--max-disk" in line and "output.grads" in line, f"2^31-1 steps: {line}")
    expect_bad(halfway, w, mlp(), "--max-disk 1K", "(--max-disk)", "--max-disk", "1K")
    for opt in ("--max-disk", "--max-memory"):
        expect_bad(halfway, w, mlp(), f"{opt} ''", "bad memory size ''", opt, "")
    # A sweep: the runs left, together, before any starts.
    w.write("base.toml", mlp(steps=50))
    sweep = w.write("disk_sweep.toml", 'base = "base.toml"\n[axes]\n"run.seed" = [1, 2, 3]\n')
    for extra, frag in ((["--max-disk", "10K"], "the sweep's 3 runs left"),
                        (["--max-disk", ""], "bad memory size ''"),
                        (["--max-memory", ""], "bad memory size ''")):
        r = subprocess.run([halfway, "sweep", sweep, "--out", w.file("dsw"), *extra],
                           capture_output=True, text=True, timeout=60)
        line = one_error_line(r, "sweep", f"sweep {extra}")
        check(frag in line, f"sweep {extra}: {line}")
        check(not os.path.isdir(w.file("dsw/runs")) or not os.listdir(w.file("dsw/runs")),
              f"sweep {extra} ran something")


def check_value_dtypes(halfway, w):
    """A format that cannot hold the values (e8m0: no zero, no sign) is refused where values
    are kept; before, the loss was NaN from step 2."""
    adam = 'kind = "adam"\nlr = 0.01'
    sgd = 'kind = "sgd"\nlr = 0.01\nmomentum = 0.9'
    for opt, key, extra in ((adam, "optimizer.state_dtype", ""),
                            (adam, "optimizer.exp_avg_dtype", ""),
                            (sgd, "optimizer.momentum_buffer_dtype", ""),
                            (adam, "precision.params", "")):
        section, name = key.split(".")
        text = mlp().replace('kind = "adam"\nlr = 0.01', opt)
        text = text.replace(f"[{section}]\n", f'[{section}]\n{name} = "e8m0"\n', 1)
        line = expect_bad(halfway, w, text, f"{key} e8m0", f"'{key}' cannot be e8m0")
        check("no zero and no sign" in line, f"{key} e8m0: {line}")
    ok = mlp().replace("[optimizer]\n", '[optimizer]\nstate_dtype = "pow2:e4m3"\n', 1)
    r = run(halfway, "train", w.write("e4m3_state.toml", ok), "--out", w.file("e4m3_out"))
    check(r.returncode == 0, f"state_dtype pow2:e4m3: {r.stderr}")


def main(halfway, w):
    check_value_dtypes(halfway, w)
    check_disk_limits(halfway, w)
    # --- sizes: checked in 64 bits against stated limits, before any allocation ----------
    # The reproducer: d_model * mlp_ratio wrapped an int and crashed (SIGSEGV).
    expect_bad(halfway, w, transformer(dmodel=4, ratio=1073741824), "mlp_ratio 2^30",
               "'model.mlp_ratio' must be in 1..16777216")
    expect_bad(halfway, w, transformer(ratio=1 << 40), "mlp_ratio 2^40", "model.mlp_ratio")
    expect_bad(halfway, w, transformer(dmodel=65536, ratio=512), "d_model * ratio",
               "(the MLP width) must be at most 16777216")
    expect_bad(halfway, w, transformer(blocks=1 << 30), "blocks 2^30", "'model.blocks'")
    expect_bad(halfway, w, transformer(vocab=1 << 40), "vocab 2^40", "'model.vocab'")
    expect_bad(halfway, w, transformer(seq=1 << 20), "seq_len 2^20", "'model.seq_len'")
    expect_bad(halfway, w, transformer(dmodel=1 << 17), "d_model 2^17", "'model.d_model'")
    expect_bad(halfway, w, transformer().replace("heads = 2", "heads = 64"), "heads > d_model",
               "'model.heads'")
    expect_bad(halfway, w, transformer().replace("heads = 2", "heads = 3"), "d_model % heads",
               "multiple of 'model.heads'")
    expect_bad(halfway, w, mlp(layers="10, 9223372036854775807, 1"), "width 2^63",
               "'model.layers' widths must be in 1..16777216")
    expect_bad(halfway, w, mlp(layers="10, 4294967296, 1"), "width 2^32", "'model.layers'")
    expect_bad(halfway, w, mlp(layers=", ".join(["4"] * 1025)), "1025 widths",
               "at most 1024 widths")
    expect_bad(halfway, w, mlp(n=(1 << 26) + 1), "data.n 2^26+1", "'data.n' must be in")
    expect_bad(halfway, w, mlp(batch=1 << 40), "batch 2^40", "'data.batch_size' must be in")
    expect_bad(halfway, w, mlp(steps=1 << 31), "steps 2^31", "'run.steps' must be in")

    # --- memory: estimated from the config, refused over --max-memory -------------------
    # blocks = 1024 (the most allowed) of a wide transformer: refused before allocating.
    line = expect_bad(halfway, w, transformer(dmodel=1024, blocks=1024), "wide and deep",
                      "more than the memory limit of 1.00 GiB", "--max-memory", "1G")
    check("parameters" in line and "activations" in line, line)
    # data.n = 2^26 fits the default limit of a large machine (it really takes ~3 GB),
    # so the refusal is shown under a small limit: the estimate must count the data.
    line = expect_bad(halfway, w, mlp(n=1 << 26), "data.n 2^26", "estimated",
                      "--max-memory", "512M")
    check(re.search(r"data [\d.]+ GiB", line), f"data not counted: {line}")
    for bad in ("0", "-1", "2X", "G", "1.2.3G", "99999999999999999999999T", "0.5"):
        expect_bad(halfway, w, mlp(), f"--max-memory {bad!r}", "memory size",
                   "--max-memory", bad)
    # The estimate is an upper bound of the measured peak within a factor of 3 (not under
    # AddressSanitizer, scripts/test --sanitize, whose shadow memory and quarantine
    # multiply the peak).
    with open(halfway, "rb") as f:
        asan = b"__asan_init" in f.read()
    for what, text in () if asan else (
            ("the issue's MLP", mlp()),
            ("wide MLP", mlp(layers="64, 512, 512, 4", n=2048, batch=1024, steps=2)),
            ("transformer", transformer(vocab=64, seq=32, dmodel=64, blocks=2, batch=64,
                                        steps=2))):
        est, rss = estimate(halfway, w, text), peak_rss(halfway, w, text)
        print(f"{what}: estimate {est / 2**20:.1f} MiB, peak RSS {rss / 2**20:.1f} MiB, "
              f"ratio {est / rss:.2f}")
        check(rss <= est <= 3 * rss,
              f"{what}: estimate {est} is not within [1, 3] x the peak RSS {rss}")
    # A generous limit runs as usual.
    cfg = w.write("ok.toml", mlp())
    r = run(halfway, "train", cfg, "--out", w.file("ok_out"), "--max-memory", "4G")
    check(r.returncode == 0, r.stderr)
    r = run(halfway, "train", "--help")
    check("--max-memory" in r.stdout, "train --help lacks --max-memory")

    # --- values that cannot train ------------------------------------------------------
    dyn = mlp()
    expect_bad(halfway, w, dyn.replace('kind = "dynamic"', 'kind = "dynamic"\ninit_scale = 1e-50'),
               "init_scale 1e-50", "below the smallest positive fp32")
    expect_bad(halfway, w, dyn.replace('kind = "dynamic"', 'kind = "static"\nscale = 1e-46'),
               "static scale 1e-46", "below the smallest positive fp32")
    expect_bad(halfway, w, dyn.replace('kind = "dynamic"', 'kind = "static"\nscale = 1e-40'),
               "static scale 1e-40", "its fp32 inverse overflows")
    expect_bad(halfway, w, dyn.replace("lr = 0.01", "lr = 1e308"), "lr 1e308",
               "makes the first update overflow fp32")
    expect_bad(halfway, w, dyn.replace("lr = 0.01", "lr = 1e38"), "adam lr 1e38",
               "makes the first update overflow fp32")
    expect_bad(halfway, w, dyn.replace('kind = "adam"', 'kind = "sgd"').replace(
        "lr = 0.01", "lr = 0.01\nmomentum = inf"), "momentum inf", "optimizer.momentum")
    # The smallest usable scale and a large but finite lr still run.
    for ok in (dyn.replace('kind = "dynamic"', 'kind = "static"\nscale = 3e-39'),
               dyn.replace('kind = "adam"', 'kind = "sgd"').replace("lr = 0.01", "lr = 1e30")):
        cfg = w.write("ok.toml", ok)
        r = run(halfway, "train", cfg, "--out", w.file("ok_out"))
        check(r.returncode == 0, f"a valid config was refused: {r.stderr}")
    # float64 data (and initial weights) beyond the fp32 range passed the NaN/inf check.
    npz_cfg = mlp().replace('synthetic = "regression"', 'npz = "data.npz"')
    g = np.random.default_rng(0)
    x = g.standard_normal((64, 10))
    y = x[:, :1] * 0.5
    x[5, 3] = 1e300
    np.savez(w.file("data.npz"), x=x, y=y)
    expect_bad(halfway, w, npz_cfg, "f8 data 1e300", "array 'x' has values beyond the fp32 range")
    x[5, 3] = 3.5e38
    np.savez(w.file("data.npz"), x=x, y=y)
    expect_bad(halfway, w, npz_cfg, "f8 data 3.5e38", "beyond the fp32 range")
    x[5, 3] = 3.4e38  # rounds to FLT_MAX: finite
    np.savez(w.file("data.npz"), x=x, y=y)
    cfg = w.write("ok.toml", npz_cfg)
    r = run(halfway, "train", cfg, "--out", w.file("ok_out"))
    check(r.returncode == 0, f"3.4e38 fits fp32: {r.stderr}")
    x[5, 3] = 0.0
    np.savez(w.file("data.npz"), x=x, y=y)
    init = {"0.weight": g.uniform(-0.3, 0.3, (32, 10)), "0.bias": np.zeros(32),
            "2.weight": g.uniform(-0.1, 0.1, (1, 32)), "2.bias": np.zeros(1)}
    init["0.bias"][7] = -1e39
    np.savez(w.file("init.npz"), **init)
    expect_bad(halfway, w, npz_cfg.replace('kind = "mlp"', 'kind = "mlp"\ninit = "init.npz"'),
               "f8 init 1e39", "array '0.bias' has values beyond the fp32 range")
    expect_bad(halfway, w, mlp().replace("[data]", "[data]\nnoise = 1e300"),
               "synthetic noise 1e300", "beyond the fp32 range")

    # --- files that are not regular: never read without end, never block ---------------
    expect_bad(halfway, w, "", "/dev/zero", "a character device, not a regular file",
               config="/dev/zero")
    fifo = w.file("fifo.toml")
    os.mkfifo(fifo)
    expect_bad(halfway, w, "", "a FIFO", "a FIFO, not a regular file", config=fifo)
    os.mkdir(w.file("dir.toml"))
    expect_bad(halfway, w, "", "a directory", "a directory, not a regular file",
               config=w.file("dir.toml"))
    big = w.write("big.toml", mlp() + "#" * (1 << 20) + "\n")
    expect_bad(halfway, w, "", "a 1 MiB config", "larger than 1048576 bytes", config=big)
    # The sweep file and its base config go through the same reader.
    r = subprocess.run([halfway, "sweep", "/dev/zero", "--out", w.file("sw")],
                       capture_output=True, text=True, timeout=60)
    one_error_line(r, "sweep", "sweep /dev/zero")
    check("not a regular file" in r.stderr, r.stderr)
    sweep = w.write("sweep.toml", 'base = "fifo.toml"\n[axes]\n"run.seed" = [0, 1]\n')
    r = subprocess.run([halfway, "sweep", sweep, "--out", w.file("sw")],
                       capture_output=True, text=True, timeout=60)
    one_error_line(r, "sweep", "sweep base FIFO")
    check("a FIFO" in r.stderr, r.stderr)
    # --max-memory applies to each run of a sweep.
    w.write("base.toml", mlp())
    sweep = w.write("sweep.toml", 'base = "base.toml"\n[axes]\n"run.seed" = [0, 1]\n')
    r = subprocess.run([halfway, "sweep", sweep, "--out", w.file("sw"), "--max-memory", "1K"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and r.stderr.count("estimated") == 2,
          f"sweep --max-memory 1K: {r.returncode} {r.stderr!r}")
    r = subprocess.run([halfway, "sweep", sweep, "--out", w.file("sw"), "--max-memory", "x"],
                       capture_output=True, text=True, timeout=60)
    one_error_line(r, "sweep", "sweep --max-memory x")

    # --- halfway round --seed: 64 bits at most ------------------------------------------
    for seed in ("18446744073709551616", "99999999999999999999999", "-1", "1e3", " 5", ""):
        r = run(halfway, "round", "0.1", "--rounding", "sr", "--seed", seed)
        one_error_line(r, "round", f"--seed {seed!r}")
    for seed in ("18446744073709551615", "0xffffffffffffffff", "0"):
        r = run(halfway, "round", "0.1", "--rounding", "sr", "--seed", seed)
        check(r.returncode == 0, f"--seed {seed}: {r.stderr}")
    print("ok")


if __name__ == "__main__":
    sys.exit(in_workdir("limits", main))
