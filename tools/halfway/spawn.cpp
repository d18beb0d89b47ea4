// Running another program without a shell: posix_spawnp, output captured through a pipe.
#include "spawn.hpp"

#include <cstdio>
#include <cstdlib>

#include "format_util.hpp"
#include "halfway/names.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

namespace halfway::cli {

int run_captured(const std::vector<std::string>& args, std::string& out) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int fd[2];
  if (::pipe2(fd, O_CLOEXEC) != 0) {
    out = std::string("cannot run ") + args[0] + ": " + std::strerror(errno);
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, fd[1], STDERR_FILENO);
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fd[1]);
  if (err != 0) {
    ::close(fd[0]);
    out = std::string("cannot run ") + args[0] + ": " + std::strerror(err);
    return -1;
  }
  char buf[4096];
  for (ssize_t n; (n = ::read(fd[0], buf, sizeof buf)) != 0;) {
    if (n > 0) out.append(buf, size_t(n));
    else if (errno != EINTR) break;
  }
  ::close(fd[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

namespace {

/// Spawn args[0] (PATH lookup, no shell) and wait: its wait status in `st`; "" or why not.
std::string spawn_wait(const std::vector<std::string>& args, int& st) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (err != 0) return "cannot run '" + args[0] + "': " + std::strerror(err);
  st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return "";
}

}  // namespace

std::string run_program(const std::vector<std::string>& args) {
  int st = 0;
  const std::string failed = spawn_wait(args, st);
  if (!failed.empty()) return failed;
  if (WIFEXITED(st))
    return WEXITSTATUS(st) == 0 ? "" : "exit status " + std::to_string(WEXITSTATUS(st));
  const int sig = WTERMSIG(st);
  const char* name = sigabbrev_np(sig);
  return "killed by " + (name ? "SIG" + std::string(name) : "signal " + std::to_string(sig));
}

int run_forwarding(const std::string& tool, const std::vector<std::string>& args) {
  int st = 0;
  const std::string failed = spawn_wait(args, st);
  if (!failed.empty()) {
    std::fprintf(stderr, "%s: %s\n", tool.c_str(), printable(failed).c_str());
    return 2;
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

bool program_exists(const std::string& program) {
  if (program.empty()) return false;
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t p = 0; p <= dirs.size();) {
    size_t c = dirs.find(':', p);
    if (c == std::string::npos) c = dirs.size();
    const std::string d = c > p ? dirs.substr(p, c - p) : ".";
    if (::access((d + "/" + program).c_str(), X_OK) == 0) return true;
    p = c + 1;
  }
  return false;
}

void build_package_first() {
  std::string env = HALFWAY_BUILD_PYTHON_DIR;
  const char* p = std::getenv("PYTHONPATH");
  if (p && std::string(p).rfind(env, 0) == 0) return;  // already first
  if (p && *p) env += std::string(":") + p;
  setenv("PYTHONPATH", env.c_str(), 1);
}

int forward_to_python(const std::string& tool, const std::string& fallback,
                      std::vector<std::string> cmd, int argc, char** argv,
                      const std::string& drop) {
  const char* env = std::getenv("HALFWAY_PYTHON");
  std::string python = env && *env ? env : fallback;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (!drop.empty() && a == drop) continue;
    if (a == "--python") {
      if (i + 1 >= argc) throw InputError("--python: needs a program");
      python = argv[++i];
    } else {
      cmd.push_back(a);
    }
  }
  if (!program_exists(python))
    throw InputError("--python: no program '" + python + "' (--python, $HALFWAY_PYTHON)");
  cmd.insert(cmd.begin(), python);
  build_package_first();
  return run_forwarding(tool, cmd);
}

int draw_figures(const std::string& tool, const std::string& python, const std::string& dir) {
  // The figures are drawn by the Python package (halfway.figures).
  build_package_first();
  std::fflush(stdout);  // this program's lines first
  const std::string failed = run_program({python, "-m", "halfway.figures", dir});
  if (failed.empty()) return 0;
  std::fprintf(stderr, "%s: the figures failed (%s -m halfway.figures: %s); the results are in "
               "%s\n", tool.c_str(), printable(python).c_str(), failed.c_str(),
               printable(dir).c_str());
  return 1;
}

}  // namespace halfway::cli
