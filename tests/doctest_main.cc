// File: tests/doctest_main.cc
// The doctest main of every single-process test binary.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  // Tests build the cuDNN plans they count and check: plan files a trainer or an
  // earlier run left in ~/.cache would be restored instead, and a test's plans
  // would land there. The tests of the plan files set a folder of their own.
  setenv("LOOM_CUDNN_PLAN_DIR", "off", /*overwrite=*/1);
  doctest::Context context(argc, argv);
  return context.run();
}
