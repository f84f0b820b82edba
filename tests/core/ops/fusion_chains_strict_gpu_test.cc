// File: tests/core/ops/fusion_chains_strict_gpu_test.cc
// Batch norm + activation + residual, a user chain gelu(scale * conv(x) + shift)
// and chains with a mul by a scalar, a scale-bias and a residual, under
// strict fp32: fused vs unfused vs the CPU, forward and backward, NCHW and
// channels-last (tests/core/ops/fusion_parity.h).
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include "tests/core/ops/fusion_parity.h"
#include "tests/testing.h"

using namespace loom;

LOOM_GPU_TEST_CASE("conv2d + norm / scale / residual chains, strict fp32: fused vs unfused vs the CPU") {
  Generator gen(23);
  const std::vector<fusion_parity::Case> cases = fusion_parity::conv_chain_cases(gen);
  fusion_parity::check_blocks(cases, {testing::kStrictFp32Parity}, gen);
}

#endif  // LOOM_WITH_CUDA
