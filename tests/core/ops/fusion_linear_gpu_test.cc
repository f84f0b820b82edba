// File: tests/core/ops/fusion_linear_gpu_test.cc
// fusion::Block on the GPU with a linear head (tests/core/ops/fusion_parity.h:
// fused and unfused against the CPU, forward and backward, both layouts, every
// policy): linear + bias + each activation row, and a derivative chain with a
// per-channel scale and shift, a mul by a scalar and a residual.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <vector>

#include "core/ops/fusion.h"
#include "core/ops/ops.h"
#include "tests/core/ops/fusion_parity.h"
#include "tests/testing.h"

using namespace loom;
using fusion::Block;
using fusion_parity::Case;
using fusion_parity::check_blocks;

LOOM_GPU_TEST_CASE("linear + bias + each activation row, fused vs unfused vs the CPU") {
  Generator gen(22);
  Tensor x = randn({32, 40}, {}, &gen), w = randn({24, 40}, {}, &gen) * 0.1, b = randn({24}, {}, &gen);
  std::vector<Case> cases;
  for (ActivationKind kind : kernel::kActivationKinds) {  // relu: the fused op linear_relu
    cases.push_back({Block().linear().bias().activation(kind), {x, w, b}});
  }
  // A derivative chain with a per-channel scale and shift, a mul by a scalar and a residual.
  Tensor scale = rand({24}, {}, &gen) + 0.5, shift = randn({24}, {}, &gen), residual = randn({32, 24}, {}, &gen);
  cases.push_back({Block().linear().scale_bias().mul(2.0).silu().add_residual(), {x, w, scale, shift, residual}});
  check_blocks(cases, {testing::kStrictFp32Parity, testing::kTf32Parity, testing::kBf16Parity}, gen);
}

#endif  // LOOM_WITH_CUDA
