"""A process killed in the middle of its work, for the tests of what a killed sweep leaves and
how it resumes."""
import shutil
import signal
import time


def kill_when(start, out, ready, poll_s, tries=3):
    """Start a process writing into the folder `out` (`start()`, a Popen; `out` is removed
    first) and SIGKILL it as soon as `ready()` holds, within 60 s. A process that ends before
    that is waited for and started again, up to `tries` times. True when one was killed."""
    for _ in range(tries):
        shutil.rmtree(out, ignore_errors=True)
        p = start()
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            if ready():
                break
            time.sleep(poll_s)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.communicate()
            return True
        p.communicate()
    return False
