// File: tests/core/cuda/pool_window_gpu_test.cc
// The window-index max-pooling kernels (core/cuda/pool_window.h) against the
// CPU reference on the same values: forward values, the one-byte window index
// (turned into the CPU's flat h * W + w), and the backward from that index,
// alone and with a second gradient (in any layout) added as the kernel reads
// dy, the fold of autograd's sum where a pool's output feeds two ops.
// Configurations: non-overlapping windows (2x2 stride 2), windows with gaps
// between them (stride > kernel), overlapping ones (stride < kernel), padding,
// ceil_mode output sizes, non-square windows, odd planes; channel counts that
// do and do not fill the 16-byte vector (3, 8, 13, 16); NCHW, channels-last and
// a sliced view, for the input side (x, dx, index) and, each of them, for the
// output side (y, dy); float32, float64, bfloat16 and float16. Inputs are small
// integers, so windows hold ties and every dtype stores them exactly, and the
// gradients are small integers, so overlapping sums are exact: results must be
// equal (rtol = atol = 0). Then max_pool2d forced onto each path through
// LOOM_POOL_KERNEL (loom, cudnn, auto) against the CPU, forward and backward,
// on inputs without ties (cuDNN breaks ties its own way) and integer
// gradients (cuDNN sums overlapping windows in its own order): equal too, with
// the output in x's layout or in the one output_format asks for.
//
// N batch, C channels, H, W input plane, P, Q output plane.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/cpu/pool.h"
#include "core/cuda/pool_window.h"
#include "core/generator.h"
#include "core/ops/elementwise.h"
#include "core/ops/pooling.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

struct Layout {
  const char* name;
  std::function<Tensor(const Tensor&)> place;
};

// Every other column of a wider tensor: no stride is dense, so the scalar path runs.
Tensor sliced(const Tensor& dense) {
  Tensor base = zeros({dense.size(0), dense.size(1), dense.size(2), 2 * dense.size(3)},
                      {.dtype = dense.dtype(), .device = dense.device()});
  Tensor view = base.slice(3, 0, 2 * dense.size(3), 2);
  view.copy_(dense);
  return view;
}

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {"nchw", [](const Tensor& t) { return t; }},
      {"channels_last", [](const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); }},
      {"sliced", sliced},
  };
  return all;
}

std::vector<Pool2dOptions> configs() {
  using P = std::array<int64_t, 2>;
  return {
      {.kernel_size = {2, 2}},
      {.kernel_size = {3, 3}},
      {.kernel_size = {3, 3}, .stride = P{2, 2}, .padding = {1, 1}},
      {.kernel_size = {3, 3}, .stride = P{1, 1}, .padding = {1, 1}},
      {.kernel_size = {2, 2}, .stride = P{3, 3}},
      {.kernel_size = {3, 3}, .stride = P{2, 2}, .padding = {1, 1}, .ceil_mode = true},
      {.kernel_size = {2, 2}, .stride = P{2, 2}, .padding = {1, 1}, .ceil_mode = true},
      {.kernel_size = {2, 3}, .stride = P{1, 2}, .padding = {1, 1}},
  };
}

kernel::Pool2dParams params_of(const Pool2dOptions& o) {
  const auto stride = o.stride.value_or(o.kernel_size);
  return {o.kernel_size[0], o.kernel_size[1], stride[0], stride[1], o.padding[0], o.padding[1],
          /*max=*/true, o.count_include_pad};
}

// (N, C, P, Q) as the op sizes it (ceil_mode acts only here).
Shape output_sizes(const Shape& x_sizes, const Pool2dOptions& o) {
  const Shape plane = max_pool2d(zeros({1, 1, x_sizes[2], x_sizes[3]}), o).sizes();
  return {x_sizes[0], x_sizes[1], plane[2], plane[3]};
}

// Small integers as float32: ties in most windows, exact in every dtype.
Tensor small_integers(const Shape& sizes, int64_t high, Generator& gen) {
  return randint(-high, high, sizes, {.dtype = DType::Int64}, &gen).to(DType::Float32);
}

// The window index turned into the CPU's flat position h * W + w.
std::vector<int64_t> flat_positions(const Tensor& index, const kernel::Pool2dParams& k, int64_t W) {
  const Tensor dense = index.cpu().contiguous();
  const std::vector<uint8_t> local = dense.to_vector<uint8_t>();
  const int64_t P = dense.size(2), Q = dense.size(3);
  std::vector<int64_t> flat(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    const int64_t q = static_cast<int64_t>(i) % Q, p = static_cast<int64_t>(i) / Q % P;
    const int64_t h = p * k.stride_h - k.pad_h + local[i] / k.kernel_w;
    const int64_t w = q * k.stride_w - k.pad_w + local[i] % k.kernel_w;
    flat[i] = h * W + w;
  }
  return flat;
}

// plane: (H, W). 6 x 12 is tiled exactly by the 2x2 and 3x3 windows of stride
// 2 and 3 (the backward's one-thread-per-window path); 7 x 9 by none.
// layout places x, dx and the index; out_layout places y and dy; addend_layout places a second
// gradient that the backward adds to dy as it reads it.
void check_config(const Layout& layout, const Layout& out_layout, const Layout& addend_layout, DType dtype,
                  int64_t C, std::array<int64_t, 2> plane, const Pool2dOptions& options, Generator& gen) {
  const kernel::Pool2dParams k = params_of(options);
  INFO(layout.name, " out ", out_layout.name, " ", dtype_name(dtype), " C ", C, " plane ", plane[0], "x", plane[1], " kernel ",
       k.kernel_h, "x", k.kernel_w, " stride ", k.stride_h, "x", k.stride_w, " pad ", k.pad_h, "x",
       k.pad_w, " ceil ", options.ceil_mode);
  const Shape x_sizes = {2, C, plane[0], plane[1]};
  const Shape y_sizes = output_sizes(x_sizes, options);
  const Tensor x = small_integers(x_sizes, 3, gen), dy = small_integers(y_sizes, 8, gen);
  const Tensor dy_addend = small_integers(y_sizes, 8, gen);
  Tensor y_ref = empty(y_sizes), dx_ref = empty(x_sizes), dx_sum_ref = empty(x_sizes);
  Tensor indices_ref = empty(y_sizes, {.dtype = DType::Int64});
  cpu::max_pool2d_forward(y_ref.strided(), indices_ref.strided(), x.strided(), k);
  cpu::max_pool2d_backward(dx_ref.strided(), dy.strided(), indices_ref.strided());
  cpu::max_pool2d_backward(dx_sum_ref.strided(), (dy + dy_addend).strided(), indices_ref.strided());

  const TensorOptions on_gpu{.dtype = dtype, .device = testing::test_gpu()};
  const Tensor x_gpu = layout.place(x.to(testing::test_gpu()).to(dtype));
  const Tensor dy_gpu = out_layout.place(dy.to(testing::test_gpu()).to(dtype));
  const Tensor y = out_layout.place(full(y_sizes, -7, on_gpu));  // poison: -7 is no input value
  const Tensor index = layout.place(full(y_sizes, 255, {.dtype = DType::UInt8, .device = testing::test_gpu()}));
  const Tensor dx = layout.place(full(x_sizes, -99, on_gpu));
  cuda::max_pool2d_window_forward(y.strided(), index.strided(), x_gpu.strided(), k);
  cuda::max_pool2d_window_backward(dx.strided(), dy_gpu.strided(), index.strided(), k);
  CHECK_CLOSE(y.to(DType::Float32).cpu(), y_ref, 0, 0);
  CHECK(flat_positions(index, k, x_sizes[3]) == indices_ref.to_vector<int64_t>());
  CHECK_CLOSE(dx.to(DType::Float32).cpu(), dx_ref, 0, 0);

  const Strided addend = addend_layout.place(dy_addend.to(testing::test_gpu()).to(dtype)).strided();
  cuda::max_pool2d_window_backward(dx.strided(), dy_gpu.strided(), index.strided(), k, &addend);
  CHECK_CLOSE(dx.to(DType::Float32).cpu(), dx_sum_ref, 0, 0);
}

// Each config with the output in x's layout, then in each layout output_format names.
std::vector<Pool2dOptions> output_formats(const std::vector<Pool2dOptions>& configs) {
  std::vector<Pool2dOptions> out;
  for (const Pool2dOptions& options : configs) {
    for (std::optional<MemoryFormat> format :
         {std::optional<MemoryFormat>(), std::optional(MemoryFormat::Contiguous),
          std::optional(MemoryFormat::ChannelsLast)}) {
      Pool2dOptions with = options;
      with.output_format = format;
      out.push_back(with);
    }
  }
  return out;
}

// Integers with no repeat inside a plane (a different permutation of
// -31 .. 31 per plane, exact in every dtype): no window holds a tie, so paths
// with different tie rules (cuDNN's) agree with the CPU.
Tensor distinct_per_plane(const Shape& sizes) {
  const int64_t plane = sizes[2] * sizes[3];
  REQUIRE(plane == 63);  // 37 and 11 permute 0 .. 62 because they are coprime to 63
  std::vector<double> values;
  for (int64_t p = 0; p < sizes[0] * sizes[1]; ++p) {
    for (int64_t i = 0; i < plane; ++i) values.push_back(double((i * 37 + p * 11) % plane) - 31);
  }
  return tensor(values, sizes);
}

// Sets an environment variable for a scope, restoring "auto" after.
}  // namespace

LOOM_GPU_TEST_CASE("window max pooling by hand: 2x2 windows of a 4x4 plane") {
  const Tensor x = tensor({1, 2, 5, 3, 4, 0, 1, 8, 7, 9, 2, 2, 3, 6, 4, 4}, {1, 1, 4, 4})
                       .to(testing::test_gpu());
  const kernel::Pool2dParams k = {2, 2, 2, 2, 0, 0, /*max=*/true, /*count_include_pad=*/true};
  const Tensor y = full({1, 1, 2, 2}, -1, {.device = testing::test_gpu()});
  const Tensor index = full({1, 1, 2, 2}, 255, {.dtype = DType::UInt8, .device = testing::test_gpu()});
  cuda::max_pool2d_window_forward(y.strided(), index.strided(), x.strided(), k);
  CHECK(testing::values(y) == std::vector<double>{4, 8, 9, 4});
  // The last window's 4s tie: the first (row 3, column 2) wins.
  CHECK(index.cpu().to_vector<uint8_t>() == std::vector<uint8_t>{2, 3, 1, 2});

  const Tensor dy = tensor({1, 2, 3, 4}, {1, 1, 2, 2}).to(testing::test_gpu());
  const Tensor dx = full({1, 1, 4, 4}, -1, {.device = testing::test_gpu()});
  cuda::max_pool2d_window_backward(dx.strided(), dy.strided(), index.strided(), k);
  CHECK(testing::values(dx) == std::vector<double>{0, 0, 0, 0, 1, 0, 0, 2, 0, 3, 0, 0, 0, 0, 4, 0});
}

LOOM_GPU_TEST_CASE("window max pooling matches the CPU: every config, layout, dtype, channel count") {
  Generator gen(1201);
  size_t addend = 0;  // the addend's layout cycles through the three
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    for (const Layout& layout : layouts()) {
      for (const Layout& out_layout : layouts()) {
        for (int64_t C : {3, 8, 13, 16}) {
          for (std::array<int64_t, 2> plane : {std::array<int64_t, 2>{7, 9}, std::array<int64_t, 2>{6, 12}}) {
            for (const Pool2dOptions& options : configs()) {
              const Layout& addend_layout = layouts()[addend++ % layouts().size()];
              check_config(layout, out_layout, addend_layout, dtype, C, plane, options, gen);
            }
          }
        }
      }
    }
  }
}

LOOM_GPU_TEST_CASE("max_pool2d on each path LOOM_POOL_KERNEL names matches the CPU, forward and backward") {
  Generator gen(1202);  // gradients: small integers, so every summation order is exact
  for (const char* path : {"loom", "cudnn", "auto"}) {
    const testing::ScopedEnv env("LOOM_POOL_KERNEL", path);
    for (DType dtype : {DType::Float32, DType::BFloat16}) {
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        for (Pool2dOptions options : output_formats(configs())) {
          const kernel::Pool2dParams k = params_of(options);
          const MemoryFormat out_format = options.output_format.value_or(format);
          INFO(path, " ", dtype_name(dtype), " channels_last ", format == MemoryFormat::ChannelsLast,
               " output ", memory_format_name(out_format),
               " kernel ", k.kernel_h, "x", k.kernel_w, " stride ", k.stride_h, "x", k.stride_w,
               " pad ", k.pad_h, "x", k.pad_w, " ceil ", options.ceil_mode);
          const Tensor x_cpu = distinct_per_plane({2, 16, 9, 7});
          Tensor x_ref = x_cpu.clone();
          x_ref.requires_grad_();
          const Tensor y_ref = max_pool2d(x_ref, options);
          const Tensor dy = small_integers(y_ref.sizes(), 8, gen);
          y_ref.backward(dy);

          Tensor x = x_cpu.to(testing::test_gpu()).to(dtype).contiguous(format);
          x.requires_grad_();
          const Tensor y = max_pool2d(x, options);
          CHECK(y.is_contiguous(out_format));
          y.backward(dy.to(testing::test_gpu()).to(dtype).contiguous(out_format));
          CHECK_CLOSE(y.to(DType::Float32).cpu(), y_ref, 0, 0);
          CHECK_CLOSE(x.grad().to(DType::Float32).cpu(), x_ref.grad(), 0, 0);
        }
      }
    }
  }
}

// A pool whose output two ops read (as a residual block's input is read by its
// first convolution and its shortcut) gets both gradients; on Loom's path the
// backward adds them as it reads them (Node::folds_gradient_sum), on cuDNN's
// autograd adds them first. Both must give the CPU's gradient.
LOOM_GPU_TEST_CASE("max_pool2d whose output two ops read: x's gradient on each path matches the CPU") {
  Generator gen(1203);
  for (const char* path : {"loom", "cudnn", "auto"}) {
    const testing::ScopedEnv env("LOOM_POOL_KERNEL", path);
    for (DType dtype : {DType::Float32, DType::BFloat16}) {
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        for (const Pool2dOptions& options : configs()) {
          const kernel::Pool2dParams k = params_of(options);
          INFO(path, " ", dtype_name(dtype), " channels_last ", format == MemoryFormat::ChannelsLast, " kernel ",
               k.kernel_h, "x", k.kernel_w, " stride ", k.stride_h, "x", k.stride_w, " pad ", k.pad_h, "x", k.pad_w,
               " ceil ", options.ceil_mode);
          const Tensor x_cpu = distinct_per_plane({2, 16, 9, 7});
          const Shape y_sizes = output_sizes(x_cpu.sizes(), options);
          const Tensor a = small_integers(y_sizes, 4, gen), b = small_integers(y_sizes, 4, gen);
          Tensor x_ref = x_cpu.clone();
          x_ref.requires_grad_();
          const Tensor y_ref = max_pool2d(x_ref, options);
          ((y_ref * a).sum() + (y_ref * b).sum()).backward();

          Tensor x = x_cpu.to(testing::test_gpu()).to(dtype).contiguous(format);
          x.requires_grad_();
          const Tensor y = max_pool2d(x, options);
          const Tensor a_gpu = a.to(testing::test_gpu()).to(dtype), b_gpu = b.to(testing::test_gpu()).to(dtype);
          ((y * a_gpu).sum() + (y * b_gpu.contiguous(MemoryFormat::ChannelsLast)).sum()).backward();
          CHECK_CLOSE(x.grad().to(DType::Float32).cpu(), x_ref.grad(), 0, 0);
        }
      }
    }
  }
}

LOOM_GPU_TEST_CASE("LOOM_POOL_KERNEL naming no path is refused with the choices") {
  const testing::ScopedEnv env("LOOM_POOL_KERNEL", "fastest");
  const Tensor x = randn({1, 8, 4, 4}).to(testing::test_gpu());
  CHECK_THROWS_WITH_FRAGMENT(max_pool2d(x, {.kernel_size = {2, 2}}), ValueError, "auto, loom, cudnn");
}

#endif  // LOOM_WITH_CUDA
