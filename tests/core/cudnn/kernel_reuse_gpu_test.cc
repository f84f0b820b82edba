// File: tests/core/cudnn/kernel_reuse_gpu_test.cc
// Kernel reuse across batch sizes (core/cudnn/kernel_reuse.h), in lazy plan building:
// - a fused linear+bias+ReLU's first batch size gets its static plan;
// - a second size first runs on a dynamic-shape plan that compiles a kernel,
//   then on its own static plan, one swap per step boundary;
// - a third size's dynamic-shape plan binds that kernel instead of compiling;
// - another layer of the same pattern but other widths is a structure of its own;
// - every stage of every size matches the CPU;
// - eager plan building builds static plans only;
// - max pooling, whose runtime-compiled engine refuses dynamic shapes, marks
//   its structure once and keeps static plans.
//
// M rows (the batch), In, Out features; N batch, C channels, H, W.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cstdlib>
#include <string>
#include <tuple>

#include "core/cpu/pool.h"
#include "core/cudnn/plan_cache.h"
#include "core/cudnn/pool.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// Plan files would turn builds into restores; set before the store's first use.
struct PlanFilesOff {
  PlanFilesOff() { setenv("LOOM_CUDNN_PLAN_DIR", "off", 1); }
};
const PlanFilesOff plan_files_off;

struct Linear {
  Tensor w, b;  // (Out, In), (Out)
  Linear(int64_t in, int64_t out, Generator& gen)
      : w(mul(randn({out, in}, {}, &gen), 0.1)), b(randn({out}, {}, &gen)) {}

  // Checks y (M, Out) = relu(x w^T + b) for a new x (M, In) on the GPU against the CPU.
  void check(int64_t m, Generator& gen) const {
    Tensor x = randn({m, w.size(1)}, {}, &gen);
    Tensor gpu = linear_relu(x.to(testing::test_gpu()), w.to(testing::test_gpu()), b.to(testing::test_gpu())).cpu();
    CHECK(testing::normalized_error(gpu, linear_relu(x, w, b)) <= testing::kTf32Parity.fwd);
  }
};

// The cached plan of the op whose pattern starts with `op` and holds `dims`.
cudnn::PlanInfo entry_for(const std::string& op, const std::string& dims) {
  for (const cudnn::PlanInfo& e : cudnn::PlanCache::global().entries()) {
    if (e.graph.rfind(op, 0) == 0 && e.graph.find(dims) != std::string::npos) return e;
  }
  FAIL("no cached plan for " << op << " with " << dims);
  return {};
}

// An empty plan cache, TF32 and `mode` plan building, for one case.
struct FreshPlans {
  explicit FreshPlans(PlanBuildMode mode) : build(mode) { cudnn::PlanCache::global().clear(); }
  NumericsGuard tf32{{.precision = Precision::Tf32}};
  PlanBuildGuard build;
};

// Every background build finished; then one step boundary.
void step_boundary() {
  cudnn::PlanCache::global().wait_for_background_builds();
  cudnn::PlanCache::global().apply_pending();
}

}  // namespace

LOOM_GPU_TEST_CASE("lazy: a new batch size runs on another size's kernel, then on its own plan") {
  const FreshPlans lazy(PlanBuildMode::Lazy);
  auto& cache = cudnn::PlanCache::global();
  Generator gen(91);
  const Linear layer(72, 40, gen);

  layer.check(128, gen);  // on a stand-in or the tier below
  step_boundary();
  layer.check(128, gen);
  const cudnn::PlanInfo own = entry_for("matmul+add+relu", "(1, 128, 72)");
  REQUIRE(cudnn::compiles_at_run_time(own.notes));  // else there is no kernel to reuse
  CHECK_FALSE(own.notes.dynamic_shape);

  for (const auto& [rows, dims, reused] :
       {std::tuple{96, "(1, 96, 72)", false}, std::tuple{1000, "(1, 1000, 72)", true}}) {
    const int64_t m = rows;
    CAPTURE(m);
    layer.check(m, gen);
    step_boundary();  // the first stage
    layer.check(m, gen);
    const cudnn::PlanInfo first = entry_for("matmul+add+relu", dims);
    CHECK(first.notes.dynamic_shape);
    CHECK(first.notes.kernel_reused == reused);
    CHECK(first.pending);  // its static plan comes next
    cache.apply_pending();  // the second stage
    layer.check(m, gen);
    const cudnn::PlanInfo second = entry_for("matmul+add+relu", dims);
    CHECK_FALSE(second.notes.dynamic_shape);
    CHECK_FALSE(second.pending);
    CHECK(second.specialized);
  }
  const cudnn::PlanCacheStats s = cache.stats();
  CHECK(s.dynamic_plans == 2);
  CHECK(s.kernels_reused == 1);
  CHECK(cache.timeline_table().find("kernel reused from another size") != std::string::npos);

  const Linear narrower(48, 16, gen);  // the same pattern, another layer: no first stage
  narrower.check(128, gen);
  step_boundary();
  narrower.check(128, gen);
  CHECK_FALSE(entry_for("matmul+add+relu", "(1, 128, 48)").notes.dynamic_shape);
  CHECK(cache.stats().dynamic_plans == 2);
}

LOOM_GPU_TEST_CASE("eager plan building builds static plans only") {
  const FreshPlans eager(PlanBuildMode::Eager);
  auto& cache = cudnn::PlanCache::global();
  Generator gen(92);
  const Linear layer(56, 24, gen);
  for (int64_t m : {64, 48, 200}) {
    CAPTURE(m);
    layer.check(m, gen);
  }
  CHECK(cache.stats().dynamic_plans == 0);
  CHECK_FALSE(entry_for("matmul+add+relu", "(1, 200, 56)").notes.dynamic_shape);
}

LOOM_GPU_TEST_CASE("max pooling, whose engine refuses dynamic shapes, marks its structure once") {
  auto& cache = cudnn::PlanCache::global();
  cache.clear();
  PlanBuildGuard lazy(PlanBuildMode::Lazy);
  Generator gen(94);
  const kernel::Pool2dParams args{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .max = true};
  for (int64_t n : {16, 12, 40}) {
    CAPTURE(n);
    Tensor x = randn({n, 24, 10, 10}, {}, &gen);
    Tensor y_ref = empty({n, 24, 5, 5}), index_ref = empty({n, 24, 5, 5}, {.dtype = DType::Int64});
    cpu::max_pool2d_forward(y_ref.strided(), index_ref.strided(), x.strided(), args);
    Tensor gx = x.to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast);
    Tensor gy = empty({n, 24, 5, 5}, {.device = testing::test_gpu(), .memory_format = MemoryFormat::ChannelsLast});
    Tensor index = empty({n, 24, 5, 5},
                         {.dtype = DType::UInt8, .device = testing::test_gpu(), .memory_format = MemoryFormat::ChannelsLast});
    Strided index_view = index.strided();
    (void)cudnn::pool2d_forward(gy.strided(), &index_view, gx.strided(), args);  // false while pending
    step_boundary();
    step_boundary();
    REQUIRE(cudnn::pool2d_forward(gy.strided(), &index_view, gx.strided(), args));
    CHECK_CLOSE(gy.cpu(), y_ref, 0, 0);
    CHECK_FALSE(cache.entries().front().notes.dynamic_shape);
  }
  REQUIRE(cudnn::compiles_at_run_time(entry_for("maxpool_fwd", "(16, 24, 10, 10)").notes));
  const cudnn::PlanCacheStats s = cache.stats();
  CHECK(s.dynamic_refused == 1);
  CHECK(s.dynamic_plans == 0);
}

#endif  // LOOM_WITH_CUDA
