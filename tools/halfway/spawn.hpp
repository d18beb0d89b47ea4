// Running another program without a shell (spawn.cpp).
#pragma once

#include <string>
#include <vector>

namespace halfway::cli {

/// Run args[0] (looked up in PATH) with these arguments, no shell in between; its stdout and
/// stderr go to `out`. Returns its exit status, or -1 (the reason in `out`) if it did not run.
int run_captured(const std::vector<std::string>& args, std::string& out);

/// Run args[0] (looked up in PATH) with these arguments, no shell in between, its output going
/// where this program's goes. Returns "" when it exited 0, else what happened, in words:
/// "cannot run 'python3': No such file or directory", "exit status 1", "killed by SIGSEGV".
std::string run_program(const std::vector<std::string>& args);

/// Run args[0] as run_program does and return its exit status (128 + the signal if killed);
/// if it cannot run, one line on stderr naming `tool`, and 2.
int run_forwarding(const std::string& tool, const std::vector<std::string>& args);

/// Whether `program` names an executable file: a path as given, a bare name in PATH.
bool program_exists(const std::string& program);

/// Put the build tree's Python package (build/python) first on PYTHONPATH, for the Python
/// programs this one starts (halfway.figures, an experiment's run.py).
void build_package_first();

/// `PYTHON -m MODULE...` for a command whose work is the Python package's: `cmd` is what follows
/// the interpreter (`-m`, the module, its fixed arguments); argv[1..] follow it, except the
/// words equal to `drop` and `--python P`, which chooses the interpreter (default
/// $HALFWAY_PYTHON, else `fallback`). The build tree's package goes first on PYTHONPATH. A
/// missing interpreter is an InputError naming --python; else the module's exit status.
int forward_to_python(const std::string& tool, const std::string& fallback,
                      std::vector<std::string> cmd, int argc, char** argv,
                      const std::string& drop = "");

/// `PYTHON -m halfway.figures DIR` (the build tree's package first), for a command's --plot.
/// Returns 0, or 1 after one line on stderr naming `tool` and where the results are.
int draw_figures(const std::string& tool, const std::string& python, const std::string& dir);

}  // namespace halfway::cli
