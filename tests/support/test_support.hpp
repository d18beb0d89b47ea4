/// \file test_support.hpp
/// Skipping a Catch2 test case honestly. Catch2 v2 (Debian's) has no SKIP, and a case that
/// returns early passes. A case that cannot do its checks here (a CPU feature or a backend is
/// missing) calls `halfway_test::skip(reason)` and returns. The shared main (test_main.cpp)
/// still runs every other selected case; at the end, if anything failed, the exit status is the
/// failure's; otherwise, if any case skipped, it prints "skipped: <case>: <reason>" for each
/// and exits 77, which CTest reports as skipped (SKIP_RETURN_CODE 77). A run in which the
/// filter selects no test case at all fails.
///
/// Granularity: one skipped case makes the whole run "skipped", so a binary whose cases need
/// different features is registered in CTest once per feature (tests/CMakeLists.txt,
/// halfway_add_feature_tests): each CTest entry is either run or skipped as a whole.
#pragma once

#include <string>

namespace halfway_test {

/// The exit status of a run that skipped something and failed nothing (CTest's SKIP_RETURN_CODE).
inline constexpr int kSkipped = 77;

/// Records that the running test case could not do its checks, and why; the caller returns.
void skip(const std::string& reason);

}  // namespace halfway_test
