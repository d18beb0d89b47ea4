// Subcommands of the `halfway` tool. Each returns the process exit code: 0 success, 1 a check
// failed (mismatch), 2 bad input (a one-line message has been printed to stderr).
#pragma once

namespace halfway::cli {
int cmd_info(int argc, char** argv);
int cmd_tensorboard(int argc, char** argv);
int cmd_round(int argc, char** argv);
int cmd_testfloat(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_analyze(int argc, char** argv);
int cmd_hw_report(int argc, char** argv);
int cmd_sweep(int argc, char** argv);
int cmd_merge(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_bisect(int argc, char** argv);
}  // namespace halfway::cli
