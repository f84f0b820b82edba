// File: tests/core/cudnn/kernel_cache_gpu_test.cc
// Kernel reuse across batch sizes (core/cudnn/kernel_cache.h): runtime-compiled
// graphs (batch-norm training forward and ReLU, NHWC) built at the training
// batch (128) compile their kernel into their structure's kernel cache; the
// tail batch (96) and the evaluation batch (1000) bind that kernel instead of
// compiling, and still match the CPU reference. The plan files record where
// each plan's kernel came from, and keep the kernel caches: after the
// in-memory cache is cleared, a new batch size compiles nothing either. In
// lazy mode the tail batch's background build binds the kernel too.
//
// N batch, C channels, H, W.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/cpu/norm.h"
#include "core/cudnn/norm.h"
#include "core/cudnn/plan_cache.h"
#include "core/cudnn/plan_store.h"
#include "core/cudnn/pointwise.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/activation.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

constexpr int64_t kC = 8, kH = 8, kW = 8;  // C * H * W a multiple of 64: ReLU's packed view applies

Tensor on_gpu(const Tensor& t) { return t.to(Device::cuda()).contiguous(MemoryFormat::ChannelsLast); }

Tensor gpu_empty(const Shape& sizes, MemoryFormat format = MemoryFormat::Contiguous) {
  return full(sizes, NAN, {.device = Device::cuda(), .memory_format = format});
}

// Batch-norm training forward at batch n, on cuDNN (NHWC) and on the CPU.
void batch_norm_matches_cpu(int64_t n, Generator& gen) {
  const Shape s{n, kC, kH, kW};
  Tensor x = add(mul(randn(s, {}, &gen), 2.0), 0.5);
  Tensor w = add(rand({kC}, {}, &gen), 0.5), b = randn({kC}, {}, &gen);
  Tensor rm = zeros({kC}), rv = ones({kC});
  Tensor mean_ref = empty({kC}), invstd_ref = empty({kC}), y_ref = empty(s);
  Tensor rm_ref = rm.clone(), rv_ref = rv.clone();
  cpu::batch_norm_batch_stats(mean_ref.strided(), invstd_ref.strided(), x.strided(), 1e-5,
                              cpu::RunningStats{rm_ref.strided(), rv_ref.strided(), 0.1});
  cpu::batch_norm_forward(y_ref.strided(), x.strided(), mean_ref.strided(), invstd_ref.strided(),
                          w.strided(), b.strided());

  Tensor gx = on_gpu(x), gw = w.to(Device::cuda()), gb = b.to(Device::cuda());
  Tensor grm = rm.to(Device::cuda()), grv = rv.to(Device::cuda());
  Tensor gy = gpu_empty(s, MemoryFormat::ChannelsLast), gmean = gpu_empty({kC}), ginvstd = gpu_empty({kC});
  cudnn::batch_norm_forward_training({.y = gy.strided(), .save_mean = gmean.strided(),
                                      .save_invstd = ginvstd.strided(), .x = gx.strided(),
                                      .weight = gw.strided(), .bias = gb.strided(),
                                      .running_mean = grm.strided(), .running_var = grv.strided(),
                                      .eps = 1e-5, .momentum = 0.1});
  CHECK_CLOSE(gy.cpu(), y_ref, 1e-4, 1e-5);
  CHECK_CLOSE(grm.cpu(), rm_ref, 1e-4, 1e-5);
  CHECK_CLOSE(grv.cpu(), rv_ref, 1e-4, 1e-5);
}

// ReLU forward at batch n as a cuDNN pointwise graph (NHWC), against the CPU.
void relu_matches_cpu(int64_t n, Generator& gen) {
  Tensor x = randn({n, kC, kH, kW}, {}, &gen);
  Tensor gx = on_gpu(x), gy = gpu_empty(x.sizes(), MemoryFormat::ChannelsLast);
  REQUIRE(cudnn::pointwise_forward({CUDNN_POINTWISE_RELU_FWD, std::nullopt}, gy.strided(), gx.strided()));
  CHECK_CLOSE(gy.cpu(), relu(x), 0, 0);
}

// The cache's only entry made by the last run (entries() lists the most recent first).
cudnn::PlanInfo newest_entry() {
  std::vector<cudnn::PlanInfo> entries = cudnn::PlanCache::global().entries();
  REQUIRE_FALSE(entries.empty());
  return entries.front();
}

std::string kernel_of(const cudnn::PlanInfo& e) {
  return std::string(cudnn::kernel_source_name(e.notes.kernel));
}

// Runs `graph_at` at the training batch, then the tail and evaluation batches:
// the first compiles its kernel into the kernel cache, the others reuse it.
void tail_and_eval_batches_reuse(const std::function<void(int64_t, Generator&)>& graph_at) {
  auto& cache = cudnn::PlanCache::global();
  cache.clear();
  Generator gen(13);
  graph_at(128, gen);
  const cudnn::PlanCacheStats trained = cache.stats();
  INFO(cache.explain());
  REQUIRE(trained.plans_built == 1);
  // cuDNN's only engines for these graphs compile at run time: the kernel went into the cache.
  REQUIRE(kernel_of(newest_entry()) == "compiled");
  CHECK(trained.kernels_compiled >= 1);
  CHECK(trained.kernels_reused == 0);
  CHECK(trained.dynamic_shapes_refused == 0);
  for (int64_t n : {96, 1000}) {
    CAPTURE(n);
    graph_at(n, gen);
    INFO(cache.explain());
    CHECK(kernel_of(newest_entry()) == "reused");
  }
  const cudnn::PlanCacheStats after = cache.stats();
  INFO(cache.explain());
  CHECK(after.plans_built == 3);
  CHECK(after.kernels_reused == 2);
  CHECK(after.kernels_compiled == trained.kernels_compiled);
}

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// How many files in `folder` have a name starting with `prefix` and hold `fragment`.
int files_with(const std::string& folder, const std::string& prefix, const std::string& fragment) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0 &&
        read_all(entry.path()).find(fragment) != std::string::npos) {
      ++count;
    }
  }
  return count;
}

// This binary's plan files go to an empty folder of their own; the setting is
// read at the store's first use, so each test case calls this first.
const cudnn::PlanStore& empty_plan_files() {
  const std::string root =
      std::filesystem::temp_directory_path() / ("loom-kernel-cache-" + std::to_string(getpid()));
  setenv("LOOM_CUDNN_PLAN_DIR", root.c_str(), 1);
  const auto& store = cudnn::PlanStore::global();
  REQUIRE(store.enabled());
  std::filesystem::remove_all(store.directory());
  return store;
}

}  // namespace

LOOM_GPU_TEST_CASE("the tail and evaluation batches reuse the training batch's compiled kernels") {
  const cudnn::PlanStore& store = empty_plan_files();
  auto& cache = cudnn::PlanCache::global();

  tail_and_eval_batches_reuse(batch_norm_matches_cpu);
  tail_and_eval_batches_reuse(relu_matches_cpu);

  // The plan files say where each kernel came from; the kernel caches have files of their own.
  CHECK(files_with(store.directory(), "plan-", "\nkernel compiled\n") == 2);
  CHECK(files_with(store.directory(), "plan-", "\nkernel reused\n") == 4);
  CHECK(files_with(store.directory(), "kernels-", "loom-cudnn-kernels 1") == 2);

  // A later process (the in-memory cache cleared): the training batch's plan
  // is restored with its record, and a batch size never built before binds
  // the kernel from the kernel cache's file instead of compiling it.
  cache.clear();
  Generator gen(17);
  batch_norm_matches_cpu(128, gen);
  INFO(cache.explain());
  CHECK(cache.stats().plans_restored == 1);
  CHECK(kernel_of(newest_entry()) == "compiled");
  batch_norm_matches_cpu(64, gen);
  const cudnn::PlanCacheStats warm = cache.stats();
  INFO(cache.explain());
  CHECK(warm.plans_built == 1);
  CHECK(kernel_of(newest_entry()) == "reused");
  CHECK(warm.kernels_compiled == 0);
  CHECK(warm.kernels_reused == 1);
  std::filesystem::remove_all(store.directory());
}

LOOM_GPU_TEST_CASE("lazily, the tail batch's background build reuses the training batch's kernel") {
  const cudnn::PlanStore& store = empty_plan_files();
  auto& cache = cudnn::PlanCache::global();
  cache.clear();
  PlanBuildGuard lazy(PlanBuildMode::Lazy);
  Generator gen(23);
  // Batch norm has no precompiled engine: the first run of each batch size
  // runs the tier below while its plan is built in the background.
  batch_norm_matches_cpu(128, gen);
  cache.wait_for_background_builds();
  cache.apply_pending();
  const cudnn::PlanCacheStats trained = cache.stats();
  INFO(cache.explain());
  REQUIRE(trained.kernels_compiled >= 1);
  batch_norm_matches_cpu(96, gen);
  cache.wait_for_background_builds();
  CHECK(cache.apply_pending() == 1);
  batch_norm_matches_cpu(96, gen);  // on the plan swapped in
  const cudnn::PlanCacheStats tail = cache.stats();
  CHECK(kernel_of(newest_entry()) == "reused");
  CHECK(tail.kernels_reused == 1);
  CHECK(tail.kernels_compiled == trained.kernels_compiled);
  std::filesystem::remove_all(store.directory());
}
#endif
