// File: tests/examples/tiny/two_layer_cli_test.cc
// two_layer's command line as a user meets it: the binary is run and its exit
// code and output checked. Usage errors print one line and exit 2; nothing aborts.
#include <doctest/doctest.h>

#include <string>

#include "core/device.h"
#include "tests/examples/program_run.h"

namespace {

using Run = loom::testing::ProgramRun;
using loom::testing::has;

Run two_layer(const std::string& args) { return loom::testing::run_program("examples/tiny/two_layer", args); }

}  // namespace

TEST_CASE("two_layer: --help and -h print the usage and exit 0") {
  for (const char* flag : {"--help", "-h"}) {
    Run run = two_layer(flag);
    CHECK(run.code == 0);
    CHECK(has(run, "usage: two_layer [--steps N]"));
  }
}

TEST_CASE("two_layer: bad numbers and unknown flags are one line and exit 2, not an abort") {
  Run abc = two_layer("--steps abc");
  CHECK(abc.code == 2);
  CHECK(has(abc, "two_layer: --steps needs a whole number from 1 to 100000000, got 'abc'"));
  CHECK(abc.output.find('\n') == abc.output.size() - 1);  // one line

  CHECK(two_layer("--steps 0").code == 2);
  CHECK(two_layer("--steps=12x").code == 2);
  CHECK(two_layer("--seed -1").code == 2);
  Run unknown = two_layer("--stpes 5");
  CHECK(unknown.code == 2);
  CHECK(has(unknown, "unknown argument '--stpes'"));
  Run missing = two_layer("--steps");
  CHECK(missing.code == 2);
  CHECK(has(missing, "--steps needs a value"));
  Run switch_value = two_layer("--explain=yes");
  CHECK(switch_value.code == 2);
  CHECK(has(switch_value, "--explain takes no value"));
}

TEST_CASE("two_layer: --device cuda without a GPU names the flags to use and exits 2" *
          doctest::skip(loom::cuda_available())) {
  Run run = two_layer("--device cuda");
  CHECK(run.code == 2);
  CHECK(has(run, "no usable GPU: use --device cpu or --device auto"));
}

TEST_CASE("two_layer: --flag=value trains as --flag value does, and --explain keeps the output") {
  Run inline_values = two_layer("--steps=20 --seed=3 --device=cpu");
  CHECK(inline_values.code == 0);
  CHECK(has(inline_values, "two-layer perceptron on cpu"));
  CHECK(has(inline_values, "step    20"));
  CHECK(inline_values.output == two_layer("--steps 20 --seed 3 --device cpu").output);

  Run explain = two_layer("--steps 20 --device cpu --explain");
  CHECK(explain.code == 0);
  CHECK(has(explain, "step    20"));
}
