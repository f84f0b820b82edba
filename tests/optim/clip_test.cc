// File: tests/optim/clip_test.cc
// clip_grad_norm_: the global norm by hand, scaling above max_norm only,
// parameters without gradients, mixed dtypes, strided gradients, NaN, errors.
#include "optim/clip.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

Tensor param_with_grad(const std::vector<double>& grad, const Shape& sizes, DType dtype) {
  Tensor p = zeros(sizes, {.dtype = dtype, .requires_grad = true});
  p.set_grad(tensor(grad, sizes, {.dtype = dtype}));
  return p;
}

TEST_CASE("clip_grad_norm_ scales every gradient by max_norm / (norm + 1e-6) above max_norm") {
  Tensor a = param_with_grad({3.0, 4.0}, {2}, DType::Float64);
  Tensor b = param_with_grad({12.0}, {1, 1}, DType::Float64);
  Tensor no_grad = zeros({3}, {.requires_grad = true});
  const double norm = optim::clip_grad_norm_({a, no_grad, b}, 6.5);
  CHECK(norm == 13.0);  // sqrt(9 + 16 + 144)
  const double scale = 6.5 / (13.0 + 1e-6);
  CHECK_CLOSE(a.grad(), tensor({3.0 * scale, 4.0 * scale}, {2}, kF64), 1e-15, 0);
  CHECK_CLOSE(b.grad(), tensor({12.0 * scale}, {1, 1}, kF64), 1e-15, 0);
  CHECK_FALSE(no_grad.grad().defined());
}

TEST_CASE("clip_grad_norm_ leaves gradients within max_norm alone") {
  Tensor a = param_with_grad({0.3, -0.4}, {2}, DType::Float32);
  const double norm = optim::clip_grad_norm_({a}, 1.0);
  CHECK(norm == doctest::Approx(0.5).epsilon(1e-7));
  CHECK(a.grad().to_vector<float>() == std::vector<float>{0.3f, -0.4f});
  CHECK(optim::clip_grad_norm_({zeros({2}, {.requires_grad = true})}, 1.0) == 0.0);
  CHECK(optim::clip_grad_norm_({}, 1.0) == 0.0);
}

TEST_CASE("clip_grad_norm_ sums float32 and float64 gradients and scales strided ones") {
  Tensor a = param_with_grad({1.0, 2.0, 2.0}, {3}, DType::Float32);
  Tensor b = zeros({2, 3}, {.dtype = DType::Float64, .requires_grad = true});
  b.set_grad(tensor({0, 4, 0, 0, 0, 0}, {3, 2}, kF64).t());  // a transposed, strided view
  const double norm = optim::clip_grad_norm_({a, b}, 1.0);
  CHECK(norm == doctest::Approx(5.0).epsilon(1e-12));  // sqrt(1 + 4 + 4 + 16)
  const double scale = 1.0 / (5.0 + 1e-6);
  CHECK_CLOSE(a.grad(), tensor({scale, 2 * scale, 2 * scale}, {3}), 1e-6, 0);
  CHECK_CLOSE(b.grad(), tensor({0, 0, 0, 4 * scale, 0, 0}, {2, 3}, kF64), 1e-15, 0);
}

TEST_CASE("clip_grad_norm_ propagates a NaN norm into the gradients, as PyTorch does") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = param_with_grad({nan, 1.0}, {2}, DType::Float64);
  CHECK(std::isnan(optim::clip_grad_norm_({a}, 1.0)));
  CHECK(std::isnan(a.grad().to_vector<double>()[1]));
}

TEST_CASE("clip_grad_norm_ rejects bad arguments") {
  Tensor a = param_with_grad({1.0}, {1}, DType::Float64);
  CHECK_THROWS_WITH_FRAGMENT(optim::clip_grad_norm_({a}, -1.0), ValueError,
                             "[clip_grad_norm_] max_norm must be >= 0, got -1");
  CHECK_THROWS_WITH_FRAGMENT(optim::clip_grad_norm_({a, Tensor()}, 1.0), ValueError,
                             "parameter 1 is undefined");
}

}  // namespace
}  // namespace loom
