// File: tests/core/ops/pool1d_test.cc
// max_pool1d, avg_pool1d, adaptive_avg_pool1d and adaptive_max_pool1d against
// windows read by hand over random configurations (padding, ceil_mode,
// count_include_pad, NCL, length-major and unbatched inputs), their gradients,
// and the argument errors.
//
// N batch, C channels, L length.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/pooling.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kFloat64 = {.dtype = DType::Float64};

// One pooled row by PyTorch's definition: window i covers [i s - p, i s - p + k)
// clipped to the padded row; its max reads the input part, its average divides
// by the padded window (count_include_pad) or by the input part.
std::vector<double> naive_pool_row(const std::vector<double>& row, const Pool1dOptions& o, bool max) {
  const int64_t l = static_cast<int64_t>(row.size()), k = o.kernel_size, s = o.stride.value_or(k), p = o.padding;
  const double span = static_cast<double>(l + 2 * p - k) / static_cast<double>(s);
  int64_t out = static_cast<int64_t>(o.ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (o.ceil_mode && (out - 1) * s >= l + p) --out;
  std::vector<double> y;
  for (int64_t i = 0; i < out; ++i) {
    const int64_t start = i * s - p, end = std::min(start + k, l + p);
    const int64_t first = std::max<int64_t>(start, 0), last = std::min(end, l);
    double best = -std::numeric_limits<double>::infinity(), total = 0;
    for (int64_t j = first; j < last; ++j) best = std::max(best, row[j]), total += row[j];
    const double divisor = static_cast<double>(o.count_include_pad ? end - start : last - first);
    y.push_back(max ? best : total / divisor);
  }
  return y;
}

// Cell i of an adaptive pooling covers [floor(i L / P), ceil((i + 1) L / P)).
std::vector<double> naive_adaptive_row(const std::vector<double>& row, int64_t cells, bool max) {
  const int64_t l = static_cast<int64_t>(row.size());
  std::vector<double> y;
  for (int64_t i = 0; i < cells; ++i) {
    const int64_t first = i * l / cells, last = ((i + 1) * l + cells - 1) / cells;
    double best = -std::numeric_limits<double>::infinity(), total = 0;
    for (int64_t j = first; j < last; ++j) best = std::max(best, row[j]), total += row[j];
    y.push_back(max ? best : total / static_cast<double>(last - first));
  }
  return y;
}

// `row_fn` applied to every (n, c) row of x (N, C, L).
template <typename RowFn>
Tensor rows_of(const Tensor& x, RowFn row_fn) {
  const std::vector<double> xv = x.contiguous().to_vector<double>();
  const int64_t rows = x.size(0) * x.size(1), l = x.size(2);
  std::vector<double> out;
  int64_t width = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<double> y = row_fn(std::vector<double>(xv.begin() + r * l, xv.begin() + (r + 1) * l));
    width = static_cast<int64_t>(y.size());
    out.insert(out.end(), y.begin(), y.end());
  }
  return tensor(out, {x.size(0), x.size(1), width}, kFloat64);
}

Pool1dOptions random_options(std::mt19937_64& rng) {
  auto between = [&rng](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int64_t k = between(1, 6);
  return {.kernel_size = k,
          .stride = between(0, 3) == 0 ? std::nullopt : std::optional<int64_t>(between(1, 4)),
          .padding = between(0, k / 2),
          .ceil_mode = between(0, 1) == 1,
          .count_include_pad = between(0, 1) == 1};
}

TEST_CASE("max_pool1d and avg_pool1d: random windows match the rows read by hand, in every layout") {
  std::mt19937_64 rng(51);
  Generator gen(52);
  for (int trial = 0; trial < 80; ++trial) {
    const Pool1dOptions o = random_options(rng);
    const int64_t l = std::max<int64_t>(std::uniform_int_distribution<int64_t>(1, 25)(rng), o.kernel_size);
    CAPTURE(trial);
    CAPTURE(o.kernel_size);
    CAPTURE(o.padding);
    CAPTURE(l);
    const Tensor x = randn({2, 3, l}, kFloat64, &gen);
    const Tensor view = trial % 2 == 0 ? x : x.transpose(1, 2).contiguous().transpose(1, 2);
    for (const bool max : {true, false}) {
      const Tensor y = max ? max_pool1d(view, o) : avg_pool1d(view, o);
      CHECK_CLOSE(y, rows_of(x, [&](const std::vector<double>& row) { return naive_pool_row(row, o, max); }),
                  1e-12, 1e-12);
    }
  }
}

TEST_CASE("adaptive 1-D pooling: every output size of a length, shorter or longer, matches its cells") {
  Generator gen(53);
  for (const int64_t l : {1, 5, 7, 12}) {
    for (const int64_t cells : {1, 2, 3, 5, 8, 13}) {
      CAPTURE(l);
      CAPTURE(cells);
      const Tensor x = randn({2, 3, l}, kFloat64, &gen);
      for (const bool max : {true, false}) {
        const Tensor y = max ? adaptive_max_pool1d(x, cells) : adaptive_avg_pool1d(x, cells);
        CHECK_CLOSE(y, rows_of(x, [&](const std::vector<double>& row) { return naive_adaptive_row(row, cells, max); }),
                    1e-12, 1e-12);
      }
    }
  }
}

TEST_CASE("1-D pooling: gradients by gradcheck, and a max's gradient reaches its window's maximum") {
  Generator gen(54);
  const Tensor x = randn({2, 3, 10}, kFloat64, &gen).requires_grad_();
  const Pool1dOptions o{.kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false};
  for (const auto& fn : std::vector<std::function<Tensor(const Tensor&)>>{
           [&](const Tensor& t) { return avg_pool1d(t, o); }, [&](const Tensor& t) { return max_pool1d(t, o); },
           [](const Tensor& t) { return adaptive_avg_pool1d(t, 4); },
           [](const Tensor& t) { return adaptive_max_pool1d(t, 4); }}) {
    const GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) { return fn(in[0]); }, {x});
    CHECK_MESSAGE(r.ok, r.message);
  }
  const Tensor row = tensor({1, 5, 2, 0, 3, 3}, {1, 1, 6}, kFloat64).requires_grad_();
  sum(max_pool1d(row, {.kernel_size = 2})).backward();
  CHECK(row.grad().to_vector<double>() == std::vector<double>{0, 1, 1, 0, 1, 0});
}

TEST_CASE("1-D pooling of one sample (C, L) equals the batch of one") {
  Generator gen(55);
  const Tensor x = randn({4, 9}, kFloat64, &gen);
  const Pool1dOptions o{.kernel_size = 3, .stride = 2};
  CHECK_CLOSE(max_pool1d(x, o), max_pool1d(x.unsqueeze(0), o).squeeze(0), 0, 0);
  CHECK_CLOSE(avg_pool1d(x, o), avg_pool1d(x.unsqueeze(0), o).squeeze(0), 0, 0);
  CHECK(adaptive_avg_pool1d(x, 2).sizes() == Shape{4, 2});
  CHECK(adaptive_max_pool1d(x, 5).sizes() == Shape{4, 5});
}

TEST_CASE("1-D pooling: bad arguments name the op and print the values") {
  const Tensor x = zeros({2, 3, 8});
  CHECK_THROWS_WITH_FRAGMENT(
      max_pool1d(zeros({2, 3, 4, 4}), {.kernel_size = 2}), ShapeError,
      "[max_pool1d] expects a 3-D input (N, C, L) or one 2-D sample (C, L), got shape (2, 3, 4, 4)");
  CHECK_THROWS_WITH_FRAGMENT(
      avg_pool1d(x, {.kernel_size = 0}), ValueError,
      "[avg_pool1d] needs a positive kernel_size and stride and 0 <= padding <= kernel_size / 2, got kernel_size 0");
  CHECK_THROWS_WITH_FRAGMENT(max_pool1d(x, {.kernel_size = 2, .padding = 2}), ValueError, "padding 2");
  CHECK_THROWS_WITH_FRAGMENT(max_pool1d(x, {.kernel_size = 3, .stride = -1}), ValueError, "stride -1");
  CHECK_THROWS_WITH_FRAGMENT(max_pool1d(zeros({2, 3, 2}), {.kernel_size = 5, .padding = 1}), ShapeError,
                             "[max_pool1d] input (2, 3, 2) with kernel_size 5, stride 5, padding 1 gives an empty "
                             "output (0)");
  CHECK_THROWS_WITH_FRAGMENT(adaptive_avg_pool1d(x, 0), ValueError, "[adaptive_avg_pool1d] output_size must be "
                             "positive, got 0");
  CHECK_THROWS_WITH_FRAGMENT(adaptive_max_pool1d(zeros({8}), 2), ShapeError, "got shape (8,)");
}

}  // namespace
}  // namespace loom
