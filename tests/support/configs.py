"""The training configs of the tests: a base per model kind as a file (tests/data/mlp.toml,
tests/data/transformer.toml) and the keys a test changes, so that each test states only what
differs. The same rules as tests/support/configs.hpp: a key of the base is replaced in place
(or removed, with None), a new key goes at the end of its table, a new table at the end of the
text; a table given as None is removed with its keys.

    config("mlp", run={"steps": 4}, precision={"policy": "bf16"})
    config("mlp", **{"precision.ops": {"linear": "fp32"}})   # a dotted table

Values are Python values written as TOML (str, bool, int, float, lists of them), or `Raw(text)`
for TOML text as it is (an inline table, a placeholder a test replaces later)."""
import json
import os

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")


class Raw(str):
    """TOML text written as it is."""


def toml_value(v):
    """TOML text of a value: Raw as it is; a str, bool, int, float or list of them in JSON's
    spelling, which is TOML's for these (no inf or NaN here)."""
    return str(v) if isinstance(v, Raw) else json.dumps(v, allow_nan=False)


def data_file(name):
    """The path of tests/data/<name>."""
    return os.path.join(DATA, name)


def config(kind, **tables):
    """tests/data/<kind>.toml with the keys of `tables` ({table: {key: value}}) changed."""
    with open(data_file(kind + ".toml")) as f:
        lines = f.read().splitlines()
    for table, keys in tables.items():
        header = f"[{table}]"
        if keys is None:  # the whole table removed
            begin = end = lines.index(header)
            end += 1
            while end < len(lines) and not lines[end].startswith("["):
                end += 1
            del lines[begin:end]
            continue
        for key, value in keys.items():
            found = header in lines
            begin = end = len(lines)
            if found:
                begin = end = lines.index(header) + 1
                while end < len(lines) and not lines[end].startswith("["):
                    end += 1
            at = [i for i in range(begin, end) if lines[i].startswith(key + " = ")]
            if at:
                if value is None:
                    del lines[at[-1]]
                else:
                    lines[at[-1]] = f"{key} = {toml_value(value)}"
            elif value is None:
                raise KeyError(f"config key to remove is not in the base: {table}.{key}")
            elif not found:
                lines += [header, f"{key} = {toml_value(value)}"]
            else:
                lines.insert(end, f"{key} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


def sweep_base(text):
    """A config as the inline base of a sweep file: each [table] becomes [base.table]."""
    return "".join("[base." + line[1:] if line.startswith("[") else line
                   for line in text.splitlines(keepends=True))
