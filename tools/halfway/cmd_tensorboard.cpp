// `halfway tensorboard RUN_DIR... --out LOGDIR`: run folders as TensorBoard event files. The
// export is the Python package's (halfway.tensorboard, standard library only), which the
// context managers call too; this command runs it with the build tree's package first.
#include <fmt/format.h>

#include <string>

#include "commands.hpp"
#include "spawn.hpp"

namespace halfway::cli {

int cmd_tensorboard(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--python") ++i;  // its value is a program, never an option
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
  }
  return forward_to_python("halfway tensorboard", "/usr/bin/python3",
                           {"-m", "halfway.tensorboard"}, argc, argv);
}

}  // namespace halfway::cli
