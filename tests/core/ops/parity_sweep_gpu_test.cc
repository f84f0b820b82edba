// File: tests/core/ops/parity_sweep_gpu_test.cc
// The randomized GPU sweep (parity_sweep.h): every op on random configurations
// in float32 on the GPU under strict fp32, tf32 and bf16 autocast, NCHW and
// channels-last, deterministic on and off, fused and unfused, against float64
// on the CPU. The suite runs 120 cases of seed 1; LOOM_SWEEP_SEEDS,
// LOOM_SWEEP_FIRST and LOOM_SWEEP_COUNT run more, LOOM_SWEEP_CASE one.
#include <doctest/doctest.h>

#include "tests/core/ops/parity_sweep.h"
#include "tests/testing.h"

using namespace loom;

LOOM_GPU_TEST_CASE("random configurations: the GPU matches float64 on the CPU") {
  sweep::Summary summary = sweep::run_sweep(
      testing::test_gpu(), {Precision::StrictFp32, Precision::Tf32, Precision::Bf16},
      /*default_seeds=*/{1}, /*count=*/120);
  CHECK(summary.failures() == 0);
}
