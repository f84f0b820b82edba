// File: tests/examples/program_run.cc
// Running an example binary as a user does, for the tests of its command line.
#include "tests/examples/program_run.h"

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>

namespace loom::testing {

ProgramRun run_program(const std::string& binary, const std::string& args,
                       const std::string& environment) {
  ProgramRun run;
  FILE* pipe = ::popen((environment + " " + binary + " " + args + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer;
  while (size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) run.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  if (WIFEXITED(status)) run.code = WEXITSTATUS(status);
  return run;
}

}  // namespace loom::testing
