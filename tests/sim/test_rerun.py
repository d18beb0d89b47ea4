"""A rerun of `halfway train` (or `halfway analyze`) into a folder that holds a finished run
changes the folder in one step: whatever stops the rerun (a full disk at any free-space level, SIGKILL at any point of
its write phase), the folder is then either the old complete run, byte for byte, or has no
manifest saying "complete": true. Never the new run's files under the old run's manifest.

    test_rerun.py HALFWAY disk|kill

disk: the folder lives on a small tmpfs (root only; skipped when it cannot be mounted) that
is filled to leave 0, 4 KiB, 8 KiB, ... free, up to what a rerun needs; the rerun (another
seed) runs at each level. tmpfs counts space in 4 KiB pages, so these are all the levels
there are: each file's write is hit at its first and its every later page. kill: strace
kills the rerun on entering its k-th rename, unlink or fsync, for every k (skipped without
a working strace)."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from simtest import SKIP, Workdir, check, run, strace_env, strace_missing  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import config  # noqa: E402


def rerun_config(seed):
    """test_interrupt's MLP (tests/data/mlp.toml without a seed of its own), 12 steps, with
    both archives."""
    return config("mlp", run={"steps": 12, "seed": seed}, output={"weights": True, "grads": True})


def snapshot(d):
    """{name: bytes} of every file in d (the folder is flat)."""
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


def complete(files):
    if "manifest.json" not in files:
        return False
    try:
        return json.loads(files["manifest.json"]).get("complete") is True
    except ValueError:
        return False


def judge(what, files, old, new):
    """The folder after a stopped or failed rerun: old complete run (byte-identical), new
    complete run (byte-identical to a rerun that was not stopped), or not complete. Returns
    which."""
    tmp = [f for f in files if ".tmp" in f]
    if files == old:
        return "old"
    if files == new:
        return "new"
    if complete({f: b for f, b in files.items() if f not in tmp}):
        mixed = sorted(f for f in files if f not in tmp and files[f] != old.get(f))
        raise AssertionError(f"{what}: a manifest says complete, but the folder is neither the "
                             f"old run nor the new one (differs from the old in {mixed})")
    return "incomplete"


def make_runs(halfway, w, kind):
    """The old run (seed 0) and what a rerun with seed 1 writes, each in its own folder, and
    the rerun's command but its --out. kind "train": `halfway train`; "analyze": `halfway
    analyze` of those two runs' grads.npz. The inputs are at the same paths throughout, so
    the manifests match byte for byte."""
    cfgs = [w.write(f"seed{s}.toml", rerun_config(s)) for s in (0, 1)]
    # --max-disk: the disk estimate (an upper bound, about twice the run) would refuse the
    # lower free-space levels before anything is written; the test is of the write path.
    cmds = [["train", c, "--threads", "1", "--max-disk", "1T"] for c in cfgs]
    if kind == "analyze":
        for c in cmds:
            r = run(halfway, *c, "--out", w.file("input"))
            check(r.returncode == 0, r.stderr)
            os.replace(w.file("input/grads.npz"), c[1].replace(".toml", ".npz"))
        cmds = [["analyze", c.replace(".toml", ".npz"), "--formats", "fp16,e4m3"] for c in cfgs]
    refs = [w.file(f"ref_{kind}_old"), w.file(f"ref_{kind}_new")]
    for c, d in zip(cmds, refs):
        r = run(halfway, *c, "--out", d)
        check(r.returncode == 0, r.stderr)
    old, new = snapshot(refs[0]), snapshot(refs[1])
    differ = [f for f in ("steps.csv", "trace.csv", "scale_window.csv", "grads.npz",
                          "weights.npz", "manifest.json") if f in old]
    check(old.keys() == new.keys() and len(differ) >= 3 and all(old[f] != new[f] for f in differ),
          f"{kind}: the two seeds must differ in {differ} (else the test proves nothing)")
    return cmds[1], refs[0], old, new


def restore(ref_old, out):
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(ref_old, out)


def fill_to(mnt, free):
    """Leave `free` bytes free on the tmpfs at mnt (a filler file takes the rest)."""
    filler = os.path.join(mnt, "filler")
    if os.path.exists(filler):
        os.remove(filler)
    st = os.statvfs(mnt)
    avail = st.f_bavail * st.f_frsize
    with open(filler, "wb") as f:
        if avail > free:
            f.write(b"\0" * (avail - free))
    st = os.statvfs(mnt)
    return st.f_bavail * st.f_frsize


def disk_test(halfway, w, kind):
    if os.geteuid() != 0:
        print("SKIP: the full-disk test mounts a tmpfs (root only)")
        return SKIP
    rerun, ref_old, old, new = make_runs(halfway, w, kind)
    mnt = w.file("mnt")
    os.mkdir(mnt)
    size = 4 * sum(len(b) for b in new.values()) + (1 << 20)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"SKIP: cannot mount a tmpfs here: {r.stderr.strip()}")
        return SKIP
    try:
        out = os.path.join(mnt, "out")
        seen = {}
        step = 4096
        free, failures = 0, 0
        # Up to what the rerun needs: its files, the gradients twice (spool and archive), and
        # four pages for each file's last partial page.
        need = sum(len(b) for b in new.values()) + len(new.get("grads.npz", b"")) + 64 * 4096
        while free <= need:
            restore(ref_old, out)
            got = fill_to(mnt, free)
            r = run(halfway, *rerun, "--out", out)
            os.remove(os.path.join(mnt, "filler"))
            files = snapshot(out)
            what = f"{got} bytes free (exit {r.returncode})"
            tmp = [f for f in files if ".tmp" in f]
            check(tmp == [], f"{what}: temporary files left: {tmp}")
            if r.returncode == 0:
                check(files == new, f"{what}: a successful rerun must be the new run")
                state = "new"
            else:
                failures += 1
                check("No space left on device" in r.stderr, f"{what}: {r.stderr!r}")
                state = judge(what, files, old, new)
            seen[state] = seen.get(state, 0) + 1
            free += step
        check(seen.get("new", 0) > 0, f"the rerun never succeeded: {seen}")
        check(failures > 0, f"the rerun never failed: {seen}")
        print(f"{kind} disk: {sum(seen.values())} free-space levels in steps of {step} bytes up to "
              f"{need}: {seen}")
    finally:
        subprocess.run(["umount", mnt])
    return 0


SYSCALLS = "rename,renameat,renameat2,unlink,unlinkat,fsync,fdatasync"


def kill_test(halfway, w, kind):
    why = strace_missing()
    if why:
        print(f"SKIP: {why}")
        return SKIP
    rerun, ref_old, old, new = make_runs(halfway, w, kind)
    out = w.file("out")
    # How many of those calls a whole rerun makes.
    restore(ref_old, out)
    log = w.file("strace.log")
    r = subprocess.run(["strace", "-f", "-qq", "-o", log, "-e", f"trace={SYSCALLS}", halfway,
                        *rerun, "--out", out], capture_output=True, text=True,
                       env=strace_env())
    check(r.returncode == 0 and snapshot(out) == new, f"traced rerun: {r.stderr!r}")
    calls = [ln for ln in open(log) if "(" in ln and "resumed>" not in ln]
    n = len(calls)
    check(n >= 4, f"only {n} traced calls")
    seen = {}
    for k in range(1, n + 1):
        restore(ref_old, out)
        # SIGKILL on entering the k-th call: the calls before it are done, it and the rest not.
        r = subprocess.run(["strace", "-f", "-qq", "-o", os.devnull, "-e", f"trace={SYSCALLS}",
                            "-e", f"inject={SYSCALLS}:signal=KILL:when={k}", halfway, *rerun,
                            "--out", out], capture_output=True, text=True,
                       env=strace_env())
        files = snapshot(out)
        stale = {f: b for f, b in files.items() if ".tmp" not in f}
        state = judge(f"killed at call {k} of {n} ({calls[k - 1].split('(')[0].split()[-1]})",
                      stale, old, new)
        seen[state] = seen.get(state, 0) + 1
        # A later run into the folder removes what the killed one left and finishes.
        if k == n // 2:
            r = run(halfway, *rerun, "--out", out)
            check(r.returncode == 0 and snapshot(out) == new,
                  f"the run after a kill: {r.returncode} {r.stderr!r} "
                  f"{sorted(set(snapshot(out)) - set(new))}")
    check(seen.get("old", 0) > 0 and seen.get("incomplete", 0) + seen.get("new", 0) > 0,
          f"the kills never reached the write phase: {seen}")
    print(f"{kind} kill: SIGKILL at each of {n} renames/unlinks/fsyncs: {seen}")
    return 0


def main(argv):
    if len(argv) < 3 or argv[2] not in ("disk", "kill"):
        print(__doc__)
        return 2
    test = disk_test if argv[2] == "disk" else kill_test
    for kind in ("train", "analyze"):
        w = Workdir("rerun")
        try:
            code = test(argv[1], w, kind)
        finally:
            w.cleanup()
        if code != 0:
            return code
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
