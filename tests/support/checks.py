"""The checks of the script-style tests that print each one: "ok   WHAT" or "FAIL WHAT"; the
failed ones are kept in `failures` (the test exits 1 when there is one)."""

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
