// File: tests/distributed/job.h
// Runs a shell command (an mpirun job) to its end and keeps its exit code,
// wall time and output, for the tests that watch a whole job fail.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace loom::testing {

struct JobResult {
  int exit_code = -1;
  double seconds = 0;
  std::string output;
};

inline JobResult run_job(const std::string& command) {
  const auto start = std::chrono::steady_clock::now();
  JobResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE(command << ": exit " << result.exit_code << " after " << result.seconds
                  << " s, output:\n" << result.output);
  return result;
}

}  // namespace loom::testing
