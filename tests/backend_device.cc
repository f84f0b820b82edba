// File: tests/backend_device.cc
// Linked into the tests of the CUDA and cuDNN layers (tests/core/cuda,
// tests/core/cudnn), which call backend functions directly. Those act on the
// calling thread's current GPU, which ops make their operands' device; so
// these tests make the test GPU (testing::test_gpu(), LOOM_TEST_DEVICE)
// current before any case runs, as an op would.
#include <cuda_runtime_api.h>

#include "tests/testing.h"

namespace {

const bool test_gpu_current = [] {
  if (loom::testing::test_gpu_available()) cudaSetDevice(loom::testing::test_gpu().index);
  return true;
}();

}  // namespace
