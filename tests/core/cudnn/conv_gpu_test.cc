// File: tests/core/cudnn/conv_gpu_test.cc
// The cuDNN convolution graphs against the CPU reference kernels, over a grid
// of shapes and both layouts, under strict fp32 (tight tolerance) and tf32
// (loose tolerance); a repeated call builds no plan; every engine config cuDNN
// reports for a few configs is checked too.
//
// N batch, C in channels, H, W input, K out channels, R, S filter.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#ifdef LOOM_WITH_CUDA
#include <fmt/format.h>

#include "core/cpu/conv.h"
#include "core/cuda/graph.h"
#include "core/cudnn/context.h"
#include "core/cudnn/conv.h"
#include "core/cudnn/plan_cache.h"
#include "core/cudnn/tensor_spec.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

struct Case {
  int64_t n, c, h, w, k, r, s;
  kernel::ConvParams p;
};

const Case kCases[] = {
    {2, 3, 8, 8, 4, 3, 3, {1, 1, 1, 1, 1, 1, 1}},
    {2, 4, 9, 7, 6, 3, 3, {2, 2, 1, 1, 1, 1, 1}},
    {1, 4, 10, 10, 4, 3, 3, {1, 1, 2, 2, 2, 2, 1}},
    {2, 4, 8, 8, 8, 3, 3, {1, 1, 1, 1, 1, 1, 2}},
    {2, 8, 6, 6, 8, 3, 3, {1, 1, 1, 1, 1, 1, 8}},  // depthwise
    {3, 16, 7, 7, 32, 1, 1, {1, 1, 0, 0, 1, 1, 1}},
};

Shape out_shape(const Case& c) {
  return {c.n, c.k, cpu::conv_output_size(c.h, c.r, c.p.stride_h, c.p.pad_h, c.p.dilation_h),
          cpu::conv_output_size(c.w, c.s, c.p.stride_w, c.p.pad_w, c.p.dilation_w)};
}

struct Tensors {
  Tensor x, w, dy;
};

Tensors random_tensors(const Case& c, Generator& gen) {
  return {randn({c.n, c.c, c.h, c.w}, {}, &gen), randn({c.k, c.c / c.p.groups, c.r, c.s}, {}, &gen),
          randn(out_shape(c), {}, &gen)};
}

Tensor gpu(const Tensor& t, MemoryFormat format) { return t.to(testing::test_gpu()).contiguous(format); }

// Relative Frobenius error: ||a - b|| / ||b||.
double relative_error(const Tensor& a, const Tensor& b) {
  std::vector<double> x = testing::values(a), y = testing::values(b);
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

void check_case(const Case& c, MemoryFormat format, double tolerance, Generator& gen) {
  Tensors t = random_tensors(c, gen);
  Tensor y_ref = empty(out_shape(c)), dx_ref = empty(t.x.sizes()), dw_ref = empty(t.w.sizes());
  cpu::conv2d_forward(y_ref.strided(), t.x.strided(), t.w.strided(), nullptr, c.p);
  cpu::conv2d_dgrad(dx_ref.strided(), t.dy.strided(), t.w.strided(), c.p);
  cpu::conv2d_wgrad(dw_ref.strided(), t.dy.strided(), t.x.strided(), c.p);

  Tensor x = gpu(t.x, format), w = gpu(t.w, format), dy = gpu(t.dy, format);
  Tensor y = empty(out_shape(c), {.device = testing::test_gpu(), .memory_format = format});
  Tensor dx = empty(t.x.sizes(), {.device = testing::test_gpu(), .memory_format = format});
  Tensor dw = empty(t.w.sizes(), {.device = testing::test_gpu(), .memory_format = format});
  cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), c.p);
  cudnn::conv2d_dgrad(dx.strided(), dy.strided(), w.strided(), c.p);
  cudnn::conv2d_wgrad(dw.strided(), dy.strided(), x.strided(), c.p);
  CHECK(relative_error(y.cpu(), y_ref) < tolerance);
  CHECK(relative_error(dx.cpu(), dx_ref) < tolerance);
  CHECK(relative_error(dw.cpu(), dw_ref) < tolerance);
}

}  // namespace

LOOM_GPU_TEST_CASE("cuDNN conv fprop/dgrad/wgrad match the CPU reference in strict fp32") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  Generator gen(11);
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    for (const Case& c : kCases) {
      CAPTURE(memory_format_name(format));
      CAPTURE(c.c);
      CAPTURE(c.p.groups);
      check_case(c, format, 1e-5, gen);
    }
  }
  MESSAGE(cudnn::PlanCache::global().explain());
}

LOOM_GPU_TEST_CASE("cuDNN conv under tf32 is within tf32 tolerance") {
  NumericsGuard tf32({.precision = Precision::Tf32});
  Generator gen(12);
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    for (const Case& c : kCases) check_case(c, format, 5e-3, gen);
  }
}

LOOM_GPU_TEST_CASE("a second call with the same key builds no plan") {
  Generator gen(13);
  const Case& c = kCases[0];
  check_case(c, MemoryFormat::ChannelsLast, 5e-3, gen);
  cudnn::PlanCacheStats before = cudnn::PlanCache::global().stats();
  check_case(c, MemoryFormat::ChannelsLast, 5e-3, gen);
  cudnn::PlanCacheStats after = cudnn::PlanCache::global().stats();
  CHECK(after.plans_built == before.plans_built);
  CHECK(after.misses == before.misses);
  CHECK(after.hits == before.hits + 3);
}
LOOM_GPU_TEST_CASE("WhilePending::Skip runs nothing while the plan is pending, Legacy runs the legacy API") {
  setenv("LOOM_CUDNN_PLAN_DIR", "off", 1);  // builds, not restores
  NumericsGuard tf32({.precision = Precision::Tf32});
  cudnn::PlanCache& plans = cudnn::PlanCache::global();
  plans.clear();
  PlanBuildGuard lazy(PlanBuildMode::Lazy);
  Generator gen(15);
  const Case& c = kCases[4];  // depthwise
  const Tensors t = random_tensors(c, gen);
  Tensor y_ref = empty(out_shape(c));
  cpu::conv2d_forward(y_ref.strided(), t.x.strided(), t.w.strided(), nullptr, c.p);
  const Tensor x = gpu(t.x, MemoryFormat::ChannelsLast), w = gpu(t.w, MemoryFormat::ChannelsLast);
  Tensor y = full(out_shape(c), 7.0f, {.device = testing::test_gpu()}).contiguous(MemoryFormat::ChannelsLast);
  // A key first met inside a capture is left pending with no plan (a capture
  // cannot build one): the one state where Skip and Legacy differ.
  cuda::CudaGraph captured;
  bool ran = true;
  captured.capture([&] { ran = cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), c.p,
                                                     cudnn::WhilePending::Skip); });
  CHECK_FALSE(ran);
  captured.replay();
  CHECK(y.cpu().to_vector<float>() == std::vector<float>(static_cast<size_t>(y.numel()), 7.0f));
  // Pending outside the capture too, until a step boundary swaps the build in
  // (none comes here): Skip still runs nothing, Legacy runs the legacy API.
  CHECK_FALSE(cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), c.p, cudnn::WhilePending::Skip));
  CHECK(y.cpu().to_vector<float>() == std::vector<float>(static_cast<size_t>(y.numel()), 7.0f));
  CHECK(cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), c.p));
  CHECK(relative_error(y.cpu(), y_ref) < 5e-3);
  plans.wait_for_background_builds();
  (void)cudnn::apply_pending_plans();
  y.fill_(7.0);
  CHECK(cudnn::conv2d_forward(y.strided(), x.strided(), w.strided(), c.p, cudnn::WhilePending::Skip));
  CHECK(relative_error(y.cpu(), y_ref) < 5e-3);
}
#endif  // LOOM_WITH_CUDA

#ifdef LOOM_WITH_CUDA

LOOM_GPU_TEST_CASE("every engine config cuDNN offers for conv fprop/dgrad/wgrad is within tolerance") {
  Generator gen(14);
  for (const Case& c : {kCases[0], kCases[1], kCases[4]}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      Tensors t = random_tensors(c, gen);
      Tensor y_ref = empty(out_shape(c)), dx_ref = empty(t.x.sizes()), dw_ref = empty(t.w.sizes());
      cpu::conv2d_forward(y_ref.strided(), t.x.strided(), t.w.strided(), nullptr, c.p);
      cpu::conv2d_dgrad(dx_ref.strided(), t.dy.strided(), t.w.strided(), c.p);
      cpu::conv2d_wgrad(dw_ref.strided(), t.dy.strided(), t.x.strided(), c.p);
      Tensor x = gpu(t.x, format), w = gpu(t.w, format), dy = gpu(t.dy, format);
      Tensor y = empty(out_shape(c), {.device = testing::test_gpu(), .memory_format = format});
      Tensor dx = empty(t.x.sizes(), {.device = testing::test_gpu(), .memory_format = format});
      Tensor dw = empty(t.w.sizes(), {.device = testing::test_gpu(), .memory_format = format});
      struct Direction {
        cudnn::ConvDirection direction;
        Tensor a, b, out_or_in, reference, result;  // handles: copies share storage
      };
      // (x-slot, w-slot, y-slot) per direction, and which of them is the output.
      Direction directions[] = {
          {cudnn::ConvDirection::Forward, x, w, y, y_ref, y},
          {cudnn::ConvDirection::BackwardData, dx, w, dy, dx_ref, dx},
          {cudnn::ConvDirection::BackwardFilter, x, dw, dy, dw_ref, dw},
      };
      for (Direction& d : directions) {
        cudnn::Graph graph;
        graph.add_tensor(cudnn::spec_of(d.a.strided(), 1));
        graph.add_tensor(cudnn::spec_of(d.b.strided(), 2));
        graph.add_tensor(cudnn::spec_of(d.out_or_in.strided(), 3));
        graph.conv(d.direction, 1, 2, 3, c.p, CUDNN_DATA_FLOAT);
        auto plans = cudnn::all_working_plans(std::move(graph), cudnn::handle());
        CHECK(!plans.empty());
        for (const auto& plan : plans) {
          d.result.fill_(NAN);
          const cudnn::Workspace workspace(static_cast<size_t>(plan->workspace_bytes()));
          plan->execute(cudnn::handle(), {{1, d.a.raw_data()}, {2, d.b.raw_data()}, {3, d.out_or_in.raw_data()}},
                        workspace.get());
          bool tensor_core = false;
          for (const std::string& note : plan->notes().numerical) {
            tensor_core |= note == "TENSOR_CORE" || note == "DOWN_CONVERT_INPUTS";
          }
          double error = relative_error(d.result.cpu(), d.reference);
          CAPTURE(plan->notes().engine_id);
          CAPTURE(static_cast<int>(d.direction));
          CAPTURE(memory_format_name(format));
          CHECK(error < (tensor_core ? 5e-3 : 1e-5));
        }
      }
    }
  }
}
#endif  // LOOM_WITH_CUDA

#ifdef LOOM_WITH_CUDA
LOOM_GPU_TEST_CASE("deterministic mode picks no NONDETERMINISTIC engine, and autotune stays correct") {
  Generator gen(15);
  auto& cache = cudnn::PlanCache::global();
  cache.clear();
  {
    NumericsGuard deterministic({.precision = Precision::Tf32, .deterministic = true});
    for (const Case& c : kCases) check_case(c, MemoryFormat::ChannelsLast, 5e-3, gen);
  }
  for (const cudnn::PlanInfo& e : cache.entries()) {
    CAPTURE(e.graph);
    for (const std::string& note : e.notes.numerical) CHECK(note != "NONDETERMINISTIC");
  }
  cache.clear();
  NumericsGuard autotune({.precision = Precision::StrictFp32, .autotune = true});
  for (const Case& c : kCases) check_case(c, MemoryFormat::Contiguous, 1e-5, gen);
  CHECK(cache.stats().plans_built == 3 * static_cast<int64_t>(std::size(kCases)));
}

LOOM_GPU_TEST_CASE("the plan cache evicts the least recently used plan past its capacity") {
  Generator gen(16);
  auto& cache = cudnn::PlanCache::global();
  cache.clear();
  cache.set_capacity(4);
  for (const Case& c : kCases) check_case(c, MemoryFormat::Contiguous, 5e-3, gen);
  CHECK(cache.entries().size() == 4);
  CHECK(cache.stats().evictions == 3 * static_cast<int64_t>(std::size(kCases)) - 4);
  // The most recent entry (the last case's wgrad) is still cached: running that case again hits.
  cudnn::PlanCacheStats before = cache.stats();
  check_case(kCases[std::size(kCases) - 1], MemoryFormat::Contiguous, 5e-3, gen);
  CHECK(cache.stats().hits > before.hits);
  cache.set_capacity(1024);
}
#endif  // LOOM_WITH_CUDA
