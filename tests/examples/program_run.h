// File: tests/examples/program_run.h
// Runs an example binary (a data dependency of the test, so a runfiles path)
// as a user does, for the tests of its command line.
#pragma once

#include <string>

namespace loom::testing {

struct ProgramRun {
  int code = -1;       // the exit status; -1 when it did not exit (a signal: an abort)
  std::string output;  // stdout and stderr together
};

// `environment`: shell assignments put before the command, e.g. "LOOM_PYTHON=/none".
ProgramRun run_program(const std::string& binary, const std::string& args,
                       const std::string& environment = "");

inline bool has(const ProgramRun& run, const std::string& text) {
  return run.output.find(text) != std::string::npos;
}

}  // namespace loom::testing
