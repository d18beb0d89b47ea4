#!/usr/bin/env python3
"""Output and error streams of the `halfway` command line.

- Every command that prints results fails (exit 2, one line on stderr with the reason) when
  its standard output cannot be written (`> /dev/full`), instead of exiting 0.
- `testfloat` fails when standard input cannot be read (a directory as stdin).
- A failed write of a result file names the file and the reason (strerror).
- Result files that are symlinks are written through; anything but a regular file is refused.
- Error messages print control characters of the input escaped (\\x1b), on one line.
- `train --bench --python X` runs X without a shell: quotes and spaces in X are just bytes.

usage: test_cli_output.py PATH/TO/halfway      (exit 77: /dev/full is missing)
"""
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import config  # noqa: E402
from checks import check, status  # noqa: E402

HALFWAY = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="halfway_output_test_")


def one_error_line(r):
    lines = r.stderr.strip().splitlines()
    return r.returncode == 2 and len(lines) == 1 and "error:" in lines[0]


def write(name, text):
    p = os.path.join(TMP, name)
    with open(p, "w") as f:
        f.write(text)
    return p


CONFIG = config("mlp", model={"layers": [4, 8, 2], "activation": "relu"},
                data={"synthetic": "blobs", "batch_size": 16, "n": 64},
                loss={"kind": "cross_entropy"}, optimizer={"kind": "sgd"},
                precision={"policy": "fp32"}, scaler=None, run={"steps": 2, "seed": None})

if not os.path.exists("/dev/full"):
    print("skip: /dev/full is missing")
    sys.exit(77)

# --- stdout that cannot be written -------------------------------------------------------------
cases = [
    (["info"], None, {}),
    (["info", "--csv", "fp16"], None, {}),
    (["round", "0.1", "--to", "fp16"], None, {}),
    (["testfloat", "f16_add"], "3C00 3C00\n" * 100, {}),
    (["verify", "--op", "sqrt", "--format", "e4m3", "--threads", "1"], None, {}),
    (["hw-report"], None, {"HALFWAY_HW_DISABLE": "nvidia-host,f16c,avx512bf16,avx512fp16,"
                                   "avx512bf16-dot,amx-bf16,amx-fp16"}),
    (["bench", "--quick", "--filter", "e4m3"], None, {}),
    (["--version"], None, {}),
    (["merge", "--help"], None, {}),
]
for args, stdin, env in cases:
    with open("/dev/full", "w") as full:
        r = subprocess.run([HALFWAY] + args, input=stdin, stdout=full, stderr=subprocess.PIPE,
                           text=True, env=dict(os.environ, **env), timeout=120)
    check(one_error_line(r) and "write to standard output failed" in r.stderr and
          "No space left on device" in r.stderr,
          "%s > /dev/full: exit 2, one line with the reason (exit %d, %r)"
          % (" ".join(args), r.returncode, r.stderr.strip()[-200:]))
# testfloat stops at the first failed write instead of reading all of its input.
with open("/dev/full", "w") as full:
    p = subprocess.Popen([HALFWAY, "testfloat", "f16_add"], stdin=subprocess.PIPE, stdout=full,
                         stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            p.stdin.write(b"3C00 3C00\n" * 50000)
    except BrokenPipeError:
        pass
    try:
        p.stdin.close()
    except BrokenPipeError:
        pass
    err = p.stderr.read().decode()
    p.wait(timeout=60)
check(p.returncode == 2 and "No space left on device" in err,
      "testfloat > /dev/full with endless input stops with exit 2 (%d, %r)" % (p.returncode, err))

# --- stdin that cannot be read ------------------------------------------------------------------
fd = os.open("/", os.O_RDONLY)
r = subprocess.run([HALFWAY, "testfloat", "f16_add"], stdin=fd, capture_output=True, text=True,
                   timeout=60)
os.close(fd)
check(one_error_line(r) and "cannot read standard input" in r.stderr and r.stdout == "",
      "testfloat < /: exit 2, one line (exit %d, %r)" % (r.returncode, r.stderr.strip()))
if os.path.exists("/dev/zero"):
    # An AddressSanitizer build (scripts/test --sanitize) reserves terabytes of address space
    # at start-up: no address-space limit there, the line limit is still checked.
    with open(HALFWAY, "rb") as f:
        asan = b"__asan_init" in f.read()

    def small_memory():
        if not asan:
            resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    with open("/dev/zero", "rb") as zero:
        r = subprocess.run([HALFWAY, "testfloat", "f16_add"], stdin=zero, capture_output=True,
                           text=True, timeout=60, preexec_fn=small_memory)
    check(one_error_line(r) and "line 1: longer than" in r.stderr,
          "testfloat < /dev/zero: one line, exit 2, bounded memory (exit %d, %r)"
          % (r.returncode, r.stderr.strip()[-200:]))
r = subprocess.run([HALFWAY, "testfloat", "f16_add"], input="3C00 3C\x0000\n",
                   capture_output=True, text=True)
check(one_error_line(r) and "\\x00" in r.stderr and "\x00" not in r.stderr,
      "testfloat: a NUL byte in an operand is an error, printed escaped (%r)" % r.stderr)
r = subprocess.run([HALFWAY, "testfloat", "f16_add"], input="3C00 3C00\n\n3C00 4000\r\n",
                   capture_output=True, text=True)
check(r.returncode == 0 and r.stdout == "3C00 3C00 4000 00\n3C00 4000 4200 00\n",
      "testfloat still reads lines, blank lines and CRLF (%r)" % r.stdout)

# --- a failed write of a result file says why ---------------------------------------------------
cfg = write("run.toml", CONFIG)


def fsize_limit():
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG


out = os.path.join(TMP, "limited")
r = subprocess.run([HALFWAY, "train", cfg, "--out", out], capture_output=True, text=True,
                   preexec_fn=fsize_limit)
check(one_error_line(r) and "write to '" in r.stderr and "failed: File too large" in r.stderr,
      "train past RLIMIT_FSIZE: the file and the reason (%r)" % r.stderr.strip())
left = [f for f in os.listdir(out)] if os.path.isdir(out) else []
check(not any(".tmp." in f for f in left), "train past RLIMIT_FSIZE: no temporary file left")

# --- result files: symlinks written through, non-regular files refused --------------------------
out = os.path.join(TMP, "linked")
os.makedirs(out)
os.makedirs(os.path.join(TMP, "elsewhere"))
target = os.path.join(TMP, "elsewhere", "steps.csv")
os.symlink(os.path.join("..", "elsewhere", "steps.csv"), os.path.join(out, "steps.csv"))
r = subprocess.run([HALFWAY, "train", cfg, "--out", out], capture_output=True, text=True)
check(r.returncode == 0 and os.path.islink(os.path.join(out, "steps.csv")) and
      os.path.isfile(target) and open(target).read().startswith("step,loss"),
      "train: a symlinked steps.csv stays a link, its target gets the table (%r)" % r.stderr)
check(not [f for f in os.listdir(os.path.join(TMP, "elsewhere")) if ".tmp." in f],
      "train: no temporary file next to the link's target")
out = os.path.join(TMP, "fifo")
os.makedirs(out)
os.mkfifo(os.path.join(out, "trace.csv"))
r = subprocess.run([HALFWAY, "train", cfg, "--out", out], capture_output=True, text=True,
                   timeout=60)
check(one_error_line(r) and "not a regular file" in r.stderr and
      stat.S_ISFIFO(os.lstat(os.path.join(out, "trace.csv")).st_mode),
      "train: a FIFO in place of trace.csv is refused and kept (%r)" % r.stderr.strip())
check(sorted(os.listdir(out)) == ["trace.csv"], "train: the refused run leaves no file behind")

# --- control characters in error messages are escaped -------------------------------------------
bad_name = os.path.join(TMP, "evil\x1b[2J\nname.toml")
r = subprocess.run([HALFWAY, "train", bad_name], capture_output=True, text=True)
check(one_error_line(r) and "\x1b" not in r.stderr and "evil\\x1b[2J\\x0aname.toml" in r.stderr,
      "a config path with ESC and newline: escaped, one line (%r)" % r.stderr)
bad_kind = write("kind.toml", CONFIG.replace('kind = "mlp"', 'kind = "ml\\u001b]0;x\\u0007p"'))
r = subprocess.run([HALFWAY, "train", bad_kind], capture_output=True, text=True)
check(one_error_line(r) and "\x1b" not in r.stderr and "\x07" not in r.stderr and
      "\\x1b]0;x\\x07" in r.stderr,
      "a TOML string with ESC and BEL: escaped, one line (%r)" % r.stderr)
r = subprocess.run([HALFWAY, "round", "0.1", "--to", "fp\x9b16\u00e9"], capture_output=True)
err = r.stderr.decode("utf-8", "replace")
check(r.returncode == 2 and b"\xc2\x9b" not in r.stderr and "\\xc2\\x9b16\u00e9" in err,
      "a C1 control (CSI) is escaped, other UTF-8 is kept (%r)" % err)
r = subprocess.run([HALFWAY, "no\x1bsuch"], capture_output=True, text=True)
check(r.returncode == 2 and "\x1b" not in r.stderr and "no\\x1bsuch" in r.stderr,
      "an unknown command is escaped too (%r)" % r.stderr)

# --- train --bench --python: no shell -----------------------------------------------------------
marker = os.path.join(TMP, "shell-ran")
evil = "/nonexistent'; touch '%s'; echo '" % marker
QUICK = ["--bench-models", "mlp", "--bench-steps", "2", "--bench-reps", "1"]
r = subprocess.run([HALFWAY, "train", "--bench", *QUICK, "--python", evil], capture_output=True,
                   text=True, timeout=300)
check(r.returncode == 0 and not os.path.exists(marker) and "unavailable" in r.stdout,
      "--python with quotes and ';' is not run by a shell (%r)" % r.stdout[-300:])
odd = os.path.join(TMP, "a dir with 'quotes' and spaces")
os.makedirs(odd)
fake = os.path.join(odd, "py thon")
# The reference protocol: argv[1] the script, argv[2] a JSON spec; one JSON object printed.
with open(fake, "w") as f:
    f.write("#!/bin/sh\ncase \"$2\" in *'\"steps\":2'*) echo '{\"reference\": \"fake ref\", "
            "\"seconds_per_step\": 2.5e-05, \"cpu_seconds_per_step\": 5e-05}';; esac\n")
os.chmod(fake, 0o755)
r = subprocess.run([HALFWAY, "train", "--bench", *QUICK, "--python", fake], capture_output=True,
                   text=True, timeout=300)
check(r.returncode == 0 and re.search(r"mlp fp32 .* reference +25\.0 us", r.stdout)
      and "fake ref" in r.stdout,
      "--python with spaces and quotes in its path runs, with its arguments (%r)"
      % r.stdout[-400:])

# --- train --bench --json: the documented record, ratio = halfway / reference -----------------
r = subprocess.run([HALFWAY, "train", "--bench", *QUICK, "--json", "--python", fake],
                   capture_output=True, text=True, timeout=300)
recs = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
FIELDS = {"name", "model", "threads", "halfway_us", "halfway_cpu_us", "reference", "reference_us",
          "reference_cpu_us", "ratio", "cpu_ratio", "goal_max"}
check(r.returncode == 0 and len(recs) == 3 and all(set(x) == FIELDS for x in recs),
      "--json prints one record with the documented fields per row (%r)" % r.stdout[-400:])
check(all(abs(x["reference_us"] - 25.0) < 1e-9 and x["threads"] == 1 and x["halfway_us"] > 0
          and x["ratio"] == x["halfway_us"] / x["reference_us"] for x in recs),
      "ratio is halfway_us / reference_us (%r)" % recs)
check(all(abs(x["reference_cpu_us"] - 50.0) < 1e-9 and x["halfway_cpu_us"] > 0
          and x["cpu_ratio"] == x["halfway_cpu_us"] / x["reference_cpu_us"] for x in recs),
      "cpu_ratio is halfway_cpu_us / reference_cpu_us, the reference's CPU time as reported "
      "(%r)" % recs)
check({x["name"]: x["goal_max"] for x in recs} ==
      {"mlp fp32": 2, "mlp torch-cuda-fp16 traced": 3, "mlp pure-bf16 untraced": 0.5},
      "the MLP rows and their goals (%r)" % recs)
r = subprocess.run([HALFWAY, "train", "--bench", *QUICK, "--json", "--python", evil],
                   capture_output=True, text=True, timeout=300)
recs = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
check(r.returncode == 0 and recs and all(x["ratio"] is None and x["reference_us"] is None
                                         and x["cpu_ratio"] is None
                                         and x["reference_cpu_us"] is None
                                         and x["reference"].startswith("unavailable")
                                         for x in recs),
      "without PyTorch, ratio and reference_us are null and the reference says why (%r)"
      % r.stdout[-300:])
r = subprocess.run([HALFWAY, "train", "--bench", "--bench-models", "cnn"], capture_output=True,
                   text=True)
check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1,
      "an unknown bench model: one line, exit 2 (%r)" % r.stderr)

shutil.rmtree(TMP, ignore_errors=True)
sys.exit(status())
