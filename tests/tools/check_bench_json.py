"""Runs `halfway bench --quick --json` and checks that every line is a JSON record with exactly
the documented fields and sensible types, and that the scalar rows compare with SoftFloat 3e
exactly when the build has it (second argument `softfloat` or `no-softfloat`). It never checks
speed: machines are noisy, and the bench reports goals rather than enforcing them."""
import json
import math
import subprocess
import sys

FIELDS = {"name", "format", "rounding", "n", "items_per_second", "reference", "ratio_to_reference",
          "goal", "met", "cpu", "path"}


# The scalar rows (name, format) and the SoftFloat 3e function each is measured against.
SCALAR = {("scalar from_f32", "fp16"): "f32_to_f16", ("scalar from_f32", "bf16"): "f32_to_f16",
          ("scalar from_f32", "e4m3"): "f32_to_f16", ("scalar add", "fp16"): "f16_add",
          ("scalar add", "bf16"): "f16_add", ("scalar mul", "fp16"): "f16_mul",
          ("scalar mul", "bf16"): "f16_mul"}


def check_scalar(rec: dict, softfloat: bool) -> str:
    """What is wrong with a scalar row, or ''."""
    key = (rec["name"], rec["format"])
    if key not in SCALAR:
        return f"unexpected scalar row {key}"
    if not softfloat:
        if rec["reference"] != "skipped: SoftFloat 3e not built":
            return "without SoftFloat the reference must say 'skipped: SoftFloat 3e not built'"
        return ""
    want = "SoftFloat 3e " + SCALAR[key] + ("" if rec["format"] == "fp16" else " (fp16 proxy)")
    if rec["reference"] != want or rec["ratio_to_reference"] is None:
        return f"the reference must be {want!r}, with a ratio"
    if rec["goal"] != 1.0:
        return "the goal must be 1.0 (SoftFloat's speed)"
    return ""


def main() -> int:
    exe = sys.argv[1]
    softfloat = sys.argv[2] == "softfloat"
    run = subprocess.run([exe, "bench", "--quick", "--json"], capture_output=True, text=True,
                         timeout=600)
    if run.returncode != 0:
        print(f"bench exited {run.returncode}: {run.stderr.strip()}")
        return 1
    lines = [l for l in run.stdout.splitlines() if l.strip()]
    if not lines:
        print("bench printed nothing")
        return 1
    names = set()
    for line in lines:
        rec = json.loads(line)
        if set(rec) != FIELDS:
            print(f"fields {sorted(rec)} != {sorted(FIELDS)} in: {line}")
            return 1
        for key in ("name", "format", "rounding", "reference"):
            if not isinstance(rec[key], str) or not rec[key]:
                print(f"{key} is not a non-empty string in: {line}")
                return 1
        if not isinstance(rec["n"], int) or rec["n"] <= 0:
            print(f"n is not a positive integer in: {line}")
            return 1
        ips = rec["items_per_second"]
        if not isinstance(ips, (int, float)) or not math.isfinite(ips) or ips <= 0:
            print(f"items_per_second is not a positive number in: {line}")
            return 1
        ratio = rec["ratio_to_reference"]
        if ratio is not None and (not isinstance(ratio, (int, float)) or not math.isfinite(ratio)
                                  or ratio <= 0):
            print(f"ratio_to_reference is neither null nor a positive number in: {line}")
            return 1
        if ratio is None and not rec["reference"].startswith("skipped"):
            print(f"a missing ratio must come with a 'skipped: ...' reference in: {line}")
            return 1
        goal, met = rec["goal"], rec["met"]
        if goal is not None and (not isinstance(goal, (int, float)) or not goal > 0):
            print(f"goal is neither null nor a positive number in: {line}")
            return 1
        want_met = None if ratio is None or goal is None else ratio >= goal
        if met is not want_met:
            print(f"met is {met!r}, but ratio {ratio} against goal {goal} says {want_met!r}: {line}")
            return 1
        for key in ("cpu", "path"):
            if not isinstance(rec[key], str) or not rec[key]:
                print(f"{key} is not a non-empty string in: {line}")
                return 1
        if rec["name"].startswith("scalar "):
            wrong = check_scalar(rec, softfloat)
            if wrong:
                print(f"{wrong}: {line}")
                return 1
        names.add((rec["name"], rec["format"]))
    for want in [("round_f32", "fp16"), ("round_f32", "bf16"), ("add", "fp16"), ("fma", "bf16"),
                 ("round_f32+counts", "e4m3"), ("encode_blocks", "mxfp4"),
                 ("encode_blocks", "nvfp4"), ("encode_blocks", "fp8_block_2d"),
                 ("decode_blocks", "mxfp4"), ("quantize_blocks", "nvfp4"),
                 ("quantize_f32", "fp16"), ("quantize_f32", "bf16"),
                 ("add (vs hardware)", "fp16"), ("mul (vs hardware)", "bf16")] + list(SCALAR):
        if want not in names:
            print(f"missing figure {want}")
            return 1
    bad = subprocess.run([exe, "bench", "--no-such-option"], capture_output=True, text=True)
    if bad.returncode != 2 or len(bad.stderr.strip().splitlines()) != 1:
        print(f"a bad option must give one line on stderr and exit 2, got {bad.returncode}: "
              f"{bad.stderr!r}")
        return 1
    print(f"{len(lines)} records ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
