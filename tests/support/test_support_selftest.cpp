// Cases for checking the shared test main's exit rules (test_support.hpp); every case is hidden
// and tests/support/test_support_exit.cmake runs them with filters and checks the exit status.
#include <catch2/catch.hpp>

#include "test_support.hpp"

TEST_CASE("selftest: passes", "[.][selftest][pass]") { CHECK(1 + 1 == 2); }

TEST_CASE("selftest: skips", "[.][selftest][skip]") {
  halfway_test::skip("the feature this case needs is absent (on purpose)");
}

TEST_CASE("selftest: checks, then skips", "[.][selftest][partial]") {
  CHECK(2 * 2 == 4);
  halfway_test::skip("the second half needs an absent feature (on purpose)");
}

TEST_CASE("selftest: fails", "[.][selftest][fail]") { CHECK(1 + 1 == 3); }

TEST_CASE("selftest: fails 77 checks", "[.][selftest][fail77]") {
  for (int i = 0; i < 77; ++i) CHECK(i < 0);
}
