// File: tests/core/cudnn/kernel_reuse_gpu_test.cc
// Kernel reuse across sizes (core/cudnn/kernel_reuse.h):
// - a fused linear+bias+ReLU keeps a static plan for the first batch size, and
//   so does another layer of the same pattern but other widths;
// - the second size compiles a dynamic-shape kernel, and the third binds that
//   kernel instead of compiling one;
// - every size matches the CPU, in eager and in lazy plan building;
// - a dynamic-shape plan goes to its plan file and is restored from it;
// - pooling, whose runtime-compiled engine refuses dynamic shapes, keeps
//   static plans for every size and still matches the CPU.
//
// M rows (the batch), In, Out features; N batch, C channels, H, W.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/cpu/pool.h"
#include "core/cudnn/plan_cache.h"
#include "core/cudnn/plan_store.h"
#include "core/cudnn/pool.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// The plan files go to a folder of this process; set before the store's first use.
struct PlanFolder {
  std::string root = std::filesystem::temp_directory_path() / ("loom-kernel-reuse-" + std::to_string(getpid()));
  PlanFolder() {
    std::filesystem::remove_all(root);
    setenv("LOOM_CUDNN_PLAN_DIR", root.c_str(), 1);
  }
  ~PlanFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(root, ignored);
  }
};
const PlanFolder plan_folder;

struct Linear {
  Tensor w, b;  // (Out, In), (Out)
  Linear(int64_t in, int64_t out, Generator& gen)
      : w(mul(randn({out, in}, {}, &gen), 0.1)), b(randn({out}, {}, &gen)) {}

  // y (M, Out) on the GPU, and the CPU's y for the same x (M, In).
  std::pair<Tensor, Tensor> run(int64_t m, Generator& gen) const {
    Tensor x = randn({m, w.size(1)}, {}, &gen);
    Tensor gpu = linear_relu(x.to(Device::cuda()), w.to(Device::cuda()), b.to(Device::cuda())).cpu();
    return {gpu, linear_relu(x, w, b)};
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

// TF32 tolerance, as every parity test of a tf32 matmul (tests/testing.h).
void check_tf32(const Tensor& gpu, const Tensor& cpu) {
  CHECK(testing::normalized_error(gpu, cpu) <= testing::kTf32Parity.fwd);
}

void settle() {
  cudnn::PlanCache& cache = cudnn::PlanCache::global();
  cache.wait_for_background_builds();
  cache.apply_pending();
}

}  // namespace

LOOM_GPU_TEST_CASE("linear+bias+ReLU: the first size keeps a static plan, later sizes share one kernel") {
  auto& cache = cudnn::PlanCache::global();
  cache.clear();
  NumericsGuard tf32({.precision = Precision::Tf32});
  PlanBuildGuard eager(PlanBuildMode::Eager);
  Generator gen(91);
  const Linear layer(72, 40, gen);

  for (int64_t m : {128, 96, 1000}) {
    CAPTURE(m);
    auto [gpu, cpu] = layer.run(m, gen);
    check_tf32(gpu, cpu);
  }
  const cudnn::PlanInfo first = entry_for("matmul+add+relu", "(1, 128, 72)");
  REQUIRE(cudnn::compiles_at_run_time(first.notes));  // else there is no kernel to reuse
  CHECK_FALSE(first.notes.dynamic_shape);
  const cudnn::PlanInfo tail = entry_for("matmul+add+relu", "(1, 96, 72)");
  CHECK(tail.notes.dynamic_shape);
  CHECK_FALSE(tail.notes.kernel_reused);
  const cudnn::PlanInfo eval = entry_for("matmul+add+relu", "(1, 1000, 72)");
  CHECK(eval.notes.dynamic_shape);
  CHECK(eval.notes.kernel_reused);
  const cudnn::PlanCacheStats s = cache.stats();
  CHECK(s.dynamic_plans == 2);
  CHECK(s.kernels_reused == 1);
  CHECK(cache.timeline_table().find("kernel reused from another size") != std::string::npos);
  CHECK(cache.explain().find("DYNAMIC_SHAPE(kernel reused)") != std::string::npos);

  auto [again, cpu_again] = layer.run(128, gen);  // the first size still runs its static plan
  check_tf32(again, cpu_again);
  CHECK_FALSE(entry_for("matmul+add+relu", "(1, 128, 72)").notes.dynamic_shape);

  const Linear narrower(48, 16, gen);  // the same pattern, another layer: a static plan of its own
  auto [other, cpu_other] = narrower.run(128, gen);
  check_tf32(other, cpu_other);
  CHECK_FALSE(entry_for("matmul+add+relu", "(1, 128, 48)").notes.dynamic_shape);
  CHECK(cache.stats().dynamic_plans == 2);
}

LOOM_GPU_TEST_CASE("lazy plan building reuses the kernel in its background builds") {
  auto& cache = cudnn::PlanCache::global();
  cache.clear();
  NumericsGuard tf32({.precision = Precision::Tf32});
  PlanBuildGuard lazy(PlanBuildMode::Lazy);
  Generator gen(92);
  const Linear layer(56, 24, gen);

  for (int64_t m : {64, 48, 200}) {
    CAPTURE(m);
    auto [first_run, cpu] = layer.run(m, gen);  // on a stand-in or the tier below
    check_tf32(first_run, cpu);
    settle();
    auto [swapped, cpu_swapped] = layer.run(m, gen);
    check_tf32(swapped, cpu_swapped);
  }
  INFO("plan timeline:\n" << cache.timeline_table());
  REQUIRE(cudnn::compiles_at_run_time(entry_for("matmul+add+relu", "(1, 64, 56)").notes));
  CHECK_FALSE(entry_for("matmul+add+relu", "(1, 64, 56)").notes.dynamic_shape);
  const cudnn::PlanInfo eval = entry_for("matmul+add+relu", "(1, 200, 56)");
  CHECK(eval.specialized);
  CHECK(eval.notes.kernel_reused);
  CHECK(cache.stats().dynamic_plans == 2);
  CHECK(cache.stats().kernels_reused == 1);
}

LOOM_GPU_TEST_CASE("a dynamic-shape plan is saved to its plan file and restored from it") {
  auto& cache = cudnn::PlanCache::global();
  const auto& store = cudnn::PlanStore::global();
  REQUIRE(store.enabled());
  cache.clear();
  std::filesystem::remove_all(store.directory());  // the other cases' plans
  NumericsGuard tf32({.precision = Precision::Tf32});
  PlanBuildGuard eager(PlanBuildMode::Eager);
  Generator gen(93);
  const Linear layer(88, 32, gen);
  (void)layer.run(64, gen);
  Tensor x = randn({40, 88}, {}, &gen).to(Device::cuda());
  Tensor w = layer.w.to(Device::cuda()), b = layer.b.to(Device::cuda());
  Tensor built = linear_relu(x, w, b).cpu();
  REQUIRE(entry_for("matmul+add+relu", "(1, 40, 88)").notes.dynamic_shape);

  int dynamic_files = 0;
  for (const auto& file : std::filesystem::directory_iterator(store.directory())) {
    std::stringstream text;
    text << std::ifstream(file.path()).rdbuf();
    if (text.str().find("\nshape dynamic compiled\n") != std::string::npos) ++dynamic_files;
  }
  CHECK(dynamic_files == 1);

  cache.clear();
  Tensor restored = linear_relu(x, w, b).cpu();
  CHECK(cache.stats().plans_restored == 1);
  const cudnn::PlanInfo e = entry_for("matmul+add+relu", "(1, 40, 88)");
  CHECK(e.restored);
  CHECK(e.notes.dynamic_shape);
  CHECK_CLOSE(restored, built, 0, 0);
}

LOOM_GPU_TEST_CASE("max pooling, whose engine refuses dynamic shapes, keeps static plans for every size") {
  auto& cache = cudnn::PlanCache::global();
  cache.clear();
  PlanBuildGuard eager(PlanBuildMode::Eager);
  Generator gen(94);
  const cudnn::PoolArgs args{.params = {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2}};
  for (int64_t n : {16, 12, 40}) {
    CAPTURE(n);
    Tensor x = randn({n, 24, 10, 10}, {}, &gen);
    Tensor y_ref = empty({n, 24, 5, 5}), index_ref = empty({n, 24, 5, 5}, {.dtype = DType::Int64});
    cpu::max_pool2d_forward(y_ref.strided(), index_ref.strided(), x.strided(), args.params);
    Tensor gx = x.to(Device::cuda()).contiguous(MemoryFormat::ChannelsLast);
    Tensor gy = empty({n, 24, 5, 5}, {.device = Device::cuda()}).contiguous(MemoryFormat::ChannelsLast);
    Tensor index = empty({n, 24, 5, 5}, {.dtype = DType::UInt8, .device = Device::cuda()})
                       .contiguous(MemoryFormat::ChannelsLast);
    Strided index_view = index.strided();
    REQUIRE(cudnn::pool2d_forward(gy.strided(), &index_view, gx.strided(), args));
    CHECK_CLOSE(gy.cpu(), y_ref, 0, 0);
  }
  const cudnn::PlanInfo first = entry_for("maxpool_fwd", "(16, 24, 10, 10)");
  REQUIRE(cudnn::compiles_at_run_time(first.notes));  // else no dynamic shape is ever tried
  const cudnn::PlanCacheStats s = cache.stats();
  // Either cuDNN offered a dynamic-shape engine, or the structure is marked once and not asked again.
  CHECK(s.dynamic_plans + s.dynamic_refused >= 1);
  CHECK(s.dynamic_refused <= 1);
  if (s.dynamic_refused == 1) {
    CHECK(s.dynamic_plans == 0);
    CHECK_FALSE(entry_for("maxpool_fwd", "(12, 24, 10, 10)").notes.dynamic_shape);
    CHECK_FALSE(entry_for("maxpool_fwd", "(40, 24, 10, 10)").notes.dynamic_shape);
  }
}

#endif  // LOOM_WITH_CUDA
