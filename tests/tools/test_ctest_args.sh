#!/usr/bin/env bash
# scripts/test's ctest selection (scripts/common.sh: ctest_args, run_ctest), through the same
# function scripts/test calls:
#  1. In a copy of this build's CTest files (so that nothing is written into the build tree while
#     CTest runs there): the default set is not empty and holds no `exhaustive` test, and
#     `-L exhaustive`, the command README.md and docs/conformance.md give, selects exactly the
#     exhaustive set, which is not empty.
#  2. In a two-test CTest project, run for real: the default runs the quick test only,
#     `-L exhaustive` the exhaustive one only, `-E` alone keeps the default set, and a selection
#     that matches nothing fails.
# Usage: test_ctest_args.sh BUILD_DIR SCRATCH_DIR
set -uo pipefail
build="$1"
scratch="$2"
here="$(cd "$(dirname "$0")" && pwd)"
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

rm -rf "$scratch"
mkdir -p "$scratch/copy" "$scratch/toy"
(cd "$build" && find . -name CTestTestfile.cmake -not -path "./Testing/*") | while read -r f; do
  mkdir -p "$scratch/copy/$(dirname "$f")"
  cp "$build/$f" "$scratch/copy/$f"
done

# run_ctest in a subshell (it changes directory); prints ctest's output, returns its status.
via_scripts_test() {
  local dir="$1"
  shift
  (
    export HALFWAY_BUILD_DIR="$dir"
    source "$here/../../scripts/common.sh"
    run_ctest "$@"
  )
}
names() { sed -n 's/^ *Test *#[0-9]*: \([^ ]*\).*/\1/p'; }

# 1. This build's tests, listed (-N).
all_exhaustive="$(cd "$scratch/copy" && ctest -N -L exhaustive | names | sort)"
[ -n "$all_exhaustive" ] || fail "this build has no test labelled exhaustive"
default_set="$(via_scripts_test "$scratch/copy" -N | names | sort)"
[ -n "$default_set" ] || fail "scripts/test (no arguments) selects no test"
both="$(comm -12 <(echo "$default_set") <(echo "$all_exhaustive"))"
[ -z "$both" ] || fail "scripts/test (no arguments) selects exhaustive tests: $both"
exhaustive_set="$(via_scripts_test "$scratch/copy" -N -L exhaustive | names | sort)"
[ -n "$exhaustive_set" ] || fail "scripts/test -L exhaustive selects no test"
[ "$exhaustive_set" = "$all_exhaustive" ] ||
  fail "scripts/test -L exhaustive does not select the exhaustive set"
echo "default set: $(grep -c . <<<"$default_set") tests; -L exhaustive: $(grep -c . <<<"$exhaustive_set") tests"

# 2. A toy project, run.
cat >"$scratch/toy/CTestTestfile.cmake" <<TOY
add_test(quick "$(command -v true)")
add_test(slow "$(command -v true)")
set_tests_properties(slow PROPERTIES LABELS "exhaustive")
TOY
expect_run() {  # expect_run STATUS "REGEX;REGEX..." ARGS...: the run's status and its output
  local want="$1" regexes="$2" regex out rc
  shift 2
  out="$(via_scripts_test "$scratch/toy" "$@" 2>&1)"
  rc=$?
  if [ "$want" = 0 ] && [ "$rc" != 0 ]; then fail "scripts/test $*: exit $rc"$'\n'"$out"; fi
  if [ "$want" != 0 ] && [ "$rc" = 0 ]; then fail "scripts/test $*: exit 0, expected a failure"$'\n'"$out"; fi
  IFS=';' read -ra regexes <<<"$regexes"
  for regex in "${regexes[@]}"; do
    grep -Eq "$regex" <<<"$out" || fail "scripts/test $*: output does not match '$regex'"$'\n'"$out"
  done
  echo "scripts/test ${*:-(no arguments)}: exit $rc"
}
expect_run 0 "Test +#1: quick .*Passed;0 tests failed out of 1$"
expect_run 0 "Test +#2: slow .*Passed;0 tests failed out of 1$" -L exhaustive
expect_run 0 "0 tests failed out of 2$" -R "quick|slow"
# A name exclusion narrows the default set; it does not widen it to the exhaustive tests.
expect_run 1 "No tests were found" -E quick
expect_run 1 "No tests were found" -R no_such_test
expect_run 1 "No tests were found" -L no_such_label

echo "ctest selection: $failures failed"
[ "$failures" -eq 0 ]
