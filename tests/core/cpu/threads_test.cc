// File: tests/core/cpu/threads_test.cc
// The CPU kernels on Loom's thread pool: the same bits at 1 and at 3 threads
// (each sum stays inside one chunk), the fused epilogues equal the unfused
// kernels, and for_each_run finds the contiguous runs.
//
// N batch, C channels, H, W input, K out channels, R, S filter, P, Q output.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <functional>
#include <random>
#include <vector>

#include "core/cpu/activation.h"
#include "core/cpu/conv.h"
#include "core/cpu/elementwise.h"
#include "core/cpu/gemm.h"
#include "core/cpu/loop.h"
#include "core/cpu/norm.h"
#include "core/cpu/pool.h"
#include "core/parallel.h"

namespace loom::cpu {
namespace {

// A dense row-major float buffer with its Strided view.
struct Buffer {
  std::vector<float> values;
  Shape sizes;

  explicit Buffer(Shape s, uint32_t seed = 0) : values(numel_of(s)), sizes(std::move(s)) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    for (float& v : values) v = seed == 0 ? 0.0f : normal(rng);
  }
  Strided view() {
    Shape strides(sizes.size(), 1);
    for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
    return {values.data(), DType::Float32, sizes, strides};
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The outputs `run` writes, at 1 thread and at 3.
std::vector<std::vector<float>> at_threads(int threads,
                                           const std::function<std::vector<std::vector<float>>()>& run) {
  const int saved = num_threads();
  set_num_threads(threads);
  auto out = run();
  set_num_threads(saved);
  return out;
}

void check_thread_independent(const std::function<std::vector<std::vector<float>>()>& run) {
  const auto one = at_threads(1, run), three = at_threads(3, run);
  REQUIRE(one.size() == three.size());
  for (size_t i = 0; i < one.size(); ++i) CHECK_MESSAGE(same_bits(one[i], three[i]), "output " << i);
}

// For BLAS products split over the threads, which may round each element
// differently by where its block starts (core/parallel.h): the outputs at 1 and
// 3 threads within `tol` of their largest magnitude, so a misplaced or missing
// block, whose error is of the values' own size, still fails.
void check_thread_rounding(const std::function<std::vector<std::vector<float>>()>& run, double tol) {
  const auto one = at_threads(1, run), three = at_threads(3, run);
  REQUIRE(one.size() == three.size());
  for (size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    REQUIRE(one[i].size() == three[i].size());
    double worst = 0, scale = 0;
    for (size_t j = 0; j < one[i].size(); ++j) {
      worst = std::max(worst, std::fabs(static_cast<double>(one[i][j]) - three[i][j]));
      scale = std::max(scale, std::fabs(static_cast<double>(one[i][j])));
    }
    CHECK(scale > 0);
    CHECK(worst <= tol * scale);
  }
}

TEST_CASE("convolution kernels give the same bits at 1 and 3 threads") {
  // Stride 2 takes the clipped im2col; stride 1 the wide columns.
  for (const kernel::ConvParams& params :
       {kernel::ConvParams{.stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 2, .dilation_w = 2},
        kernel::ConvParams{.pad_h = 2, .pad_w = 1, .dilation_h = 2}}) {
  check_thread_independent([&] {
    Buffer x({5, 3, 9, 8}, 1), w({4, 3, 3, 3}, 2), bias({4}, 3);
    const int64_t p = conv_output_size(9, 3, params.stride_h, params.pad_h, params.dilation_h),
                  q = conv_output_size(8, 3, params.stride_w, params.pad_w, params.dilation_w);
    Buffer y({5, 4, p, q}), dy({5, 4, p, q}, 4), dx({5, 3, 9, 8}), dw({4, 3, 3, 3}), db({4});
    Strided b = bias.view();
    conv2d_forward(y.view(), x.view(), w.view(), &b, params, /*relu=*/true);
    conv2d_dgrad(dx.view(), dy.view(), w.view(), params);
    conv2d_wgrad(dw.view(), dy.view(), x.view(), params);
    conv2d_bgrad(db.view(), dy.view());
    return std::vector<std::vector<float>>{y.values, dx.values, dw.values, db.values};
  });
  }
}

TEST_CASE("conv2d_wgrad of a large filter (split by dw's columns) agrees at 1 and 3 threads") {
  // 16 images of a 32 x 256 x 3 x 3 filter: its partial sums per image block would
  // exceed the kernel's limit, so dw's columns are split instead of the batch.
  check_thread_rounding([] {
    Buffer x({16, 256, 4, 4}, 1), dy({16, 32, 4, 4}, 2), dw({32, 256, 3, 3});
    conv2d_wgrad(dw.view(), dy.view(), x.view(), kernel::ConvParams{.pad_h = 1, .pad_w = 1});
    return std::vector<std::vector<float>>{dw.values};
  }, 1e-5);
  // And it sums what the images give one by one (each a batch of one, split by images).
  Buffer x({16, 256, 4, 4}, 1), dy({16, 32, 4, 4}, 2), dw({32, 256, 3, 3}), one({32, 256, 3, 3});
  const kernel::ConvParams params{.pad_h = 1, .pad_w = 1};
  conv2d_wgrad(dw.view(), dy.view(), x.view(), params);
  std::vector<double> sum(dw.values.size(), 0.0);
  for (int64_t n = 0; n < 16; ++n) {
    Strided xn = x.view(), dyn = dy.view();
    xn.data = x.values.data() + n * 256 * 16;
    dyn.data = dy.values.data() + n * 32 * 16;
    xn.sizes[0] = dyn.sizes[0] = 1;
    conv2d_wgrad(one.view(), dyn, xn, params);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += one.values[i];
  }
  double worst = 0.0;
  for (size_t i = 0; i < sum.size(); ++i) worst = std::max(worst, std::abs(sum[i] - dw.values[i]));
  CHECK(worst < 1e-3);
}

TEST_CASE("conv2d_wgrad: an Inf in the image reaches only the taps that meet it") {
  // x (1, 1, 3, 8), w (1, 1, 3, 3), stride 1, no padding: P 1, Q 6. Pixel (0, 7) is
  // met only by tap (0, 2) at q = 5; the wide columns of the other taps of row 0 run
  // over it in their wrapped columns, which must add exact zeros.
  Buffer x({1, 1, 3, 8}, 1), dy({1, 1, 1, 6}, 2), dw({1, 1, 3, 3});
  x.values[7] = std::numeric_limits<float>::infinity();
  conv2d_wgrad(dw.view(), dy.view(), x.view(), kernel::ConvParams{});
  for (int64_t tap = 0; tap < 9; ++tap) {
    INFO("tap ", tap);
    CHECK(std::isfinite(dw.values[tap]) == (tap != 2));
  }
}

TEST_CASE("conv2d_forward's ReLU epilogue equals the forward, then ReLU") {
  Buffer x({3, 2, 6, 6}, 1), w({5, 2, 3, 3}, 2), bias({5}, 3);
  Buffer fused({3, 5, 6, 6}), plain({3, 5, 6, 6});
  Strided b = bias.view();
  const kernel::ConvParams params{.pad_h = 1, .pad_w = 1};
  conv2d_forward(fused.view(), x.view(), w.view(), &b, params, /*relu=*/true);
  conv2d_forward(plain.view(), x.view(), w.view(), &b, params);
  activation_forward(plain.view(), plain.view(), kernel::ActivationKind::Relu, kernel::act::Relu::info.default_parameters);
  CHECK(same_bits(fused.values, plain.values));
}

TEST_CASE("batch norm + ReLU kernels give the same bits at 1 and 3 threads") {
  check_thread_independent([] {
    Buffer x({6, 5, 7, 3}, 1), z({6, 5, 7, 3}, 2), weight({5}, 3), bias({5}, 4), dy({6, 5, 7, 3}, 5);
    Buffer mean({5}), invstd({5}), y({6, 5, 7, 3}), dx({6, 5, 7, 3}), dweight({5}), dbias({5}),
        dz({6, 5, 7, 3});
    batch_norm_batch_stats(mean.view(), invstd.view(), x.view(), 1e-5, std::nullopt);
    batch_norm_relu_forward(y.view(), x.view(), mean.view(), invstd.view(), weight.view(),
                            bias.view(), z.view());
    batch_norm_relu_backward(dx.view(), dweight.view(), dbias.view(), dz.view(), dy.view(),
                             x.view(), y.view(), mean.view(), invstd.view(), weight.view());
    return std::vector<std::vector<float>>{mean.values, invstd.values, y.values,    dx.values,
                                           dweight.values, dbias.values, dz.values};
  });
}

TEST_CASE("batch_norm_relu_backward equals the ReLU mask, then batch_norm_backward") {
  Buffer x({4, 3, 5, 5}, 1), weight({3}, 2), bias({3}, 3), dy({4, 3, 5, 5}, 4);
  Buffer mean({3}), invstd({3}), y({4, 3, 5, 5});
  batch_norm_batch_stats(mean.view(), invstd.view(), x.view(), 1e-5, std::nullopt);
  batch_norm_relu_forward(y.view(), x.view(), mean.view(), invstd.view(), weight.view(),
                          bias.view(), std::nullopt);
  Buffer dx({4, 3, 5, 5}), dweight({3}), dbias({3}), dpre({4, 3, 5, 5});
  batch_norm_relu_backward(dx.view(), dweight.view(), dbias.view(), dpre.view(), dy.view(),
                           x.view(), y.view(), mean.view(), invstd.view(), weight.view());
  Buffer masked({4, 3, 5, 5}), dx_ref({4, 3, 5, 5}), dweight_ref({3}), dbias_ref({3});
  activation_backward(masked.view(), dy.view(), y.view(), kernel::ActivationKind::Relu, kernel::act::Relu::info.default_parameters);
  batch_norm_backward(dx_ref.view(), dweight_ref.view(), dbias_ref.view(), masked.view(), x.view(),
                      mean.view(), invstd.view(), weight.view(), /*training=*/true);
  CHECK(same_bits(dpre.values, masked.values));
  CHECK(same_bits(dx.values, dx_ref.values));
  CHECK(same_bits(dweight.values, dweight_ref.values));
  CHECK(same_bits(dbias.values, dbias_ref.values));
  int zeros = 0;
  for (float v : dpre.values) zeros += v == 0.0f;
  CHECK(zeros > 0);  // the mask did cut something
}

TEST_CASE("pooling and elementwise kernels give the same bits at 1 and 3 threads; split GEMMs agree") {
  check_thread_independent([] {
    Buffer x({4, 3, 9, 8}, 1), y({4, 3, 4, 4}), dy({4, 3, 4, 4}, 2), dx({4, 3, 9, 8});
    std::vector<int64_t> index(4 * 3 * 4 * 4);
    Strided indices{index.data(), DType::Int64, {4, 3, 4, 4}, {48, 16, 4, 1}};
    const kernel::Pool2dParams params{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2};
    max_pool2d_forward(y.view(), indices, x.view(), params);
    max_pool2d_backward(dx.view(), dy.view(), indices);
    Buffer big({300, 170}, 3), relu({300, 170});
    activation_forward(relu.view(), big.view(), kernel::ActivationKind::Relu, kernel::act::Relu::info.default_parameters);
    return std::vector<std::vector<float>>{y.values, dx.values, relu.values};
  });
  // Split by rows (m >= n) and by columns.
  check_thread_rounding([] {
    Buffer a({300, 64}, 4), b({64, 170}, 5), c({300, 170}), at({64, 170}, 6), bt({300, 64}, 7), ct({170, 300});
    gemm(false, false, 300, 170, 64, 1.0f, a.values.data(), 64, b.values.data(), 170, 0.0f,
         c.values.data(), 170);
    gemm(true, true, 170, 300, 64, 1.0f, at.values.data(), 170, bt.values.data(), 64, 0.0f,
         ct.values.data(), 300);
    return std::vector<std::vector<float>>{c.values, ct.values};
  }, 1e-5);
}

TEST_CASE("max pooling 2x2: dense rows pick what the strided scan picks, ties, zeros and NaNs included") {
  // Values drawn from a small set, so windows tie, hold -0 beside +0, or hold one NaN
  // or several; the same values with every other column skipped (a strided view)
  // take the general scan, and both must choose the same element of every window.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> pool_of = {1.0f, 1.0f, -2.0f, 0.0f, -0.0f, nan, inf, -inf, 3.0f};
  const Shape sizes = {2, 3, 6, 14}, out_sizes = {2, 3, 3, 7};  // 7 windows a row: 4 at once, 3 alone
  std::mt19937 rng(7);
  std::vector<float> dense(numel_of(sizes)), spaced(2 * dense.size());
  for (size_t i = 0; i < dense.size(); ++i) {
    dense[i] = pool_of[rng() % pool_of.size()];
    spaced[2 * i] = dense[i];
  }
  const Strided x_dense{dense.data(), DType::Float32, sizes, {252, 84, 14, 1}};
  const Strided x_spaced{spaced.data(), DType::Float32, sizes, {504, 168, 28, 2}};
  Buffer y_dense(out_sizes), y_spaced(out_sizes);
  std::vector<int64_t> i_dense(numel_of(out_sizes)), i_spaced(numel_of(out_sizes));
  const Shape index_strides = {63, 21, 7, 1};
  const kernel::Pool2dParams params{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2};
  max_pool2d_forward(y_dense.view(), {i_dense.data(), DType::Int64, out_sizes, index_strides}, x_dense,
                     params);
  max_pool2d_forward(y_spaced.view(), {i_spaced.data(), DType::Int64, out_sizes, index_strides},
                     x_spaced, params);
  CHECK(i_dense == i_spaced);
  CHECK(same_bits(y_dense.values, y_spaced.values));
  int nans = 0;
  for (float v : y_dense.values) nans += std::isnan(v);
  CHECK(nans > 0);  // the draw did put NaNs in some windows
}

TEST_CASE("for_each_run merges the dims every operand steps over densely") {
  auto runs = [](const Shape& sizes, const Shape& a, const Shape& b) {
    std::vector<std::pair<std::array<int64_t, 2>, int64_t>> out;
    for_each_run<2>(sizes, {&a, &b}, [&](const auto& o, int64_t len) { out.push_back({o, len}); });
    return out;
  };
  // Both dense: one run over everything.
  auto dense = runs({2, 3, 4}, {12, 4, 1}, {12, 4, 1});
  REQUIRE(dense.size() == 1);
  CHECK(dense[0].second == 24);
  // A broadcast row (stride 0 on dim 0): one run per row, the row re-read.
  auto broadcast = runs({2, 3, 4}, {12, 4, 1}, {0, 4, 1});
  REQUIRE(broadcast.size() == 2);
  CHECK(broadcast[1].first == std::array<int64_t, 2>{12, 0});
  CHECK(broadcast[1].second == 12);
  // A transposed operand: single elements, in row-major order of the sizes.
  auto transposed = runs({2, 3}, {3, 1}, {1, 2});
  REQUIRE(transposed.size() == 6);
  CHECK(transposed[1].first == std::array<int64_t, 2>{1, 2});
  CHECK(transposed[3].first == std::array<int64_t, 2>{3, 1});
  CHECK(runs({2, 0}, {0, 1}, {0, 1}).empty());
}

}  // namespace
}  // namespace loom::cpu
