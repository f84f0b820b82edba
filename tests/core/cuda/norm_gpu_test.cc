// File: tests/core/cuda/norm_gpu_test.cc
// Batch norm on the GPU against the CPU reference kernels on the same
// inputs: running statistics, the forward and the eval backward, with and
// without weight and bias, over NCHW, channels-last, sliced, permuted, 2-D and
// 3-D inputs, strided per-channel vectors, large channels (sums split over
// blocks), empty batches; and the training kernels (batch statistics, running update,
// training backward) that run where cuDNN has no engine. Outputs start as NaN.
//
// N batch, C channels, H, W; M = N * H * W elements per channel.
// Tolerances: the forward and dx are a multiply-add per element in the dtype
// (float32 rtol 1e-5, atol 1e-6; float64 rtol 1e-12, atol 1e-13). dweight and
// dbias are sums over M: the GPU sums float32 in float, the CPU in double, so
// float32 uses rtol 1e-5 and atol 1e-7 * M (see reduce_gpu_test.cc), float64
// atol 1e-13 * max(1, M / 1000).
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "core/cpu/norm.h"
#include "core/cuda/norm.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr DType kDtypes[] = {DType::Float32, DType::Float64};
constexpr double kEps = 1e-5;

struct Operand {
  Tensor cpu, gpu;
};

Tensor on_gpu(const Tensor& t) { return t.to(testing::test_gpu()); }

// An input of logical sizes `sizes` taken from a base through `view`, alike on both devices.
struct Layout {
  const char* name;
  Shape base, sizes;
  std::function<Tensor(const Tensor&)> view;
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {"nchw", {2, 3, 5, 7}, {2, 3, 5, 7}, [](const Tensor& t) { return t; }},
      {"channels_last", {2, 3, 5, 7}, {2, 3, 5, 7},
       [](const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); }},
      {"sliced", {2, 3, 10, 9}, {2, 3, 5, 7},
       [](const Tensor& t) { return t.slice(2, 1, 10, 2).slice(3, 1, 8); }},
      {"permuted", {7, 5, 3, 2}, {2, 3, 5, 7},
       [](const Tensor& t) { return t.permute({3, 2, 1, 0}); }},
      {"2d", {6, 4}, {6, 4}, [](const Tensor& t) { return t; }},
      {"3d_transposed", {2, 9, 5}, {2, 5, 9}, [](const Tensor& t) { return t.transpose(1, 2); }},
  };
  return all;
}

Operand operand(const Layout& layout, const Tensor& base) {
  return {layout.view(base), layout.view(on_gpu(base))};
}

// A per-channel vector (C) with stride 2, positive where asked (var, invstd).
Operand per_channel(int64_t channels, DType dtype, bool positive, Generator& gen) {
  Tensor base = positive ? rand({2 * channels}, {.dtype = dtype}, &gen) + 0.5
                         : randn({2 * channels}, {.dtype = dtype}, &gen);
  return {base.slice(0, 0, 2 * channels, 2), on_gpu(base).slice(0, 0, 2 * channels, 2)};
}

// A GPU output with the layout's strides (a view of a NaN base) and a dense CPU one.
struct Output {
  Tensor gpu, cpu;
};

Output output(const Layout& layout, DType dtype) {
  return {layout.view(full(layout.base, kNaN, {.dtype = dtype, .device = testing::test_gpu()})),
          empty(layout.sizes, {.dtype = dtype})};
}

Output channel_output(int64_t channels, DType dtype) {
  return {full({channels}, kNaN, {.dtype = dtype, .device = testing::test_gpu()}),
          empty({channels}, {.dtype = dtype})};
}

std::optional<Strided> strided_if(bool present, const Tensor& t) {
  if (!present) return std::nullopt;
  return t.strided();
}

void check_elementwise(const Tensor& gpu, const Tensor& cpu_ref) {
  const bool single = cpu_ref.dtype() == DType::Float32;
  CHECK_CLOSE(gpu.cpu(), cpu_ref, single ? 1e-5 : 1e-12, single ? 1e-6 : 1e-13);
}

void check_channel_sums(const Tensor& gpu, const Tensor& cpu_ref, int64_t m) {
  const double per_element = cpu_ref.dtype() == DType::Float32 ? 1e-7 : 1e-16;
  const double floor = cpu_ref.dtype() == DType::Float32 ? 1e-5 : 1e-13;
  CHECK_CLOSE(gpu.cpu(), cpu_ref, cpu_ref.dtype() == DType::Float32 ? 1e-5 : 1e-12,
              std::max(floor, per_element * static_cast<double>(m)));
}

// Statistics of one test configuration on both devices.
struct Stats {
  Operand mean, invstd, weight, bias;
};

Stats random_stats(int64_t channels, DType dtype, Generator& gen) {
  return {per_channel(channels, dtype, false, gen), per_channel(channels, dtype, true, gen),
          per_channel(channels, dtype, false, gen), per_channel(channels, dtype, false, gen)};
}

// Runs the backward on both devices for one choice of wanted gradients.
void check_backward(const Operand& dy, const Operand& x, const Layout& layout, const Stats& s,
                    bool affine, bool want_dx, bool want_params, bool training = false) {
  const DType dtype = x.cpu.dtype();
  const int64_t channels = x.cpu.size(1);
  Output dx = output(layout, dtype);
  Output dweight = channel_output(channels, dtype), dbias = channel_output(channels, dtype);
  cuda::batch_norm_backward(strided_if(want_dx, dx.gpu), strided_if(want_params, dweight.gpu),
                            strided_if(want_params, dbias.gpu), dy.gpu.strided(), x.gpu.strided(),
                            s.mean.gpu.strided(), s.invstd.gpu.strided(),
                            strided_if(affine, s.weight.gpu), training);
  cpu::batch_norm_backward(strided_if(want_dx, dx.cpu), strided_if(want_params, dweight.cpu),
                           strided_if(want_params, dbias.cpu), dy.cpu.strided(), x.cpu.strided(),
                           s.mean.cpu.strided(), s.invstd.cpu.strided(),
                           strided_if(affine, s.weight.cpu), training);
  const int64_t m = x.cpu.numel() / std::max<int64_t>(channels, 1);
  if (want_dx) {
    check_elementwise(dx.gpu, dx.cpu);
  } else {  // not asked for: left untouched
    for (double v : testing::values(dx.gpu)) CHECK(std::isnan(v));
  }
  if (want_params) {
    check_channel_sums(dweight.gpu, dweight.cpu, m);
    check_channel_sums(dbias.gpu, dbias.cpu, m);
  } else {
    for (double v : testing::values(dweight.gpu)) CHECK(std::isnan(v));
    for (double v : testing::values(dbias.gpu)) CHECK(std::isnan(v));
  }
}

// check_backward over every layout and dtype, with and without weight, for
// each choice of wanted gradients.
void check_backward_everywhere(bool training, uint64_t seed) {
  Generator gen(seed);
  for (DType dtype : kDtypes) {
    for (const Layout& layout : layouts()) {
      Operand x = operand(layout, randn(layout.base, {.dtype = dtype}, &gen));
      // dy dense row-major whatever x's layout: mixed strides in one launch.
      Tensor dy_dense = randn(layout.sizes, {.dtype = dtype}, &gen);
      Operand dy = {dy_dense, on_gpu(dy_dense)};
      Stats s = random_stats(layout.sizes[1], dtype, gen);
      for (bool affine : {true, false}) {
        for (auto [want_dx, want_params] : {std::pair{true, true}, {true, false}, {false, true}}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(layout.name);
          CAPTURE(affine);
          CAPTURE(want_dx);
          CAPTURE(want_params);
          check_backward(dy, x, layout, s, affine, want_dx, want_params, training);
        }
      }
    }
  }
}

}  // namespace

LOOM_GPU_TEST_CASE("running stats: save_mean copies, save_invstd = 1 / sqrt(var + eps)") {
  Generator gen(401);
  for (DType dtype : kDtypes) {
    CAPTURE(dtype_name(dtype));
    Operand running_mean = per_channel(7, dtype, false, gen);
    Operand running_var = per_channel(7, dtype, true, gen);
    Output save_mean = channel_output(7, dtype), save_invstd = channel_output(7, dtype);
    cuda::batch_norm_running_stats(save_mean.gpu.strided(), save_invstd.gpu.strided(),
                                   running_mean.gpu.strided(), running_var.gpu.strided(), kEps);
    cpu::batch_norm_running_stats(save_mean.cpu.strided(), save_invstd.cpu.strided(),
                                  running_mean.cpu.strided(), running_var.cpu.strided(), kEps);
    // Both compute in double with IEEE sqrt and division: identical.
    CHECK_CLOSE(save_mean.gpu.cpu(), save_mean.cpu, 0, 0);
    CHECK_CLOSE(save_invstd.gpu.cpu(), save_invstd.cpu, 0, 0);
  }
}

LOOM_GPU_TEST_CASE("running stats by hand: var 3 and eps 1 give invstd 0.5") {
  Tensor mean = tensor({1.5, -2}, {2}).to(testing::test_gpu());
  Tensor var = tensor({3, 0}, {2}).to(testing::test_gpu());
  Tensor save_mean = full({2}, kNaN, {.device = testing::test_gpu()});
  Tensor save_invstd = full({2}, kNaN, {.device = testing::test_gpu()});
  cuda::batch_norm_running_stats(save_mean.strided(), save_invstd.strided(), mean.strided(),
                                 var.strided(), 1.0);
  CHECK(testing::values(save_mean) == std::vector<double>{1.5, -2});
  CHECK(testing::values(save_invstd) == std::vector<double>{0.5, 1});
}

LOOM_GPU_TEST_CASE("forward matches the CPU for every layout, dtype and affine choice") {
  Generator gen(402);
  for (DType dtype : kDtypes) {
    for (const Layout& layout : layouts()) {
      for (bool with_weight : {true, false}) {
        for (bool with_bias : {true, false}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(layout.name);
          CAPTURE(with_weight);
          CAPTURE(with_bias);
          Operand x = operand(layout, randn(layout.base, {.dtype = dtype}, &gen));
          Stats s = random_stats(layout.sizes[1], dtype, gen);
          Output y = output(layout, dtype);
          cuda::batch_norm_forward(y.gpu.strided(), x.gpu.strided(), s.mean.gpu.strided(),
                                   s.invstd.gpu.strided(), strided_if(with_weight, s.weight.gpu),
                                   strided_if(with_bias, s.bias.gpu));
          cpu::batch_norm_forward(y.cpu.strided(), x.cpu.strided(), s.mean.cpu.strided(),
                                  s.invstd.cpu.strided(), strided_if(with_weight, s.weight.cpu),
                                  strided_if(with_bias, s.bias.cpu));
          check_elementwise(y.gpu, y.cpu);
        }
      }
    }
  }
}

LOOM_GPU_TEST_CASE("forward by hand: (x - mean) * invstd * weight + bias per channel") {
  // x (1, 2, 2): channel 0 = {1, 3}, mean 2, invstd 0.5, weight 4, bias 1 -> {-1, 3};
  // channel 1 = {0, 10}, mean 5, invstd 0.2, weight -1, bias 0 -> {1, -1}.
  Tensor x = tensor({1, 3, 0, 10}, {1, 2, 2}).to(testing::test_gpu());
  Tensor mean = tensor({2, 5}, {2}).to(testing::test_gpu());
  Tensor invstd = tensor({0.5, 0.2}, {2}).to(testing::test_gpu());
  Tensor weight = tensor({4, -1}, {2}).to(testing::test_gpu());
  Tensor bias = tensor({1, 0}, {2}).to(testing::test_gpu());
  Tensor y = full({1, 2, 2}, kNaN, {.device = testing::test_gpu()});
  cuda::batch_norm_forward(y.strided(), x.strided(), mean.strided(), invstd.strided(),
                           weight.strided(), bias.strided());
  CHECK_CLOSE(y.cpu(), tensor({-1, 3, 1, -1}, {1, 2, 2}), 1e-6, 1e-6);
}

LOOM_GPU_TEST_CASE("eval backward matches the CPU for every layout and choice of gradients") {
  check_backward_everywhere(/*training=*/false, 403);
}

namespace {

// Large channels, whose sums split over many blocks (a partial last range in
// large_nchw: M = 10403 in three ranges), few channels over a large M, and an empty batch.
const std::vector<Layout>& large_layouts() {
  static const std::vector<Layout> all = {
      {"large_channels_last", {8, 3, 125, 100}, {8, 3, 125, 100},
       [](const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); }},
      {"large_nchw", {1, 5, 101, 103}, {1, 5, 101, 103}, [](const Tensor& t) { return t; }},
      {"16_channels_last", {16, 16, 32, 32}, {16, 16, 32, 32},
       [](const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); }},
      // two 32-channel column tiles, the second partial, over many ranges
      {"40_channels_last", {32, 40, 20, 20}, {32, 40, 20, 20},
       [](const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); }},
  };
  return all;
}

void check_backward_large(bool training, uint64_t seed) {
  Generator gen(seed);
  const Layout empty_batch = {"empty", {0, 3, 4, 4}, {0, 3, 4, 4}, [](const Tensor& t) { return t; }};
  std::vector<const Layout*> all = {&empty_batch};
  for (const Layout& layout : large_layouts()) all.push_back(&layout);
  for (DType dtype : kDtypes) {
    for (const Layout* layout : all) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(layout->name);
      Operand x = operand(*layout, randn(layout->base, {.dtype = dtype}, &gen));
      Operand dy = operand(*layout, randn(layout->base, {.dtype = dtype}, &gen));
      Stats s = random_stats(layout->sizes[1], dtype, gen);
      check_backward(dy, x, *layout, s, true, true, true, training);
    }
  }
}

}  // namespace

LOOM_GPU_TEST_CASE("eval backward over large channels and an empty batch") { check_backward_large(false, 404); }

LOOM_GPU_TEST_CASE("training backward over large channels and an empty batch") { check_backward_large(true, 406); }

// The training kernels are the tier below cuDNN's NORM graphs (core/cudnn/norm.h).
LOOM_GPU_TEST_CASE("training backward matches the CPU for every layout and choice of gradients") {
  check_backward_everywhere(/*training=*/true, 404);
}

LOOM_GPU_TEST_CASE("batch statistics and the running update match the CPU for every layout") {
  Generator gen(405);
  std::vector<Layout> all = layouts();
  all.insert(all.end(), large_layouts().begin(), large_layouts().end());
  for (DType dtype : kDtypes) {
    for (const Layout& layout : all) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(layout.name);
      // A large mean with a small spread: a one-pass variance would cancel.
      Tensor base = randn(layout.base, {.dtype = dtype}, &gen) * 0.01 + 1000.0;
      Operand x = operand(layout, base);
      const int64_t channels = layout.sizes[1];
      Operand running_mean = per_channel(channels, dtype, false, gen);
      Operand running_var = per_channel(channels, dtype, true, gen);
      Output mean = channel_output(channels, dtype), invstd = channel_output(channels, dtype);
      cuda::batch_norm_batch_stats(mean.gpu.strided(), invstd.gpu.strided(), x.gpu.strided(), kEps,
                                   kernel::RunningStats{running_mean.gpu.strided(),
                                                     running_var.gpu.strided(), 0.3});
      cpu::batch_norm_batch_stats(mean.cpu.strided(), invstd.cpu.strided(), x.cpu.strided(), kEps,
                                  kernel::RunningStats{running_mean.cpu.strided(),
                                                    running_var.cpu.strided(), 0.3});
      check_elementwise(mean.gpu, mean.cpu);
      check_elementwise(invstd.gpu, invstd.cpu);
      check_elementwise(running_mean.gpu, running_mean.cpu);
      check_elementwise(running_var.gpu, running_var.cpu);
    }
  }
}
#endif  // LOOM_WITH_CUDA
