// File: tests/core/ops/reduction_test.cc
// sum / mean / max / argmax / sum_to / any / all / cumsum / cumprod / prod: hand values, a naive reference over
// row-major values for several dim sets (contiguous, strided and channels-last
// inputs), tie and NaN rules, gradients, and argument errors.
// N batch, C channels, H, W.
#include "core/ops/reduction.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/compare.h"
#include "core/ops/elementwise.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

enum class Naive { Sum, Mean, Max };

// Reduces row-major `x` over `dims` (non-negative) by walking every input index;
// the result has the keepdim shape.
Tensor naive_reduce(const Tensor& x, const std::vector<int64_t>& dims, Naive op) {
  const Shape& sizes = x.sizes();
  Shape keep = sizes;
  for (int64_t d : dims) keep[d] = 1;
  const std::vector<double> v = x.to_vector<double>();
  std::vector<double> acc(numel_of(keep), op == Naive::Max ? -INFINITY : 0.0);
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    int64_t rest = i, out = 0, stride = 1;
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
      int64_t index = rest % sizes[d];
      rest /= sizes[d];
      out += (keep[d] == 1 ? 0 : index) * stride;
      stride *= keep[d];
    }
    acc[out] = op == Naive::Max ? std::max(acc[out], v[i]) : acc[out] + v[i];
  }
  if (op == Naive::Mean) {
    for (double& a : acc) a /= static_cast<double>(v.size()) / static_cast<double>(acc.size());
  }
  return tensor(acc, keep, kF64);
}

// Max along `dim` with the first index of the maximum, as (values, indices) in the keepdim shape.
std::pair<Tensor, Tensor> naive_max_dim(const Tensor& x, int64_t dim) {
  int64_t outer = 1, inner = 1, length = x.sizes()[dim];
  for (int64_t d = 0; d < dim; ++d) outer *= x.sizes()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.sizes()[d];
  const std::vector<double> v = x.to_vector<double>();
  std::vector<double> values, indices;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < length; ++k) {
        if (v[(o * length + k) * inner + i] > v[(o * length + best) * inner + i]) best = k;
      }
      values.push_back(v[(o * length + best) * inner + i]);
      indices.push_back(static_cast<double>(best));
    }
  }
  Shape keep = x.sizes();
  keep[dim] = 1;
  return {tensor(values, keep, kF64), tensor(indices, keep, kF64)};
}

void check_grad(const GradcheckFn& fn, const Tensor& x) {
  GradcheckResult r = gradcheck(fn, {x});
  CHECK_MESSAGE(r.ok, r.message);
}

// --- sum / mean ------------------------------------------------------------------------

TEST_CASE("sum and mean by hand, over all elements and over dims, with keepdim") {
  const Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kF64);
  CHECK(sum(x).dim() == 0);
  CHECK(sum(x).item() == 21);
  CHECK(mean(x).item() == 3.5);
  CHECK(sum(x, {0}).to_vector<double>() == std::vector<double>{5, 7, 9});
  CHECK(sum(x, {0}).sizes() == Shape{3});
  CHECK(sum(x, {1}, true).sizes() == Shape{2, 1});
  CHECK(sum(x, {1}, true).to_vector<double>() == std::vector<double>{6, 15});
  CHECK(sum(x, {-1}).to_vector<double>() == std::vector<double>{6, 15});
  CHECK(sum(x, {0, 1}).sizes() == Shape{});
  CHECK(sum(x, {1, 0}, true).sizes() == Shape{1, 1});
  CHECK(mean(x, {0}).to_vector<double>() == std::vector<double>{2.5, 3.5, 4.5});
  CHECK(mean(x, {-1}, true).to_vector<double>() == std::vector<double>{2, 5});
  CHECK(mean(x, {-1}, true).sizes() == Shape{2, 1});
}

TEST_CASE("sum and mean of 0-d and empty tensors") {
  CHECK(sum(full({}, 3.0)).item() == 3);
  CHECK(mean(full({}, 3.0), {0}).item() == 3);
  CHECK(sum(zeros({0, 3})).item() == 0);
  CHECK(sum(zeros({0, 3}), {0}).to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(std::isnan(mean(zeros({0})).item()));
}

TEST_CASE("sum accumulates in double: a million float32 0.1s give 100000") {
  // Accumulating in float32 drifts to about 100958.
  CHECK(sum(full({1000000}, 0.1)).item() == 100000.0);
}

TEST_CASE("sum and mean match the naive reference: dim sets, keepdim, strided and channels-last") {
  Generator gen(1);
  const std::vector<std::vector<int64_t>> dim_sets = {{0}, {1, 3}, {3}, {0, 1, 2, 3}, {2, 0}};
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor x = randn({2, 3, 4, 5}, {.dtype = dtype}, &gen);  // N 2, C 3, H 4, W 5
    const Tensor inputs[] = {x, x.contiguous(MemoryFormat::ChannelsLast),
                             randn({5, 4, 3, 2}, {.dtype = dtype}, &gen).permute({3, 2, 1, 0}),
                             randn({2, 3, 8, 5}, {.dtype = dtype}, &gen).slice(2, 1, 8, 2)};
    const double tol = dtype == DType::Float64 ? 1e-12 : 1e-5;
    for (const Tensor& input : inputs) {
      for (const auto& dims : dim_sets) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(shape_str(input.strides()));
        CAPTURE(shape_str(Shape(dims.begin(), dims.end())));
        const Shape shape_dims(dims.begin(), dims.end());
        CHECK_CLOSE(sum(input, shape_dims, true), naive_reduce(input, dims, Naive::Sum), tol, tol);
        CHECK_CLOSE(mean(input, shape_dims, true), naive_reduce(input, dims, Naive::Mean), tol, tol);
        CHECK_CLOSE(sum(input, shape_dims).reshape(naive_reduce(input, dims, Naive::Sum).sizes()),
                    naive_reduce(input, dims, Naive::Sum), tol, tol);
        CHECK(sum(input, shape_dims).dtype() == dtype);
      }
      CHECK_CLOSE(sum(input).reshape({1, 1, 1, 1}), naive_reduce(input, {0, 1, 2, 3}, Naive::Sum), tol, tol);
    }
  }
}

// --- max / argmax ------------------------------------------------------------------------

TEST_CASE("max over all elements; ties share the gradient evenly") {
  const Tensor x = tensor({1, 5, 5, 2}, {2, 2}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor m = max(x);
  CHECK(m.dim() == 0);
  CHECK(m.item() == 5);
  m.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0.5, 0.5, 0});
  const Tensor y = tensor({3, 3, 3}, {3}, {.dtype = DType::Float64, .requires_grad = true});
  mul(max(y), 6.0).backward();
  CHECK(y.grad().to_vector<double>() == std::vector<double>{2, 2, 2});
  CHECK(max(tensor({-3, -1, -2}, {3})).item() == -1);
  CHECK(std::isnan(max(tensor({1, std::nan(""), 3}, {3})).item()));
}

TEST_CASE("max(dim): values and first-occurrence indices, keepdim, argmax") {
  const Tensor x = tensor({1, 3, 3, 7, 2, 7}, {2, 3}, kF64);
  ValuesIndices r = max(x, 1);
  CHECK(r.values.to_vector<double>() == std::vector<double>{3, 7});
  CHECK(r.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(r.indices.dtype() == DType::Int64);
  r = max(x, 0);
  CHECK(r.values.to_vector<double>() == std::vector<double>{7, 3, 7});
  CHECK(r.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  r = max(x, -1, true);
  CHECK(r.values.sizes() == Shape{2, 1});
  CHECK(r.indices.sizes() == Shape{2, 1});
  CHECK(argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(argmax(x, 0, true).sizes() == Shape{1, 3});
  const Tensor with_nan = tensor({1, std::nan(""), 5}, {1, 3});
  CHECK(argmax(with_nan, 1).item() == 1);
  CHECK(std::isnan(max(with_nan, 1).values.item()));
  ValuesIndices scalar = max(full({}, 4.0), 0);
  CHECK(scalar.values.item() == 4);
  CHECK(scalar.indices.item() == 0);
}

TEST_CASE("max(dim) sends the gradient to the first maximum only") {
  const Tensor x = tensor({1, 3, 3, 7, 2, 7}, {2, 3}, {.dtype = DType::Float64, .requires_grad = true});
  max(x, 1).values.backward(tensor({10, 20}, {2}, kF64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 10, 0, 20, 0, 0});
  CHECK_FALSE(argmax(x, 1).requires_grad());
  CHECK_FALSE(max(x, 1).indices.requires_grad());
}

TEST_CASE("max(dim) matches the naive reference on every dim of strided and channels-last input") {
  Generator gen(2);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor x = randn({2, 3, 4, 5}, {.dtype = dtype}, &gen);
    for (const Tensor& input : {x, x.contiguous(MemoryFormat::ChannelsLast), x.transpose(0, 2)}) {
      for (int64_t dim = 0; dim < 4; ++dim) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(dim);
        auto [values, indices] = naive_max_dim(input, dim);
        ValuesIndices r = max(input, dim, true);
        CHECK_CLOSE(r.values, values, 0, 0);
        CHECK_CLOSE(r.indices, indices, 0, 0);
        CHECK_CLOSE(argmax(input, dim - 4), indices.squeeze(dim), 0, 0);
      }
      CHECK(max(input).item() == naive_reduce(input, {0, 1, 2, 3}, Naive::Max).item());
    }
  }
}

// --- min, var, std, logsumexp (composites) ------------------------------------------------

TEST_CASE("min and argmin mirror max: first-occurrence indices, ties share the gradient, NaN wins") {
  Tensor x = tensor({4, 1, 1, -7, 2, -7}, {2, 3}, {.dtype = DType::Float64, .requires_grad = true});
  const ValuesIndices r = min(x, 1);
  CHECK(r.values.to_vector<double>() == std::vector<double>{1, -7});
  CHECK(r.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(argmin(x, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(argmin(x, -1, true).sizes() == Shape{2, 1});
  CHECK_FALSE(argmin(x, 1).requires_grad());
  r.values.backward(tensor({10, 20}, {2}, kF64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 10, 0, 20, 0, 0});
  x.set_grad(Tensor());
  const Tensor all = min(x);
  CHECK(all.item() == -7);
  all.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 0.5, 0, 0.5});
  CHECK(std::isnan(min(tensor({1, std::nan(""), -3}, {3})).item()));
  CHECK_THROWS_WITH_FRAGMENT(min(zeros({0, 2})), ValueError, "[min] of an empty tensor (shape (0, 2))");
  CHECK_THROWS_WITH_FRAGMENT(min(zeros({0, 2}), 0), ValueError, "[min] dim 0 of shape (0, 2) is empty");
  CHECK_THROWS_WITH_FRAGMENT(argmin(zeros({2, 2}), 2), IndexError, "[min] dim 2 is out of range");
}

TEST_CASE("var and std match two-pass naive sums: dims, keepdim, corrections, strided input") {
  Generator gen(5);
  const Tensor base = randn({3, 4, 5}, kF64, &gen) * 3.0 + 100.0;  // far from 0: a one-pass formula would cancel
  for (const Tensor& x : {base, base.transpose(0, 2)}) {
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{0}, {1, 2}, {0, 1, 2}}) {
      for (int64_t correction : {0, 1, 2}) {
        CAPTURE(shape_str(dims));
        CAPTURE(correction);
        const Tensor mu = naive_reduce(x, dims, Naive::Mean);
        const Tensor squares = naive_reduce(mul(sub(x, mu), sub(x, mu)), dims, Naive::Sum);
        const double count = static_cast<double>(x.numel() / mu.numel());
        const Tensor expected = div(squares, count - static_cast<double>(correction));
        CHECK_CLOSE(var(x, dims, true, correction), expected, 1e-12, 0);
        CHECK_CLOSE(std(x, dims, true, correction), sqrt(expected), 1e-12, 0);
      }
    }
  }
  const Tensor x = tensor({1, 2, 3, 4}, {2, 2}, kF64);
  CHECK(var(x).item() == doctest::Approx(5.0 / 3));
  CHECK(var(x, {}, false, 0).item() == doctest::Approx(1.25));
  CHECK(var(x, {1}).to_vector<double>() == std::vector<double>{0.5, 0.5});
  CHECK(std(x, {0}, true).sizes() == Shape{1, 2});
  CHECK(std::isnan(var(tensor({3}, {1})).item()));  // one value, correction 1: 0 / 0, as PyTorch
  CHECK_THROWS_WITH_FRAGMENT(var(x, {0}, false, -1), ValueError, "[var] correction must be >= 0, got -1");
  CHECK_THROWS_WITH_FRAGMENT(std(x, {3}), IndexError, "[std] dim 3 is out of range");
}

TEST_CASE("logsumexp matches log(sum(exp)) and stays finite for large and infinite values") {
  Generator gen(6);
  const Tensor x = randn({2, 3, 4}, kF64, &gen) * 4.0;
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{1}, {0, 2}, {-1}}) {
    CAPTURE(shape_str(dims));
    CHECK_CLOSE(logsumexp(x, dims, true), log(sum(exp(x), dims, true)), 1e-14, 0);
    CHECK_CLOSE(logsumexp(x, dims), log(sum(exp(x), dims)), 1e-14, 0);
  }
  CHECK_CLOSE(logsumexp(x, {}), log(sum(exp(x))), 1e-14, 0);  // no dims: all of them, as var
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor wide = tensor({1000, 1000, -inf, -inf, 5, inf}, {3, 2}, kF64);
  const std::vector<double> rows = logsumexp(wide, {1}).to_vector<double>();
  CHECK(rows[0] == doctest::Approx(1000 + std::log(2.0)).epsilon(1e-15));
  CHECK(rows[1] == -inf);
  CHECK(rows[2] == inf);
  const Tensor big = tensor({1000, 1000}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  logsumexp(big, {0}).backward();
  CHECK(big.grad().to_vector<double>() == std::vector<double>{0.5, 0.5});
  CHECK_THROWS_WITH_FRAGMENT(logsumexp(zeros({0, 3}), {1}), ValueError, "[logsumexp] of an empty tensor");
}

TEST_CASE("gradcheck: min, var, std, logsumexp") {
  Generator gen(7);
  const Tensor x = randn({3, 4}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  check_grad([](const std::vector<Tensor>& in) { return min(in[0]); }, x);
  check_grad([](const std::vector<Tensor>& in) { return min(in[0], 1).values; }, x);
  check_grad([](const std::vector<Tensor>& in) { return var(in[0]); }, x);
  check_grad([](const std::vector<Tensor>& in) { return var(in[0], {0}, true, 0); }, x);
  check_grad([](const std::vector<Tensor>& in) { return std(in[0], {1}); }, x);
  check_grad([](const std::vector<Tensor>& in) { return logsumexp(in[0], {1}); }, x);
  check_grad([](const std::vector<Tensor>& in) { return logsumexp(in[0].t(), {0, 1}, true); }, x);
}

// --- sum_to -----------------------------------------------------------------------------------

TEST_CASE("sum_to sums broadcast dims away") {
  const Tensor x = arange(24, kF64).view({2, 3, 4});
  CHECK(sum_to(x, {3, 1}).to_vector<double>() == std::vector<double>{60, 92, 124});
  CHECK(sum_to(x, {3, 1}).sizes() == Shape{3, 1});
  CHECK(sum_to(x, {4}).to_vector<double>() == std::vector<double>{60, 66, 72, 78});
  CHECK(sum_to(x, {1, 3, 1}).sizes() == Shape{1, 3, 1});
  CHECK(sum_to(x, {}).item() == 276);
  CHECK(sum_to(x, {2, 3, 4}).is_same(x));
  CHECK_CLOSE(sum_to(x, {2, 1, 4}), naive_reduce(x, {1}, Naive::Sum), 0, 0);
  CHECK_THROWS_WITH_FRAGMENT(sum_to(x, {5}), ShapeError, "[sum_to] shape (5,) does not broadcast to (2, 3, 4)");
  CHECK_THROWS_WITH_FRAGMENT(sum_to(x, {1, 2, 3, 4}), ShapeError,
                             "[sum_to] cannot sum shape (2, 3, 4) down to (1, 2, 3, 4) with more dims");
}

// --- gradients --------------------------------------------------------------------------------

TEST_CASE("gradcheck: sum and mean over all, over dims, keepdim, strided input") {
  Generator gen(3);
  for (const Shape& sizes : {Shape{3, 4}, Shape{2, 3, 2, 2}}) {
    CAPTURE(shape_str(sizes));
    const Tensor x = randn(sizes, {.dtype = DType::Float64, .requires_grad = true}, &gen);
    check_grad([](const std::vector<Tensor>& in) { return sum(in[0]); }, x);
    check_grad([](const std::vector<Tensor>& in) { return mean(in[0]); }, x);
    check_grad([](const std::vector<Tensor>& in) { return sum(in[0], {0}); }, x);
    check_grad([](const std::vector<Tensor>& in) { return sum(in[0], {-1, 0}, true); }, x);
    check_grad([](const std::vector<Tensor>& in) { return mean(in[0], {1}); }, x);
    check_grad([](const std::vector<Tensor>& in) { return mean(in[0], {0, -1}, true); }, x);
    check_grad([](const std::vector<Tensor>& in) { return mean(in[0].transpose(0, 1), {0}); }, x);
  }
}

TEST_CASE("gradcheck: max over all, max(dim) values, sum_to") {
  Generator gen(4);
  for (const Shape& sizes : {Shape{3, 4}, Shape{2, 3, 4}}) {
    CAPTURE(shape_str(sizes));
    const Tensor x = randn(sizes, {.dtype = DType::Float64, .requires_grad = true}, &gen);
    check_grad([](const std::vector<Tensor>& in) { return max(in[0]); }, x);
    check_grad([](const std::vector<Tensor>& in) { return max(in[0], 0).values; }, x);
    check_grad([](const std::vector<Tensor>& in) { return max(in[0], -1, true).values; }, x);
    check_grad([](const std::vector<Tensor>& in) { return max(in[0].t().contiguous(), 1).values; },
               randn({4, 3}, {.dtype = DType::Float64, .requires_grad = true}, &gen));
    check_grad([](const std::vector<Tensor>& in) { return sum_to(in[0], {1}); }, x);
    check_grad([&](const std::vector<Tensor>& in) {
      Shape target(in[0].sizes().begin() + 1, in[0].sizes().end());
      target[0] = 1;
      return sum_to(in[0], target);
    }, x);
  }
}

// --- cumsum ------------------------------------------------------------------------------

// The running sum (or product) along `dim` by walking every index, in double.
std::vector<double> naive_scan(const Tensor& x, int64_t dim, bool product = false) {
  const std::vector<double> v = x.contiguous().to(DType::Float64).to_vector<double>();
  std::vector<double> out(v.size());
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t k = static_cast<int64_t>(i) / inner % n;
    out[i] = k == 0 ? v[i] : product ? v[i] * out[i - inner] : v[i] + out[i - inner];
  }
  return out;
}

TEST_CASE("cumsum is the running total, as torch.cumsum") {
  const Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(cumsum(x, 1).to_vector<float>() == std::vector<float>{1, 3, 6, 4, 9, 15});
  CHECK(cumsum(x, 0).to_vector<float>() == std::vector<float>{1, 2, 3, 5, 7, 9});
  CHECK(cumsum(x, -1).dtype() == DType::Float32);
  const Tensor mask = tensor({1, 0, 1, 1}, {4}, {.dtype = DType::Bool});
  CHECK(cumsum(mask, 0).dtype() == DType::Int64);  // a mask's cumsum counts
  CHECK(cumsum(mask, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 2, 3});
  const Tensor bytes = tensor({200, 100, 7}, {3}, {.dtype = DType::UInt8});
  CHECK(cumsum(bytes, 0).to_vector<int64_t>() == std::vector<int64_t>{200, 300, 307});
  CHECK(cumsum(bytes, 0, DType::UInt8).to_vector<int64_t>() == std::vector<int64_t>{200, 44, 51});  // wraps
  CHECK(cumsum(x, 1, DType::Float64).dtype() == DType::Float64);
  CHECK(cumsum(full({}, 2.5), 0).to_vector<float>() == std::vector<float>{2.5f});
  CHECK(cumsum(zeros({0, 3}), 0).sizes() == Shape{0, 3});
}

TEST_CASE("cumsum matches the naive running sum on random shapes, dims, dtypes and layouts") {
  Generator gen(404);
  for (int trial = 0; trial < 60; ++trial) {
    Shape sizes(1 + trial % 4);
    for (size_t d = 0; d < sizes.size(); ++d) sizes[d] = 1 + (trial * 7 + static_cast<int64_t>(d) * 3) % 6;
    Tensor x = trial % 3 == 0 ? randint(-50, 50, sizes, {.dtype = DType::Int32}, &gen)
                              : randn(sizes, {.dtype = trial % 2 ? DType::Float64 : DType::Float32}, &gen);
    if (x.dim() >= 2 && trial % 2 == 0) x = x.transpose(0, x.dim() - 1);
    const int64_t dim = trial % x.dim();
    CAPTURE(trial);
    CAPTURE(shape_str(x.sizes()));
    CAPTURE(dim);
    const Tensor y = cumsum(x, dim);
    CHECK(y.dtype() == (is_floating(x.dtype()) ? x.dtype() : DType::Int64));
    CHECK_CLOSE(y.to(DType::Float64), tensor(naive_scan(x, dim), x.sizes(), kF64), 1e-5, 1e-5);
  }
}

TEST_CASE("cumsum's gradient is the running sum of dy from the end") {
  Tensor x = tensor({1, 2, 3}, {3}, kF64).requires_grad_(true);
  cumsum(x, 0).backward(tensor({1, 10, 100}, {3}, kF64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{111, 110, 100});
  Generator gen(8);
  const Tensor y = randn({3, 4, 5}, kF64, &gen).requires_grad_(true);
  for (int64_t dim : {0, 1, 2}) {
    CAPTURE(dim);
    check_grad([dim](const std::vector<Tensor>& in) { return cumsum(in[0], dim); }, y);
    check_grad([dim](const std::vector<Tensor>& in) { return cumsum(in[0].transpose(0, 2), dim); }, y);
  }
  Tensor f = tensor({1, 2}, {2}).requires_grad_(true);
  CHECK(cumsum(f, 0, DType::Float64).requires_grad());  // through the differentiable cast
}

TEST_CASE("cumsum errors name the op and the fix") {
  CHECK_THROWS_WITH_FRAGMENT(cumsum(zeros({2, 3}), 2), IndexError, "[cumsum] dim 2 is out of range");
  CHECK_THROWS_WITH_FRAGMENT(cumsum(zeros({2}), 0, DType::Bool), TypeError, "[cumsum] the result cannot be Bool");
  CHECK_THROWS_WITH_FRAGMENT(cumsum(Tensor(), 0), ValueError, "[cumsum] x is an undefined tensor");
}

// --- any, all, count_nonzero ---------------------------------------------------------------

TEST_CASE("any, all and count_nonzero as torch's: any dtype, NaN is nonzero, empty reductions") {
  const Tensor x = tensor({0, 1, NAN, 0, 0, 0}, {2, 3});
  CHECK(any(x).dtype() == DType::Bool);
  CHECK(any(x).dim() == 0);
  CHECK(any(x).item() == 1.0);
  CHECK(all(x).item() == 0.0);
  CHECK(any(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(all(x, 0).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0});
  CHECK(all(tensor({2, NAN, -1}, {3})).item() == 1.0);  // NaN counts as nonzero
  CHECK(any(x, -1, true).sizes() == Shape{2, 1});
  CHECK(count_nonzero(x).to_vector<int64_t>() == std::vector<int64_t>{2});
  CHECK(count_nonzero(x, {0}).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1});
  const Tensor mask = tensor({1, 1, 0}, {3}, {.dtype = DType::Bool});
  CHECK(any(mask).item() == 1.0);
  CHECK(all(mask).item() == 0.0);
  CHECK(all(tensor({5, -3}, {2}, {.dtype = DType::Int64})).item() == 1.0);
  CHECK(any(zeros({0})).item() == 0.0);  // over no elements: any false, all true
  CHECK(all(zeros({0})).item() == 1.0);
  CHECK(all(zeros({2, 0}), 1).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(any(full({}, 3.0), 0).item() == 1.0);
  Generator gen(406);
  for (int trial = 0; trial < 20; ++trial) {
    const Tensor r = randint(0, 3, {3, 4, 5}, {.dtype = DType::Int32}, &gen).transpose(0, 2);
    const int64_t dim = trial % 3;
    const std::vector<double> values = r.contiguous().to(DType::Float64).to_vector<double>();
    CAPTURE(trial);
    // Naive: walk the (5, 4, 3) values, one output per index with `dim` dropped.
    const Shape sizes = r.sizes();
    Shape out_sizes = sizes;
    out_sizes.erase(out_sizes.begin() + dim);
    std::vector<double> any_ref(numel_of(out_sizes), 0), all_ref(numel_of(out_sizes), 1), count(numel_of(out_sizes));
    for (int64_t i = 0; i < numel_of(sizes); ++i) {
      const int64_t idx[3] = {i / (sizes[1] * sizes[2]), i / sizes[2] % sizes[1], i % sizes[2]};
      int64_t out = 0;
      for (int64_t d = 0; d < 3; ++d) {
        if (d != dim) out = out * sizes[d] + idx[d];
      }
      const bool nonzero = values[i] != 0;
      any_ref[out] = any_ref[out] || nonzero;
      all_ref[out] = all_ref[out] && nonzero;
      count[out] += nonzero;
    }
    CHECK(testing::values(any(r, dim)) == any_ref);
    CHECK(testing::values(all(r, dim)) == all_ref);
    CHECK(testing::values(count_nonzero(r, {dim})) == count);
  }
  CHECK_THROWS_WITH_FRAGMENT(any(x, 2), IndexError, "[any] dim 2 is out of range");
  CHECK_THROWS_WITH_FRAGMENT(all(Tensor()), ValueError, "[all] x is an undefined tensor");
}

// --- cumprod and prod ---------------------------------------------------------------------

// x with about a quarter of its elements set to exactly 0, so that lines hold
// none, one or several zeros.
Tensor with_zeros(const Tensor& x, Generator& gen) {
  return masked_fill(x, lt(rand(x.sizes(), x.options(), &gen), 0.25), 0.0);
}

TEST_CASE("cumprod and prod multiply as torch.cumprod and torch.prod") {
  const Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(cumprod(x, 1).to_vector<float>() == std::vector<float>{1, 2, 6, 4, 20, 120});
  CHECK(cumprod(x, 0).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 10, 18});
  CHECK(prod(x).to_vector<float>() == std::vector<float>{720});
  CHECK(prod(x).dim() == 0);
  CHECK(prod(x, 1).to_vector<float>() == std::vector<float>{6, 120});
  CHECK(prod(x, 0, true).sizes() == Shape{1, 3});
  CHECK(prod(x, -1, false, DType::Float64).dtype() == DType::Float64);
  const Tensor bytes = tensor({16, 16, 2}, {3}, {.dtype = DType::UInt8});
  CHECK(cumprod(bytes, 0).dtype() == DType::Int64);
  CHECK(cumprod(bytes, 0).to_vector<int64_t>() == std::vector<int64_t>{16, 256, 512});
  CHECK(cumprod(bytes, 0, DType::UInt8).to_vector<int64_t>() == std::vector<int64_t>{16, 0, 0});  // wraps
  const Tensor big = tensor({65536, 65536, 3}, {3}, {.dtype = DType::Int32});
  CHECK(cumprod(big, 0, DType::Int32).to_vector<int64_t>() == std::vector<int64_t>{65536, 0, 0});
  CHECK(prod(bytes).dtype() == DType::Int64);
  CHECK(prod(bytes).to_vector<int64_t>() == std::vector<int64_t>{512});
  const Tensor mask = tensor({1, 1, 0}, {3}, {.dtype = DType::Bool});
  CHECK(cumprod(mask, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0});
  CHECK(prod(mask).to_vector<int64_t>() == std::vector<int64_t>{0});
  CHECK(prod(zeros({0, 3})).to_vector<float>() == std::vector<float>{1});  // the empty product
  CHECK(prod(zeros({0, 3}), 0).to_vector<float>() == std::vector<float>{1, 1, 1});
  CHECK(prod(full({}, 2.5), 0).to_vector<float>() == std::vector<float>{2.5f});
  CHECK(cumprod(full({}, 2.5), 0).to_vector<float>() == std::vector<float>{2.5f});
  CHECK(std::isnan(prod(tensor({2, NAN}, {2})).item()));
}

TEST_CASE("cumprod and prod match the naive product on random shapes, dims, dtypes, zeros and layouts") {
  Generator gen(405);
  for (int trial = 0; trial < 60; ++trial) {
    Shape sizes(1 + trial % 4);
    for (size_t d = 0; d < sizes.size(); ++d) sizes[d] = 1 + (trial * 5 + static_cast<int64_t>(d) * 3) % 6;
    Tensor x = trial % 3 == 0 ? randint(-4, 5, sizes, {.dtype = DType::Int64}, &gen)
                              : with_zeros(randn(sizes, {.dtype = trial % 2 ? DType::Float64 : DType::Float32}, &gen),
                                           gen);
    if (x.dim() >= 2 && trial % 2 == 0) x = x.transpose(0, x.dim() - 1);
    const int64_t dim = trial % x.dim();
    CAPTURE(trial);
    CAPTURE(shape_str(x.sizes()));
    CAPTURE(dim);
    const Tensor running = tensor(naive_scan(x, dim, true), x.sizes(), kF64);
    CHECK_CLOSE(cumprod(x, dim).to(DType::Float64), running, 1e-5, 1e-5);
    const Tensor last = running.narrow(dim, x.size(dim) - 1, 1).squeeze(dim);
    CHECK_CLOSE(prod(x, dim).to(DType::Float64), last, 1e-5, 1e-5);
    double all = 1.0;
    for (double v : x.contiguous().to(DType::Float64).to_vector<double>()) all *= v;
    CHECK(prod(x).item() == doctest::Approx(all).epsilon(1e-5));
  }
}

TEST_CASE("cumprod's and prod's gradients are exact where x holds zeros") {
  Tensor x = tensor({2, 0, 3, 0, 5}, {5}, kF64).requires_grad_(true);
  cumprod(x, 0).backward(ones({5}, kF64));
  // dx_k: the sum over i >= k of the product of x_0..x_i without x_k.
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 8, 0, 0, 0});
  Tensor y = tensor({2, 0, 3, 0, 0, 3, 4, 5}, {2, 4}, kF64).requires_grad_(true);
  prod(y, 1).backward(tensor({1, 10}, {2}, kF64));
  // Two zeros leave every other product 0; one zero gets the product of the rest.
  CHECK(y.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 0, 600, 0, 0, 0});
  Tensor z = tensor({2, 3, 4}, {3}, kF64).requires_grad_(true);
  prod(z).backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{12, 8, 6});
  Generator gen(9);
  for (int trial = 0; trial < 6; ++trial) {
    const Tensor w = with_zeros(randn({3, 4, 5}, kF64, &gen), gen).requires_grad_(true);
    for (int64_t dim : {0, 1, 2}) {
      CAPTURE(trial);
      CAPTURE(dim);
      check_grad([dim](const std::vector<Tensor>& in) { return cumprod(in[0], dim); }, w);
      check_grad([dim](const std::vector<Tensor>& in) { return cumprod(in[0].transpose(0, 2), dim); }, w);
      check_grad([dim](const std::vector<Tensor>& in) { return prod(in[0], dim, dim == 1); }, w);
    }
    check_grad([](const std::vector<Tensor>& in) { return prod(in[0].narrow(1, 0, 2)); }, w);
  }
  Tensor f = tensor({1, 2}, {2}).requires_grad_(true);
  CHECK(prod(f, DType::Float64).requires_grad());  // through the differentiable cast
  CHECK_FALSE(prod(tensor({1, 2}, {2}, {.dtype = DType::Int64})).requires_grad());
}

TEST_CASE("cumprod and prod errors name the op and the fix") {
  CHECK_THROWS_WITH_FRAGMENT(cumprod(zeros({2, 3}), 2), IndexError, "[cumprod] dim 2 is out of range");
  CHECK_THROWS_WITH_FRAGMENT(cumprod(zeros({2}), 0, DType::Bool), TypeError, "[cumprod] the result cannot be Bool");
  CHECK_THROWS_WITH_FRAGMENT(prod(zeros({2}), DType::Bool), TypeError, "[prod] the product cannot be Bool");
  CHECK_THROWS_WITH_FRAGMENT(prod(zeros({2, 3}), -3), IndexError, "[prod] dim -3 is out of range");
  CHECK_THROWS_WITH_FRAGMENT(prod(Tensor()), ValueError, "[prod] x is an undefined tensor");
  CHECK_THROWS_WITH_FRAGMENT(cumprod(Tensor(), 0), ValueError, "[cumprod] x is an undefined tensor");
}

// --- argument errors ----------------------------------------------------------------------

TEST_CASE("reduction argument errors name the op and print the values") {
  const Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_FRAGMENT(sum(x, {2}), IndexError, "[sum] dim 2 is out of range for a 2-D tensor (expected -2 to 1)");
  CHECK_THROWS_WITH_FRAGMENT(mean(x, {-3}), IndexError, "[mean] dim -3 is out of range");
  CHECK_THROWS_WITH_FRAGMENT(sum(x, {1, -1}), ValueError, "[sum] dim 1 appears twice in (1, -1)");
  CHECK_THROWS_WITH_FRAGMENT(mean(zeros({2}, {.dtype = DType::Int64})), TypeError, "[mean] input has dtype int64");
  CHECK_THROWS_WITH_FRAGMENT(sum(zeros({2}, {.dtype = DType::Float16})), TypeError, "[sum] input has dtype float16");
  CHECK_THROWS_WITH_FRAGMENT(max(zeros({0, 3})), ValueError, "[max] of an empty tensor (shape (0, 3)) has no identity");
  CHECK_THROWS_WITH_FRAGMENT(max(zeros({2, 0}), 1), ValueError, "[max] dim 1 of shape (2, 0) is empty");
  CHECK_THROWS_WITH_FRAGMENT(max(x, 2), IndexError, "[max] dim 2 is out of range for a 2-D tensor");
  CHECK_THROWS_WITH_FRAGMENT(argmax(zeros({3}, {.dtype = DType::Int32}), 0), TypeError, "[max] input has dtype int32");
  CHECK_THROWS_WITH_FRAGMENT(sum(Tensor()), ValueError, "undefined");
}

}  // namespace
}  // namespace loom
