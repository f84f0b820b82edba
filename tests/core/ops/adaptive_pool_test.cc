// File: tests/core/ops/adaptive_pool_test.cc
// adaptive_avg_pool2d and adaptive_max_pool2d: a naive per-cell loop in float64
// over sizes that do and do not divide the input (the avg_pool2d / max_pool2d
// path and the composite one), by hand, gradcheck, and argument errors.
// N batch, C channels, H, W input, P, Q output.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/pooling.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

// PyTorch's bins: rows floor(i H / P) to ceil((i + 1) H / P), the same for
// columns; `reduce` gets each cell's values.
Tensor naive_adaptive(const Tensor& x, int64_t p, int64_t q,
                      const std::function<double(const std::vector<double>&)>& reduce) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const std::vector<double> v = x.contiguous().to_vector<double>();
  std::vector<double> out;
  for (int64_t plane = 0; plane < n * c; ++plane) {
    for (int64_t i = 0; i < p; ++i) {
      for (int64_t j = 0; j < q; ++j) {
        const int64_t h0 = i * h / p, h1 = ((i + 1) * h + p - 1) / p;
        const int64_t w0 = j * w / q, w1 = ((j + 1) * w + q - 1) / q;
        std::vector<double> cell;
        for (int64_t r = h0; r < h1; ++r) {
          for (int64_t s = w0; s < w1; ++s) cell.push_back(v[(plane * h + r) * w + s]);
        }
        out.push_back(reduce(cell));
      }
    }
  }
  return tensor(out, {n, c, p, q}, kF64);
}

Tensor naive_adaptive_avg(const Tensor& x, int64_t p, int64_t q) {
  return naive_adaptive(x, p, q, [](const std::vector<double>& cell) {
    double total = 0;
    for (double value : cell) total += value;
    return total / static_cast<double>(cell.size());
  });
}

Tensor naive_adaptive_max(const Tensor& x, int64_t p, int64_t q) {
  return naive_adaptive(x, p, q, [](const std::vector<double>& cell) {
    return *std::max_element(cell.begin(), cell.end());
  });
}

TEST_CASE("adaptive_avg_pool2d: overlapping bins of a 1x3 row to 2 cells, by hand") {
  // Bins [0, 2) and [1, 3): (1 + 2) / 2 and (2 + 4) / 2.
  const Tensor y = adaptive_avg_pool2d(tensor({1, 2, 4}, {1, 1, 1, 3}, kF64), {1, 2});
  CHECK(y.to_vector<double>() == std::vector<double>{1.5, 3});
}

TEST_CASE("adaptive_avg_pool2d matches a naive per-cell loop, dividing sizes or not, any layout") {
  Generator gen(21);
  const Tensor x = randn({2, 3, 7, 6}, kF64, &gen);
  for (auto [p, q] : {std::pair<int64_t, int64_t>{7, 3}, {1, 1}, {3, 4}, {5, 6}, {2, 5}}) {
    CAPTURE(p);
    CAPTURE(q);
    const Tensor expected = naive_adaptive_avg(x, p, q);
    CHECK_CLOSE(adaptive_avg_pool2d(x, {p, q}), expected, 1e-14, 1e-14);
    CHECK_CLOSE(adaptive_avg_pool2d(x.contiguous(MemoryFormat::ChannelsLast), {p, q}), expected, 1e-14, 1e-14);
  }
}

TEST_CASE("adaptive_avg_pool2d gradcheck: avg_pool2d path and composite path") {
  Generator gen(22);
  const Tensor x = randn({2, 2, 5, 4}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  for (auto [p, q] : {std::pair<int64_t, int64_t>{5, 2}, {3, 3}}) {
    CAPTURE(p);
    const GradcheckResult r = gradcheck(
        [p, q](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], {p, q}); }, {x});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("adaptive_avg_pool2d rejects non-4-D inputs and empty output sizes") {
  CHECK_THROWS_WITH_FRAGMENT(adaptive_avg_pool2d(zeros({3, 4}), {1, 1}), ShapeError,
                             "[adaptive_avg_pool2d] expects input (N, C, H, W), got shape (3, 4)");
  CHECK_THROWS_WITH_FRAGMENT(adaptive_avg_pool2d(zeros({1, 1, 3, 4}), {0, 2}), ValueError,
                             "output_size must be positive, got (0, 2)");
}

TEST_CASE("adaptive_max_pool2d: overlapping bins share a maximum and its gradient, by hand") {
  // Bins [0, 2) and [1, 3) of (1, 5, 2) both hold the 5, so its gradient is dy0 + dy1.
  const Tensor x =
      tensor({1, 5, 2}, {1, 1, 1, 3}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor y = adaptive_max_pool2d(x, {1, 2});
  CHECK(y.to_vector<double>() == std::vector<double>{5, 5});
  y.backward(tensor({0.25, 2}, {1, 1, 1, 2}, kF64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 2.25, 0});
}

TEST_CASE("adaptive_max_pool2d matches a naive per-cell loop, dividing sizes or not, any layout") {
  Generator gen(23);
  const Tensor x = randn({2, 3, 7, 6}, kF64, &gen);
  for (auto [p, q] : {std::pair<int64_t, int64_t>{7, 3}, {1, 1}, {3, 4}, {5, 6}, {2, 5}, {9, 8}}) {
    CAPTURE(p);
    CAPTURE(q);
    const Tensor expected = naive_adaptive_max(x, p, q);
    CHECK_CLOSE(adaptive_max_pool2d(x, {p, q}), expected, 0, 0);
    const Tensor channels_last = x.contiguous(MemoryFormat::ChannelsLast);
    CHECK_CLOSE(adaptive_max_pool2d(channels_last, {p, q}), expected, 0, 0);
  }
}

TEST_CASE("adaptive_max_pool2d gradcheck: max_pool2d path and composite path") {
  Generator gen(24);
  const Tensor x = randn({2, 2, 5, 4}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  for (auto [p, q] : {std::pair<int64_t, int64_t>{5, 2}, {3, 3}, {2, 3}}) {
    CAPTURE(p);
    CAPTURE(q);
    const GradcheckResult r = gradcheck(
        [p, q](const std::vector<Tensor>& in) { return adaptive_max_pool2d(in[0], {p, q}); }, {x});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("adaptive_max_pool2d rejects non-4-D inputs, empty planes and empty output sizes") {
  CHECK_THROWS_WITH_FRAGMENT(adaptive_max_pool2d(zeros({3, 4}), {1, 1}), ShapeError,
                             "[adaptive_max_pool2d] expects input (N, C, H, W), got shape (3, 4)");
  CHECK_THROWS_WITH_FRAGMENT(adaptive_max_pool2d(zeros({1, 1, 3, 4}), {2, 0}), ValueError,
                             "output_size must be positive, got (2, 0)");
  CHECK_THROWS_WITH_FRAGMENT(adaptive_max_pool2d(zeros({1, 1, 0, 4}), {2, 2}), ShapeError,
                             "(1, 1, 0, 4) has an empty plane");
}

}  // namespace
}  // namespace loom
