"""The text files an experiment's sweep trains on (`data.text` of its base config) that are not
installed here: text_lm needs Debian's `fortunes` package (scripts/common.sh installs it). The
experiment tests leave such an experiment out and say so, rather than fail."""
import os
import shutil
import tomllib


def missing(exp_dir):
    p = os.path.join(exp_dir, "sweep.toml")
    if not os.path.exists(p):
        return []
    with open(p, "rb") as f:
        text = tomllib.load(f).get("base", {}).get("data", {}).get("text", [])
    files = [text] if isinstance(text, str) else text
    return [f for f in files if not os.path.isfile(os.path.join(exp_dir, f))]


def leave_out_missing(exps, names):
    """`names` without the experiments whose corpus is missing (removed from the copy `exps`)."""
    kept = []
    for n in names:
        gone = missing(os.path.join(exps, n))
        if gone:
            print("skip %s: %d corpus files missing (%s, ...): install Debian's fortunes package"
                  % (n, len(gone), gone[0]))
            shutil.rmtree(os.path.join(exps, n))
        else:
            kept.append(n)
    return kept
