// `halfway tensorboard RUN_DIR... --out LOGDIR`: run folders as TensorBoard event files. The
// export is the Python package's (halfway.tensorboard, standard library only), which the
// context managers call too; this command runs it with the build tree's package first.
#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "commands.hpp"
#include "format_util.hpp"
#include "halfway/names.hpp"
#include "spawn.hpp"

namespace halfway::cli {

int cmd_tensorboard(int argc, char** argv) {
  const char* env = std::getenv("HALFWAY_PYTHON");
  std::string python = env && *env ? env : "/usr/bin/python3";
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      fmt::print(
          "usage: halfway tensorboard RUN_DIR... --out LOGDIR [--python PYTHON]\n"
          "Writes each run folder (train, sweep members, analyze, halfway.torch.trace and\n"
          "emulate) as a TensorBoard run under LOGDIR: loss, loss scale, the flushed and\n"
          "overflow fractions per tensor and format, the block counts and SNR, and the\n"
          "magnitude and scale histograms (docs/python.md, halfway.tensorboard). PYTHON runs\n"
          "the export (default $HALFWAY_PYTHON or /usr/bin/python3; it needs no package).\n");
      return 0;
    }
    if (a == "--python") {
      if (i + 1 >= argc) throw InputError("--python: needs a program");
      python = argv[++i];
      continue;
    }
    args.push_back(a);
  }
  if (!program_exists(python))
    throw InputError("--python: no program '" + python + "' (--python, $HALFWAY_PYTHON)");
  build_package_first();
  std::vector<std::string> cmd = {python, "-m", "halfway.tensorboard"};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return run_forwarding("halfway tensorboard", cmd);
}

}  // namespace halfway::cli
