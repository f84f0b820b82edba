// File: tests/core/ops/fusion_rows1_strict_gpu_test.cc
// conv2d + bias + the first half of the activation rows (relu: the fused op conv2d_bias_relu),
// under strict fp32: fused vs unfused vs the CPU, forward and backward, NCHW and
// channels-last (tests/core/ops/fusion_parity.h).
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include "tests/core/ops/fusion_parity.h"
#include "tests/testing.h"

using namespace loom;

LOOM_GPU_TEST_CASE("conv2d + bias + activation rows, half 1, strict fp32: fused vs unfused vs the CPU") {
  Generator gen(21);
  const std::vector<fusion_parity::Case> cases = fusion_parity::conv_activation_cases(gen, 0);
  fusion_parity::check_blocks(cases, {testing::kStrictFp32Parity}, gen);
}

#endif  // LOOM_WITH_CUDA
