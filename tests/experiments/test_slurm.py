"""A sweep on a real Slurm cluster of one node, started here: munged, slurmctld and slurmd with
their own key, socket, configuration, state and spool folders in a temporary folder, on free
loopback ports. scripts/slurm-sweep submits a 4-task job array into one results folder and a
merge job; the merged sweep.csv must equal the unsharded local sweep's (every column but `dir`).
Then the halfway process of one array task is killed in the middle of its shard, the task is
requeued alone (`scontrol requeue`), and the merge must still be equal; submitted once more, the
array finds every run done and its merge job writes the same table. Everything started here is
stopped by its pid at the end, on failure and on timeout too; the logs of the daemons and jobs
are printed when something fails.

Skipped (exit 77) when not root or when Slurm (slurm-wlm) or munge is not installed.

usage: test_slurm.py PATH/TO/halfway PATH/TO/scripts/slurm-sweep
"""
import csv
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from configs import Raw, config, sweep_base  # noqa: E402

SKIP = 77
DEADLINE_S = 210  # everything, daemons' start and stop included; CTest's TIMEOUT is above it
HALFWAY = os.path.abspath(sys.argv[1])
SLURM_SWEEP = os.path.abspath(sys.argv[2])
TASKS = 4
failures = []


class Timeout(Exception):
    pass


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def find(name):
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin")


def become_subreaper():
    """Processes that Slurm detaches (slurmstepd) become this process's children when their
    parent exits, so that reap() collects them instead of leaving zombies behind."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def reap(seconds):
    """Wait for every child (adopted ones too) to exit, for at most `seconds`."""
    end = time.monotonic() + seconds
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > end:
                return
            time.sleep(0.1)


def free_ports(n):
    """n distinct ports that are free on 127.0.0.1 now (bound to port 0, then released)."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


SWEEP = sweep_base(config("mlp", model={"layers": [8, 32, 32, 3], "activation": "gelu"},
                          data={"synthetic": "blobs", "batch_size": 64, "n": 512},
                          loss={"kind": "cross_entropy"}, precision=None, scaler={"kind": "none"},
                          run={"steps": Raw("STEPS"), "seed": None})) + """[axes]
"precision.policy" = ["fp32", "torch-cuda-fp16"]
"run.seed" = [0, 1, 2, 3, 4, 5]
"""


def read_index(path):
    """sweep.csv as a list of rows, every column but `dir`."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in r.items() if k != "dir"} for r in rows]


class Cluster:
    """munged, slurmctld and slurmd of this test, in TMP; start() and stop() (idempotent)."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = {}  # name -> Popen
        self.host = socket.gethostname().split(".")[0]
        self.conf = os.path.join(tmp, "etc", "slurm.conf")
        self.munge_socket = os.path.join(tmp, "munge-run", "munge.socket")
        self.log = os.path.join(tmp, "log")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        for k in list(self.env):  # a surrounding Slurm job's settings must not leak in
            if k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SCONTROL_")) \
                    and k != "SLURM_CONF":
                del self.env[k]

    def cmd(self, args, timeout=20, check_rc=False):
        r = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check_rc and r.returncode != 0:
            raise RuntimeError("%s: exit %d: %s %s" % (" ".join(args), r.returncode, r.stdout,
                                                        r.stderr))
        return r

    def spawn(self, name, args):
        out = open(os.path.join(self.log, name + ".out"), "w")
        self.procs[name] = subprocess.Popen(args, env=self.env, stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        out.close()

    def alive(self, name):
        p = self.procs.get(name)
        return p is not None and p.poll() is None

    def start(self):
        t = self.tmp
        for d in ("etc", "munge", "munge-run", "state", "spool", "log", "run"):
            os.makedirs(os.path.join(t, d))
        os.chmod(os.path.join(t, "munge"), 0o700)       # munged: the key's folder private,
        os.chmod(os.path.join(t, "munge-run"), 0o755)   # the socket's folder open to all
        key = os.path.join(t, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.spawn("munged", [find("munged"), "--foreground", "--force",
                              "--socket=" + self.munge_socket, "--key-file=" + key,
                              "--pid-file=" + os.path.join(t, "munge-run", "munged.pid"),
                              "--seed-file=" + os.path.join(t, "munge", "munged.seed"),
                              "--log-file=" + os.path.join(self.log, "munged.log"),
                              "--num-threads=2"])
        self.wait_for(lambda: os.path.exists(self.munge_socket), 15, "munged's socket",
                      "munged")

        ctld_port, slurmd_port = free_ports(2)
        cpus = TASKS  # one array task per CPU, all four at once, whatever this machine has
        with open(os.path.join(t, "etc", "plugstack.conf"), "w"):
            pass  # no SPANK plugins from the system's configuration
        with open(self.conf, "w") as f:
            f.write(f"""# written by test_slurm.py
ClusterName=halfwaytest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket},cred_expire=10
StateSaveLocation={t}/state
SlurmdSpoolDir={t}/spool
SlurmctldPidFile={t}/run/slurmctld.pid
SlurmdPidFile={t}/run/slurmd.pid
SlurmctldLogFile={self.log}/slurmctld.log
SlurmdLogFile={self.log}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={t}/etc/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
MinJobAge=600
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={self.host} NodeAddr=127.0.0.1 NodeHostname={self.host} CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=halfway Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")
        self.spawn("slurmctld", [find("slurmctld"), "-D", "-c", "-f", self.conf])
        self.wait_for(lambda: "UP" in self.cmd(["scontrol", "ping"], timeout=10).stdout,
                      30, "slurmctld to answer", "slurmctld")
        self.spawn("slurmd", [find("slurmd"), "-D", "-f", self.conf, "-N", self.host])
        self.wait_for(lambda: self.cmd(["sinfo", "-h", "-N", "-o", "%T"]).stdout.strip()
                      .rstrip("*") in ("idle", "mixed", "allocated"), 45,
                      "the node to be idle", "slurmd")

    def wait_for(self, cond, seconds, what, daemon=None):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if daemon and not self.alive(daemon):
                raise RuntimeError("%s exited (code %s) while waiting for %s" %
                                   (daemon, self.procs[daemon].poll(), what))
            try:
                if cond():
                    return
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.25)
        raise RuntimeError("waited %d s for %s" % (seconds, what))

    def stop(self):
        """Cancel every job of this cluster, wait for them to end, stop the daemons by pid, and
        end any process this cluster left behind (one whose environment names its config)."""
        try:
            if self.alive("slurmctld"):
                self.cmd(["scancel", "--user", "root"], timeout=10)
                end = time.monotonic() + 15
                while time.monotonic() < end and \
                        self.cmd(["squeue", "-h", "-o", "%i"], timeout=10).stdout.strip():
                    time.sleep(0.5)
        except (subprocess.TimeoutExpired, OSError):
            pass
        finally:
            try:
                for name in ("slurmd", "slurmctld", "munged"):
                    p = self.procs.get(name)
                    if p is None or p.poll() is not None:
                        continue
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait(timeout=5)
            finally:
                for pid in self.leftovers():
                    try:
                        os.kill(pid, signal.SIGKILL)
                        print("killed leftover process %d" % pid)
                    except OSError:
                        pass

    def leftovers(self):
        """Processes (job steps, job scripts, halfway) whose environment holds this
        cluster's SLURM_CONF: started by this test, directly or through Slurm."""
        mark = ("SLURM_CONF=" + self.conf).encode() + b"\0"
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == os.getpid():
                continue
            try:
                with open("/proc/%s/environ" % d, "rb") as f:
                    if mark in f.read():
                        pids.append(int(d))
            except OSError:
                pass
        return pids

    def diagnostics(self):
        print("---- diagnostics ----")
        for args in (["sinfo", "-N", "-l"], ["squeue", "-t", "all", "--array", "-l"]):
            try:
                r = self.cmd(args, timeout=10)
                print("$ " + " ".join(args) + "\n" + r.stdout + r.stderr)
            except Exception as e:  # noqa: BLE001 -- diagnostics only
                print("$ %s: %s" % (" ".join(args), e))
        for name in ("munged.out", "slurmctld.log", "slurmctld.out", "slurmd.log", "slurmd.out"):
            p = os.path.join(self.log, name)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    lines = f.readlines()
                print("---- %s (last 60 lines) ----\n%s" % (name, "".join(lines[-60:])))


def job_states(cluster, job):
    """{task or job id: (state, exit code)} of a job array (or a job), from slurmctld."""
    r = cluster.cmd(["scontrol", "-o", "show", "job", str(job)])
    out = {}
    for line in r.stdout.splitlines():
        f = dict(re.findall(r"(\w+)=(\S*)", line))
        key = f.get("ArrayTaskId") or f.get("JobId")
        if key:
            out[key] = (f.get("JobState"), f.get("ExitCode"))
    return out


FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


def wait_final(cluster, job, seconds, n=1):
    """Wait until every one of the n tasks of the job is in a final state; their states."""
    end = time.monotonic() + seconds
    while True:
        s = job_states(cluster, job)
        if len(s) >= n and all(st in FINAL for st, _ in s.values()):
            return s
        if time.monotonic() > end:
            raise RuntimeError("job %s not finished after %d s: %s" % (job, seconds, s))
        time.sleep(0.5)


def task_process(cluster, task):
    """The pid of the halfway process of this cluster's array task, or None."""
    marks = [("SLURM_CONF=" + cluster.conf).encode(), ("SLURM_ARRAY_TASK_ID=" + task).encode()]
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.readlink("/proc/%s/exe" % d) != os.path.realpath(HALFWAY):
                continue
            with open("/proc/%s/environ" % d, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if all(m in env for m in marks):
            return int(d)
    return None


def submit(cluster, sweep, out):
    r = cluster.cmd([SLURM_SWEEP, sweep, out, "--tasks", str(TASKS), "--halfway", HALFWAY],
                    timeout=30, check_rc=True)
    print(r.stdout, end="")
    array = re.search(r"array job (\d+)", r.stdout)
    merge = re.search(r"merge job (\d+)", r.stdout)
    if not (array and merge):
        raise RuntimeError("slurm-sweep printed no job ids: " + r.stdout + r.stderr)
    return array.group(1), merge.group(1)


def show_logs(out):
    d = os.path.join(out, "slurm")
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        with open(os.path.join(d, name), errors="replace") as f:
            print("---- %s ----\n%s" % (name, f.read()[-2000:]))


def test(cluster, tmp):
    sweep = os.path.join(tmp, "sweep.toml")
    with open(sweep, "w") as f:
        f.write(SWEEP.replace("STEPS", "600"))
    n_runs = 12

    # The reference: the same sweep, unsharded, here.
    local = os.path.join(tmp, "local")
    r = subprocess.run([HALFWAY, "sweep", sweep, "--out", local, "--jobs", "2", "--quiet"],
                       env={k: v for k, v in cluster.env.items() if not k.startswith("SLURM")},
                       capture_output=True, text=True, timeout=120)
    if not check(r.returncode == 0, "the local sweep runs (%s)" % r.stderr.strip()):
        return
    want = read_index(os.path.join(local, "sweep.csv"))
    check(len(want) == n_runs, "the local sweep has %d runs" % n_runs)

    # --- a 4-task array into one folder, and the merge job -----------------------------------
    shared = os.path.join(tmp, "shared")
    array, merge = submit(cluster, sweep, shared)
    tasks = wait_final(cluster, array, 90, TASKS)
    m = wait_final(cluster, merge, 60)
    ok = check(sorted(tasks) == [str(i) for i in range(TASKS)] and
               all(v == ("COMPLETED", "0:0") for v in tasks.values()),
               "every array task completed with exit 0: %s" % tasks)
    ok &= check(m.get(merge) == ("COMPLETED", "0:0"), "the merge job completed: %s" % m)
    for i in range(TASKS):
        ok &= check(os.path.exists(os.path.join(shared, "sweep.shard-%d-of-%d.csv" % (i, TASKS))),
                    "task %d ran shard %d/%d (from SLURM_ARRAY_TASK_ID/COUNT)" % (i, i, TASKS))
    merged = os.path.join(shared, "sweep.csv")
    if check(os.path.exists(merged), "the merge job wrote sweep.csv"):
        check(read_index(merged) == want, "merged sweep.csv == the local sweep's (but `dir`)")
    if not ok:
        show_logs(shared)

    # --- one task killed in the middle of its shard, requeued alone --------------------------
    # Task 2 runs runs 2, 6 and 10; its halfway process is killed (SIGKILL: a crash, a lost
    # node) once run 2 is done, with run 6 under way and run 10 to go.
    killed = os.path.join(tmp, "killed")
    array, merge = submit(cluster, sweep, killed)
    first = os.path.join(killed, "runs", "0002", "manifest.json")
    end = time.monotonic() + 90
    pid, k = None, 0
    while time.monotonic() < end and not (pid and os.path.exists(first)):
        pid = pid or task_process(cluster, "2")
        k += 1
        if k % 50 == 0 and job_states(cluster, array).get("2", ("",))[0] in FINAL:
            break  # ended by itself, before its first run was done
        time.sleep(0.01)
    if not check(pid is not None and os.path.exists(first), "task 2 runs, its first run is done"):
        show_logs(killed)
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it ended first: the checks below say how
    tasks = wait_final(cluster, array, 90, TASKS)
    m = wait_final(cluster, merge, 60)
    check(tasks.get("2", ("",))[0] == "FAILED", "task 2 failed: %s" % tasks)
    check(all(tasks.get(str(i)) == ("COMPLETED", "0:0") for i in range(TASKS) if i != 2),
          "the other tasks completed: %s" % tasks)
    check(m.get(merge, ("",))[0] == "CANCELLED",
          "the merge job is cancelled with its failed dependency: %s" % m)
    r = subprocess.run([HALFWAY, "merge", killed], capture_output=True, text=True, timeout=30)
    check(r.returncode == 1 and "2 of %d runs are not done: 6 10" % n_runs in r.stderr,
          "killed in the middle: runs 6 and 10 are not done (%s)" % r.stderr.strip())

    r = cluster.cmd(["scontrol", "requeue", "%s_2" % array], timeout=20)
    check(r.returncode == 0, "task 2 requeued (%s)" % r.stderr.strip())
    end = time.monotonic() + 20
    while time.monotonic() < end and job_states(cluster, array).get("2", ("",))[0] == "FAILED":
        time.sleep(0.2)
    tasks = wait_final(cluster, array, 90, TASKS)
    ok = check(tasks.get("2") == ("COMPLETED", "0:0"), "the requeued task 2 completed: %s" % tasks)
    r = subprocess.run([HALFWAY, "merge", killed], capture_output=True, text=True, timeout=30)
    ok &= check(r.returncode == 0, "merge after the requeue (%s)" % r.stderr.strip())
    if ok:
        check(read_index(os.path.join(killed, "sweep.csv")) == want,
              "after the kill and the requeue: merged sweep.csv == the local sweep's")
    leftover = [n for n in os.listdir(os.path.join(killed, "runs")) if n.startswith(".tmp-")]
    check(not leftover, "no temporary run folder left (%s)" % leftover)
    if not ok:
        show_logs(killed)
        return

    # --- the same command again: nothing left to run, and its merge job writes the table ----
    os.remove(os.path.join(killed, "sweep.csv"))
    array, merge = submit(cluster, sweep, killed)
    tasks = wait_final(cluster, array, 90, TASKS)
    m = wait_final(cluster, merge, 60)
    ok = check(all(v == ("COMPLETED", "0:0") for v in tasks.values()) and
               m.get(merge) == ("COMPLETED", "0:0"),
               "submitted again: every task and the merge job completed: %s %s" % (tasks, m))
    logs = ""
    for i in range(TASKS):
        with open(os.path.join(killed, "slurm", "sweep-%s_%d.out" % (array, i))) as f:
            logs += f.read()
    ok &= check(logs.count("(3 already done, 0 run now)") == TASKS,
                "submitted again: every shard found its 3 runs done")
    merged = os.path.join(killed, "sweep.csv")
    ok &= check(os.path.exists(merged) and read_index(merged) == want,
                "submitted again: the merge job's sweep.csv == the local sweep's")
    if not ok:
        show_logs(killed)


BISECT_CONFIG = config("mlp", model={"layers": [8, 32, 32, 1], "activation": "gelu"},
                       data={"batch_size": 32}, optimizer={"exp_avg_sq_dtype": "fp16"},
                       precision={"policy": "torch-cuda-bf16"}, scaler=None,
                       run={"steps": 40, "seed": None})


def test_bisect(cluster, tmp):
    """`slurm-sweep bisect`: a 2-task array, each task a shard of one bisection into one folder;
    task 0's answer and bisect.csv equal a bisection run here, unsharded."""
    cfg = os.path.join(tmp, "bisect.toml")
    with open(cfg, "w") as f:
        f.write(BISECT_CONFIG)
    opts = ["--seeds", "0,1", "--budget", "12"]
    local = os.path.join(tmp, "bisect-local")
    r = subprocess.run([HALFWAY, "bisect", cfg, "--out", local] + opts,
                       env={k: v for k, v in cluster.env.items() if not k.startswith("SLURM")},
                       capture_output=True, text=True, timeout=120)
    if not check(r.returncode == 0, "the local bisection runs (%s)" % r.stderr.strip()):
        return
    shared = os.path.join(tmp, "bisect-shared")
    r = cluster.cmd([SLURM_SWEEP, "bisect", cfg, shared, "--tasks", "2", "--halfway", HALFWAY,
                     "--"] + opts, timeout=30, check_rc=True)
    print(r.stdout, end="")
    array = re.search(r"array job (\d+)", r.stdout)
    if not check(array is not None, "slurm-sweep bisect printed the array job: %s" % r.stdout):
        return
    tasks = wait_final(cluster, array.group(1), 120, 2)
    ok = check(all(v == ("COMPLETED", "0:0") for v in tasks.values()) and len(tasks) == 2,
               "both bisect tasks completed with exit 0: %s" % tasks)
    with open(os.path.join(local, "bisect.csv")) as f:
        want = f.read()
    got = os.path.join(shared, "bisect.csv")
    ok &= check(os.path.exists(got) and open(got).read() == want,
                "the sharded bisection's bisect.csv == the local one's")
    logs = ""
    for name in sorted(os.listdir(os.path.join(shared, "slurm"))):
        with open(os.path.join(shared, "slurm", name)) as f:
            logs += f.read()
    ok &= check("shard 1/2 done" in logs and "closes 100% of the gap" in logs,
                "task 1 trained its share, task 0 printed the answer")
    if not ok:
        show_logs(shared)


def main():
    if os.geteuid() != 0:
        print("skipped: starting Slurm's daemons needs root")
        return SKIP
    missing = [b for b in ("munged", "slurmctld", "slurmd", "slurmstepd", "sbatch", "squeue",
                           "scontrol", "scancel", "sinfo") if not find(b)]
    if missing:
        print("skipped: not installed: %s (Debian: slurm-wlm, munge)" % " ".join(missing))
        return SKIP

    def on_alarm(signum, frame):
        raise Timeout("the test ran past its time limit (%d s, then 45 s to stop)" % DEADLINE_S)

    def on_term(signum, frame):
        raise Timeout("stopped by SIGTERM")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(DEADLINE_S)
    t0 = time.monotonic()
    become_subreaper()
    tmp = tempfile.mkdtemp(prefix="halfway_slurm_test_")
    os.chmod(tmp, 0o755)  # munged wants the socket's path searchable by all
    cluster = Cluster(tmp)
    try:
        cluster.start()
        print("ok   cluster up in %.1f s: munged, slurmctld, slurmd on %s" %
              (time.monotonic() - t0, cluster.host), flush=True)
        test(cluster, tmp)
        test_bisect(cluster, tmp)
    except Exception as e:  # noqa: BLE001 -- the Timeout above included
        failures.append("%s: %s" % (type(e).__name__, e))
        print("FAIL %s: %s" % (type(e).__name__, e), flush=True)
    finally:
        signal.alarm(0)
        try:
            if failures:
                cluster.diagnostics()
        finally:
            signal.alarm(45)  # stopping is bounded too
            try:
                cluster.stop()
            finally:
                signal.alarm(0)
                reap(10)
                shutil.rmtree(tmp, ignore_errors=True)
    print("%.1f s" % (time.monotonic() - t0))
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
