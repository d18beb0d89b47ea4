"""The checks of the script-style tests. `check` prints each one, "ok   WHAT" or "FAIL WHAT";
`quiet_check`, for tests of many checks, prints only a failed one, "FAIL: WHAT". Both keep
the failed ones in `failures`, and `status` gives the test's exit status: 1 when there is one."""

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def quiet_check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def status(ok="all passed"):
    """1 after "N FAILED" when a check failed, else 0 after `ok` (what the test showed)."""
    if failures:
        print("%d FAILED" % len(failures))
        return 1
    print(ok)
    return 0
