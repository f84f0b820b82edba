// File: tests/core/cuda/pool_gpu_test.cc
// The GPU pooling kernels against the CPU reference kernels on the same inputs:
// max pooling (values and int64 indices, both backwards) and average pooling
// (forward and backward, with and without count_include_pad) over the config
// grid of tests/core/ops/pooling_test.cc (kernel 2/3, stride 1/2, padding 0/1,
// ceil_mode through the output size) in NCHW, channels-last, sliced and
// transposed layouts, float32 and float64; then ties, NaN and -inf windows,
// non-square windows and odd sizes, an empty batch, and more elements than one
// grid covers. GPU outputs start as NaN (indices as -1), so unwritten elements show.
//
// N batch, C channels, H, W input plane, P, Q output plane.
// Tolerances: the kernels do the CPU's arithmetic in the CPU's order (window sums
// in double, the backward gathers in row-major window order), so results must be
// equal: rtol = atol = 0. Only the atomic max backward (no params) adds an
// element's contributions in any order: float32 rtol 1e-5, atol 1e-5 (sums of
// a few randn values, one ulp of ~10 is 1e-6), float64 rtol 1e-12, atol 1e-12.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/cpu/pool.h"
#include "core/cuda/pool.h"
#include "core/cuda/stream.h"
#include "core/generator.h"
#include "core/ops/pooling.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
// No window's max sits at a negative index, so an index left unwritten shows.
constexpr double kPoisonIndex = -1;
constexpr DType kDtypes[] = {DType::Float32, DType::Float64};

// ---- layouts and operands ----------------------------------------------------------

// A copy of a dense (N, C, rows, cols) tensor, on its device, with a layout's strides.
struct Layout {
  const char* name;
  std::function<Tensor(const Tensor&)> place;
};

// Every other row and column of a larger tensor, from channel 1 on: no stride is dense.
Tensor sliced(const Tensor& dense) {
  const int64_t N = dense.size(0), C = dense.size(1), H = dense.size(2), W = dense.size(3);
  Tensor base = zeros({N, C + 1, 2 * H, 2 * W}, {.dtype = dense.dtype(), .device = dense.device()});
  Tensor view = base.slice(1, 1, C + 1).slice(2, 0, 2 * H, 2).slice(3, 1, 2 * W, 2);
  view.copy_(dense);
  return view;
}

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {"nchw", [](const Tensor& t) { return t; }},
      {"channels_last", [](const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); }},
      {"sliced", sliced},
      {"transposed", [](const Tensor& t) { return t.transpose(2, 3).contiguous().transpose(2, 3); }},
  };
  return all;
}

const Layout& layout_named(std::string_view name) {
  for (const Layout& layout : layouts()) {
    if (layout.name == name) return layout;
  }
  FAIL("no layout named " << name);
  return layouts()[0];
}

// The same values on both devices.
struct Operand {
  Tensor cpu, gpu;
};

Operand operand(const Layout& layout, const Tensor& dense) {
  return {layout.place(dense), layout.place(dense.to(testing::test_gpu()))};
}

// A dense CPU output for the reference and a poisoned GPU one in the layout.
Operand output(const Layout& layout, const Shape& sizes, DType dtype, double poison) {
  return {empty(sizes, {.dtype = dtype}),
          layout.place(full(sizes, poison, {.dtype = dtype, .device = testing::test_gpu()}))};
}

// ---- configurations ------------------------------------------------------------------

kernel::Pool2dParams params_of(const Pool2dOptions& o) {
  const auto stride = o.stride.value_or(o.kernel_size);
  return {o.kernel_size[0], o.kernel_size[1], stride[0], stride[1], o.padding[0], o.padding[1],
          /*max=*/true, o.count_include_pad};
}

// (N, C, P, Q) as the op sizes it: ceil_mode acts only here, the kernels take it as given.
Shape output_sizes(const Shape& x_sizes, const Pool2dOptions& o) {
  const Shape plane = max_pool2d(zeros({1, 1, x_sizes[2], x_sizes[3]}), o).sizes();
  return {x_sizes[0], x_sizes[1], plane[2], plane[3]};
}

// The geometry grid of pooling_test.cc; count_include_pad is looped where it matters.
std::vector<Pool2dOptions> option_grid() {
  std::vector<Pool2dOptions> grid;
  for (int64_t k : {2, 3}) {
    for (int64_t s : {1, 2}) {
      for (int64_t p : {0, 1}) {
        for (bool ceil_mode : {false, true}) {
          grid.push_back(
              {.kernel_size = {k, k}, .stride = {{s, s}}, .padding = {p, p}, .ceil_mode = ceil_mode});
        }
      }
    }
  }
  return grid;
}

std::string options_str(const Pool2dOptions& o) {
  const kernel::Pool2dParams p = params_of(o);
  return "kernel (" + std::to_string(p.kernel_h) + ", " + std::to_string(p.kernel_w) +
         ") stride (" + std::to_string(p.stride_h) + ", " + std::to_string(p.stride_w) +
         ") pad (" + std::to_string(p.pad_h) + ", " + std::to_string(p.pad_w) + ") ceil " +
         std::to_string(o.ceil_mode);
}

// ---- comparisons -------------------------------------------------------------------

// Equal element by element, a NaN equal to a NaN and -inf to -inf (inputs may hold
// both); reports the first mismatches.
void check_identical(const Tensor& gpu, const Tensor& cpu_ref) {
  REQUIRE(gpu.sizes() == cpu_ref.sizes());
  const std::vector<double> a = testing::values(gpu), e = testing::values(cpu_ref);
  int64_t differ = 0;
  std::string first;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == e[i] || (std::isnan(a[i]) && std::isnan(e[i]))) continue;
    if (++differ <= 5) {
      first += " [" + std::to_string(i) + "] gpu " + std::to_string(a[i]) + " cpu " +
               std::to_string(e[i]);
    }
  }
  CHECK_MESSAGE(differ == 0, differ << " of " << a.size() << " differ:" << first);
}

void check_same_indices(const Tensor& gpu, const Tensor& cpu_ref) {
  REQUIRE(gpu.sizes() == cpu_ref.sizes());
  const std::vector<int64_t> a = gpu.to_vector<int64_t>(), e = cpu_ref.to_vector<int64_t>();
  int64_t differ = 0;
  std::string first;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != e[i] && ++differ <= 5) {
      first += " [" + std::to_string(i) + "] gpu " + std::to_string(a[i]) + " cpu " +
               std::to_string(e[i]);
    }
  }
  CHECK_MESSAGE(differ == 0, differ << " of " << a.size() << " indices differ:" << first);
}

void check_atomic_sum(const Tensor& gpu, const Tensor& cpu_ref) {
  const double tol = cpu_ref.dtype() == DType::Float32 ? 1e-5 : 1e-12;
  CHECK_CLOSE(gpu.cpu(), cpu_ref, tol, tol);
}

// ---- one configuration -------------------------------------------------------------

// The forward, then both backwards from the CPU's indices (so that they are
// checked apart from the forward), on one layout.
void check_max_pool(const Layout& layout, const Tensor& x_dense, const Pool2dOptions& options,
                    Generator& gen) {
  CAPTURE(layout.name);
  INFO(options_str(options), " dtype ", dtype_name(x_dense.dtype()), " x ",
       shape_str(x_dense.sizes()));
  const DType dtype = x_dense.dtype();
  const kernel::Pool2dParams params = params_of(options);
  const Shape out_sizes = output_sizes(x_dense.sizes(), options);
  const Operand x = operand(layout, x_dense);
  const Operand y = output(layout, out_sizes, dtype, kNaN);
  const Operand indices = output(layout, out_sizes, DType::Int64, kPoisonIndex);
  cpu::max_pool2d_forward(y.cpu.strided(), indices.cpu.strided(), x.cpu.strided(), params);
  cuda::max_pool2d_forward(y.gpu.strided(), indices.gpu.strided(), x.gpu.strided(), params);
  check_identical(y.gpu, y.cpu);
  check_same_indices(indices.gpu, indices.cpu);

  const Operand dy = operand(layout, randn(out_sizes, {.dtype = dtype}, &gen));
  const Operand saved = operand(layout, indices.cpu);
  const Operand dx = output(layout, x_dense.sizes(), dtype, kNaN);
  cpu::max_pool2d_backward(dx.cpu.strided(), dy.cpu.strided(), saved.cpu.strided());
  cuda::max_pool2d_backward(dx.gpu.strided(), dy.gpu.strided(), saved.gpu.strided(), params);
  CHECK_CLOSE(dx.gpu.cpu(), dx.cpu, 0, 0);
  const Operand scattered = output(layout, x_dense.sizes(), dtype, kNaN);
  cuda::max_pool2d_backward(scattered.gpu.strided(), dy.gpu.strided(), saved.gpu.strided());
  check_atomic_sum(scattered.gpu, dx.cpu);
}

// The forward and backward with and without count_include_pad, on one layout.
void check_avg_pool(const Layout& layout, const Tensor& x_dense, const Pool2dOptions& options,
                    Generator& gen) {
  const DType dtype = x_dense.dtype();
  kernel::Pool2dParams params = params_of(options);
  params.max = false;
  const Shape out_sizes = output_sizes(x_dense.sizes(), options);
  const Operand x = operand(layout, x_dense);
  const Operand dy = operand(layout, randn(out_sizes, {.dtype = dtype}, &gen));
  for (bool count_include_pad : {true, false}) {
    params.count_include_pad = count_include_pad;
    CAPTURE(layout.name);
    CAPTURE(count_include_pad);
    INFO(options_str(options), " dtype ", dtype_name(dtype), " x ", shape_str(x_dense.sizes()));
    const Operand y = output(layout, out_sizes, dtype, kNaN);
    cpu::avg_pool2d_forward(y.cpu.strided(), x.cpu.strided(), params);
    cuda::avg_pool2d_forward(y.gpu.strided(), x.gpu.strided(), params);
    CHECK_CLOSE(y.gpu.cpu(), y.cpu, 0, 0);

    const Operand dx = output(layout, x_dense.sizes(), dtype, kNaN);
    cpu::avg_pool2d_backward(dx.cpu.strided(), dy.cpu.strided(), params);
    cuda::avg_pool2d_backward(dx.gpu.strided(), dy.gpu.strided(), params);
    CHECK_CLOSE(dx.gpu.cpu(), dx.cpu, 0, 0);
  }
}

}  // namespace

LOOM_GPU_TEST_CASE("pooling by hand: 2x2 windows of a 4x4 plane") {
  Tensor x = tensor({1, 2, 5, 3, 4, 0, 1, 8, 7, 9, 2, 2, 3, 6, 4, 1}, {1, 1, 4, 4})
                 .to(testing::test_gpu());
  const kernel::Pool2dParams params = {2, 2, 2, 2, 0, 0, /*max=*/true, /*count_include_pad=*/true};
  Tensor y = full({1, 1, 2, 2}, kNaN, {.device = testing::test_gpu()});
  Tensor indices = full({1, 1, 2, 2}, kPoisonIndex, {.dtype = DType::Int64, .device = testing::test_gpu()});
  cuda::max_pool2d_forward(y.strided(), indices.strided(), x.strided(), params);
  CHECK(testing::values(y) == std::vector<double>{4, 8, 9, 4});
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{4, 7, 9, 14});

  Tensor dy = tensor({1, 2, 3, 4}, {1, 1, 2, 2}).to(testing::test_gpu());
  Tensor dx = full({1, 1, 4, 4}, kNaN, {.device = testing::test_gpu()});
  cuda::max_pool2d_backward(dx.strided(), dy.strided(), indices.strided(), params);
  CHECK(testing::values(dx) == std::vector<double>{0, 0, 0, 0, 1, 0, 0, 2, 0, 3, 0, 0, 0, 0, 4, 0});

  cuda::avg_pool2d_forward(y.strided(), x.strided(), params);
  CHECK(testing::values(y) == std::vector<double>{1.75, 4.25, 6.25, 2.25});
  cuda::avg_pool2d_backward(dx.strided(), dy.strided(), params);
  CHECK(testing::values(dx) ==
        std::vector<double>{0.25, 0.25, 0.5, 0.5, 0.25, 0.25, 0.5, 0.5,  //
                            0.75, 0.75, 1, 1, 0.75, 0.75, 1, 1});
}

LOOM_GPU_TEST_CASE("max_pool2d matches the CPU over the config grid, every layout and dtype") {
  Generator gen(501);
  for (DType dtype : kDtypes) {
    const Tensor x = randn({2, 3, 7, 6}, {.dtype = dtype}, &gen);
    for (const Layout& layout : layouts()) {
      for (const Pool2dOptions& options : option_grid()) check_max_pool(layout, x, options, gen);
    }
  }
}

LOOM_GPU_TEST_CASE("avg_pool2d matches the CPU over the config grid, every layout and dtype") {
  Generator gen(502);
  for (DType dtype : kDtypes) {
    const Tensor x = randn({2, 3, 7, 6}, {.dtype = dtype}, &gen);
    for (const Layout& layout : layouts()) {
      for (const Pool2dOptions& options : option_grid()) check_avg_pool(layout, x, options, gen);
    }
  }
}

LOOM_GPU_TEST_CASE("max_pool2d: ties, NaN and all -inf windows give the CPU's values and indices") {
  // Values in {-1, 0, 1} tie everywhere; two NaNs share a window (the last one
  // wins) and a 3x3 block of -inf fills whole windows (the index stays at the
  // window's first element).
  Generator gen(503);
  const std::vector<Pool2dOptions> configs = {
      {.kernel_size = {3, 3}, .stride = {{1, 1}}, .padding = {1, 1}},
      {.kernel_size = {2, 2}, .ceil_mode = true},
      {.kernel_size = {3, 3}, .stride = {{2, 2}}, .padding = {1, 1}, .ceil_mode = true},
  };
  for (DType dtype : kDtypes) {
    Tensor x = randint(-1, 2, {2, 3, 7, 6}, {.dtype = DType::Int64}, &gen).to(dtype);
    x.set({0, 1, 2, 2}, kNaN);
    x.set({0, 1, 3, 3}, kNaN);
    x.set({1, 2, 6, 5}, kNaN);
    for (int64_t h = 3; h < 6; ++h) {
      for (int64_t w = 0; w < 3; ++w) x.set({1, 0, h, w}, -kInf);
    }
    for (const Layout& layout : layouts()) {
      for (const Pool2dOptions& options : configs) check_max_pool(layout, x, options, gen);
    }
  }
}

LOOM_GPU_TEST_CASE("pooling matches the CPU on non-square windows and odd sizes") {
  Generator gen(504);
  struct Case {
    Shape x;
    Pool2dOptions options;
  };
  const std::vector<Case> cases = {
      {{1, 1, 1000003, 1},
       {.kernel_size = {3, 1}, .stride = {{2, 1}}, .padding = {1, 0}, .ceil_mode = true}},
      {{3, 5, 1, 7}, {.kernel_size = {1, 3}, .stride = {{1, 2}}, .padding = {0, 1}}},
      {{2, 3, 1, 1}, {.kernel_size = {1, 1}}},
      {{2, 4, 5, 4}, {.kernel_size = {3, 2}, .stride = {{2, 3}}, .padding = {1, 1}, .ceil_mode = true}},
  };
  for (DType dtype : kDtypes) {
    for (const Case& c : cases) {
      const Tensor x = randn(c.x, {.dtype = dtype}, &gen);
      for (const Layout& layout : layouts()) {
        check_max_pool(layout, x, c.options, gen);
        check_avg_pool(layout, x, c.options, gen);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("pooling an empty batch launches nothing and raises nothing") {
  const Pool2dOptions options = {.kernel_size = {2, 2}};
  const kernel::Pool2dParams params = params_of(options);
  const TensorOptions on_gpu = {.device = testing::test_gpu()};
  Tensor x = zeros({0, 3, 5, 5}, on_gpu), dx = empty({0, 3, 5, 5}, on_gpu);
  Tensor y = empty({0, 3, 2, 2}, on_gpu), dy = zeros({0, 3, 2, 2}, on_gpu);
  Tensor indices = empty({0, 3, 2, 2}, {.dtype = DType::Int64, .device = testing::test_gpu()});
  CHECK_NOTHROW(cuda::max_pool2d_forward(y.strided(), indices.strided(), x.strided(), params));
  CHECK_NOTHROW(cuda::max_pool2d_backward(dx.strided(), dy.strided(), indices.strided(), params));
  CHECK_NOTHROW(cuda::max_pool2d_backward(dx.strided(), dy.strided(), indices.strided()));
  CHECK_NOTHROW(cuda::avg_pool2d_forward(y.strided(), x.strided(), params));
  CHECK_NOTHROW(cuda::avg_pool2d_backward(dx.strided(), dy.strided(), params));
  CHECK_NOTHROW(cuda::synchronize());
}

LOOM_GPU_TEST_CASE("pooling covers more elements than one grid of threads") {
  // 17 * 1024 * 1024 outputs and 17 * 1025 * 1025 inputs are both more than
  // kMaxBlocks * kThreads = 16776960, so every kernel's grid-stride loop wraps.
  Generator gen(505);
  const Tensor x = randn({1, 17, 1025, 1025}, {}, &gen);
  const Pool2dOptions options = {.kernel_size = {2, 2}, .stride = {{1, 1}}};
  check_max_pool(layout_named("nchw"), x, options, gen);
  check_avg_pool(layout_named("channels_last"), x, options, gen);
}
#endif  // LOOM_WITH_CUDA
