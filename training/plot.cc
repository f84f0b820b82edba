// File: training/plot.cc
// Finding and running tools/plot_metrics.py.
#include "training/plot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/serialize.h"
#include "training/trainer.h"

namespace loom::training {

namespace {

// Runs `args` (args[0] found on PATH) with its output passed through, and
// returns its exit status: 127 when it could not start.
int run_command(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  // posix_spawn, not fork: the data loader's worker threads are running.
  if (::posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return 127;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The Python that runs the plot tool: $LOOM_PYTHON, else Debian's (where its
// python3-matplotlib lives, whatever python3 comes first on PATH), else python3.
std::string plot_python() {
  if (const char* python = std::getenv("LOOM_PYTHON"); python != nullptr && *python != '\0') return python;
  std::error_code error;
  return std::filesystem::exists("/usr/bin/python3", error) ? "/usr/bin/python3" : "python3";
}

}  // namespace

std::string check_plot(const TrainConfig& c) {
  if (c.plot.empty()) return "";
  LOOM_CHECK(c.plot.ends_with(".png"), ValueError, "[train] --plot '{}': the picture is a PNG, so the name ends in .png", c.plot);
  try {
    check_save_path(c.plot);
  } catch (const IoError& e) {
    throw IoError(fmt::format("[train] --plot {} cannot be written (checked before training): {}", c.plot, e.what()));
  }
  const std::string tool = plot_tool_path();
  LOOM_CHECK(!tool.empty(), IoError,
             "[train] --plot: tools/plot_metrics.py is not among this program's runfiles (checked "
             "before training); start the trainer with bazel run, or as bazel-bin/examples/...");
  const std::string python = plot_python();
  const int status = run_command({python, tool, "--check"});
  LOOM_CHECK(status == 0, IoError,
             "[train] --plot needs Python with matplotlib (checked before training; {} {}): "
             "install Debian's python3-matplotlib with 'bash tools/setup.sh python3-matplotlib', "
             "or set LOOM_PYTHON to a Python that has it, or drop --plot",
             python, status == 127 ? "could not start" : "has no matplotlib");
  return tool;
}

TemporaryFile::~TemporaryFile() {
  std::error_code ignored;  // a file that is already gone is fine
  if (!path_.empty()) std::filesystem::remove(path_, ignored);
}

void draw_plot(const TrainConfig& c, const std::string& tool, const std::string& metrics,
               const std::string& run_id) {
  const int status = run_command({plot_python(), tool, metrics, "--run-id", run_id, "--out",
                                  c.plot, "--title", fmt::format("{} on {}", c.model, c.device.str())});
  LOOM_CHECK(status == 0, IoError,
             "[train] --plot: tools/plot_metrics.py exited with {} (its message is above); the "
             "training itself finished{}",
             status, c.metrics.empty() ? "" : ", and its metrics are in " + c.metrics);
  if (c.progress) std::printf("training curves written to %s\n", c.plot.c_str());
}

std::string plot_tool_path() {
  namespace fs = std::filesystem;
  constexpr const char* kTool = "loom/tools/plot_metrics.py";
  std::vector<fs::path> roots;
  std::error_code error;
  // A binary's runfiles lie beside it; under a test, its own tree comes from the environment.
  if (fs::path exe = fs::read_symlink("/proc/self/exe", error); !error) roots.push_back(exe.string() + ".runfiles");
  for (const char* variable : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* dir = std::getenv(variable)) roots.push_back(dir);
  }
  for (const fs::path& root : roots) {
    if (fs::is_regular_file(root / kTool, error)) return (root / kTool).string();
  }
  return "";
}

}  // namespace loom::training
