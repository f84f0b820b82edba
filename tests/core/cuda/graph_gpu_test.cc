// File: tests/core/cuda/graph_gpu_test.cc
// A sequence of ops captured into a CUDA graph and replayed gives what eager
// execution gives, also after the inputs change in place.
//
// N batch, C channels, H, W, K out channels.
#include <doctest/doctest.h>

#include <array>
#include <utility>
#include <vector>

#ifdef LOOM_WITH_CUDA
#include "core/cuda/graph.h"
#include "core/cuda/stream.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// conv -> batch norm (eval) -> relu -> max pool -> linear -> softmax
Tensor block(const Tensor& x, const Tensor& w, const Tensor& rm, const Tensor& rv, const Tensor& fc) {
  Tensor h = conv2d(x, w, Tensor(), {.padding = {1, 1}});
  h = relu(batch_norm(h, rm, rv, Tensor(), Tensor(), {.training = false}));
  h = max_pool2d(h, {.kernel_size = {2, 2}});
  return softmax(linear(h.flatten(1), fc), 1);
}

// block's input, weights and running statistics on the test GPU, after one
// eager run of block that builds every plan outside a capture.
std::array<Tensor, 5> block_inputs(Generator& gen) {
  TensorOptions gpu{.device = testing::test_gpu()};
  Tensor x = randn({8, 3, 16, 16}, {}, &gen).to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast);
  Tensor w = mul(randn({8, 3, 3, 3}, {}, &gen), 0.3).to(testing::test_gpu());
  Tensor rm = zeros({8}, gpu), rv = ones({8}, gpu);
  Tensor fc = mul(randn({10, 8 * 8 * 8}, {}, &gen), 0.05).to(testing::test_gpu());
  block(x, w, rm, rv, fc);
  cuda::synchronize();
  return {x, w, rm, rv, fc};
}

}  // namespace

LOOM_GPU_TEST_CASE("a captured sequence of ops replays like eager execution") {
  Generator gen(71);
  auto [x, w, rm, rv, fc] = block_inputs(gen);

  cuda::CudaGraph graph;
  Tensor captured;
  graph.capture([&] { captured = block(x, w, rm, rv, fc); });
  graph.replay();
  CHECK_CLOSE(captured.cpu(), block(x, w, rm, rv, fc).cpu(), 0, 0);

  // New input values, same buffer: the replay must see them.
  x.copy_(randn({8, 3, 16, 16}, {}, &gen));
  graph.replay();
  CHECK_CLOSE(captured.cpu(), block(x, w, rm, rv, fc).cpu(), 0, 0);
}

// TrainStep records a step's capture only to plan the memory of the capture
// that runs: the record keeps no graph and no memory once its outputs are gone.
LOOM_GPU_TEST_CASE("a recorded capture keeps nothing, and a capture planned from its record replays like eager") {
  Generator gen(72);
  auto [x, w, rm, rv, fc] = block_inputs(gen);
  const size_t allocated = cuda::stats().allocated_bytes;

  cuda::CudaGraph recorded;
  Tensor dropped;
  recorded.record([&] { dropped = block(x, w, rm, rv, fc); });
  CHECK_FALSE(recorded.captured());
  CHECK_THROWS_WITH_FRAGMENT(recorded.replay(), CudaError, "before capture");
  REQUIRE_FALSE(recorded.memory_record().empty());
  dropped = Tensor();
  CHECK(cuda::stats().allocated_bytes == allocated);

  cuda::CudaGraph graph;
  Tensor captured;
  graph.capture([&] { captured = block(x, w, rm, rv, fc); }, cuda::CapturePlan(recorded.memory_record()));
  CHECK(graph.plan_misses() == 0);
  graph.replay();
  CHECK_CLOSE(captured.cpu(), block(x, w, rm, rv, fc).cpu(), 0, 0);
}

LOOM_GPU_TEST_CASE("building a plan during capture is refused with a clear error") {
  // 12 input and 16 output channels: more than Loom's small-channel kernels take
  // (at most 8 in, or at most 8 out), so cuDNN runs the conv.
  Tensor x = ones({2, 12, 7, 7}, {.device = testing::test_gpu()});
  Tensor w = ones({16, 12, 3, 3}, {.device = testing::test_gpu()});
  cuda::CudaGraph graph;
  // This conv shape was never run eagerly, so its plan does not exist yet.
  CHECK_THROWS_AS(graph.capture([&] { conv2d(x, w, Tensor(), {.stride = {2, 2}}); }), Error);
  CHECK_FALSE(graph.captured());
  Tensor after = conv2d(x, w);  // the stream still works
  CHECK(after.size(1) == 16);
}

LOOM_GPU_TEST_CASE("flip and one_hot replay inside a capture: arange makes its values on the device") {
  Generator gen(72);
  const Device gpu = testing::test_gpu();
  const TensorOptions int64_gpu{.dtype = DType::Int64, .device = gpu};
  Tensor x = randn({3, 5, 4}, {}, &gen).to(gpu);
  Tensor labels = randint(0, 4, {6}, int64_gpu, &gen);
  auto work = [&] { return std::pair(flip(x, {0, 2}), one_hot(labels, 4)); };
  work();
  cuda::synchronize();
  cuda::CudaGraph graph;
  std::pair<Tensor, Tensor> captured;
  graph.capture([&] { captured = work(); });
  for (int replay = 0; replay < 2; ++replay) {  // new values in the same buffers each time
    x.copy_(randn({3, 5, 4}, {}, &gen));
    labels.copy_(randint(0, 4, {6}, int64_gpu, &gen));
    graph.replay();
    CHECK_CLOSE(captured.first.cpu(), flip(x.cpu(), {0, 2}), 0, 0);
    CHECK_CLOSE(captured.second.cpu(), one_hot(labels.cpu(), 4), 0, 0);
  }
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64, DType::Int32}) {
    CAPTURE(dtype_name(dtype));
    CHECK_CLOSE(arange(0.5, 9.0, 0.75, {.dtype = dtype, .device = gpu}).cpu(), arange(0.5, 9.0, 0.75, {.dtype = dtype}),
                0, 0);
    CHECK_CLOSE(arange(4.0, -3.0, -1.5, {.dtype = dtype, .device = gpu}).cpu(),
                arange(4.0, -3.0, -1.5, {.dtype = dtype}), 0, 0);
    CHECK(arange(2.0, 2.0, 1.0, {.dtype = dtype, .device = gpu}).numel() == 0);
  }
}

// A captured host copy would replay whatever the pinned staging buffer holds by
// then, and its staging event could not be waited on afterwards.
LOOM_GPU_TEST_CASE("host copies inside a capture are refused with a clear error, and copies work after it") {
  const Device gpu = testing::test_gpu();
  const Tensor host = tensor({1, 2, 3}, {3});
  const Tensor device_scalar = full({}, 5.0, {.device = gpu});
  cuda::CudaGraph to_gpu;
  CHECK_THROWS_WITH_FRAGMENT(to_gpu.capture([&] { (void)host.to(gpu); }), CudaError,
                             "while a CUDA graph is being captured");
  CHECK_FALSE(to_gpu.captured());
  cuda::CudaGraph to_cpu;
  CHECK_THROWS_WITH_FRAGMENT(to_cpu.capture([&] { (void)device_scalar.item(); }), CudaError,
                             "while a CUDA graph is being captured");
  CHECK_FALSE(to_cpu.captured());
  for (int round = 0; round < 3; ++round) {  // both staging halves are usable again
    CHECK_CLOSE(host.to(gpu).cpu(), host, 0, 0);
    CHECK(device_scalar.item() == 5.0);
  }
}
#endif  // LOOM_WITH_CUDA

LOOM_GPU_TEST_CASE("counters added at the capture's end count every replay, once per add, in any number") {
  // 70 counters: more than one launch's batch (cuda::kCounterBatch); counter 0
  // is added to twice in the step and counter 1 also at once, so a replay adds
  // 2 + 3 to counter 0, 1 + 5 to counter 1 and i + 1 to counter i.
  constexpr int64_t kCounters = 70;
  const TensorOptions on_gpu{.dtype = DType::Int64, .device = testing::test_gpu()};
  std::vector<Tensor> counters;
  for (int64_t i = 0; i < kCounters; ++i) counters.push_back(zeros({}, on_gpu));
  Tensor seen_in_step = zeros({}, on_gpu);
  auto step = [&] {
    for (int64_t i = 0; i < kCounters; ++i) increment_(counters[i], i + 1, CounterOrder::AtCaptureEnd);
    increment_(counters[0], 3, CounterOrder::AtCaptureEnd);
    increment_(counters[1], 5);
    // What the step's own kernels see of counter 2: its value before this step's adds.
    seen_in_step.copy_(counters[2]);
  };
  step();  // eager: every add lands at once
  CHECK(counters[0].item() == 4);
  CHECK(seen_in_step.item() == 3);
  cuda::CudaGraph graph;
  graph.capture(step);
  cuda::synchronize();
  CHECK(counters[0].item() == 4);  // capturing runs nothing
  constexpr int kReplays = 3;
  for (int r = 0; r < kReplays; ++r) graph.replay();
  cuda::synchronize();
  CHECK(counters[0].item() == 4 + kReplays * 4);
  CHECK(counters[1].item() == 7 + kReplays * 7);
  for (int64_t i = 2; i < kCounters; ++i) {
    CAPTURE(i);
    CHECK(counters[i].item() == (kReplays + 1) * (i + 1));
  }
  CHECK(seen_in_step.item() == 3 + (kReplays - 1) * 3);
  // Outside a capture the deferred form is immediate.
  increment_(counters[5], 10, CounterOrder::AtCaptureEnd);
  CHECK(counters[5].item() == (kReplays + 1) * 6 + 10);
}
