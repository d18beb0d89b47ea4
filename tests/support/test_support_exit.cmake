# The exit rules of the shared test main (test_support.hpp), through test_support_selftest's
# hidden cases: a run that skipped something and failed nothing exits 77 (CTest: skipped), also
# when other cases passed; a failure wins over a skip, and 77 failed checks do not read as a
# skip; a filter that matches nothing, or a run with no case selected, fails.
set(_expect ${HALFWAY_TEST_SUPPORT}/expect_exit.cmake)
set(_selftest $<TARGET_FILE:test_support_selftest>)
function(_support_case name args rc)
  add_test(NAME test_support_${name}
           COMMAND ${CMAKE_COMMAND} -DCMD=${_selftest} "-DARGS=${args}" -DRC=${rc} ${ARGN}
                   -P ${_expect})
endfunction()
_support_case(pass "[pass]" 0)
_support_case(skip_only "[skip]" 77
              "-DSTDOUT_REGEX=skipped: selftest: skips: the feature this case needs is absent")
_support_case(pass_and_skip "[pass],[skip]" 77)
_support_case(check_then_skip "[partial]" 77)
_support_case(fail_and_skip "[fail],[skip]" 1)
_support_case(fail_77_checks "[fail77]" 1)
_support_case(unmatched_filter "[no-such-tag]" 2)
_support_case(unmatched_part "[pass],[no-such-tag]" 2)
_support_case(nothing_selected "" 1 "-DSTDOUT_REGEX=no test case selected")
# Listing is not a run: no "no test case selected" failure (Catch exits with the number listed).
_support_case(list "--list-tests" 0)
