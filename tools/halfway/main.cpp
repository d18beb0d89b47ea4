// The `halfway` command-line tool: one binary, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.hpp"
#include "halfway/names.hpp"

namespace {

const char* kUsage =
    "usage: halfway COMMAND [ARGS...]\n"
    "\n"
    "commands:\n"
    "  info [FORMAT...]                      numpy-finfo-like table of formats\n"
    "  round VALUE... [--to F] [--rounding R] encoding, fields, exact value, neighbours, flags\n"
    "  testfloat FUNCTION [OPTIONS]          Berkeley TestFloat-compatible filter (stdin->stdout)\n"
    "  verify [--exhaustive] [--op OP] [--format F]  check against independent oracles\n"
    "  bench [--json]                        throughput against hardware references\n"
    "  hw-report [--backend NAME] [--exhaustive] [--json]  library vs hardware/vendor backends\n"
    "  train CONFIG.toml [--out DIR]         simulate mixed-precision training, trace roundings\n"
    "  sweep SWEEP.toml [--out DIR] [--jobs N] [--shard I/N]  resumable sweep over config keys\n"
    "  merge DIR... [--out FILE]             one sweep.csv from the shards of a sweep\n"
    "  run EXPERIMENT_DIR... | --all         run experiments and draw their figures\n"
    "\n"
    "Run 'halfway COMMAND --help' for a command's options.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace halfway::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "info") return cmd_info(argc - 1, argv + 1);
    if (cmd == "round") return cmd_round(argc - 1, argv + 1);
    if (cmd == "testfloat") return cmd_testfloat(argc - 1, argv + 1);
    if (cmd == "verify") return cmd_verify(argc - 1, argv + 1);
    if (cmd == "bench") return cmd_bench(argc - 1, argv + 1);
    if (cmd == "train") return cmd_train(argc - 1, argv + 1);
    if (cmd == "hw-report") return cmd_hw_report(argc - 1, argv + 1);
    if (cmd == "sweep") return cmd_sweep(argc - 1, argv + 1);
    if (cmd == "merge") return cmd_merge(argc - 1, argv + 1);
    if (cmd == "run") return cmd_run(argc - 1, argv + 1);
    if (cmd == "--version") {
      std::puts("halfway " HALFWAY_VERSION);
      return 0;
    }
  } catch (const halfway::InputError& e) {
    std::fprintf(stderr, "halfway %s: error: %s\n", cmd.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "halfway %s: error: %s\n", cmd.c_str(), e.what());
    return 2;
  }
  std::fprintf(stderr, "halfway: error: unknown command '%s' (info round testfloat verify bench train sweep merge run "
               "hw-report)\n",
               cmd.c_str());
  return 2;
}
