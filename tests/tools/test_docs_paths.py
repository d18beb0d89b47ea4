#!/usr/bin/env python3
"""Every repository path and `halfway` command that README.md and docs/*.md name exists.
Paths are words that start with a top-level folder of the repository (lib/, sim/, hw/, tools/,
python/, tests/, docs/, experiments/, notebooks/, examples/, scripts/); placeholders (NAME,
<name>, *, ...) are skipped. Usage: test_docs_paths.py REPO_ROOT HALFWAY_BINARY"""
import os
import re
import subprocess
import sys

ROOT, HALFWAY = sys.argv[1], sys.argv[2]
TOPS = ("lib", "sim", "hw", "tools", "python", "tests", "docs", "experiments", "notebooks",
        "examples", "scripts")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[A-Za-z0-9_./+-]*[A-Za-z0-9_/])" % "|".join(TOPS))
CMD = re.compile(r"`halfway ([a-z][a-z-]+)")


def docs():
    yield os.path.join(ROOT, "README.md")
    d = os.path.join(ROOT, "docs")
    for name in sorted(os.listdir(d)):
        if name.endswith(".md"):
            yield os.path.join(d, name)


def placeholder(p):
    return any(s in p for s in ("NAME", "<", "*", "...", "HARNESS", "N.", "/X")) or \
        re.search(r"/[A-Z_]+(\.|/|$)", p)


def main():
    missing, commands = [], set()
    for doc in docs():
        text = open(doc, encoding="utf-8").read()
        for m in PATH.finditer(text):
            p = m.group(1).rstrip("/.")
            after = text[m.end():m.end() + 1]
            if placeholder(p) or "results/" in p or after in ("*", "<", "{"):
                continue
            if not os.path.exists(os.path.join(ROOT, p)):
                missing.append(f"{os.path.relpath(doc, ROOT)}: {p}")
        commands |= set(CMD.findall(text))
    out = subprocess.run([HALFWAY, "--help"], capture_output=True, text=True).stdout
    unknown = sorted(c for c in commands if not re.search(r"\b%s\b" % re.escape(c), out))
    for m in missing:
        print("missing path:", m)
    for c in unknown:
        print("unknown command: halfway", c)
    # A negative control: a path that does not exist is reported.
    assert not os.path.exists(os.path.join(ROOT, "lib/src/no_such_file.cpp"))
    assert PATH.search("see lib/src/no_such_file.cpp.") is not None
    print("FAILED" if missing or unknown else "ok",
          f"({len(missing)} missing paths, {len(unknown)} unknown commands)")
    return 1 if missing or unknown else 0


if __name__ == "__main__":
    sys.exit(main())
