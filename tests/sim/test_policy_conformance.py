"""Every precision preset does exactly what docs/sim.md's policy table says.

The table is parsed from the documentation, not restated here. For every preset, one traced
step of the tiny transformer and one of the MLP are run, and every low-precision rounding in
trace.csv must be allowed by the preset's row:
  - its dtype is one of the row's "low-precision dtypes" (fp32: no rounding at all);
  - where the row qualifies a dtype with "(op: role, role)", the rounding comes from that op
    and is one of those operands (fp8-hybrid: only a linear layer's input, weight and output
    gradient, and every linear layer has all three);
  - no op on the row's "fp32" list rounds into a low dtype;
  - every op on the "lower" list, and for "everything in the low dtype" every op the models
    run, rounds into the low dtype.
A preset the tool knows but the table lacks (or the reverse) fails too.

The [precision.blocks] keys are checked against their table ("Choosing the recipe"): for each
key, a traced step of the transformer under the example's preset and value must change exactly
the copies the row lists, to that value (the manifest for pow2_scales), every other copy
staying as the block table says; and each example must change something.

The block-scaled presets are also checked against the block table: every row of blocks.csv
(scheme, axis, stochastic rounding, Hadamard transform of each operand copy) is the table's
cell for that operand and copy, every linear layer has all six copies, and presets outside
the block table write no rows.

usage: test_policy_conformance.py PATH/TO/halfway
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simtest  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import config  # noqa: E402

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "sim.md")

# The two models every preset runs one step of, without a scaler: what differs from
# tests/data/<model>.toml.
MODELS = {
    "transformer": {"data": {"n": 64}},
    "mlp": {"model": {"layers": [16, 64, 64, 1], "activation": "gelu"},
            "data": {"batch_size": 16, "n": 64}},
}


def model_config(model, policy):
    return config(model, optimizer={"lr": 0.003}, precision={"policy": policy},
                  scaler={"kind": "none"}, run={"steps": 1, "seed": 0}, **MODELS[model])


def split_list(cell):
    """'a, b (note, more), c' -> ['a', 'b', 'c']; a cell starting with an em dash -> []."""
    cell = re.sub(r"\([^)]*\)", "", cell).strip()
    if cell.startswith("\u2014"):
        return []
    return [x.strip() for x in cell.split(",") if x.strip()]


def parse_dtypes(cell):
    """'fp16' or 'e4m3:sat (linear: input, weight), e5m2:sat (linear: grad_output)' ->
    {dtype: None | (op, {roles})}."""
    out = {}
    if cell.strip().startswith("\u2014"):
        return out
    for m in re.finditer(r"([\w:]+)(?:\s*\((\w+):\s*([\w, ]+)\))?", cell):
        dtype, op, roles = m.group(1), m.group(2), m.group(3)
        out[dtype] = (op, {r.strip() for r in roles.split(",")}) if op else None
    return out


def policy_table():
    with open(DOC) as f:
        lines = f.read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("| preset | low-precision dtypes"))
    rows = {}
    for l in lines[start + 2:]:
        if not l.startswith("|"):
            break
        cells = [c.strip() for c in l.strip().strip("|").split("|")]
        name = cells[0].strip("`")
        lower = cells[2]
        rows[name] = {
            "dtypes": parse_dtypes(cells[1]),
            "everything": "everything in the low dtype" in lower,
            "lower": [] if "everything" in lower else split_list(lower),
            "fp32": split_list(cells[3]),
        }
    return rows


BLOCK_COLUMNS = {"X fprop": ("input", "fprop"), "W fprop": ("weight", "fprop"),
                 "dY dgrad": ("grad_output", "dgrad"), "W dgrad": ("weight", "dgrad"),
                 "dY wgrad": ("grad_output", "wgrad"), "X wgrad": ("input", "wgrad")}


# Linear layers whose input needs no gradient (the MLP's first reads the data): no dgrad.
NO_INPUT_GRAD = {"mlp": {"0"}, "transformer": set()}


def block_table():
    """{preset: {(role, copy): (scheme, axis, sr, rht, pow2)}} from the block table."""
    with open(DOC) as f:
        lines = f.read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("| preset | X fprop"))
    head = [c.strip() for c in lines[start].strip().strip("|").split("|")]
    rows = {}
    for l in lines[start + 2:]:
        if not l.startswith("|"):
            break
        cells = [c.strip() for c in l.strip().strip("|").split("|")]
        row = {}
        for col, cell in zip(head[1:], cells[1:]):
            parts = [x.strip() for x in cell.split(",")]
            flags = set(parts[2:])
            row[BLOCK_COLUMNS[col]] = (parts[0], int(parts[1]), "sr" in flags, "rht" in flags,
                                       "pow2" in flags)
        rows[cells[0].strip("`")] = row
    return rows


def option_table():
    """[(key, preset, value, [copy labels])] from the [precision.blocks] key table."""
    with open(DOC) as f:
        lines = f.read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("| key | example | copies"))
    rows = []
    for l in lines[start + 2:]:
        if not l.startswith("|"):
            break
        cells = [c.strip() for c in l.strip().strip("|").split("|")]
        preset, value = [x.strip().strip("`") for x in cells[1].split(":", 1)]
        copies = [] if cells[2] == "(manifest)" else [c.strip() for c in cells[2].split(",")]
        rows.append((cells[0].strip("`"), preset, value, copies))
    return rows


def toml_value(text):
    """A TOML value of the table: true, false or a string."""
    return {"true": True, "false": False}.get(text, text.strip('"'))


def check_options(halfway, w, btable, linear_scopes):
    """Each [precision.blocks] key's example against the block table's row of its preset."""
    import json
    errors = []
    rows = option_table()
    simtest.check(len(rows) == 10, "the key table has %d rows" % len(rows))
    for key, preset, value, copies in rows:
        tag = "opt-%s-%s" % (preset, key)
        text = (model_config("transformer", preset) +
                "[precision.blocks]\n%s = %s\n" % (key, value))
        simtest.train(halfway, w.write(tag + ".toml", text), w.file(tag))
        v = toml_value(value)
        if key == "pow2_scales":
            with open(os.path.join(w.file(tag), "manifest.json")) as f:
                got = json.load(f)["policy"]["blocks"]["pow2_scales"]
            if got != v or btable[preset][("input", "fprop")][4] == v:
                errors.append("%s: manifest pow2_scales %s, example %s" % (tag, got, v))
            continue
        field = 2 if key.endswith("_sr") else 3 if key.endswith("_rht") else 0
        cells = dict(btable[preset])
        for label in copies:
            cell = list(cells[BLOCK_COLUMNS[label]])
            cell[field] = v
            cells[BLOCK_COLUMNS[label]] = tuple(cell)
        if cells == btable[preset]:
            errors.append("%s: the example changes no copy" % tag)
        rows_csv = simtest.read_csv(os.path.join(w.file(tag), "blocks.csv"))
        errors += check_blocks(tag, cells, {"transformer": rows_csv}, linear_scopes)
    return errors


def check_blocks(name, cells, blocks, linear_scopes):
    """blocks.csv rows of one traced step against the block table's row (None: no rows)."""
    errors = []
    for model, rows in blocks.items():
        if cells is None:
            if rows:
                errors.append("%s/%s: %d blocks.csv rows, but no block table row"
                              % (name, model, len(rows)))
            continue
        seen = {}
        for r in rows:
            scope, role = scope_role(r["name"])
            key = (role, r["gemm"])
            what = "%s/%s: %s %s" % (name, model, r["name"], r["gemm"])
            if key not in cells:
                errors.append(what + ": not a copy the table lists")
                continue
            scheme, axis, sr, rht, pow2 = cells[key]
            got = (r["scheme"], int(r["axis"]), r["sr"] == "1", r["rht"] == "1")
            if got != (scheme, axis, sr, rht):
                errors.append(what + ": %s, the table says %s" % (got, (scheme, axis, sr, rht)))
            if r["op"] != "linear":
                errors.append(what + ": op %s is not linear" % r["op"])
            seen.setdefault(scope, set()).add(key)
        for scope in linear_scopes[model]:
            want = set(cells)
            if scope in NO_INPUT_GRAD[model]:
                want = {k for k in want if k[1] != "dgrad"}
            if seen.get(scope) != want:
                errors.append("%s/%s: linear layer %s has copies %s, the table lists %s"
                              % (name, model, scope, sorted(seen.get(scope, [])), sorted(cells)))
    return errors


def tool_presets(halfway, w):
    """The presets the tool itself lists when asked for an unknown one."""
    path = w.write("bad.toml", model_config("mlp", "no-such-policy"))
    r = simtest.run(halfway, "train", path, "--out", w.file("bad"))
    m = re.search(r"presets: ([^;)]*)", r.stderr)
    simtest.check(r.returncode == 2 and m, "unknown policy is refused with the preset list: "
                  + r.stderr)
    return m.group(1).split()


def traced_step(halfway, w, model, policy):
    tag = "%s-%s" % (model, policy)
    path = w.write(tag + ".toml", model_config(model, policy))
    simtest.train(halfway, path, w.file(tag))
    return (simtest.read_csv(os.path.join(w.file(tag), "trace.csv")),
            simtest.read_csv(os.path.join(w.file(tag), "blocks.csv")))


def scope_role(name):
    """'blocks.0.attn.q.weight' -> ('blocks.0.attn.q', 'weight')."""
    scope, _, role = name.rpartition(".")
    return scope, role


def check_preset(name, row, traces, all_ops, linear_scopes):
    errors = []
    dtypes = row["dtypes"]
    seen_ops = {}
    for model, rows in traces.items():
        fp8_roles = {}
        for r in rows:
            what = "%s/%s: %s (op %s, %s)" % (name, model, r["name"], r["op"], r["dtype"])
            if r["dtype"] not in dtypes:
                errors.append(what + ": dtype not in the table's " + str(sorted(dtypes)))
                continue
            if r["op"] in row["fp32"]:
                errors.append(what + ": op is on the fp32 list")
            q = dtypes[r["dtype"]]
            if q is not None:
                scope, role = scope_role(r["name"])
                if r["op"] != q[0] or role not in q[1]:
                    errors.append(what + ": only %s's %s may be %s" % (q[0], sorted(q[1]),
                                                                       r["dtype"]))
                else:
                    fp8_roles.setdefault(scope, set()).add(role)
            seen_ops.setdefault(r["op"], set()).add(r["dtype"])
        qualified = [q for q in dtypes.values() if q is not None]
        if qualified:
            want = set().union(*(q[1] for q in qualified))
            for scope in linear_scopes[model]:
                if fp8_roles.get(scope) != want:
                    errors.append("%s/%s: linear layer %s has fp8 %s, the table says %s"
                                  % (name, model, scope, sorted(fp8_roles.get(scope, [])),
                                     sorted(want)))
    for op in row["lower"]:
        if not seen_ops.get(op):
            errors.append("%s: op %s is on the lower list but never rounds into %s"
                          % (name, op, sorted(dtypes)))
    if row["everything"]:
        for op in sorted(all_ops - set(seen_ops) - {"cast"}):
            errors.append("%s: everything should be in the low dtype, but op %s never is"
                          % (name, op))
    if not dtypes and any(traces.values()):
        errors.append("%s: the table lists no low-precision dtype, yet %d roundings were traced"
                      % (name, sum(len(t) for t in traces.values())))
    return errors


def main(halfway):
    w = simtest.Workdir("policy_conformance")
    try:
        table = policy_table()
        presets = tool_presets(halfway, w)
        simtest.check(sorted(table) == sorted(presets),
                      "docs/sim.md's table lists %s, the tool knows %s" % (sorted(table),
                                                                           sorted(presets)))
        steps = {p: {m: traced_step(halfway, w, m, p) for m in MODELS} for p in presets}
        traces = {p: {m: s[0] for m, s in v.items()} for p, v in steps.items()}
        blocks = {p: {m: s[1] for m, s in v.items()} for p, v in steps.items()}
        btable = block_table()
        simtest.check(set(btable) <= set(presets), "block table presets %s" % sorted(btable))
        # The ops that round into a low dtype under any preset, and the models' linear layers
        # (from the autocast run, where each has a low-precision output).
        all_ops, linear_scopes = set(), {}
        for p in presets:
            for m, rows in traces[p].items():
                all_ops |= {r["op"] for r in rows}
        for m, rows in traces["torch-cuda-fp16"].items():
            linear_scopes[m] = sorted({scope_role(r["name"])[0] for r in rows
                                       if r["op"] == "linear" and r["name"].endswith(".output")})
        simtest.check(len(linear_scopes["mlp"]) == 3 and len(linear_scopes["transformer"]) == 7,
                      "linear layers found: %s" % linear_scopes)
        errors = []
        for p in presets:
            e = check_preset(p, table[p], traces[p], all_ops, linear_scopes)
            e += check_blocks(p, btable.get(p), blocks[p], linear_scopes)
            n = sum(len(t) for t in traces[p].values())
            nb = sum(len(t) for t in blocks[p].values())
            print("%-16s %5d traced roundings, %4d block copies: %s"
                  % (p, n, nb, "ok" if not e else "%d errors" % len(e)))
            errors += e
        # Negative control: the table's fp8-hybrid row must reject a rounding it does not allow.
        bad = dict(traces["fp8-hybrid"])
        bad["transformer"] = bad["transformer"] + [{
            "name": "blocks.0.attn.proj.grad_input", "op": "linear", "dtype": "e4m3:sat"}]
        simtest.check(check_preset("fp8-hybrid", table["fp8-hybrid"], bad, all_ops, linear_scopes),
                      "negative control: an e4m3 grad_input is reported")
        # Negative control: a wgrad copy of X without the Hadamard transform is reported.
        bad_blocks = {m: [dict(r) for r in rows] for m, rows in blocks["nvfp4"].items()}
        for r in bad_blocks["mlp"]:
            if r["gemm"] == "wgrad" and r["name"].endswith(".input"):
                r["rht"] = "0"
        simtest.check(check_blocks("nvfp4", btable["nvfp4"], bad_blocks, linear_scopes),
                      "negative control: an nvfp4 wgrad copy without RHT is reported")
        e = check_options(halfway, w, btable, linear_scopes)
        print("[precision.blocks] keys: %s" % ("ok" if not e else "%d errors" % len(e)))
        errors += e
        # Negative control: a key table that claimed input_sr for W's copies is reported.
        fake = {"transformer": [dict(r) for r in blocks["mxfp8"]["transformer"]]}
        cells = dict(btable["mxfp8"])
        cells[("weight", "fprop")] = cells[("weight", "fprop")][:2] + (True,) + \
            cells[("weight", "fprop")][3:]
        simtest.check(check_blocks("mxfp8", cells, fake, linear_scopes),
                      "negative control: a W copy claimed stochastic is reported")
        for e in errors[:40]:
            print("FAIL " + e)
        simtest.check(not errors, "%d rounding(s) the documentation does not allow" % len(errors))
        print("all %d presets conform to docs/sim.md's table" % len(presets))
    finally:
        w.cleanup()


if __name__ == "__main__":
    main(sys.argv[1])
