"""`pip install .` the way a user does it: build a wheel of the repository (pyproject.toml,
scikit-build-core), install it into a new virtual environment that has nothing else, and import
it there, away from the build tree. Then `pip install -e .` into the same environment (the
build tools pinned in python/requirements.txt installed there, the wheel's CMake build folder
reused): the package must import from the repository's python/halfway, with the extension.

    test_wheel.py SCRATCH_DIR

The wheel is built with this interpreter's scikit-build-core and pybind11 (no build isolation,
so the build itself needs no network); the new environment gets numpy from the package index
like any user's. Skipped (77) when scikit-build-core is missing here or pip cannot reach the
index."""
import glob
import os
import shutil
import subprocess
import sys

SKIP = 77
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The check in the new environment: the extension is the installed one, and it rounds.
IMPORT_CHECK = """
import os, sys, numpy as np, halfway
where = os.path.dirname(halfway._halfway.__file__)
assert where.startswith(sys.prefix), f"halfway imported from {where}, not from {sys.prefix}"
got = halfway.round(np.float32([0.1, 1e-8, 70000.0]), "fp16")
want = np.float32([0.0999755859375, 0.0, np.inf])
assert np.array_equal(got, want), f"halfway.round gave {got!r}, expected {want!r}"
assert int(halfway.encode(np.float32([448.0]), "e4m3")[0]) == 126
print("ok:", halfway.__version__, where)
"""
# The check after `pip install -e .`: the pure-Python files are the repository's, and it rounds.
EDITABLE_CHECK = """
import os, sys, numpy as np, halfway, halfway.tensorboard
src = sys.argv[1]
for m in (halfway, halfway.tensorboard):
    assert os.path.realpath(m.__file__).startswith(src), f"{m.__name__} from {m.__file__}"
assert halfway.round(np.float32([0.1]), "bf16")[0] == np.float32(0.10009765625)
print("ok: editable,", os.path.dirname(halfway.__file__))
"""


def pinned(name):
    """name==version as python/requirements.txt pins it."""
    with open(os.path.join(ROOT, "python", "requirements.txt")) as f:
        for line in f:
            if line.lower().startswith(name + "=="):
                return line.split()[0]
    sys.exit(f"FAIL: python/requirements.txt pins no {name}")


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def clean_env():
    """The environment without the build tree's package path (CTest sets PYTHONPATH)."""
    env = dict(os.environ)
    for k in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(k, None)
    return env


def need(ok, reason):
    if not ok:
        print(f"SKIP: {reason}")
        sys.exit(SKIP)


def check(result, what):
    if result.returncode != 0:
        print(result.stdout)
        sys.exit(f"FAIL: {what} (exit {result.returncode})")
    return result.stdout


def main(scratch):
    for mod in ("scikit_build_core", "pybind11"):
        need(run([sys.executable, "-c", f"import {mod}"]).returncode == 0,
             f"{mod} is not installed for {sys.executable} (python/requirements.txt has it)")
    shutil.rmtree(scratch, ignore_errors=True)
    env = clean_env()
    venv = os.path.join(scratch, "venv")
    check(run([sys.executable, "-m", "venv", venv], env=env), "python -m venv")
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip"]
    probe = run(pip + ["download", "--quiet", "--no-deps", "--dest", os.path.join(scratch, "probe"),
                       "numpy"], env=env)
    last = (probe.stdout.strip().splitlines() or ["no output"])[-1]
    need(probe.returncode == 0, f"pip cannot download numpy (no network?): {last}")
    dist = os.path.join(scratch, "dist")
    check(run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-build-isolation",
               "--no-deps", "--wheel-dir", dist,
               "--config-settings", f"build-dir={os.path.join(scratch, 'build')}", ROOT], env=env),
          "pip wheel .")
    wheels = glob.glob(os.path.join(dist, "halfway-*.whl"))
    if len(wheels) != 1:
        sys.exit(f"FAIL: expected one halfway wheel in {dist}, found {wheels}")
    check(run(pip + ["install", "--quiet", "--find-links", os.path.join(scratch, "probe"),
                     wheels[0]], env=env), "pip install halfway-*.whl")
    out = check(run([pip[0], "-c", IMPORT_CHECK], env=env, cwd=scratch), "import halfway")
    print(out.strip())
    print(f"ok: {os.path.basename(wheels[0])} installs and imports in a new environment")

    check(run(pip + ["uninstall", "--quiet", "--yes", "halfway"], env=env), "pip uninstall")
    check(run(pip + ["install", "--quiet", pinned("scikit-build-core"), pinned("pybind11")],
              env=env), "pip install scikit-build-core pybind11")
    check(run(pip + ["install", "--quiet", "--no-build-isolation", "--no-deps", "--editable",
                     ROOT, "--config-settings", f"build-dir={os.path.join(scratch, 'build')}"],
              env=env), "pip install -e .")
    src = os.path.realpath(os.path.join(ROOT, "python", "halfway"))
    out = check(run([pip[0], "-c", EDITABLE_CHECK, src], env=env, cwd=scratch),
                "import halfway (editable)")
    print(out.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
