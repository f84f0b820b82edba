// File: tests/core/cudnn/plan_memory_gpu_test.cc
// What plan selection and plan runs keep alive, read from the caching
// allocator's per-purpose counters (core/cuda/allocator_purpose.h): a build on
// the calling thread tests its candidates on the op's own tensors (no scratch
// copy of them, unlike a selection without them); a tensor bound twice (batch
// norm's running statistics) still gets a copy, so the build's test runs do not
// update it; a cuDNN workspace lives for one run (none is
// left after it, and inside a capture it is the capture pool's, whose replays
// give the eager bits); and the chosen plan's workspace is within the limit
// whenever a working plan within it exists; in lazy mode a graph too big for
// the background builders' scratch budget is selected on the calling thread.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <vector>

#include "core/cuda/allocator.h"
#include "core/cuda/allocator_purpose.h"
#include "core/cuda/capture.h"
#include "core/cuda/graph.h"
#include "core/cudnn/context.h"
#include "core/cudnn/conv.h"
#include "core/cudnn/norm.h"
#include "core/cudnn/plan_cache.h"
#include "core/cudnn/plan_memory.h"
#include "core/cudnn/pointwise.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;
using cuda::Purpose;

namespace {

// Nothing restored from or saved to the plan files: every key here is built
// by the case that meets it (before the store's first use, which reads this once).
const bool kNoPlanFiles = [] {
  setenv("LOOM_CUDNN_PLAN_DIR", "off", /*overwrite=*/0);
  return true;
}();

int gpu() { return testing::test_gpu().index; }

Tensor random_on_gpu(const Shape& sizes, uint64_t seed, MemoryFormat format = MemoryFormat::Contiguous) {
  Generator gen(seed);
  return randn(sizes, {}, &gen).to(testing::test_gpu()).contiguous(format);
}

// The bytes of `purpose` live now: reset_peak_stats() restarts each purpose's
// own peak from what is live.
size_t live_bytes(Purpose purpose) {
  cuda::synchronize();
  cuda::reset_peak_stats();
  return cuda::memory_breakdown(gpu()).high_water[purpose];
}

// The high-water mark of `purpose` while `work` runs, from what was live before it.
template <class Work>
size_t peak_during(Purpose purpose, Work work) {
  (void)live_bytes(purpose);
  work();
  cuda::synchronize();
  return cuda::memory_breakdown(gpu()).high_water[purpose];
}

const cudnn::PointwiseMode kRelu{CUDNN_POINTWISE_RELU_FWD, {}};

}  // namespace

LOOM_GPU_TEST_CASE("a plan built on the calling thread is tested on the op's own tensors") {
  cudnn::PlanCache::global().clear();
  // ReLU over 32 MiB: x and y are 64 MiB of tensors, far more than a pointwise engine's workspace.
  Tensor x = random_on_gpu({32, 64, 64, 64}, 7, MemoryFormat::ChannelsLast);
  Tensor y = empty_like(x);
  const std::vector<float> x_before = x.to_vector<float>();
  const size_t tensor_bytes = 2 * static_cast<size_t>(x.numel()) * sizeof(float);
  std::optional<cudnn::Graph> graph = cudnn::pointwise_forward_graph(kRelu, y.strided(), x.strided());
  REQUIRE(graph.has_value());
  const cudnn::VariantPointers pointers = cudnn::pointwise_forward_pointers(y.strided(), x.strided());

  // A timed selection without the op's tensors binds a scratch copy of each; an
  // untimed one only checks that its candidates run, on one buffer as large as
  // the larger tensor.
  const size_t with_scratch = peak_during(Purpose::PlanTests, [&] {
    cudnn::Selection s = cudnn::select_plan(*graph, cudnn::handle(), {.policy = numerics_policy(), .timed = true});
    CHECK(s.plan != nullptr);
    CHECK(s.candidates_timed >= 1);
  });
  CHECK(with_scratch >= tensor_bytes);
  const size_t shared_scratch = peak_during(Purpose::PlanTests, [&] {
    cudnn::Selection s = cudnn::select_plan(*graph, cudnn::handle(), {.policy = numerics_policy()});
    CHECK(s.plan != nullptr);
    CHECK(s.candidates_timed == 0);
  });
  CHECK(shared_scratch >= tensor_bytes / 2);
  CHECK(shared_scratch < tensor_bytes);

  // Restoring a saved plan only checks that it runs: the same one buffer.
  cudnn::Selection timed = cudnn::select_plan(*graph, cudnn::handle(), {.policy = numerics_policy(), .timed = true});
  REQUIRE(timed.plan != nullptr);
  const size_t restore_scratch = peak_during(Purpose::PlanTests, [&] {
    std::unique_ptr<cudnn::Plan> restored =
        cudnn::restore_plan(*graph, cudnn::handle(), timed.plan->json(), timed.plan->notes(),
                            {.policy = numerics_policy(), .timed = true}, nullptr);
    CHECK(restored != nullptr);
  });
  CHECK(restore_scratch >= tensor_bytes / 2);
  CHECK(restore_scratch < tensor_bytes);

  // run_plan's miss: the build binds x and y themselves.
  const int64_t built_before = cudnn::PlanCache::global().stats().plans_built;
  bool ran = false;
  const size_t in_place = peak_during(Purpose::PlanTests, [&] { ran = cudnn::run_plan(*graph, pointers, ""); });
  REQUIRE(ran);
  CHECK(cudnn::PlanCache::global().stats().plans_built == built_before + 1);
  CHECK(in_place < tensor_bytes / 2);  // not even one tensor's copy: workspaces at most
  CHECK(in_place + tensor_bytes <= with_scratch);

  // The test runs read x and wrote y, which the real run wrote again: exact ReLU of the untouched x.
  CHECK(x.to_vector<float>() == x_before);
  std::vector<float> expected = x_before;
  for (float& v : expected) v = v > 0 ? v : 0.0f;
  CHECK(y.to_vector<float>() == expected);
}

LOOM_GPU_TEST_CASE("running statistics bound as input and output get copies: they are updated once") {
  cudnn::PlanCache::global().clear();
  const int64_t c = 24;
  Tensor x = random_on_gpu({16, c, 12, 12}, 11, MemoryFormat::ChannelsLast);
  Tensor weight = random_on_gpu({c}, 12), bias = random_on_gpu({c}, 13);
  const Tensor mean0 = random_on_gpu({c}, 14), var0 = add(mul(random_on_gpu({c}, 15), 0.1), 1.0);
  // One call per plan-cache state, from the same running statistics.
  auto call = [&] {
    Tensor running_mean = mean0.clone(), running_var = var0.clone();
    Tensor y = empty_like(x), save_mean = empty({c}, x.options()), save_invstd = empty({c}, x.options());
    cudnn::batch_norm_forward_training({.y = y.strided(), .save_mean = save_mean.strided(),
                                        .save_invstd = save_invstd.strided(), .x = x.strided(),
                                        .weight = weight.strided(), .bias = bias.strided(),
                                        .running_mean = running_mean.strided(),
                                        .running_var = running_var.strided()});
    return std::vector<Tensor>{y, save_mean, save_invstd, running_mean, running_var};
  };
  const int64_t built_before = cudnn::PlanCache::global().stats().plans_built;
  const std::vector<Tensor> built = call();  // test runs on x, y and the saved statistics
  REQUIRE(cudnn::PlanCache::global().stats().plans_built > built_before);  // cuDNN ran it
  const std::vector<Tensor> cached = call();
  // Each test run on the real running statistics would have applied the
  // momentum again: 0.9^k rm0 + (1 - 0.9^k) mean, off by about 0.1 |rm0 - mean|
  // per extra run (rm0 is N(0, 1), a channel's mean about 0). One plan, two
  // calls: equal up to the order of the engine's reductions.
  for (size_t i = 0; i < built.size(); ++i) {
    CAPTURE(i);
    const std::vector<float> a = built[i].to_vector<float>(), b = cached[i].to_vector<float>();
    REQUIRE(a.size() == b.size());
    for (size_t j = 0; j < a.size(); ++j) CHECK(std::abs(a[j] - b[j]) <= 1e-4f * (1.0f + std::abs(b[j])));
  }
}

LOOM_GPU_TEST_CASE("a cuDNN workspace lives for one run; inside a capture it is the capture pool's") {
  cudnn::PlanCache::global().clear();
  // Deterministic engines only: replays and the eager run then give the same bits.
  NumericsPolicy deterministic = numerics_policy();
  deterministic.deterministic = true;
  NumericsGuard guard(deterministic);
  // A strided, dilated fp32 conv: engines for it tend to want a workspace.
  Tensor x = random_on_gpu({8, 32, 40, 40}, 21, MemoryFormat::ChannelsLast);
  Tensor w = random_on_gpu({48, 32, 3, 3}, 22, MemoryFormat::ChannelsLast);
  Tensor y = empty({8, 48, 19, 19}, x.options()).contiguous(MemoryFormat::ChannelsLast);
  const kernel::ConvParams p{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .dilation_h = 2,
                             .dilation_w = 2};
  const cudnn::Graph graph = cudnn::conv2d_graph(cudnn::ConvDirection::Forward, x.strided(), w.strided(),
                                                 y.strided(), p);
  const cudnn::VariantPointers pointers = cudnn::conv_pointers(x.strided(), w.strided(), y.strided());
  REQUIRE(cudnn::run_plan(graph, pointers, ""));  // builds the plan
  const std::vector<cudnn::PlanInfo> entries = cudnn::PlanCache::global().entries();
  REQUIRE(entries.size() == 1);
  const size_t workspace = static_cast<size_t>(entries[0].workspace_bytes);

  const size_t during = peak_during(Purpose::Workspace, [&] { REQUIRE(cudnn::run_plan(graph, pointers, "")); });
  CHECK(during >= workspace);
  CHECK(live_bytes(Purpose::Workspace) == 0);  // given back after the run
  const std::vector<float> eager = y.to_vector<float>();

  cuda::CudaGraph captured;
  y.zero_();
  (void)live_bytes(Purpose::Workspace);  // restarts every purpose's peak
  captured.capture([&] { REQUIRE(cudnn::run_plan(graph, pointers, "")); });
  const cuda::MemoryBreakdown m = cuda::memory_breakdown(gpu());
  CHECK(m.high_water[Purpose::Workspace] == 0);  // the capture's block counts as its pool's
  CHECK(m.high_water[Purpose::CapturePools] >= workspace);
  for (int replay = 0; replay < 2; ++replay) {
    y.zero_();
    captured.replay();
    CHECK(y.to_vector<float>() == eager);
  }
}

// Built on the training thread, such graphs made resnet9's first step at batch
// 512 wait 46-48 s (H200): its batch-norm and pooling graphs compile every
// candidate at run time, 2.5-10 s a graph.
LOOM_GPU_TEST_CASE("lazy mode leaves a graph bigger than the background's scratch budget to the background") {
  cudnn::PlanCache::global().clear();
  PlanBuildGuard lazy(PlanBuildMode::Lazy);
  // A 3x3 conv over 128 MiB in and 128 MiB out: past the default 128 MiB background scratch.
  Tensor x = random_on_gpu({32, 64, 128, 128}, 31, MemoryFormat::ChannelsLast);
  Tensor w = random_on_gpu({64, 64, 3, 3}, 32, MemoryFormat::ChannelsLast);
  Tensor y = empty({32, 64, 128, 128}, x.options()).contiguous(MemoryFormat::ChannelsLast);
  const kernel::ConvParams p{.pad_h = 1, .pad_w = 1};
  const cudnn::Graph big = cudnn::conv2d_graph(cudnn::ConvDirection::Forward, x.strided(), w.strided(),
                                               y.strided(), p);
  const size_t tensor_bytes = 2 * static_cast<size_t>(x.numel()) * sizeof(float);
  const cudnn::PlanCacheStats before = cudnn::PlanCache::global().stats();
  const cudnn::VariantPointers pointers = cudnn::conv_pointers(x.strided(), w.strided(), y.strided());
  const size_t tests = peak_during(Purpose::PlanTests, [&] {
    cudnn::run_plan(big, pointers, "the tier below");  // a stand-in or the tier below: either is right
    cudnn::PlanCache::global().wait_for_background_builds();
  });
  cudnn::PlanCache::global().apply_pending();
  const cudnn::PlanCacheStats after = cudnn::PlanCache::global().stats();
  CHECK(after.background_builds == before.background_builds + 1);
  CHECK(tests >= tensor_bytes);  // scratch copies of its tensors, one candidate at a time
  for (const cudnn::PlanInfo& e : cudnn::PlanCache::global().entries()) {
    CHECK_FALSE(e.pending);
    CHECK(e.supported);
    CHECK(e.background_ms > 0);  // its plan came back from the background build
  }
}

LOOM_GPU_TEST_CASE("random convs: the chosen plan's workspace is within the limit when a working plan is") {
  std::mt19937_64 rng(32);
  for (int round = 0; round < 6; ++round) {
    CAPTURE(round);
    const int64_t n = 1 + static_cast<int64_t>(rng() % 16), ci = 3 + static_cast<int64_t>(rng() % 90),
                  co = 3 + static_cast<int64_t>(rng() % 90), h = 8 + static_cast<int64_t>(rng() % 57),
                  k = 1 + 2 * static_cast<int64_t>(rng() % 3);
    CAPTURE(n);
    CAPTURE(ci);
    CAPTURE(co);
    CAPTURE(h);
    CAPTURE(k);
    const MemoryFormat format = rng() % 2 ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
    Tensor x = random_on_gpu({n, ci, h, h}, 100 + round, format);
    Tensor w = random_on_gpu({co, ci, k, k}, 200 + round, format);
    Tensor y = empty({n, co, h, h}, x.options()).contiguous(format);
    const kernel::ConvParams p{.pad_h = k / 2, .pad_w = k / 2};
    const cudnn::Graph graph = cudnn::conv2d_graph(cudnn::ConvDirection::Forward, x.strided(), w.strided(),
                                                   y.strided(), p);
    const size_t tensor_bytes = static_cast<size_t>(x.numel() + w.numel() + y.numel()) * sizeof(float);
    bool any_within = false;
    for (const auto& plan : cudnn::all_working_plans(graph, cudnn::handle())) {
      any_within |= cudnn::workspace_preferred(plan->workspace_bytes(), cudnn::preferred_workspace_limit(tensor_bytes));
    }
    // Under the bf16 policy the filter allows every engine, so the selection
    // chooses among exactly the plans all_working_plans found.
    const NumericsPolicy every_engine{.precision = Precision::Bf16};
    cudnn::Selection s = cudnn::select_plan(graph, cudnn::handle(), {.policy = every_engine});
    REQUIRE(s.plan != nullptr);
    if (!any_within) continue;  // only oversized plans work: the first of them is right
    CHECK(cudnn::workspace_preferred(s.plan->workspace_bytes(), cudnn::preferred_workspace_limit(tensor_bytes)));
  }
}

#endif  // LOOM_WITH_CUDA
