// File: tests/core/ops/softmax_test.cc
// softmax / log_softmax: hand values, a naive per-row reference over every dim
// (including strided views), gradcheck, and argument errors.
#include "core/ops/softmax.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/elementwise.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

// Softmax (or log-softmax) of a row-major tensor of `sizes` along `dim`, by
// splitting the index into (outer, dim, inner).
std::vector<double> naive_softmax(const std::vector<double>& x, const Shape& sizes, int64_t dim,
                                  bool log) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= sizes[d];
  for (size_t d = dim + 1; d < sizes.size(); ++d) inner *= sizes[d];
  const int64_t length = sizes[dim];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * length + k) * inner + i; };
      double max = -std::numeric_limits<double>::infinity(), total = 0.0;
      for (int64_t k = 0; k < length; ++k) max = std::max(max, x[at(k)]);
      for (int64_t k = 0; k < length; ++k) total += std::exp(x[at(k)] - max);
      for (int64_t k = 0; k < length; ++k) {
        y[at(k)] = log ? x[at(k)] - max - std::log(total) : std::exp(x[at(k)] - max) / total;
      }
    }
  }
  return y;
}

void check_against_naive(const Tensor& x, int64_t dim) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  const std::vector<double> values = x.to_vector<double>();
  const Tensor expected = tensor(naive_softmax(values, x.sizes(), d, false), x.sizes(), kF64);
  const Tensor expected_log = tensor(naive_softmax(values, x.sizes(), d, true), x.sizes(), kF64);
  const double tol = x.dtype() == DType::Float64 ? 1e-12 : 1e-5;
  CHECK_CLOSE(softmax(x, dim), expected, tol, tol);
  CHECK_CLOSE(log_softmax(x, dim), expected_log, tol, tol);
}

TEST_CASE("softmax of [1, 2, 3] by hand") {
  // exp(k) / (e + e^2 + e^3) for k = 1, 2, 3; log-softmax is k - log(e + e^2 + e^3).
  const Tensor x = tensor({1, 2, 3}, {3}, kF64);
  CHECK_CLOSE(softmax(x, 0),
              tensor({0.09003057317038046, 0.24472847105479764, 0.6652409557748219}, {3}, kF64),
              1e-12, 0);
  CHECK_CLOSE(log_softmax(x, -1),
              tensor({-2.4076059644443806, -1.4076059644443806, -0.4076059644443806}, {3}, kF64),
              1e-12, 0);
}

TEST_CASE("softmax subtracts the max: huge logits neither overflow nor underflow") {
  const Tensor x = tensor({1000, 1001, 1002, -1000, 0, 1000}, {2, 3});
  const Tensor y = softmax(x, 1);
  CHECK_CLOSE(y.slice(0, 0, 1), softmax(tensor({0, 1, 2}, {1, 3}), 1), 1e-6, 0);
  // Absolute 1e-5 on the 0: oneDNN's float32 log of a sum near 1 is within ~1.5e-6.
  CHECK_CLOSE(log_softmax(x, 1).slice(0, 1, 2), tensor({-2000, -1000, 0}, {1, 3}), 1e-6, 1e-5);
}

TEST_CASE("softmax matches a naive reference over every dim of 3-D and 4-D tensors") {
  Generator gen(11);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor x3 = randn({2, 3, 4}, {.dtype = dtype}, &gen);
    const Tensor x4 = randn({2, 3, 4, 5}, {.dtype = dtype}, &gen) * 3.0;  // wider range
    for (int64_t dim : {0, 1, 2, -1}) check_against_naive(x3, dim);
    for (int64_t dim : {0, 1, 2, 3, -2}) check_against_naive(x4, dim);
  }
}

TEST_CASE("softmax reads strided views: transposed, permuted, sliced, channels-last") {
  Generator gen(12);
  const Tensor x3 = randn({4, 3, 5}, kF64, &gen);
  const Tensor x4 = randn({2, 3, 4, 5}, kF64, &gen);
  const Tensor transposed = x3.transpose(0, 2);  // (5, 3, 4)
  const Tensor sliced = x3.slice(2, 0, 5, 2);    // (4, 3, 3), stride 2 in the last dim
  const Tensor permuted = x4.permute({3, 1, 0, 2});
  const Tensor channels_last = x4.contiguous(MemoryFormat::ChannelsLast);
  REQUIRE(!transposed.is_contiguous());
  REQUIRE(!sliced.is_contiguous());
  REQUIRE(!channels_last.is_contiguous());
  for (int64_t dim : {0, 1, 2}) {
    check_against_naive(transposed, dim);
    check_against_naive(sliced, dim);
  }
  for (int64_t dim : {0, 1, 2, 3}) {
    check_against_naive(permuted, dim);
    check_against_naive(channels_last, dim);
  }
}

TEST_CASE("softmax of a 0-D tensor is 1") {
  const Tensor x = tensor({5.0}, {}, kF64);
  CHECK(softmax(x, 0).dim() == 0);
  CHECK(softmax(x, -1).item() == 1.0);
  CHECK(log_softmax(x, 0).item() == 0.0);
}

TEST_CASE("softmax and log_softmax gradcheck in float64") {
  Generator gen(13);
  const Tensor x3 = randn({2, 3, 4}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const Tensor x4 = randn({2, 3, 2, 2}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  for (int64_t dim : {0, 1, -1}) {
    auto soft = [dim](const std::vector<Tensor>& in) { return softmax(in[0], dim); };
    auto log_soft = [dim](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); };
    GradcheckResult r = gradcheck(soft, {x3});
    CHECK_MESSAGE(r.ok, r.message);
    r = gradcheck(log_soft, {x3});
    CHECK_MESSAGE(r.ok, r.message);
  }
  // A non-contiguous input, as a transposed or channels-last view feeds it.
  auto soft_view = [](const std::vector<Tensor>& in) {
    return softmax(in[0].permute({0, 2, 3, 1}), 2);
  };
  auto log_soft_view = [](const std::vector<Tensor>& in) {
    return log_softmax(in[0].transpose(1, 3), 1);
  };
  GradcheckResult r = gradcheck(soft_view, {x4});
  CHECK_MESSAGE(r.ok, r.message);
  r = gradcheck(log_soft_view, {x4});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("softmax rejects a bad dim and non-float inputs") {
  const Tensor x = zeros({2, 3, 4});
  CHECK_THROWS_WITH_FRAGMENT(softmax(x, 3), IndexError,
                             "[softmax] dim 3 is out of range for a 3-D");
  CHECK_THROWS_WITH_FRAGMENT(log_softmax(x, -4), IndexError,
                             "[log_softmax] dim -4 is out of range");
  const Tensor ints = zeros({2, 3}, {.dtype = DType::Int64});
  CHECK_THROWS_WITH_FRAGMENT(softmax(ints, 1), TypeError, "[softmax] input has dtype int64");
  CHECK_THROWS_WITH_FRAGMENT(log_softmax(Tensor(), 0), ValueError,
                             "[log_softmax] input is an undefined");
}

}  // namespace
}  // namespace loom
