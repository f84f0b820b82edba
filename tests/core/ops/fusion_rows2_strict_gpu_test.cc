// File: tests/core/ops/fusion_rows2_strict_gpu_test.cc
// conv2d + bias + the second half of the activation rows,
// under strict fp32: fused vs unfused vs the CPU, forward and backward, NCHW and
// channels-last (tests/core/ops/fusion_parity.h).
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include "tests/core/ops/fusion_parity.h"
#include "tests/testing.h"

using namespace loom;

LOOM_GPU_TEST_CASE("conv2d + bias + activation rows, half 2, strict fp32: fused vs unfused vs the CPU") {
  Generator gen(21);
  const std::vector<fusion_parity::Case> cases = fusion_parity::conv_activation_cases(gen, 1);
  fusion_parity::check_blocks(cases, {testing::kStrictFp32Parity}, gen);
}

#endif  // LOOM_WITH_CUDA
