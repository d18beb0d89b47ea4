"""Folders of the Python tests: every file under a folder, read back as bytes (the Python side
of tests/support/scratch.hpp)."""
import os


def tree(folder):
    """{relative path: bytes} of every file under `folder`."""
    out = {}
    for base, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(base, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, folder)] = f.read()
    return out
