// File: tests/core/cudnn/kernel_reuse_gpu_test.cc
// The failure class the first kernel-cache version hit on the H100
// (cudaErrorMisalignedAddress): one graph structure run at several batch
// sizes, with data pointers at every alignment an offset view gives (16, 4
// and 8 bytes), for ReLU (a pointwise graph, which may reuse kernels) and
// pooling (which never uses a kernel cache), in both layouts. Every result
// matches the CPU reference, and a kernel is reused only by a graph whose
// pointers are fully aligned. Run it with the kernel cache on (the default)
// and with LOOM_CUDNN_KERNEL_CACHE=off: both must pass.
//
// N batch, C channels, H, W input, P, Q output.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/cpu/pool.h"
#include "core/cudnn/plan_cache.h"
#include "core/cudnn/pointwise.h"
#include "core/cudnn/pool.h"
#include "core/generator.h"
#include "core/ops/activation.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

constexpr int64_t kC = 8, kH = 8, kW = 8;
const cpu::Pool2dParams kPool{2, 2, 2, 2, 0, 0};
const int64_t kBatches[] = {128, 96, 1000};
// Elements of float32 before the first one: pointers aligned to 16, 4, 8 and 4 bytes.
const int64_t kOffsets[] = {0, 1, 2, 3};

// A GPU view of `sizes` in `format` whose first element sits `offset` floats
// into its storage, holding `values` (NaN when undefined).
Tensor offset_view(const Shape& sizes, MemoryFormat format, int64_t offset, const Tensor& values = Tensor()) {
  const int64_t n = sizes[0], c = sizes[1], h = sizes[2], w = sizes[3];
  Tensor flat = full({offset + n * c * h * w}, NAN, {.device = Device::cuda()});
  Tensor body = flat.narrow(0, offset, n * c * h * w);
  Tensor view = format == MemoryFormat::ChannelsLast ? body.view({n, h, w, c}).permute({0, 3, 1, 2})
                                                     : body.view({n, c, h, w});
  if (values.defined()) view.copy_(values);
  return view;
}

Shape pooled(const Shape& x) { return {x[0], x[1], x[2] / 2, x[3] / 2}; }

void relu_matches_cpu(int64_t n, MemoryFormat format, int64_t offset, Generator& gen) {
  Tensor x = randn({n, kC, kH, kW}, {}, &gen);
  Tensor gx = offset_view(x.sizes(), format, offset, x), gy = offset_view(x.sizes(), format, offset);
  REQUIRE(cudnn::pointwise_forward({CUDNN_POINTWISE_RELU_FWD, std::nullopt}, gy.strided(), gx.strided()));
  CHECK_CLOSE(gy.cpu(), relu(x), 0, 0);
}

void average_pool_matches_cpu(int64_t n, MemoryFormat format, int64_t offset, Generator& gen) {
  const Shape xs{n, kC, kH, kW};
  Tensor x = randn(xs, {}, &gen), dy = randn(pooled(xs), {}, &gen);
  Tensor y_ref = empty(pooled(xs)), dx_ref = empty(xs);
  cpu::avg_pool2d_forward(y_ref.strided(), x.strided(), kPool, /*count_include_pad=*/true);
  cpu::avg_pool2d_backward(dx_ref.strided(), dy.strided(), kPool, /*count_include_pad=*/true);
  Tensor gx = offset_view(xs, format, offset, x), gy = offset_view(pooled(xs), format, offset);
  Tensor gdy = offset_view(pooled(xs), format, offset, dy), gdx = offset_view(xs, format, offset);
  const cudnn::PoolArgs args{.params = kPool, .max = false, .count_include_pad = true};
  REQUIRE(cudnn::pool2d_forward(gy.strided(), nullptr, gx.strided(), args));
  CHECK_CLOSE(gy.cpu(), y_ref, 1e-5, 1e-6);
  Strided x_view = gx.strided(), y_view = gy.strided();
  cudnn::PoolBackwardInputs saved;
  if (format == MemoryFormat::Contiguous) {  // the NCHW contract reads x and y
    saved.x = &x_view;
    saved.y = &y_view;
  }
  REQUIRE(cudnn::pool2d_backward(gdx.strided(), gdy.strided(), saved, args));
  CHECK_CLOSE(gdx.cpu(), dx_ref, 1e-5, 1e-6);
}

void max_pool_matches_cpu(int64_t n, MemoryFormat format, int64_t offset, Generator& gen) {
  const Shape xs{n, kC, kH, kW};
  Tensor x = randn(xs, {}, &gen);
  Tensor y_ref = empty(pooled(xs)), idx = empty(pooled(xs), {.dtype = DType::Int64});
  cpu::max_pool2d_forward(y_ref.strided(), idx.strided(), x.strided(), kPool);
  Tensor gx = offset_view(xs, format, offset, x), gy = offset_view(pooled(xs), format, offset);
  const cudnn::PoolArgs args{.params = kPool, .max = true, .count_include_pad = true};
  const bool indexed = cudnn::pool_uses_index(gx.strided());
  Tensor index = indexed ? empty(pooled(xs), {.dtype = DType::UInt8, .device = Device::cuda(),
                                              .memory_format = format})
                         : Tensor();
  Strided index_view = indexed ? index.strided() : Strided{};
  REQUIRE(cudnn::pool2d_forward(gy.strided(), indexed ? &index_view : nullptr, gx.strided(), args));
  CHECK_CLOSE(gy.cpu(), y_ref, 0, 0);
}

using Check = void (*)(int64_t, MemoryFormat, int64_t, Generator&);

// Runs `check` at every batch size and pointer offset in `format`.
void sweep(Check check, MemoryFormat format, Generator& gen) {
  for (int64_t n : kBatches) {
    for (int64_t offset : kOffsets) {
      CAPTURE(n);
      CAPTURE(offset);
      check(n, format, offset, gen);
    }
  }
}

bool kernel_cache_on() {
  const char* setting = std::getenv("LOOM_CUDNN_KERNEL_CACHE");
  return setting == nullptr || std::string(setting) != "off";
}

}  // namespace

LOOM_GPU_TEST_CASE("one structure at several batch sizes and pointer alignments matches the CPU") {
  setenv("LOOM_CUDNN_PLAN_DIR", "off", 1);  // built here, never restored from an earlier run
  auto& cache = cudnn::PlanCache::global();
  Generator gen(41);
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    CAPTURE(memory_format_name(format));
    cache.clear();
    sweep(average_pool_matches_cpu, format, gen);
    sweep(max_pool_matches_cpu, format, gen);
    const cudnn::PlanCacheStats pools = cache.stats();
    INFO(cache.explain());
    CHECK(pools.kernels_reused == 0);  // pooling keeps its static builds
    CHECK(pools.kernels_compiled == 0);
    for (const cudnn::PlanInfo& e : cache.entries()) {
      CHECK(e.notes.kernel == cudnn::KernelSource::Static);
    }

    cache.clear();
    sweep(relu_matches_cpu, format, gen);
    const cudnn::PlanCacheStats relus = cache.stats();
    INFO(cache.explain());
    if (kernel_cache_on() && relus.kernels_compiled > 0) {
      // The 16-byte-aligned graphs share one structure: the first batch size
      // compiles, the other two reuse. The 4- and 8-byte ones build statically.
      CHECK(relus.kernels_reused >= 2);
    } else {
      CHECK(relus.kernels_reused == 0);
    }
  }
}
#endif  // LOOM_WITH_CUDA
