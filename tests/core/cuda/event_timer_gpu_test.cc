// File: tests/core/cuda/event_timer_gpu_test.cc
// EventTimer's contract, never its numbers (a test cannot assert timings):
// stop_ms() returns only once the timed work has finished, the elapsed time is
// a finite non-negative count, and one timer can time several runs in turn;
// evict_l2() writes only its own scratch and is refused inside a capture.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cmath>
#include <cstddef>

#include "core/cuda/event_timer.h"
#include "core/cuda/graph.h"
#include "core/tensor.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "tests/testing.h"

using namespace loom;

LOOM_GPU_TEST_CASE("stop_ms waits for the timed work and can be repeated") {
  constexpr size_t kBytes = size_t{64} << 20;  // large enough to still be running at the stop record
  void* buffer = cuda::malloc_device(kBytes, testing::test_gpu().index);
  cuda::EventTimer timer;
  for (int run = 0; run < 2; ++run) {
    timer.start();
    LOOM_CUDA_CHECK(cudaMemsetAsync(buffer, run, kBytes, cuda::current_stream()));
    const float ms = timer.stop_ms();
    CHECK(cudaStreamQuery(cuda::current_stream()) == cudaSuccess);
    CHECK(std::isfinite(ms));
    CHECK(ms >= 0.0f);
  }
  cuda::free_device(buffer, testing::test_gpu().index);
}

LOOM_GPU_TEST_CASE("evict_l2 leaves every other buffer as it was, and never runs in a capture") {
  const Tensor kept = arange(0, 1 << 20, 1, {.dtype = DType::Float32, .device = testing::test_gpu()});
  const std::vector<float> before = kept.to_vector<float>();
  cuda::evict_l2();
  cuda::evict_l2();  // the scratch is made once and written again
  CHECK(kept.to_vector<float>() == before);
  Tensor work = zeros({4}, {.device = testing::test_gpu()});
  cuda::CudaGraph graph;
  CHECK_THROWS_WITH_FRAGMENT(graph.capture([&] {
    work.fill_(1);
    cuda::evict_l2();
  }),
                             ValueError, "inside a CUDA-graph capture");
}
#endif  // LOOM_WITH_CUDA
