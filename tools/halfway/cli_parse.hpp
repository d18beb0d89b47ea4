// The one way every CLI11 command of `halfway` parses its arguments.
#pragma once

#include <CLI/CLI.hpp>

namespace halfway::cli {

/// Parse argv into `app`. Returns true when --help was asked for: the help text is printed on
/// stdout and the command returns 0. A bad argument throws InputError with CLI11's message on
/// one line (exit code 2, see main.cpp).
bool parse_or_help(CLI::App& app, int argc, char** argv);

}  // namespace halfway::cli
