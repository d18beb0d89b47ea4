// Running another program without a shell (spawn.cpp).
#pragma once

#include <string>
#include <vector>

namespace halfway::cli {

/// Run args[0] (looked up in PATH) with these arguments, no shell in between; its stdout and
/// stderr go to `out`. Returns its exit status, or -1 (the reason in `out`) if it did not run.
int run_captured(const std::vector<std::string>& args, std::string& out);

}  // namespace halfway::cli
