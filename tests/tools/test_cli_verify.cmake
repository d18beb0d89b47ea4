# `halfway verify` under CTest: the quick run (default suite), argument errors, a planted fault
# that every check must catch, and the exhaustive runs (label `exhaustive`, excluded by default;
# run them with `ctest -L exhaustive`).
set(_expect ${HALFWAY_TEST_SUPPORT}/expect_exit.cmake)
set(_halfway $<TARGET_FILE:halfway_cli>)

# Quick run: every check agrees with the oracle; nothing on stderr when it is not a terminal.
add_test(NAME verify_quick
         COMMAND ${CMAKE_COMMAND} -DCMD=${_halfway} -DARGS=verify -DRC=0 -DSTDERR_EMPTY=ON
                 "-DSTDOUT_REGEX=OK: all [0-9]+ checks agree" -P ${_expect})

# Bad arguments: one line on stderr, exit 2.
add_test(NAME verify_bad_op
         COMMAND ${CMAKE_COMMAND} -DCMD=${_halfway} "-DARGS=verify|--op|bogus" -DRC=2
                 "-DSTDERR_ONE_LINE=unknown --op 'bogus'" -P ${_expect})
add_test(NAME verify_bad_format
         COMMAND ${CMAKE_COMMAND} -DCMD=${_halfway} "-DARGS=verify|--format|fp12" -DRC=2
                 "-DSTDERR_ONE_LINE=unknown format 'fp12'" -P ${_expect})
add_test(NAME verify_bad_threads
         COMMAND ${CMAKE_COMMAND} -DCMD=${_halfway} "-DARGS=verify|--threads|0" -DRC=2
                 "-DSTDERR_ONE_LINE=--threads needs an integer" -P ${_expect})
add_test(NAME verify_bad_rounding
         COMMAND ${CMAKE_COMMAND} -DCMD=${_halfway} "-DARGS=verify|--rounding|stochastic" -DRC=2
                 "-DSTDERR_ONE_LINE=deterministic" -P ${_expect})

# The checker can fail: one library result, one flag and one event count per check are
# corrupted before comparison; every check must report it, and the exit status is 1.
add_test(NAME verify_catches_planted_fault
         COMMAND ${CMAKE_COMMAND} -DCMD=${_halfway} "-DARGS=verify|--inject-fault" -DRC=1
                 -DALL_CHECKS_FAIL=ON "-DSTDOUT_REGEX=MISMATCH in f32 -> fp16" -P ${_expect})

# Exhaustive: all 2^32 f32 inputs per format (every rounding direction), all 2^32 pairs of the
# 16-bit formats per operation (near_even).
foreach(_fmt fp16 bf16 e4m3 e5m2)
  add_test(NAME verify_exhaustive_${_fmt}_convert
           COMMAND halfway_cli verify --exhaustive --op convert --format ${_fmt})
  set_tests_properties(verify_exhaustive_${_fmt}_convert PROPERTIES LABELS exhaustive TIMEOUT 7200)
endforeach()
foreach(_fmt fp16 bf16)
  foreach(_op add sub mul div)
    add_test(NAME verify_exhaustive_${_fmt}_${_op}
             COMMAND halfway_cli verify --exhaustive --op ${_op} --format ${_fmt})
    set_tests_properties(verify_exhaustive_${_fmt}_${_op} PROPERTIES LABELS exhaustive TIMEOUT 3600)
  endforeach()
endforeach()
