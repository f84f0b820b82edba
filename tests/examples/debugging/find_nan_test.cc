// File: tests/examples/debugging/find_nan_test.cc
// docs/debugging.md's example does what the tutorial says it does.
#include <doctest/doctest.h>

#include <string>

#include "tests/examples/program_run.h"

using loom::testing::has;

TEST_CASE("find_nan: gradcheck passes the right backward and catches the wrong one; anomaly mode "
          "names the op and module of a forward and of a backward NaN/inf") {
  loom::testing::ProgramRun r = loom::testing::run_program("examples/debugging/find_nan", "");
  CHECK(r.code == 0);
  CHECK(has(r, "gradcheck my_softplus: ok\n"));
  CHECK(has(r, "gradcheck my_softplus_wrong: gradcheck: d output[0] / d input0[0]"));
  CHECK(has(r, "[anomaly] the forward of 'log' in 2 (LogFeatures) produced -inf"));
  CHECK(has(r, "[anomaly] the backward of 'sqrt' (recorded in 2 (ScaledFeatures)) produced"));
  // What training without the guard sees, in both cases: gradients that are not finite.
  CHECK(has(r, "gradients with NaN/inf\n  [anomaly] the forward"));
  CHECK(has(r, "gradients with NaN/inf\n  [anomaly] the backward"));
}
