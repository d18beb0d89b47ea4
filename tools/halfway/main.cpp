// The `halfway` command-line tool: one binary, one subcommand per job.
#include "halfway/cpu.hpp"
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include "commands.hpp"
#include "format_util.hpp"
#include "halfway/names.hpp"

namespace {

/// The commands: one row each makes the usage text, the dispatch and the list in the
/// unknown-command message.
struct Command {
  const char* name;
  const char* synopsis;  ///< the usage line after the name, padded to the description
  const char* what;
  int (*run)(int argc, char** argv);
};

constexpr Command kCommands[] = {
    {"info", "[FORMAT...]", "numpy-finfo-like table of formats", halfway::cli::cmd_info},
    {"round", "VALUE... [--to F] [--rounding R]", "encoding, fields, exact value, neighbours, flags",
     halfway::cli::cmd_round},
    {"testfloat", "FUNCTION [OPTIONS]", "Berkeley TestFloat-compatible filter (stdin->stdout)",
     halfway::cli::cmd_testfloat},
    {"verify", "[--exhaustive] [--op OP] [--format F]", "check against independent oracles",
     halfway::cli::cmd_verify},
    {"bench", "[--json]", "throughput against hardware references", halfway::cli::cmd_bench},
    {"hw-report", "[--backend NAME] [--exhaustive] [--json]", "library vs hardware/vendor backends",
     halfway::cli::cmd_hw_report},
    {"train", "CONFIG.toml [--out DIR]", "simulate mixed-precision training, trace roundings",
     halfway::cli::cmd_train},
    {"analyze", "INPUT... [--formats F,...]", "per-tensor rounding report for arrays of .npz files",
     halfway::cli::cmd_analyze},
    {"sweep", "SWEEP.toml [--out DIR] [--jobs N] [--shard I/N]", "resumable sweep over config keys",
     halfway::cli::cmd_sweep},
    {"merge", "DIR... [--out FILE]", "one sweep.csv from the shards of a sweep",
     halfway::cli::cmd_merge},
    {"run", "EXPERIMENT_DIR... | --all", "run experiments and draw their figures",
     halfway::cli::cmd_run},
    {"bisect", "CONFIG.toml [--metric M] [--granularity G] [--budget N]",
     "which rounding costs the loss", halfway::cli::cmd_bisect},
    {"tensorboard", "RUN_DIR... --out LOGDIR", "run folders as TensorBoard event files",
     halfway::cli::cmd_tensorboard},
};

std::string usage() {
  std::string u = "usage: halfway COMMAND [ARGS...]\n\ncommands:\n";
  for (const Command& c : kCommands) {
    std::string line = std::string("  ") + c.name + " " + c.synopsis;
    line += line.size() < 40 ? std::string(40 - line.size(), ' ') : "  ";
    u += line + c.what + "\n";
  }
  return u + "\nRun 'halfway COMMAND --help' for a command's options.\n";
}

std::string command_names() {
  std::string n;
  for (const Command& c : kCommands) n += (n.empty() ? "" : " ") + std::string(c.name);
  return n;
}

// Standard output goes through this writer, which keeps the reason of the first failed write:
// a command may flush (and fail) long before the end, when errno no longer says why.
struct StdoutState {
  int error = 0;
};
StdoutState g_stdout;

ssize_t write_stdout(void* cookie, const char* buf, size_t n) {
  auto* s = static_cast<StdoutState*>(cookie);
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(STDOUT_FILENO, buf + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (s->error == 0) s->error = w < 0 ? errno : EIO;
      errno = s->error;
      return 0;  // fopencookie: 0 is the error
    }
    done += size_t(w);
  }
  return ssize_t(n);
}

void checked_stdout() {
  cookie_io_functions_t io{};
  io.write = write_stdout;
  if (FILE* f = ::fopencookie(&g_stdout, "w", io)) {
    std::setvbuf(f, nullptr, ::isatty(STDOUT_FILENO) ? _IOLBF : _IOFBF, BUFSIZ);
    stdout = f;  // glibc: stdout is a variable
  }
}

bool g_reported = false;  ///< an error line has been printed

/// Exit codes: 2 for bad input or a refused write (the user can act on it), 70 (sysexits'
/// EX_SOFTWARE) for an internal error (out of memory no limit caught, a broken invariant).
constexpr int kExitBadInput = 2, kExitInternal = 70;

/// The exit code once standard output is flushed: output that could not be written (a full
/// disk, a closed pipe or descriptor) is an error, not a success.
int finish(const std::string& cmd, int rc) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int e = g_stdout.error ? g_stdout.error : flushed ? 0 : errno;
  if (flushed && !std::ferror(stdout) && g_stdout.error == 0) return rc;
  if (!g_reported) {
    const std::string who = cmd.empty() ? "halfway" : "halfway " + halfway::cli::printable(cmd);
    std::fprintf(stderr, "%s: error: write to standard output failed%s%s\n", who.c_str(),
                 e ? ": " : "", e ? std::strerror(e) : "");
  }
  return 2;
}

int dispatch(const std::string& cmd, int argc, char** argv) {
  using namespace halfway::cli;
  try {
    halfway::cpu::check_environment();  // HALFWAY_DISABLE_ISA names only known features
    for (const Command& c : kCommands)
      if (cmd == c.name) return c.run(argc - 1, argv + 1);
    if (cmd == "--version") {
      std::puts("halfway " HALFWAY_VERSION);
      return 0;
    }
  } catch (const std::runtime_error& e) {
    // Bad input (InputError) and what the system refused (a failed write, a full disk): the
    // user can act on it. Messages quote user input (paths, config values): control
    // characters are escaped.
    g_reported = true;
    std::fprintf(stderr, "halfway %s: error: %s\n", printable(cmd).c_str(),
                 printable(e.what()).c_str());
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    g_reported = true;
    std::fprintf(stderr, "halfway %s: internal error: out of memory (std::bad_alloc); no size "
                 "limit caught this, please report it with the command\n",
                 printable(cmd).c_str());
    return kExitInternal;
  } catch (const std::exception& e) {
    // A logic_error (out_of_range, length_error, ...) or anything else: a bug, not the input.
    g_reported = true;
    std::fprintf(stderr, "halfway %s: internal error: %s; please report it with the command\n",
                 printable(cmd).c_str(), printable(e.what()).c_str());
    return kExitInternal;
  }
  std::fprintf(stderr, "halfway: error: unknown command '%s' (%s)\n", printable(cmd).c_str(),
               command_names().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  checked_stdout();
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(usage().c_str(), argc < 2 ? stderr : stdout);
    return finish("", argc < 2 ? 2 : 0);
  }
  const std::string cmd = argv[1];
  const int rc = dispatch(cmd, argc, argv);
  return finish(cmd == "--version" ? "" : cmd, rc);
}
