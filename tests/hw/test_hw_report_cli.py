#!/usr/bin/env python3
"""`halfway hw-report` end to end: bad input and absent backends exit 2 with one line on stderr;
a present backend gives a JSON report whose numbers follow from the hardware's documented
behaviour. Usage: test_hw_report_cli.py PATH_TO_HALFWAY"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import quiet_check as check, status  # noqa: E402

HALFWAY = sys.argv[1]


def run(args, env_extra=None):
    env = dict(os.environ)
    env.pop("HALFWAY_HW_DISABLE", None)
    env.update(env_extra or {})
    p = subprocess.run([HALFWAY, "hw-report"] + args, capture_output=True, text=True, env=env,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


def expect_exit2(args, needle, env_extra=None):
    rc, out, err = run(args, env_extra)
    lines = err.strip().splitlines()
    check(rc == 2, f"{args}: exit {rc}, want 2")
    check(len(lines) == 1, f"{args}: want one line on stderr, got {lines!r}")
    check(needle in err, f"{args}: stderr {err!r} lacks {needle!r}")
    check(out == "", f"{args}: nothing on stdout, got {out[:200]!r}")


expect_exit2(["--backend", "no-such-backend"], "unknown backend 'no-such-backend'")
expect_exit2(["--backend"], "--backend: 1 required TEXT missing")
expect_exit2(["--op", "f32_to_f17_rn"], "unknown operation")
expect_exit2(["--threads", "0"], "--threads: Value 0 not in range 1 to 1024")
expect_exit2(["--frobnicate"], "not expected: --frobnicate")
for name in ["f16c", "avx512bf16", "avx512fp16", "nvidia-host"]:
    expect_exit2(["--backend", name], f"backend '{name}' is not available here: disabled by "
                 "HALFWAY_HW_DISABLE", {"HALFWAY_HW_DISABLE": "x," + name})
expect_exit2(["--cases", "0"], "--cases: Value 0 not in range 1 to 68719476736")
expect_exit2(["--backend", "avx512bf16-dot", "--op", "f16_add"], "--op does not apply")
for name in ["avx512bf16-dot", "amx-bf16", "amx-fp16"]:
    expect_exit2(["--backend", name], f"backend '{name}' is not available here: disabled by "
                 "HALFWAY_HW_DISABLE", {"HALFWAY_HW_DISABLE": name})
expect_exit2(["--op", "f32_to_bf16_rn"], "no available backend implements",
             {"HALFWAY_HW_DISABLE": "nvidia-host,avx512bf16,f16c,avx512fp16"})

# Which backends are really present here (the listing names absent ones and why).
present = set()
rc, out, err = run(["--json", "--op", "f16_to_f32"])
if rc == 0:
    for b in json.loads(out)["backends"]:
        present.add(b["name"])
rc, out, err = run(["--json", "--op", "f32_to_bf16_rn"])
if rc == 0:
    for b in json.loads(out)["backends"]:
        present.add(b["name"])

if "f16c" in present:
    rc, out, err = run(["--backend", "f16c", "--op", "f32_to_f16_rd", "--json", "--threads", "2"])
    check(rc == 0, f"f16c report exit {rc}: {err}")
    rep = json.loads(out)
    op = rep["backends"][0]["ops"][0]
    check(op["op"] == "f32_to_f16_rd" and op["coverage"] == "sample", f"f16c op {op}")
    check(op["total"] == 1 << 22 and op["mismatches"] == 0, f"f16c rd: {op}")
    check(op["hw_hash"] == op["ref_hash"], "equal results must have equal fingerprints")
else:
    print("f16c not present here: its report was not checked")

if "avx512bf16" in present:
    rc, out, err = run(["--backend", "avx512bf16", "--json", "--threads", "2"])
    check(rc == 0, f"avx512bf16 exit {rc}: {err}")
    op = json.loads(out)["backends"][0]["ops"][0]
    classes = {c["class"]: c for c in op["classes"]}
    check(list(classes) == ["daz"], f"avx512bf16 classes {list(classes)}")
    ex = classes["daz"]["example"]
    x = int(ex["a"], 16)
    check((x & 0x7F800000) == 0 and (x & 0x7FFFFF) > 0x8000, f"daz example input {ex}")
    check(int(ex["hw"], 16) & 0x7FFF == 0, f"daz example hw {ex}")
    check(op["hw_hash"] != op["ref_hash"], "different results must have different fingerprints")
    rc, out, err = run(["--backend", "avx512bf16"])
    check("fp32 subnormal inputs flushed to zero" in out, f"text report: {out}")
else:
    print("avx512bf16 not present here: its report was not checked")

rc, out, err = run(["--json", "--op", "f16_fma"])
if rc == 0:
    for b in json.loads(out)["backends"]:
        present.add(b["name"])
if "avx512fp16" in present:
    rc, out, err = run(["--backend", "avx512fp16", "--op", "f16_fma", "--json", "--threads", "2"])
    op = json.loads(out)["backends"][0]["ops"][0]
    check(op["coverage"] == "random" and op["total"] == 1 << 22 and op["mismatches"] == 0,
          f"avx512fp16 fma: {op}")
else:
    print("avx512fp16 not present here: its report was not checked")

if "nvidia-host" in present:
    rc, out, err = run(["--backend", "nvidia-host", "--op", "f16_to_f32"])
    check(rc == 0, f"nvidia-host exit {rc}: {err}")
    check("2046  NaN payload canonicalized to 0x7FFFFFFF" in out, f"nvidia-host text: {out}")
    rc, out, err = run(["--backend", "nvidia-host", "--op", "f32_to_e4m3_nosat", "--json"])
    op = json.loads(out)["backends"][0]["ops"][0]
    classes = {c["class"]: c for c in op["classes"]}
    check(list(classes) == ["nan_sign"] and classes["nan_sign"]["description"] == "NaN sign dropped",
          f"e4m3 nosat classes {classes}")
else:
    print("nvidia-host not built here: its report was not checked")

# Dot-product instructions: the documented model on every lane, found by the search alone.
rc, out, err = run(["--backend", "avx512bf16-dot", "--cases", "65536", "--json", "--threads", "2"])
if rc == 2 and "is not available here" in err:
    print("avx512bf16-dot not present here: its report was not checked")
else:
    check(rc == 0, f"avx512bf16-dot exit {rc}: {err}")
    dot = json.loads(out)["backends"][0]["dot"]
    check(dot["lanes"] == 65536 and dot["mismatches"] == 0 and dot["classes"] == [],
          f"avx512bf16-dot: {dot['mismatches']} mismatches")
    check(dot["hw_hash"] == dot["ref_hash"], "equal lanes must have equal fingerprints")
    check(dot["search"]["documented_matched"] and len(dot["search"]["matched"]) == 1,
          f"search: {dot['search']['matched']}")
    ieee = {c["class"] for c in dot["ieee_classes"]}
    check({"daz", "ftz"} <= ieee, f"IEEE baseline classes {ieee}")

# HALFWAY_DISABLE_ISA (halfway/cpu.hpp): a disabled feature makes its backends absent, with the
# reason; an unknown name is bad input.
for name, feature in (("avx512bf16", "avx512"), ("avx512bf16-dot", "avx512bf16"), ("f16c", "f16c"),
                      ("amx-bf16", "amx")):
    rc, out, err = run(["--backend", name], {"HALFWAY_DISABLE_ISA": feature})
    check(rc == 2, f"HALFWAY_DISABLE_ISA={feature} --backend {name}: exit {rc}")
    check(f"backend '{name}' is not available here" in err and
          ("disabled by HALFWAY_DISABLE_ISA" in err or "this CPU has no" in err),
          f"HALFWAY_DISABLE_ISA={feature}: {err!r}")
expect_exit2(["--backend", "f16c"], "HALFWAY_DISABLE_ISA: unknown feature 'sse9'",
             {"HALFWAY_DISABLE_ISA": "avx512,sse9"})

# Recorded AMX tiles, on any machine: the first 20 records of the committed file, then the same
# with one output changed by one ulp (which must show as exactly one mismatch).
import tempfile
TILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "amx",
                     "tdpbf16ps_tiles.bin")
RECORD = 4112
with open(TILES, "rb") as f:
    head = f.read(20 * RECORD)
with tempfile.TemporaryDirectory() as tmp:
    good, bad, cut = (os.path.join(tmp, n) for n in ("good.bin", "bad.bin", "cut.bin"))
    with open(good, "wb") as f:
        f.write(head)
    flipped = bytearray(head)
    flipped[5 * RECORD + 3072] ^= 1  # C after of record 5, output (0, 0): its last bit
    with open(bad, "wb") as f:
        f.write(bytes(flipped))
    with open(cut, "wb") as f:
        f.write(head[:RECORD + 7])
    for path, want in ((good, 0), (bad, 1)):
        rc, out, err = run(["--backend", "amx-bf16", "--from-file", path, "--json"],
                           {"HALFWAY_HW_DISABLE": "amx-bf16"})  # no instruction needed
        check(rc == 0, f"--from-file {path}: exit {rc}: {err}")
        if rc == 0:
            doc = json.loads(out)
            dot = doc["backends"][0]["dot"]
            check(doc["coverage"] == "recorded", f"coverage {doc['coverage']}")
            check(dot["lanes"] == 20 * 256 and dot["mismatches"] == want,
                  f"--from-file: {dot['lanes']} outputs, {dot['mismatches']} mismatches, want {want}")
            check(dot["family_mismatches"]["overflow_range"] == 0,
                  f"family counts {dot['family_mismatches']}")
            check(dot["family_mismatches"]["sparse"] == want,
                  f"the changed output is in record 5 (sparse): {dot['family_mismatches']}")
            check(dot["search"]["lanes"] == 20 * 256, f"search outputs {dot['search']['lanes']}")
            if want == 0:
                check(dot["search"]["documented_matched"], "the documented model must match")
                check(dot["ieee_mismatches"] > 0, "Intel's IEEE fmas differ on real tiles")
    expect_exit2(["--backend", "avx512bf16-dot", "--from-file", good], "needs --backend amx-bf16")
    expect_exit2(["--backend", "amx-bf16", "--from-file", cut], "whole number")
    expect_exit2(["--backend", "amx-bf16", "--from-file", os.path.join(tmp, "none.bin")],
                 "cannot open")
    expect_exit2(["--backend", "amx-bf16", "--from-file", good, "--cases", "5"], "no --cases")
    expect_exit2(["--backend", "amx-bf16", "--from-file"], "--from-file: 1 required TEXT missing")

sys.exit(status("ok"))
