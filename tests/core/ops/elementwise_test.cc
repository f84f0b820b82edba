// File: tests/core/ops/elementwise_test.cc
// Elementwise arithmetic and unary math: hand values, a naive broadcasting
// reference over row-major values (contiguous, strided and channels-last
// inputs), scalars and operators, in-place updates, clamp, pow, gradcheck and
// argument errors.
// N batch, C channels, H, W.
#include "core/ops/elementwise.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numbers>
#include <random>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};
const double kInf = std::numeric_limits<double>::infinity();

using Binary = std::function<double(double, double)>;
using Unary = std::function<double(double)>;

// NumPy broadcasting done by hand: the result shape, and for each result index
// (row-major) the row-major position in an operand of shape `sizes`.
Shape naive_broadcast_shape(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t source_position(int64_t flat, const Shape& out, const Shape& sizes) {
  int64_t position = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
    int64_t index = flat % out[d];
    flat /= out[d];
    int64_t sd = d - static_cast<int64_t>(out.size() - sizes.size());
    if (sd < 0) continue;
    if (sizes[sd] != 1) position += index * stride;
    stride *= sizes[sd];
  }
  return position;
}

Tensor naive_binary(const Tensor& a, const Tensor& b, const Binary& f) {
  const Shape out = naive_broadcast_shape(a.sizes(), b.sizes());
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  std::vector<double> y(numel_of(out));
  for (int64_t i = 0; i < static_cast<int64_t>(y.size()); ++i) {
    y[i] = f(va[source_position(i, out, a.sizes())], vb[source_position(i, out, b.sizes())]);
  }
  return tensor(y, out, kF64);
}

Tensor naive_unary(const Tensor& x, const Unary& f) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = f(e);
  return tensor(v, x.sizes(), kF64);
}

double tolerance(const Tensor& t) { return t.dtype() == DType::Float64 ? 1e-12 : 2e-6; }

Tensor leaf_like(const Tensor& t) { return t.detach().clone().requires_grad_(); }

Tensor random_leaf(const Shape& sizes, Generator& gen) {
  return randn(sizes, {.dtype = DType::Float64, .requires_grad = true}, &gen);
}

// In [0.5, 2): safe for log, sqrt, division and real powers.
Tensor positive_leaf(const Shape& sizes, Generator& gen) {
  return leaf_like(add(mul(rand(sizes, kF64, &gen), 1.5), 0.5));
}

void check_grad(const GradcheckFn& fn, const std::vector<Tensor>& inputs) {
  GradcheckResult r = gradcheck(fn, inputs);
  CHECK_MESSAGE(r.ok, r.message);
}

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  Binary reference;
};

const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); }, [](double a, double b) { return a + 2.5 * b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }},
      {"sub alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, 0.5); }, [](double a, double b) { return a - 0.5 * b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, [](double a, double b) { return std::pow(a, b); }},
  };
  return cases;
}

// Every binary op on (a, b) against the naive reference; a must be positive for pow.
void check_binary_against_naive(const Tensor& a, const Tensor& b) {
  for (const BinaryCase& c : binary_cases()) {
    CAPTURE(c.name);
    CHECK_CLOSE(c.op(a, b), naive_binary(a, b, c.reference), tolerance(a), tolerance(a));
  }
}

// --- binary -----------------------------------------------------------------------------

TEST_CASE("add / sub / mul / div by hand") {
  const Tensor a = tensor({1, 2, 3, 4}, {2, 2}, kF64);
  const Tensor b = tensor({10, 20, 30, 40}, {2, 2}, kF64);
  CHECK(add(a, b).to_vector<double>() == std::vector<double>{11, 22, 33, 44});
  CHECK(add(a, b, -0.5).to_vector<double>() == std::vector<double>{-4, -8, -12, -16});
  CHECK(sub(b, a).to_vector<double>() == std::vector<double>{9, 18, 27, 36});
  CHECK(sub(b, a, 2).to_vector<double>() == std::vector<double>{8, 16, 24, 32});
  CHECK(mul(a, b).to_vector<double>() == std::vector<double>{10, 40, 90, 160});
  CHECK(div(b, a).to_vector<double>() == std::vector<double>{10, 10, 10, 10});
  CHECK(div(a, tensor({0}, {1}, kF64)).to_vector<double>() == std::vector<double>(4, kInf));
  // Broadcasting a row and a column: (2, 1) + (3,) -> (2, 3).
  CHECK(add(tensor({100, 200}, {2, 1}, kF64), tensor({1, 2, 3}, {3}, kF64)).to_vector<double>() ==
        std::vector<double>{101, 102, 103, 201, 202, 203});
}

TEST_CASE("binary ops match the naive reference, with broadcasting, in float32 and float64") {
  Generator gen(1);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{3, 1, 5}, {4, 1}}, {{4, 1}, {3, 1, 5}}, {{2, 3}, {3}}, {{}, {2, 3}}, {{2, 1, 1}, {1}}};
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const auto& [sa, sb] : shapes) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(sa));
      CAPTURE(shape_str(sb));
      const Tensor a = add(rand(sa, {.dtype = dtype}, &gen), 0.5);  // positive: pow is real
      const Tensor b = randn(sb, {.dtype = dtype}, &gen);
      CHECK(add(a, b).sizes() == naive_broadcast_shape(sa, sb));
      check_binary_against_naive(a, b);
    }
  }
}

TEST_CASE("binary ops read non-contiguous operands: transposed, stepped, expanded") {
  Generator gen(2);
  const Tensor base = add(rand({5, 3}, kF64, &gen), 0.5);
  const Tensor transposed = base.t();                                  // (3, 5) strides (1, 3)
  const Tensor stepped = randn({3, 10}, kF64, &gen).slice(1, 1, 10, 2);  // (3, 5) stride 2
  const Tensor expanded = randn({3, 1}, kF64, &gen).expand({3, 5});    // stride 0
  check_binary_against_naive(transposed, stepped);
  check_binary_against_naive(transposed, expanded);
  check_binary_against_naive(exp(stepped), transposed);  // exp: a positive base for pow
}

TEST_CASE("binary ops keep channels-last; unary ops keep any dense layout") {
  Generator gen(3);
  const Tensor a = add(rand({2, 3, 4, 5}, kF64, &gen), 0.5);  // N 2, C 3, H 4, W 5
  const Tensor b = randn({2, 3, 4, 5}, kF64, &gen);
  const Tensor a_cl = a.contiguous(MemoryFormat::ChannelsLast);
  const Tensor b_cl = b.contiguous(MemoryFormat::ChannelsLast);
  check_binary_against_naive(a_cl, b_cl);
  check_binary_against_naive(a_cl, b);
  CHECK(mul(a_cl, b_cl).is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(add(a_cl, randn({3, 1, 1}, kF64, &gen)).is_contiguous(MemoryFormat::ChannelsLast));
  for (const auto& op : std::vector<std::function<Tensor(const Tensor&)>>{
           [](const Tensor& x) { return exp(x); }, [](const Tensor& x) { return sqrt(x); },
           [](const Tensor& x) { return neg(x); }, [](const Tensor& x) { return mul(x, 3.0); },
           [](const Tensor& x) { return pow(x, 2.0); },
           [](const Tensor& x) { return clamp(x, 0.7, 1.2); }}) {
    const Tensor y = op(a_cl);
    CHECK(y.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK_FALSE(y.is_contiguous());
    CHECK_CLOSE(y, op(a), 1e-15, 0);
  }
}

// --- scalars and operators ------------------------------------------------------------------

TEST_CASE("scalar variants and operators with the scalar on either side") {
  const Tensor x = tensor({1, 2, 4}, {3}, kF64);
  CHECK(add(x, 1.5).to_vector<double>() == std::vector<double>{2.5, 3.5, 5.5});
  CHECK(sub(x, 1).to_vector<double>() == std::vector<double>{0, 1, 3});
  CHECK(mul(x, -2).to_vector<double>() == std::vector<double>{-2, -4, -8});
  CHECK(div(x, 4).to_vector<double>() == std::vector<double>{0.25, 0.5, 1});
  CHECK(rsub(x, 10).to_vector<double>() == std::vector<double>{9, 8, 6});
  CHECK(rdiv(x, 8).to_vector<double>() == std::vector<double>{8, 4, 2});
  CHECK((x + 1.0).to_vector<double>() == std::vector<double>{2, 3, 5});
  CHECK((1.0 + x).to_vector<double>() == std::vector<double>{2, 3, 5});
  CHECK((x - 1.0).to_vector<double>() == std::vector<double>{0, 1, 3});
  CHECK((1.0 - x).to_vector<double>() == std::vector<double>{0, -1, -3});
  CHECK((x * 3.0).to_vector<double>() == std::vector<double>{3, 6, 12});
  CHECK((3.0 * x).to_vector<double>() == std::vector<double>{3, 6, 12});
  CHECK((x / 2.0).to_vector<double>() == std::vector<double>{0.5, 1, 2});
  CHECK((2.0 / x).to_vector<double>() == std::vector<double>{2, 1, 0.5});
  CHECK((-x).to_vector<double>() == std::vector<double>{-1, -2, -4});
  const Tensor y = tensor({4, 4, 4}, {3}, kF64);
  CHECK((x + y).to_vector<double>() == std::vector<double>{5, 6, 8});
  CHECK((x - y).to_vector<double>() == std::vector<double>{-3, -2, 0});
  CHECK((x * y).to_vector<double>() == std::vector<double>{4, 8, 16});
  CHECK((x / y).to_vector<double>() == std::vector<double>{0.25, 0.5, 1});
  CHECK((2.0 * x - y / 4.0 + 1.0).to_vector<double>() == std::vector<double>{2, 4, 8});
}

TEST_CASE("division by a scalar is a true division (x / 10 gives 0.3 for x = 3)") {
  // Multiplying by a rounded reciprocal is off by an ulp: 3 * 0.1 = 0.30000000000000004.
  CHECK((tensor({3}, {1}, kF64) / 10.0).item() == 3.0 / 10.0);
  CHECK(div(tensor({49}, {1}, kF64), 49.0).item() == 1.0);
  CHECK(div(tensor({3}, {1}), 10.0).item() == static_cast<double>(3.0f / 10.0f));
}

TEST_CASE("scalar variants match the naive reference on strided float32 input") {
  Generator gen(4);
  const Tensor x = add(rand({4, 6}, {}, &gen), 0.5).t();
  const double tol = 2e-6;
  CHECK_CLOSE(add(x, 0.75), naive_unary(x, [](double v) { return v + 0.75; }), tol, tol);
  CHECK_CLOSE(sub(x, 0.75), naive_unary(x, [](double v) { return v - 0.75; }), tol, tol);
  CHECK_CLOSE(mul(x, -3.0), naive_unary(x, [](double v) { return v * -3.0; }), tol, tol);
  CHECK_CLOSE(div(x, 7.0), naive_unary(x, [](double v) { return v / 7.0; }), tol, tol);
  CHECK_CLOSE(rsub(x, 2.0), naive_unary(x, [](double v) { return 2.0 - v; }), tol, tol);
  CHECK_CLOSE(rdiv(x, 2.0), naive_unary(x, [](double v) { return 2.0 / v; }), tol, tol);
}

TEST_CASE("scalar variants give the same bits on dense input (the flat loop) as on strided input") {
  Generator gen(5);
  // Every other column: no dense layout, so the strided loop; big enough that the flat loop splits.
  const Tensor strided = add(rand({300, 514}, {}, &gen), 0.5).slice(1, 0, 514, 2);
  const Tensor dense = strided.contiguous();
  const std::vector<std::function<Tensor(const Tensor&)>> ops = {
      [](const Tensor& x) { return add(x, 0.75); },  [](const Tensor& x) { return sub(x, 0.3); },
      [](const Tensor& x) { return mul(x, -3.1); },  [](const Tensor& x) { return div(x, 7.0); },
      [](const Tensor& x) { return rsub(x, 2.0); },  [](const Tensor& x) { return rdiv(x, 2.0); },
      [](const Tensor& x) { return pow(x, 1.7); }};
  for (size_t i = 0; i < ops.size(); ++i) {
    CAPTURE(i);
    CHECK_CLOSE(ops[i](dense), ops[i](strided).contiguous(), 0, 0);
  }
}

// --- unary ------------------------------------------------------------------------------

TEST_CASE("neg / exp / log / sqrt by hand, including edge values") {
  const Tensor x = tensor({0, 1, 4, -1}, {4}, kF64);
  CHECK(neg(x).to_vector<double>() == std::vector<double>{-0.0, -1, -4, 1});
  CHECK_CLOSE(exp(x), tensor({1, M_E, std::exp(4.0), 1 / M_E}, {4}, kF64), 1e-15, 0);
  const std::vector<double> logs = log(x).to_vector<double>();
  CHECK(logs[0] == -kInf);
  CHECK(logs[1] == 0);
  CHECK(logs[2] == doctest::Approx(std::log(4.0)).epsilon(1e-15));
  CHECK(std::isnan(logs[3]));
  const std::vector<double> roots = sqrt(x).to_vector<double>();
  CHECK(roots[0] == 0);
  CHECK(roots[2] == 2);
  CHECK(std::isnan(roots[3]));
  CHECK(exp(tensor({1000}, {1})).item() == kInf);  // overflow in float32 is inf, not an error
}

TEST_CASE("unary ops match the naive reference on contiguous and strided input") {
  Generator gen(5);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor x = add(rand({3, 4, 5}, {.dtype = dtype}, &gen), 0.1);
    for (const Tensor& input : {x, x.permute({2, 0, 1}), x.slice(1, 0, 4, 3)}) {
      CAPTURE(dtype_name(dtype));
      const double tol = tolerance(input);
      CHECK_CLOSE(neg(input), naive_unary(input, [](double v) { return -v; }), tol, tol);
      CHECK_CLOSE(exp(input), naive_unary(input, [](double v) { return std::exp(v); }), tol, tol);
      CHECK_CLOSE(log(input), naive_unary(input, [](double v) { return std::log(v); }), tol, tol);
      CHECK_CLOSE(sqrt(input), naive_unary(input, [](double v) { return std::sqrt(v); }), tol, tol);
      CHECK(exp(input).dtype() == dtype);
    }
  }
}

// --- pow ------------------------------------------------------------------------------------

TEST_CASE("pow with a scalar and with a tensor exponent, by hand and against the reference") {
  const Tensor x = tensor({2, 3, 4}, {3}, kF64);
  CHECK(pow(x, 2.0).to_vector<double>() == std::vector<double>{4, 9, 16});
  CHECK(pow(x, 0.5).to_vector<double>() == std::vector<double>{std::sqrt(2.0), std::sqrt(3.0), 2});
  CHECK(pow(x, -1.0).to_vector<double>() == std::vector<double>{0.5, 1.0 / 3.0, 0.25});
  CHECK(pow(x, 0.0).to_vector<double>() == std::vector<double>{1, 1, 1});
  CHECK(pow(tensor({-2}, {1}, kF64), 3.0).item() == -8);
  CHECK(pow(x, tensor({3, 2, 0.5}, {3}, kF64)).to_vector<double>() == std::vector<double>{8, 9, 2});
  CHECK(pow(tensor({2}, {1}, kF64), tensor({1, 2, 3}, {3, 1}, kF64)).to_vector<double>() ==
        std::vector<double>{2, 4, 8});
  Generator gen(6);
  const Tensor base = add(rand({3, 1, 5}, {}, &gen), 0.5);
  const Tensor e = randn({4, 1}, {}, &gen);
  CHECK_CLOSE(pow(base, e), naive_binary(base, e, [](double a, double b) { return std::pow(a, b); }), 2e-6, 2e-6);
  CHECK_CLOSE(pow(base, 2.5), naive_unary(base, [](double v) { return std::pow(v, 2.5); }), 2e-6, 2e-6);
}

TEST_CASE("pow(x, 0.0) has gradient 0 at x = 0, not 0 * 0^-1 = NaN") {
  const Tensor x = tensor({0, 2}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  sum(pow(x, 0.0)).backward();
  CHECK_CLOSE(x.grad(), zeros({2}, kF64), 0, 0);
}

TEST_CASE("pow(x, exponent tensor) has gradient 0 at x = 0 where the exponent is 0") {
  // As torch.pow: d/dx x^e = e * x^(e-1) is masked to 0 where e == 0.
  const Tensor x = tensor({0, 2}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  sum(pow(x, tensor({0, 0}, {2}, kF64))).backward();
  CHECK_CLOSE(x.grad(), zeros({2}, kF64), 0, 0);
}

TEST_CASE("pow(x, exponent tensor): the exponent's gradient is 0 at x = 0, as torch.pow") {
  const Tensor x = tensor({0, 2}, {2}, kF64);
  const Tensor e = tensor({1.5, 3}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  sum(pow(x, e)).backward();
  // d/de 2^3 = 2^3 log 2; d/de 0^1.5 is masked to 0 instead of 0 * log 0 = NaN.
  CHECK_CLOSE(e.grad(), tensor({0, 8 * std::log(2.0)}, {2}, kF64), 1e-12, 1e-12);
}

TEST_CASE("in-place ops refuse destinations whose expanded elements share memory") {
  Tensor expanded = ones({1}).expand({3});
  CHECK_THROWS_WITH_FRAGMENT(mul_(expanded, 2.0), ValueError, "[mul_] the destination (shape (3,), strides (0,))");
  CHECK_THROWS_WITH_FRAGMENT(expanded.fill_(1.0), ValueError, "[fill_]");
  Tensor owned = expanded.clone();
  mul_(owned, 2.0);
  CHECK(testing::values(owned) == std::vector<double>{2, 2, 2});
}

// --- clamp ------------------------------------------------------------------------------------

TEST_CASE("clamp: min only, max only, both; NaN stays NaN") {
  const Tensor x = tensor({-2, -0.5, 0.5, 3}, {4}, kF64);
  CHECK(clamp(x, 0.0, std::nullopt).to_vector<double>() == std::vector<double>{0, 0, 0.5, 3});
  CHECK(clamp(x, std::nullopt, 0.0).to_vector<double>() == std::vector<double>{-2, -0.5, 0, 0});
  CHECK(clamp(x, -1.0, 1.0).to_vector<double>() == std::vector<double>{-1, -0.5, 0.5, 1});
  CHECK(clamp(x, 2.0, 2.0).to_vector<double>() == std::vector<double>(4, 2.0));
  CHECK(std::isnan(clamp(tensor({std::nan("")}, {1}), 0.0, 1.0).item()));
  Generator gen(7);
  const Tensor r = randn({3, 4}, {}, &gen).t();
  CHECK_CLOSE(clamp(r, -0.5, 0.25), naive_unary(r, [](double v) { return std::min(std::max(v, -0.5), 0.25); }), 0, 0);
}

TEST_CASE("clamp gradient: dy inside and at the bounds, 0 outside") {
  const Tensor x = tensor({-1, 0, 0.5, 1, 2}, {5}, {.dtype = DType::Float64, .requires_grad = true});
  clamp(x, 0.0, 1.0).backward(tensor({1, 2, 3, 4, 5}, {5}, kF64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 2, 3, 4, 0});
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return clamp(in[0], 0.0, 1.0); }, {leaf_like(x)});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.kinks == 2);  // the two elements sitting on a bound
}

TEST_CASE("clamp rejects missing bounds; inverted bounds give max and a NaN bound NaN, as torch.clamp") {
  const Tensor x = zeros({2});
  CHECK_THROWS_WITH_FRAGMENT(clamp(x, std::nullopt, std::nullopt), ValueError, "[clamp] needs at least one of min and max");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  using Bounds = std::pair<std::optional<double>, std::optional<double>>;
  for (const auto& [lo, hi] : {Bounds{2.0, 1.0}, Bounds{nan, 1.0}, Bounds{std::nullopt, nan}, Bounds{0.0, nan}}) {
    const Tensor v = tensor({-3, 0.5, 1.5, 9}, {4}, {.dtype = DType::Float64, .requires_grad = true});
    const Tensor y = clamp(v, lo, hi);
    const bool nan_bound = (lo && std::isnan(*lo)) || (hi && std::isnan(*hi));
    for (double e : y.to_vector<double>()) CHECK((nan_bound ? std::isnan(e) : e == 1.0));
    y.sum().backward();
    CHECK(v.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 0});  // no x lies in [lo, hi]
  }
  const Tensor labels = tensor({-2, 5}, {2}, {.dtype = DType::Int64});
  CHECK(clamp(labels, 3.0, 1.0).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  const Tensor promoted = clamp(labels, nan, std::nullopt);  // NaN is no whole number: float32, as PyTorch's
  CHECK(promoted.dtype() == DType::Float32);
  for (double e : promoted.to_vector<double>()) CHECK(std::isnan(e));
  CHECK_THROWS_WITH_FRAGMENT(clamp(zeros({2}, {.dtype = DType::UInt8}), 300.0, std::nullopt), ValueError,
                             "[clamp] the min bound 300 is outside the range of the uint8 input ([0, 255])");
}

// --- in place -----------------------------------------------------------------------------------

TEST_CASE("add_ / sub_ / mul_ / div_ update in place with broadcasting") {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kF64);
  const void* data = x.raw_data();
  add_(x, tensor({10, 20, 30}, {3}, kF64));
  CHECK(x.to_vector<double>() == std::vector<double>{11, 22, 33, 14, 25, 36});
  sub_(x, tensor({1, 2}, {2, 1}, kF64), 10);
  CHECK(x.to_vector<double>() == std::vector<double>{1, 12, 23, -6, 5, 16});
  mul_(x, tensor({2}, {1}, kF64));
  CHECK(x.to_vector<double>() == std::vector<double>{2, 24, 46, -12, 10, 32});
  div_(x, tensor({2, 4, 2}, {3}, kF64));
  CHECK(x.to_vector<double>() == std::vector<double>{1, 6, 23, -6, 2.5, 16});
  add_(x, 1.0);
  mul_(x, 2.0);
  CHECK(x.to_vector<double>() == std::vector<double>{4, 14, 48, -10, 7, 34});
  CHECK(x.raw_data() == data);
  add_(x, x, -1.0);  // aliasing self is fine elementwise
  CHECK(x.to_vector<double>() == std::vector<double>(6, 0.0));
}

TEST_CASE("in-place ops write through views and keep strides") {
  Tensor base = zeros({3, 4});
  Tensor column = base.select(1, 1);
  add_(column, tensor({1, 2, 3}, {3}));
  Tensor t = base.t();
  mul_(t, 2.0);
  CHECK(base.to_vector<double>() == std::vector<double>{0, 2, 0, 0, 0, 4, 0, 0, 0, 6, 0, 0});
  Tensor cl = ones({1, 2, 2, 2}).contiguous(MemoryFormat::ChannelsLast);
  add_(cl, tensor({1, 2}, {2, 1, 1}));
  CHECK(cl.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(cl.to_vector<double>() == std::vector<double>{2, 2, 2, 2, 3, 3, 3, 3});
}

TEST_CASE("in-place errors: dtype, broadcasting into self, autograd") {
  Tensor x = zeros({3});
  CHECK_THROWS_WITH_FRAGMENT(add_(x, zeros({3}, kF64)), TypeError,
                             "[add_] operands have different dtypes, float32 (3,) and float64 (3,)");
  CHECK_THROWS_WITH_FRAGMENT(mul_(x, zeros({2, 3})), ShapeError,
                             "[mul_] the operand of shape (2, 3) does not broadcast to the destination's shape (3,)");
  CHECK_THROWS_WITH_FRAGMENT(div_(x, zeros({4})), ShapeError, "[div_] shapes (3,) and (4,) cannot be broadcast");
  CHECK_THROWS_WITH_FRAGMENT(sub_(x, zeros({2})), ShapeError, "shapes (3,) and (2,) cannot be broadcast");
  Tensor ints = zeros({3}, {.dtype = DType::Int64});
  CHECK_THROWS_WITH_FRAGMENT(add_(ints, 0.5), TypeError, "[add_] the int64 tensor times or plus 0.5 is floating");
  Tensor w = zeros({3}, {.requires_grad = true});
  CHECK_THROWS_WITH_FRAGMENT(add_(w, ones({3})), AutogradError, "[add_] a leaf tensor that requires grad");
  CHECK_THROWS_WITH_FRAGMENT(mul_(w, 2.0), AutogradError, "[mul_]");
  {
    NoGradGuard guard;
    sub_(w, ones({3}), 0.5);  // an optimizer step
  }
  CHECK(w.to_vector<double>() == std::vector<double>(3, -0.5));
  CHECK(w.requires_grad());
}

TEST_CASE("compound assignments update in place, as PyTorch's: a manual SGD step moves the parameter") {
  Tensor x = tensor({1, 2, 3}, {3}, kF64);
  const Tensor alias = x;  // another handle to the same tensor sees every update
  x += tensor({10, 20, 30}, {3}, kF64);
  x -= tensor({1}, {1}, kF64);  // broadcast into x
  x *= tensor({2, 2, 2}, {3}, kF64);
  x /= tensor({4, 5, 8}, {3}, kF64);
  CHECK(alias.to_vector<double>() == std::vector<double>{5, 8.4, 8});
  x += 1.0;
  x -= 0.5;
  x *= 2.0;
  x /= 4.0;
  CHECK(alias.to_vector<double>() == std::vector<double>{2.75, 4.45, 4.25});
  Tensor third = tensor({1}, {1});
  third /= 3.0;  // a true division, rounded once: float32(1 / 3), not float32(1 * float32(1 / 3))
  CHECK(third.item() == static_cast<double>(1.0f / 3.0f));

  Tensor w = tensor({1, -1}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  const std::vector<Tensor> params = {w};  // as Module::parameters() hands them out
  sum(mul(w, w)).backward();
  {
    NoGradGuard no_grad;
    for (Tensor p : params) p -= 0.25 * p.grad();
  }
  CHECK(w.to_vector<double>() == std::vector<double>{0.5, -0.5});
  CHECK_THROWS_WITH_FRAGMENT(w += 1.0, AutogradError, "[add_] a leaf tensor that requires grad");
  Tensor h = mul(w, 2.0);
  CHECK_THROWS_WITH_FRAGMENT(h += w, AutogradError, "use the out-of-place op (y = y + x, not y += x)");
}

// --- gradients --------------------------------------------------------------------------------

TEST_CASE("gradcheck: binary ops with same shapes and with broadcasting") {
  Generator gen(8);
  const std::vector<std::pair<Shape, Shape>> shapes = {{{2, 3}, {2, 3}}, {{3, 1, 5}, {4, 1}}, {{2, 3}, {}}};
  for (const auto& [sa, sb] : shapes) {
    CAPTURE(shape_str(sa));
    CAPTURE(shape_str(sb));
    const Tensor a = positive_leaf(sa, gen), b = random_leaf(sb, gen), pb = positive_leaf(sb, gen);
    check_grad([](const std::vector<Tensor>& in) { return add(in[0], in[1], -1.5); }, {a, b});
    check_grad([](const std::vector<Tensor>& in) { return sub(in[0], in[1]); }, {b, a});
    check_grad([](const std::vector<Tensor>& in) { return mul(in[0], in[1]); }, {a, b});
    check_grad([](const std::vector<Tensor>& in) { return div(in[0], in[1]); }, {b, a});
    check_grad([](const std::vector<Tensor>& in) { return div(in[0], in[1]); }, {a, pb});
    check_grad([](const std::vector<Tensor>& in) { return pow(in[0], in[1]); }, {a, b});
  }
}

TEST_CASE("gradcheck: one operand without grad, the same tensor twice, strided operands") {
  Generator gen(9);
  const Tensor a = random_leaf({3, 4}, gen);
  const Tensor c = randn({4}, kF64, &gen);
  check_grad([&](const std::vector<Tensor>& in) { return mul(in[0], c); }, {a});
  check_grad([&](const std::vector<Tensor>& in) { return div(c, add(mul(in[0], in[0]), 1.0)); }, {a});
  check_grad([](const std::vector<Tensor>& in) { return mul(in[0], in[0]); }, {a});
  check_grad([](const std::vector<Tensor>& in) { return mul(in[0].t(), in[0].select(1, 0)); }, {a});
  check_grad([](const std::vector<Tensor>& in) { return pow(in[0].slice(1, 0, 4, 2), in[1].t()); },
             {positive_leaf({2, 4}, gen), random_leaf({2, 2}, gen)});
}

TEST_CASE("gradcheck: unary ops, scalar variants, pow with a scalar exponent") {
  Generator gen(10);
  for (const Shape& sizes : {Shape{2, 3}, Shape{3, 1, 2}}) {
    CAPTURE(shape_str(sizes));
    const Tensor x = random_leaf(sizes, gen), p = positive_leaf(sizes, gen);
    check_grad([](const std::vector<Tensor>& in) { return neg(in[0]); }, {x});
    check_grad([](const std::vector<Tensor>& in) { return exp(in[0]); }, {x});
    check_grad([](const std::vector<Tensor>& in) { return log(in[0]); }, {p});
    check_grad([](const std::vector<Tensor>& in) { return sqrt(in[0]); }, {p});
    check_grad([](const std::vector<Tensor>& in) { return add(in[0], 2.0); }, {x});
    check_grad([](const std::vector<Tensor>& in) { return sub(in[0], 2.0); }, {x});
    check_grad([](const std::vector<Tensor>& in) { return mul(in[0], -3.0); }, {x});
    check_grad([](const std::vector<Tensor>& in) { return div(in[0], 4.0); }, {x});
    check_grad([](const std::vector<Tensor>& in) { return rsub(in[0], 1.0); }, {x});
    check_grad([](const std::vector<Tensor>& in) { return rdiv(in[0], 2.0); }, {p});
    check_grad([](const std::vector<Tensor>& in) { return 1.0 - 2.0 * in[0] / 3.0 + -in[0]; }, {x});
    for (double e : {2.0, 3.0, 0.5, -1.5}) {
      CAPTURE(e);
      check_grad([e](const std::vector<Tensor>& in) { return pow(in[0], e); }, {p});
    }
    check_grad([](const std::vector<Tensor>& in) { return clamp(in[0], -0.3, 0.4); }, {x});
    check_grad([](const std::vector<Tensor>& in) { return clamp(in[0], std::nullopt, 0.1); }, {x});
  }
}

TEST_CASE("abs: values, strided input, its gradient sign(x) (0 at 0), gradcheck") {
  Tensor x = tensor({-2, -0.0, 0, 3, NAN}, {5}, {.dtype = DType::Float64, .requires_grad = true});
  const std::vector<double> y = abs(x).to_vector<double>();
  CHECK(y[0] == 2);
  CHECK(y[1] == 0);
  CHECK_FALSE(std::signbit(y[1]));
  CHECK(y[3] == 3);
  CHECK(std::isnan(y[4]));
  abs(x).backward(ones({5}, kF64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{-1, 0, 0, 1, 0});
  Generator gen(11);
  const Tensor s = randn({4, 5}, {}, &gen).t();
  CHECK_CLOSE(abs(s), naive_unary(s, [](double v) { return std::fabs(v); }), 0, 0);
  for (const Shape& sizes : {Shape{2, 3}, Shape{3, 1, 2}}) {
    check_grad([](const std::vector<Tensor>& in) { return abs(in[0]); }, {random_leaf(sizes, gen)});
  }
  CHECK_THROWS_WITH_FRAGMENT(abs(tensor({1}, {1}, {.dtype = DType::Bool})), TypeError, "[abs] input is a Bool mask");
}

// --- graph lifetime ------------------------------------------------------------------------------

TEST_CASE("graphs of div, rdiv and pow(tensor) are freed when their output is dropped") {
  // A backward that captures its own output (instead of output.detach()) makes
  // node -> output -> node a cycle, and the graph leaks unless backward runs.
  Generator gen(11);
  const Tensor a = positive_leaf({3}, gen), b = positive_leaf({3}, gen);
  const std::vector<std::pair<std::string, std::function<Tensor()>>> ops = {
      {"div", [&] { return div(a, b); }},
      {"rdiv", [&] { return rdiv(a, 2.0); }},
      {"pow", [&] { return pow(a, b); }},
      {"exp", [&] { return exp(a); }},
      {"mul", [&] { return mul(a, b); }},
  };
  for (const auto& [name, op] : ops) {
    CAPTURE(name);
    std::weak_ptr<Node> node;
    {
      const Tensor out = op();
      node = out.grad_fn();
      REQUIRE(node.lock() != nullptr);
    }
    CHECK(node.expired());
  }
}

// --- argument errors -----------------------------------------------------------------------------

TEST_CASE("operands of different dtypes promote as in PyTorch") {
  const TensorOptions u8{.dtype = DType::UInt8}, i64{.dtype = DType::Int64};
  // float32 meets float64 in float64, and each leaf gets its gradient in its own dtype.
  Tensor a = tensor({1.5, -2.0}, {2}).requires_grad_(), b = tensor({0.25, 3.0}, {2}, kF64).requires_grad_();
  Tensor y = mul(a, b);
  CHECK(y.dtype() == DType::Float64);
  CHECK_CLOSE(y, tensor({0.375, -6.0}, {2}, kF64), 0, 0);
  sum(y).backward();
  CHECK(a.grad().dtype() == DType::Float32);
  CHECK_CLOSE(a.grad(), tensor({0.25, 3.0}, {2}), 0, 0);
  CHECK(b.grad().dtype() == DType::Float64);
  CHECK(add(b.detach(), a.detach()).dtype() == DType::Float64);
  CHECK(pow(b.detach(), tensor({2.0, 1.0}, {2})).dtype() == DType::Float64);
  // Pixels and labels meet floating tensors and numbers in a floating dtype.
  const Tensor pixels = tensor({0, 51, 255}, {3}, u8), labels = tensor({7, -3}, {2}, i64);
  CHECK_CLOSE(div(pixels, 255.0), tensor({0.0, 0.2, 1.0}, {3}), 1e-7, 0);
  CHECK(div(pixels, 255.0).dtype() == DType::Float32);
  CHECK(mul(pixels, tensor({2.0}, {1}, kF64)).dtype() == DType::Float64);
  CHECK_CLOSE(sub(tensor({0.5, 0.5, 0.5}, {3}), pixels), tensor({0.5, -50.5, -254.5}, {3}), 0, 0);
  CHECK_CLOSE(div(labels, tensor({2, 2}, {2}, i64)), tensor({3.5, -1.5}, {2}), 0, 0);  // a true division
  CHECK_CLOSE(mul(labels, 0.5), tensor({3.5, -1.5}, {2}), 0, 0);
  CHECK_CLOSE(add(labels, 0.25), tensor({7.25, -2.75}, {2}), 0, 0);
  CHECK_CLOSE(rsub(labels, 1.5), tensor({-5.5, 4.5}, {2}), 0, 0);
  CHECK_CLOSE(rdiv(labels, 7.0), tensor({1.0, -7.0 / 3.0}, {2}), 1e-7, 0);
  CHECK_CLOSE(add(tensor({1, 0}, {2}, {.dtype = DType::Bool}), tensor({0.5, 0.5}, {2})), tensor({1.5, 0.5}, {2}), 0, 0);
}

TEST_CASE("argument errors name the op and print dtypes and shapes") {
  CHECK_THROWS_WITH_FRAGMENT(clamp(zeros({2}, {.dtype = DType::Float16}), 0.0, 1.0), TypeError,
                             "[clamp] input has dtype float16 on the CPU");
  CHECK_THROWS_WITH_FRAGMENT(log(zeros({2}, {.dtype = DType::Float16})), TypeError, "[log] input has dtype float16");
  CHECK_THROWS_WITH_FRAGMENT(add(zeros({3}), zeros({4})), ShapeError,
                             "[add] shapes (3,) and (4,) cannot be broadcast: dim 0 has sizes 3 and 4");
  CHECK_THROWS_WITH_FRAGMENT(div(zeros({2, 3}), zeros({4, 2})), ShapeError, "[div] shapes (2, 3) and (4, 2) cannot be broadcast");
  CHECK_THROWS_WITH_FRAGMENT(sub(zeros({3, 2, 5}), zeros({4, 5})), ShapeError, "shapes (3, 2, 5) and (4, 5) cannot be broadcast");
  CHECK_THROWS_WITH_FRAGMENT(neg(Tensor()), ValueError, "[neg] input is an undefined tensor");
  CHECK_THROWS_WITH_FRAGMENT(mul(zeros({2}), Tensor()), ValueError, "[mul] input is an undefined tensor");
}

// --- integer arithmetic ----------------------------------------------------------------------------

// The values of t as int64 (Bool as 0 / 1), row-major.
std::vector<int64_t> ints_of(const Tensor& t) { return t.to_vector<int64_t>(); }

Tensor int_tensor(const std::vector<int64_t>& values, const Shape& sizes, DType dtype) {
  return from_host(values.data(), DType::Int64, sizes, {.dtype = dtype});
}

TEST_CASE("integer arithmetic keeps PyTorch's integer dtypes and wraps around as it does") {
  const TensorOptions i64{.dtype = DType::Int64}, i32{.dtype = DType::Int32}, u8{.dtype = DType::UInt8};
  const Tensor labels = tensor({7, -3, 0}, {3}, i64);
  CHECK((labels + 1.0).dtype() == DType::Int64);
  CHECK(ints_of(labels + 1.0) == std::vector<int64_t>{8, -2, 1});
  CHECK(ints_of(labels - 4.0) == std::vector<int64_t>{3, -7, -4});
  CHECK(ints_of(10.0 - labels) == std::vector<int64_t>{3, 13, 10});
  CHECK(ints_of(labels * -2.0) == std::vector<int64_t>{-14, 6, 0});
  CHECK(ints_of(labels * labels) == std::vector<int64_t>{49, 9, 0});
  CHECK(ints_of(-labels) == std::vector<int64_t>{-7, 3, 0});
  CHECK(ints_of(abs(labels)) == std::vector<int64_t>{7, 3, 0});
  CHECK(ints_of(pow(labels, 3.0)) == std::vector<int64_t>{343, -27, 0});
  CHECK(ints_of(pow(labels, 0.0)) == std::vector<int64_t>{1, 1, 1});
  CHECK(ints_of(add(labels, tensor({1, 2, 3}, {3}, i64), 3.0)) == std::vector<int64_t>{10, 3, 9});
  CHECK(ints_of(sub(labels, tensor({1, 2, 3}, {3}, i64))) == std::vector<int64_t>{6, -5, -3});
  // Fractions and true divisions are float32; exp, log, sqrt compute in float32.
  CHECK(pow(labels, 0.5).dtype() == DType::Float32);
  CHECK((labels / 2.0).dtype() == DType::Float32);
  CHECK_CLOSE(exp(tensor({0, 1}, {2}, i64)), tensor({1.0, std::exp(1.0)}, {2}), 1e-7, 0);
  CHECK_CLOSE(sqrt(tensor({4, 9}, {2}, u8)), tensor({2.0, 3.0}, {2}), 0, 0);
  // Mixed integer dtypes meet in the wider one; masks in the other operand's dtype.
  CHECK((tensor({1}, {1}, u8) + tensor({1}, {1}, i32)).dtype() == DType::Int32);
  CHECK((tensor({1}, {1}, i32) * tensor({1}, {1}, i64)).dtype() == DType::Int64);
  const Tensor mask = tensor({1, 0, 1}, {3}, {.dtype = DType::Bool});
  CHECK((mask + tensor({5, 5, 5}, {3}, i32)).dtype() == DType::Int32);
  CHECK(ints_of(mask * 2.0) == std::vector<int64_t>{2, 0, 2});
  CHECK((mask * 2.0).dtype() == DType::Int64);
  CHECK((mask * 2.5).dtype() == DType::Float32);
  CHECK((mask + mask).dtype() == DType::Bool);
  CHECK(ints_of(mask + tensor({0, 1, 0}, {3}, {.dtype = DType::Bool})) == std::vector<int64_t>{1, 1, 1});
  // Wrapping: uint8 modulo 256, int32 and int64 in two's complement.
  CHECK(ints_of(tensor({250, 0, 17}, {3}, u8) + 10.0) == std::vector<int64_t>{4, 10, 27});
  CHECK(ints_of(tensor({0}, {1}, u8) - 1.0) == std::vector<int64_t>{255});
  CHECK(ints_of(-tensor({1}, {1}, u8)) == std::vector<int64_t>{255});
  CHECK(ints_of(tensor({3}, {1}, u8) + 300.0) == std::vector<int64_t>{47});
  CHECK(ints_of(tensor({3}, {1}, u8) * -1.0) == std::vector<int64_t>{253});
  const int64_t i32_max = std::numeric_limits<int32_t>::max(), i64_min = std::numeric_limits<int64_t>::min();
  CHECK(ints_of(int_tensor({i32_max}, {1}, DType::Int32) + 1.0) == std::vector<int64_t>{-i32_max - 1});
  CHECK(ints_of(-int_tensor({i64_min}, {1}, DType::Int64)) == std::vector<int64_t>{i64_min});
  CHECK(ints_of(abs(int_tensor({i64_min}, {1}, DType::Int64))) == std::vector<int64_t>{i64_min});
  CHECK(ints_of(pow(int_tensor({3}, {1}, DType::Int32), 21.0)) == std::vector<int64_t>{1870418611});  // 3^21 mod 2^32
  // A number too large for int64 is a floating one.
  CHECK((labels + 1e19).dtype() == DType::Float32);
}

TEST_CASE("integer arithmetic refuses what PyTorch refuses, saying what to write") {
  const Tensor labels = tensor({7, -3}, {2}, {.dtype = DType::Int64});
  Tensor mask = tensor({1, 0}, {2}, {.dtype = DType::Bool});
  CHECK_THROWS_WITH_FRAGMENT(add(labels, labels, 0.5), TypeError, "[add] takes int64 operands with a whole alpha only");
  CHECK_THROWS_WITH_FRAGMENT(pow(labels, -1.0), ValueError, "[pow] integers to negative integer powers");
  CHECK_THROWS_WITH_FRAGMENT(pow(labels, labels), TypeError, "[pow] of two int64 tensors has no kernel");
  CHECK_THROWS_WITH_FRAGMENT(sub(mask, mask), TypeError, "[sub] of two Bool masks is not defined");
  CHECK_THROWS_WITH_FRAGMENT(-mask, TypeError, "[neg] of a Bool mask is not defined");
  CHECK_THROWS_WITH_FRAGMENT(add(mask, mask, 2.0), TypeError, "[add] of two Bool masks takes no alpha");
  Tensor ints = tensor({1, 2}, {2}, {.dtype = DType::Int32});
  CHECK_THROWS_WITH_FRAGMENT(ints += tensor({0.5, 0.5}, {2}), TypeError,
                             "[add_] the result of int32 and float32 is floating");
  CHECK_THROWS_WITH_FRAGMENT(ints *= 0.5, TypeError, "[mul_] the int32 tensor times or plus 0.5 is floating");
  CHECK_THROWS_WITH_FRAGMENT(ints /= 2.0, TypeError, "[div_] a true division of the int32 tensor is floating");
  CHECK_THROWS_WITH_FRAGMENT(add_(ints, ints, 0.5), TypeError, "[add_] takes a int32 tensor with a whole alpha only");
  CHECK_THROWS_WITH_FRAGMENT(mask += mask, TypeError, "[add_] input is a Bool mask");
  CHECK(ints_of(ints) == std::vector<int64_t>{1, 2});  // nothing written by a refused update
}

TEST_CASE("integer updates in place, and integers into floating tensors") {
  Tensor counts = tensor({1, 2, 3}, {3}, {.dtype = DType::Int64});
  counts += 1.0;
  counts *= 3.0;
  counts -= tensor({1, 1, 1}, {3}, {.dtype = DType::Int32});  // cast to int64, as PyTorch's in-place ops cast
  counts += tensor({1, 0, 1}, {3}, {.dtype = DType::Bool});
  CHECK(counts.dtype() == DType::Int64);
  CHECK(ints_of(counts) == std::vector<int64_t>{6, 8, 12});
  Tensor x = tensor({0.5, 0.5, 0.5}, {3});
  x += tensor({1, 2, 3}, {3}, {.dtype = DType::UInt8});
  CHECK_CLOSE(x, tensor({1.5, 2.5, 3.5}, {3}), 0, 0);
}

// The integer ops on random values (extremes included) and layouts against a
// reference that computes in uint64 and keeps the low bits, as two's complement wraps.
TEST_CASE("integer arithmetic on random values and layouts matches wrapping reference arithmetic") {
  std::mt19937_64 rng(5);
  for (DType dtype : {DType::UInt8, DType::Int32, DType::Int64}) {
    const int bits = static_cast<int>(element_size(dtype)) * 8;
    const auto wrap = [&](uint64_t v) -> int64_t {
      if (bits == 64) return static_cast<int64_t>(v);
      const uint64_t low = v & ((uint64_t{1} << bits) - 1);
      if (dtype == DType::UInt8) return static_cast<int64_t>(low);
      return static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(low)));
    };
    for (int trial = 0; trial < 12; ++trial) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(trial);
      const int64_t rows = 1 + static_cast<int64_t>(rng() % 5), cols = 1 + static_cast<int64_t>(rng() % 6);
      std::vector<int64_t> av(rows * cols), bv(cols);
      for (auto* values : {&av, &bv}) {
        for (int64_t& v : *values) v = wrap(rng() % 4 == 0 ? ~uint64_t{0} - rng() % 3 : rng());
      }
      Tensor a = int_tensor(av, {rows, cols}, dtype);
      if (trial % 2 == 1) a = a.t().contiguous().t();  // column-major storage, same values
      const Tensor b = int_tensor(bv, {cols}, dtype);  // broadcast over the rows
      const int64_t k = static_cast<int64_t>(rng() % 200) - 100;
      const auto kd = static_cast<double>(k);
      const std::vector<int64_t> sum = ints_of(a + b), diff = ints_of(a - b), prod = ints_of(a * b);
      const std::vector<int64_t> plus_k = ints_of(a + kd), times_k = ints_of(a * kd), negated = ints_of(-a);
      const std::vector<int64_t> absolute = ints_of(abs(a)), cube = ints_of(pow(a, 3.0));
      for (int64_t i = 0; i < rows * cols; ++i) {
        const auto x = static_cast<uint64_t>(av[i]), y = static_cast<uint64_t>(bv[i % cols]);
        const auto ku = static_cast<uint64_t>(k);
        CHECK(sum[i] == wrap(x + y));
        CHECK(diff[i] == wrap(x - y));
        CHECK(prod[i] == wrap(x * y));
        CHECK(plus_k[i] == wrap(x + ku));
        CHECK(times_k[i] == wrap(x * ku));
        CHECK(negated[i] == wrap(0 - x));
        CHECK(absolute[i] == (av[i] < 0 ? wrap(0 - x) : av[i]));
        CHECK(cube[i] == wrap(x * x * x));
      }
    }
  }
}

// --- sin, cos, rounding, Python's division --------------------------------------------------------

// The values of t as doubles with their signs of zero, row-major.
std::vector<double> doubles_of(const Tensor& t) { return t.to(DType::Float64).to_vector<double>(); }

// floor, ceil, round and trunc (round named without its decimals overload).
using UnaryFn = Tensor (*)(const Tensor&);
const std::vector<UnaryFn> kRoundings = {floor, ceil, round, trunc};

bool same_bits(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (!both_nan && (got[i] != want[i] || std::signbit(got[i]) != std::signbit(want[i]))) return false;
  }
  return true;
}

TEST_CASE("floor, ceil, round (half to even), trunc by hand, as torch gives them") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = tensor({0.5, 1.5, 2.5, -0.5, -2.5, -1.5, 2.6, -0.2, 3.0, kInf, NAN}, {11}, {.dtype = dtype});
    CHECK(round(x).dtype() == dtype);
    CHECK(same_bits(doubles_of(round(x)), {0, 2, 2, -0.0, -2, -2, 3, -0.0, 3, kInf, NAN}));
    CHECK(same_bits(doubles_of(floor(x)), {0, 1, 2, -1, -3, -2, 2, -1, 3, kInf, NAN}));
    CHECK(same_bits(doubles_of(ceil(x)), {1, 2, 3, -0.0, -2, -1, 3, -0.0, 3, kInf, NAN}));
    CHECK(same_bits(doubles_of(trunc(x)), {0, 1, 2, -0.0, -2, -1, 2, -0.0, 3, kInf, NAN}));
  }
  // The float32 just below 0.5 rounds down; half-way values of float64 to even.
  CHECK(doubles_of(round(tensor({0.49999997f, 4.5, 5.5}, {3}))) == std::vector<double>{0, 4, 6});
  CHECK(doubles_of(round(tensor({0.49999999999999994, 1e300}, {2}, kF64))) == std::vector<double>{0, 1e300});
  // Strided input: a transposed view.
  Generator gen(20);
  const Tensor s = mul(randn({4, 5}, {}, &gen), 4.0).t();
  CHECK_CLOSE(floor(s), naive_unary(s, [](double v) { return std::floor(static_cast<float>(v)); }), 0, 0);
  CHECK_CLOSE(round(s), naive_unary(s, [](double v) { return std::nearbyint(static_cast<float>(v)); }), 0, 0);
}

TEST_CASE("rounding an integer tensor is a copy in its dtype; a Bool mask is refused") {
  for (DType dtype : {DType::UInt8, DType::Int32, DType::Int64}) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = int_tensor({0, 7, 200, 3}, {2, 2}, dtype).t();
    for (const UnaryFn op : kRoundings) {
      const Tensor y = op(x);
      CHECK(y.dtype() == dtype);
      CHECK(ints_of(y) == ints_of(x));
      CHECK(y.raw_data() != x.raw_data());
    }
  }
  const int64_t i64_min = std::numeric_limits<int64_t>::min();
  CHECK(ints_of(floor(int_tensor({i64_min, -5}, {2}, DType::Int64))) == std::vector<int64_t>{i64_min, -5});
  const Tensor mask = tensor({1, 0}, {2}, {.dtype = DType::Bool});
  for (const auto& [name, op] : std::vector<std::pair<std::string, Tensor (*)(const Tensor&)>>{
           {"floor", floor}, {"ceil", ceil}, {"round", round}, {"trunc", trunc}}) {
    CHECK_THROWS_WITH_FRAGMENT(op(mask), TypeError, "[" + name + "] input is a Bool mask");
  }
  CHECK_THROWS_WITH_FRAGMENT(floor(Tensor()), ValueError, "[floor] input is an undefined tensor");
  CHECK_THROWS_WITH_FRAGMENT(sin(Tensor()), ValueError, "[sin] input is an undefined tensor");
}

TEST_CASE("sin and cos: values, strided input, integers and masks in float32") {
  const Tensor x = tensor({0.0, std::numbers::pi / 6, -std::numbers::pi / 2, 10.0, -0.0}, {5}, kF64);
  CHECK_CLOSE(sin(x), tensor({0.0, 0.5, -1.0, std::sin(10.0), -0.0}, {5}, kF64), 1e-15, 1e-16);
  CHECK(std::signbit(doubles_of(sin(x))[4]));
  CHECK_CLOSE(cos(x), tensor({1.0, std::sqrt(3.0) / 2, 0.0, std::cos(10.0), 1.0}, {5}, kF64), 1e-15, 1e-16);
  Generator gen(21);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor s = randn({4, 5}, {.dtype = dtype}, &gen).t();
    CHECK_CLOSE(sin(s), naive_unary(s, [](double v) { return std::sin(v); }), tolerance(s), tolerance(s));
    CHECK_CLOSE(cos(s), naive_unary(s, [](double v) { return std::cos(v); }), tolerance(s), tolerance(s));
  }
  const Tensor ints = int_tensor({0, 1, -3}, {3}, DType::Int32);
  CHECK(sin(ints).dtype() == DType::Float32);
  CHECK_CLOSE(sin(ints), tensor({0.0, std::sin(1.0), std::sin(-3.0)}, {3}), 1e-7, 0);
  CHECK_CLOSE(cos(tensor({1, 0}, {2}, {.dtype = DType::Bool})), tensor({std::cos(1.0), 1.0}, {2}), 1e-7, 0);
}

TEST_CASE("log1p, expm1, log2, log10, tan, atan, erf, rsqrt and sign: values, gradients, integers") {
  // log1p and expm1 keep what 1 + x rounds away: log(1 + 1e-20) is 0, log1p(1e-20) is 1e-20.
  const Tensor tiny = tensor({1e-20, -1e-18}, {2}, kF64);
  CHECK(doubles_of(log1p(tiny)) == std::vector<double>{1e-20, -1e-18});
  CHECK(doubles_of(expm1(tiny)) == std::vector<double>{1e-20, -1e-18});
  CHECK(doubles_of(log2(tensor({8, 0.5}, {2}, kF64))) == std::vector<double>{3, -1});
  CHECK(doubles_of(log10(tensor({1000, 0.01}, {2}, kF64))) == std::vector<double>{3, -2});
  CHECK(doubles_of(rsqrt(tensor({4, 0.25}, {2}, kF64))) == std::vector<double>{0.5, 2});
  CHECK(doubles_of(sign(tensor({-2.5, 0.0, -0.0, 3.0, std::nan("")}, {5}, kF64))) ==
        std::vector<double>{-1, 0, 0, 1, 0});
  CHECK(sign(int_tensor({-7, 0, 9}, {3}, DType::Int64)).dtype() == DType::Int64);
  CHECK(doubles_of(sign(int_tensor({-7, 0, 9}, {3}, DType::Int64))) == std::vector<double>{-1, 0, 1});
  CHECK(doubles_of(sign(int_tensor({0, 200}, {2}, DType::UInt8))) == std::vector<double>{0, 1});
  CHECK_THROWS_AS(sign(tensor({1, 0}, {2}, {.dtype = DType::Bool})), TypeError);
  CHECK(log2(int_tensor({1, 4}, {2}, DType::Int32)).dtype() == DType::Float32);
  struct Row {
    Tensor (*op)(const Tensor&);
    double (*reference)(double);
    bool positive;
  };
  const Row rows[] = {{log1p, [](double v) { return std::log1p(v); }, true},
                      {expm1, [](double v) { return std::expm1(v); }, false},
                      {log2, [](double v) { return std::log2(v); }, true},
                      {log10, [](double v) { return std::log10(v); }, true},
                      {tan, [](double v) { return std::tan(v); }, false},
                      {atan, [](double v) { return std::atan(v); }, false},
                      {erf, [](double v) { return std::erf(v); }, false},
                      {rsqrt, [](double v) { return 1.0 / std::sqrt(v); }, true}};
  Generator gen(23);
  for (const Row& row : rows) {
    for (DType dtype : {DType::Float32, DType::Float64}) {
      Tensor x = randn({4, 5}, {.dtype = dtype}, &gen).t();
      if (row.positive) x = x * x + 0.1;
      CHECK_CLOSE(row.op(x), naive_unary(x, row.reference), tolerance(x), tolerance(x));
    }
    const Tensor in = row.positive ? positive_leaf({2, 3}, gen) : random_leaf({2, 3}, gen);
    check_grad([op = row.op](const std::vector<Tensor>& v) { return op(v[0]); }, {in});
  }
  Tensor x = tensor({-1.5, 0.3, 2.5}, {3}, kF64).requires_grad_();
  sum(sign(x)).backward();
  CHECK(doubles_of(x.grad()) == std::vector<double>{0, 0, 0});
}

TEST_CASE("floor_divide and remainder by hand: Python's signs, as torch gives them") {
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
    CAPTURE(dtype_name(dtype));
    const Tensor a = tensor({-3, 3, -3, 3, -7, 7, -7, 7, 0, 6}, {10}, {.dtype = dtype});
    const Tensor b = tensor({2, -2, -2, 2, 2, -2, -2, 2, 5, 3}, {10}, {.dtype = dtype});
    CHECK(remainder(a, b).dtype() == dtype);
    CHECK(doubles_of(remainder(a, b)) == std::vector<double>{1, -1, -1, 1, 1, -1, -1, 1, 0, 0});
    CHECK(doubles_of(a % b) == doubles_of(remainder(a, b)));
    CHECK(doubles_of(floor_divide(a, b)) == std::vector<double>{-2, -2, 1, 1, -4, -4, 3, 3, 0, 2});
    CHECK(doubles_of(floor_divide(a, -2.0)) == std::vector<double>{1, -2, 1, -2, 3, -4, 3, -4, -0.0, -3});
    CHECK(doubles_of(remainder(a, -2.0)) == std::vector<double>{-1, -1, -1, -1, -1, -1, -1, -1, 0, 0});
    CHECK(doubles_of(a % 4.0) == std::vector<double>{1, 3, 1, 3, 1, 3, 1, 3, 0, 2});
  }
  // Floats: fractions, the exact fmod (1 // 0.1 is 9), signed zeros, division by zero.
  const Tensor a = tensor({-3.5, 5.5, 1.0, 1.0, -1.0, 0.0, -0.0, 0.5, 1.0, -1.0, 0.0}, {11}, kF64);
  const Tensor b = tensor({2.0, -2.0, 0.1, 0.0, 0.0, 0.0, 3.0, 2.0, kInf, kInf, -3.0}, {11}, kF64);
  CHECK(same_bits(doubles_of(floor_divide(a, b)), {-2, -3, 9, kInf, -kInf, NAN, -0.0, 0, 0, -1, -0.0}));
  CHECK(same_bits(doubles_of(remainder(a, b)), {0.5, -0.5, 0.09999999999999995, NAN, NAN, NAN, -0.0, 0.5, 1, kInf, 0}));
  CHECK(doubles_of(floor_divide(tensor({1.0f}, {1}), tensor({0.1f}, {1}))) == std::vector<double>{9});
  // Broadcasting, and promotion as the other binary ops: int32 with int64 in int64, with float32 in float32.
  const Tensor i32 = tensor({-7, 8}, {2, 1}, {.dtype = DType::Int32});
  const Tensor i64 = tensor({3, -3}, {2}, {.dtype = DType::Int64});
  CHECK(floor_divide(i32, i64).dtype() == DType::Int64);
  CHECK(ints_of(floor_divide(i32, i64)) == std::vector<int64_t>{-3, 2, 2, -3});
  CHECK(ints_of(remainder(i32, i64)) == std::vector<int64_t>{2, -1, 2, -1});
  CHECK(remainder(i32, tensor({2.5}, {1})).dtype() == DType::Float32);
  CHECK(doubles_of(remainder(i32, 2.5)) == std::vector<double>{0.5, 0.5});
  CHECK(remainder(tensor({1, 0}, {2}, {.dtype = DType::Bool}), 2.0).dtype() == DType::Int64);
}

TEST_CASE("integer floor_divide and remainder: int64 extremes and uint8, wrapping as the other integer ops") {
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  const Tensor a = int_tensor({lo, lo, lo, hi, lo, hi, lo, -1}, {8}, DType::Int64);
  const Tensor b = int_tensor({-1, 1, 3, -2, -7, lo, lo, lo}, {8}, DType::Int64);
  // Python: lo // -1 is 2^63, which wraps to lo; the remainder is 0.
  CHECK(ints_of(floor_divide(a, b)) ==
        std::vector<int64_t>{lo, lo, -3074457345618258603, -4611686018427387904, 1317624576693539401, -1, 1, 0});
  CHECK(ints_of(remainder(a, b)) == std::vector<int64_t>{0, 0, 1, -1, -1, -1, 0, -1});
  const Tensor i32 = int_tensor({std::numeric_limits<int32_t>::min()}, {1}, DType::Int32);
  CHECK(ints_of(floor_divide(i32, -1.0)) == std::vector<int64_t>{std::numeric_limits<int32_t>::min()});
  CHECK(ints_of(remainder(i32, -1.0)) == std::vector<int64_t>{0});
  const Tensor u8 = int_tensor({200, 255, 0, 7}, {4}, DType::UInt8);
  CHECK(floor_divide(u8, 7.0).dtype() == DType::UInt8);
  CHECK(ints_of(floor_divide(u8, 7.0)) == std::vector<int64_t>{28, 36, 0, 1});
  CHECK(ints_of(u8 % 7.0) == std::vector<int64_t>{4, 3, 0, 0});
  const Tensor u8_divisor = int_tensor({201, 16, 1, 255}, {4}, DType::UInt8);
  CHECK(ints_of(remainder(u8, u8_divisor)) == std::vector<int64_t>{200, 15, 0, 7});
  // -1 is 255 in uint8, as a number meets the other integer ops in the tensor's dtype.
  CHECK(ints_of(floor_divide(u8, -1.0)) == std::vector<int64_t>{0, 1, 0, 0});
}

TEST_CASE("floor_divide and remainder refuse an integer division by zero and Bool masks") {
  const Tensor labels = tensor({7, -3}, {2}, {.dtype = DType::Int64});
  const Tensor zero_in = tensor({2, 0}, {2}, {.dtype = DType::Int32});
  CHECK_THROWS_WITH_FRAGMENT(floor_divide(labels, zero_in), ValueError,
                             "[floor_divide] integer division by zero: the int64 divisor of shape (2,) holds a zero "
                             "(PyTorch raises ZeroDivisionError)");
  CHECK_THROWS_WITH_FRAGMENT(remainder(labels, zero_in), ValueError, "[remainder] integer division by zero");
  CHECK_THROWS_WITH_FRAGMENT(labels % 0.0, ValueError,
                             "[remainder] integer division by zero: the int64 tensor divided by 0");
  CHECK_THROWS_WITH_FRAGMENT(floor_divide(labels, 0.0), ValueError, "[floor_divide] integer division by zero");
  // 256 is 0 in uint8; a zero hidden by broadcasting (stride 0) still counts.
  CHECK_THROWS_WITH_FRAGMENT(tensor({1}, {1}, {.dtype = DType::UInt8}) % 256.0, ValueError,
                             "uint8 tensor divided by 256");
  CHECK_THROWS_WITH_FRAGMENT(remainder(labels, int_tensor({0}, {1}, DType::Int64).expand({2})), ValueError,
                             "holds a zero");
  CHECK_THROWS_WITH_FRAGMENT(floor_divide(labels, int_tensor({4, 0, 3, 5}, {2, 2}, DType::Int64).select(1, 1)),
                             ValueError, "holds a zero");
  CHECK(ints_of(remainder(labels, int_tensor({4, 0, 3, 5}, {2, 2}, DType::Int64).select(1, 0))) ==
        std::vector<int64_t>{3, 0});  // the view's elements, not the storage's zero
  const Tensor mask = tensor({1, 0}, {2}, {.dtype = DType::Bool});
  CHECK_THROWS_WITH_FRAGMENT(remainder(mask, mask), TypeError, "[remainder] input is a Bool mask");
  CHECK_THROWS_WITH_FRAGMENT(floor_divide(mask, mask), TypeError, "[floor_divide] input is a Bool mask");
  CHECK_THROWS_WITH_FRAGMENT(remainder(labels, Tensor()), ValueError, "[remainder] input is an undefined tensor");
  CHECK_THROWS_WITH_FRAGMENT(remainder(zeros({3}), zeros({2})), ShapeError, "[remainder] shapes (3,) and (2,)");
}

// Python's floor of the exact quotient and the remainder from it, in 128-bit integers
// (the int64 minimum // -1 fits there, then wraps) and in long double: another way
// of computing them than the kernels' truncating division and fmod.
int64_t wrap_to(__int128 v, DType dtype) {
  const auto bits = static_cast<uint64_t>(static_cast<unsigned __int128>(v));
  if (dtype == DType::Int64) return static_cast<int64_t>(bits);
  if (dtype == DType::Int32) return static_cast<int32_t>(static_cast<uint32_t>(bits));
  return static_cast<uint8_t>(bits);
}

__int128 floor_quotient(__int128 a, __int128 b) {
  const __int128 q = a / b;
  return q * b != a && (a < 0) != (b < 0) ? q - 1 : q;
}

TEST_CASE("floor_divide and remainder on random values and layouts match a 128-bit and long double reference") {
  std::mt19937_64 rng(31);
  for (DType dtype : {DType::UInt8, DType::Int32, DType::Int64, DType::Float32, DType::Float64}) {
    const bool floating = is_floating(dtype);
    for (int trial = 0; trial < 10; ++trial) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(trial);
      const int64_t rows = 1 + static_cast<int64_t>(rng() % 5), cols = 1 + static_cast<int64_t>(rng() % 6);
      Generator gen(trial);
      Tensor a, b;
      if (floating) {
        a = mul(randn({rows, cols}, {.dtype = dtype}, &gen), 10.0);
        b = randn({cols}, {.dtype = dtype}, &gen);
      } else {
        std::vector<int64_t> av(rows * cols), bv(cols);
        // A quarter the type's minimum or maximum (for uint8 128 or 127); divisors from -9 to 9 but 0, or any.
        const int bits = static_cast<int>(element_size(dtype)) * 8;
        const __int128 min_bits = static_cast<__int128>(1) << (bits - 1);
        for (int64_t& v : av) v = wrap_to(rng() % 4 == 0 ? min_bits - static_cast<__int128>(rng() % 2) : rng(), dtype);
        for (int64_t& v : bv) {
          const int64_t small = static_cast<int64_t>(rng() % 18) - 9;
          v = wrap_to(rng() % 3 == 0 ? static_cast<__int128>(rng()) : small == 0 ? 9 : small, dtype);
        }
        a = int_tensor(av, {rows, cols}, dtype);
        b = int_tensor(bv, {cols}, dtype);
      }
      if (trial % 2 == 1) a = a.t().contiguous().t();  // column-major storage, same values
      const std::vector<double> va = doubles_of(a), vb = doubles_of(b);
      const std::vector<int64_t> ia = ints_of(a), ib = ints_of(b);
      const std::vector<double> quotient = doubles_of(floor_divide(a, b)), rest = doubles_of(remainder(a, b));
      const std::vector<int64_t> iq = ints_of(floor_divide(a, b)), ir = ints_of(a % b);
      for (int64_t i = 0; i < rows * cols; ++i) {
        CAPTURE(va[i]);
        CAPTURE(vb[i % cols]);
        if (floating) {
          // The kernel's fmod is exact and adding b rounds once: within an ulp of |b|.
          const long double x = va[i], y = vb[i % cols], q = std::floor(x / y);
          const double ulp = dtype == DType::Float32 ? 0x1p-23 : 0x1p-52;
          CHECK(quotient[i] == static_cast<double>(q));
          CHECK(std::fabs(rest[i] - static_cast<double>(x - q * y)) <= ulp * std::fabs(vb[i % cols]));
          continue;
        }
        const __int128 x = ia[i], y = ib[i % cols], q = floor_quotient(x, y);
        CHECK(iq[i] == wrap_to(q, dtype));
        CHECK(ir[i] == wrap_to(x - q * y, dtype));
      }
    }
  }
}

TEST_CASE("gradients: sin, cos, remainder (gradcheck, float64); rounding is zero; floor_divide has none") {
  Generator gen(22);
  for (const Shape& sizes : {Shape{2, 3}, Shape{3, 1, 2}}) {
    CAPTURE(shape_str(sizes));
    check_grad([](const std::vector<Tensor>& in) { return sin(in[0]); }, {random_leaf(sizes, gen)});
    check_grad([](const std::vector<Tensor>& in) { return cos(in[0]); }, {random_leaf(sizes, gen)});
    check_grad([](const std::vector<Tensor>& in) { return cos(sin(in[0]) * 3.0); }, {random_leaf(sizes, gen)});
    check_grad([](const std::vector<Tensor>& in) { return remainder(in[0], 0.7); }, {random_leaf(sizes, gen)});
    // Both operands, broadcast; b away from zero, both sides of it.
    const Tensor b = leaf_like(mul(positive_leaf({sizes.back()}, gen), tensor({-1.0}, {1}, kF64)));
    check_grad([](const std::vector<Tensor>& in) { return remainder(in[0], in[1]); }, {random_leaf(sizes, gen), b});
    check_grad([](const std::vector<Tensor>& in) { return in[0] % in[1]; },
               {mul(random_leaf(sizes, gen), 3.0).detach().requires_grad_(), positive_leaf(sizes, gen)});
  }
  // db = -floor_divide(a, b) * dy, summed over the broadcast dim.
  Tensor a = tensor({-3.5, 5.5, 7.0}, {3}, kF64).requires_grad_(), b = tensor({2.0}, {1}, kF64).requires_grad_();
  sum(remainder(a, b)).backward();
  CHECK(doubles_of(a.grad()) == std::vector<double>{1, 1, 1});
  CHECK(doubles_of(b.grad()) == std::vector<double>{-(-2.0 + 2.0 + 3.0)});
  for (const UnaryFn op : kRoundings) {
    Tensor x = tensor({-1.5, 0.3, 2.5}, {3}, kF64).requires_grad_();
    const Tensor y = op(x);
    CHECK(y.requires_grad());
    sum(y).backward();
    CHECK(doubles_of(x.grad()) == std::vector<double>{0, 0, 0});
  }
  const Tensor q = floor_divide(a, b);
  CHECK_FALSE(q.requires_grad());
  CHECK_FALSE(floor_divide(a, 2.0).requires_grad());
  CHECK(remainder(a, 2.0).requires_grad());
}

// --- round with decimals, integer clamp, the number first, %= --------------------------------------

// Each value as the dtype holds it (float32's nearest to the decimal), as doubles.
std::vector<double> in_dtype(const std::vector<double>& values, DType dtype) {
  std::vector<double> out;
  for (double v : values) out.push_back(dtype == DType::Float32 ? static_cast<double>(static_cast<float>(v)) : v);
  return out;
}

TEST_CASE("round with decimals by hand, as torch.round(x, decimals=d) gives them") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    CAPTURE(dtype_name(dtype));
    const TensorOptions o{.dtype = dtype};
    const auto rounded = [&](const std::vector<double>& x, int64_t d) {
      const Tensor y = round(tensor(x, {static_cast<int64_t>(x.size())}, o), d);
      CHECK(y.dtype() == dtype);
      return doubles_of(y);
    };
    // torch's documented examples: 0.1234567 to 3 decimals, 1200.1234567 to -3.
    CHECK(same_bits(rounded({0.1234567, 1200.1234567, -0.0005, 0.0015}, 3),
                    in_dtype({0.123, 1200.123, -0.0, 0.002}, dtype)));
    CHECK(same_bits(rounded({1200.1234567, 1500, 2500, -499}, -3), {1000, 2000, 2000, -0.0}));
    // x * 100 rounds before nearbyint sees it: 2.675 (2.67499...) becomes 267.5, then 268, in
    // either dtype, as PyTorch's kernel computes; 1.005 (1.00499...) stays below 100.5.
    CHECK(same_bits(rounded({2.675, 0.125, -0.125, 0.135, -0.004, 1.005}, 2),
                    in_dtype({2.68, 0.12, -0.12, 0.14, -0.0, 1.0}, dtype)));
    CHECK(same_bits(rounded({0.25, 0.35, -0.45, 1.15}, 1), in_dtype({0.2, 0.4, -0.4, 1.2}, dtype)));
    CHECK(same_bits(rounded({15, 25, -35, 1234.5678, 5, -4.9}, -1), {20, 20, -40, 1230, 0, -0.0}));
    CHECK(same_bits(rounded({kInf, -kInf, NAN}, 2), {kInf, -kInf, NAN}));
    // 0 decimals is round(x); 10^40 overflows float32 (x * inf / inf is NaN), not float64.
    CHECK(same_bits(rounded({0.5, 1.5, -2.5, 2.6}, 0), {0, 2, -2, 3}));
    const bool f32 = dtype == DType::Float32;
    CHECK(same_bits(rounded({1.5, -0.25}, 40), f32 ? std::vector<double>{NAN, NAN} : std::vector<double>{1.5, -0.25}));
    CHECK(same_bits(rounded({1.5, 0.0}, -40), f32 ? std::vector<double>{NAN, NAN} : std::vector<double>{0.0, 0.0}));
  }
}

TEST_CASE("round with decimals on random values and layouts matches PyTorch's formula in the dtype") {
  Generator gen(41);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (int64_t d = -3; d <= 6; ++d) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(d);
      Tensor x = mul(randn({5, 7}, {.dtype = dtype}, &gen), 500.0);
      if (d % 2 != 0) x = x.t();  // strided
      const std::vector<double> got = doubles_of(round(x, d)), values = doubles_of(x);
      const double p = std::pow(10.0, std::abs(static_cast<double>(d)));
      for (size_t i = 0; i < values.size(); ++i) {
        CAPTURE(values[i]);
        double want = 0;
        if (dtype == DType::Float32) {
          const float v = static_cast<float>(values[i]), pf = static_cast<float>(p);
          want = d >= 0 ? std::nearbyint(v * pf) / pf : std::nearbyint(v / pf) * pf;
        } else {
          want = d >= 0 ? std::nearbyint(values[i] * p) / p : std::nearbyint(values[i] / p) * p;
        }
        CHECK(same_bits({got[i]}, {want}));
        // Within half a unit of the last place kept, give or take the dtype's rounding.
        CHECK(std::fabs(got[i] - values[i]) <= 0.5 / std::pow(10.0, static_cast<double>(d)) * (1 + 1e-6) +
                                                   std::fabs(values[i]) * (dtype == DType::Float32 ? 1e-6 : 1e-15));
      }
    }
  }
}

TEST_CASE("round with decimals: zero gradient; integer tensors and masks refused as in PyTorch") {
  Tensor x = tensor({-1.25, 0.333, 2.5}, {3}, kF64).requires_grad_();
  const Tensor y = round(x, 1);
  CHECK(y.requires_grad());
  sum(mul(y, 3.0)).backward();
  CHECK(doubles_of(x.grad()) == std::vector<double>{0, 0, 0});
  CHECK_FALSE(round(x.detach(), 2).requires_grad());
  CHECK_THROWS_WITH_FRAGMENT(round(int_tensor({1, 2}, {2}, DType::Int64), 2), TypeError,
                             "[round] with decimals (2) takes a floating tensor, but the input is int64 of shape (2,)");
  CHECK_THROWS_WITH_FRAGMENT(round(int_tensor({1}, {1}, DType::UInt8), 0), TypeError, "round(x) copies it");
  CHECK_THROWS_WITH_FRAGMENT(round(tensor({1, 0}, {2}, {.dtype = DType::Bool}), -1), TypeError,
                             "but the input is bool");
  CHECK_THROWS_WITH_FRAGMENT(round(Tensor(), 1), ValueError, "[round] input is an undefined tensor");
  CHECK_THROWS_WITH_FRAGMENT(round(zeros({2}, {.dtype = DType::BFloat16}), 1), TypeError,
                             "[round] input has dtype bfloat16 on the CPU");
}

TEST_CASE("clamp of integer tensors keeps their dtype for whole bounds, float32 for a fraction, as torch.clamp") {
  for (DType dtype : {DType::Int32, DType::Int64}) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = int_tensor({-7, -1, 0, 3, 9, 12}, {2, 3}, dtype);
    const Tensor y = clamp(x, -1.0, 9.0);
    CHECK(y.dtype() == dtype);
    CHECK(ints_of(y) == std::vector<int64_t>{-1, -1, 0, 3, 9, 9});
    CHECK(ints_of(clamp(x, 2.0, std::nullopt)) == std::vector<int64_t>{2, 2, 2, 3, 9, 12});
    CHECK(ints_of(clamp(x, std::nullopt, -3.0)) == std::vector<int64_t>{-7, -3, -3, -3, -3, -3});
    CHECK(ints_of(clamp(x.t(), 0.0, 5.0)) == std::vector<int64_t>{0, 3, 0, 5, 0, 5});  // strided
    // A fractional bound: float32, as PyTorch's result type of an integer tensor and a float.
    const Tensor f = clamp(x, 1.5, 9.0);
    CHECK(f.dtype() == DType::Float32);
    CHECK(doubles_of(f) == std::vector<double>{1.5, 1.5, 1.5, 3, 9, 9});
    CHECK(clamp(x, std::nullopt, 0.25).dtype() == DType::Float32);
  }
  // A mask meets whole bounds in int64 (PyTorch's result type of Bool and an int).
  const Tensor mask = tensor({1, 0, 1}, {3}, {.dtype = DType::Bool});
  CHECK(clamp(mask, 0.0, 1.0).dtype() == DType::Int64);
  CHECK(ints_of(clamp(mask, std::nullopt, 0.0)) == std::vector<int64_t>{0, 0, 0});
  CHECK(doubles_of(clamp(mask, 0.5, std::nullopt)) == std::vector<double>{1, 0.5, 1});
  // uint8: a min below 0 or a max above 255 changes nothing and is dropped (a copy comes back),
  // a min above 255 or a max below 0 is refused, as PyTorch's prepare_clamp_bound.
  const Tensor pixels = int_tensor({0, 100, 255}, {3}, DType::UInt8);
  const Tensor same = clamp(pixels, -1.0, 300.0);
  CHECK(same.dtype() == DType::UInt8);
  CHECK(ints_of(same) == std::vector<int64_t>{0, 100, 255});
  CHECK(same.raw_data() != pixels.raw_data());
  CHECK(ints_of(clamp(pixels, -5.0, 200.0)) == std::vector<int64_t>{0, 100, 200});
  CHECK(ints_of(clamp(pixels, 50.0, 1e6)) == std::vector<int64_t>{50, 100, 255});
  CHECK_THROWS_WITH_FRAGMENT(clamp(pixels, std::nullopt, -1.0), ValueError,
                             "[clamp] the max bound -1 is outside the range of the uint8 input ([0, 255]), so every "
                             "element would become a value it cannot hold");
  const Tensor i32 = int_tensor({5}, {1}, DType::Int32);
  CHECK(ints_of(clamp(i32, -3e9, 3e9)) == std::vector<int64_t>{5});
  CHECK_THROWS_WITH_FRAGMENT(clamp(i32, 3e9, std::nullopt), ValueError,
                             "[clamp] the min bound 3000000000 is outside the range of the int32 input "
                             "([-2147483648, 2147483647])");
  // int64 compares in int64, not double: 2^53 + 1 stays below a min of 2^53 + 2.
  const int64_t big = (int64_t{1} << 53) + 1;
  CHECK(ints_of(clamp(int_tensor({big, big + 2}, {2}, DType::Int64), 0x1p53 + 2, std::nullopt)) ==
        std::vector<int64_t>{big + 1, big + 2});
  CHECK(ints_of(clamp(int_tensor({big + 2}, {1}, DType::Int64), std::nullopt, 0x1p53)) ==
        std::vector<int64_t>{big - 1});
  CHECK(ints_of(clamp(i32, 7.0, 6.0)) == std::vector<int64_t>{6});  // inverted: max, as torch.clamp
}

TEST_CASE("integer clamp on random values and layouts matches std::clamp") {
  std::mt19937_64 rng(43);
  for (DType dtype : {DType::UInt8, DType::Int32, DType::Int64}) {
    // int64 values within +-10^6: its full range is covered by the hand cases.
    const int64_t i32_min = std::numeric_limits<int32_t>::min(), i32_max = std::numeric_limits<int32_t>::max();
    const auto [lowest, highest] = dtype == DType::UInt8   ? std::pair<int64_t, int64_t>{0, 255}
                                   : dtype == DType::Int32 ? std::pair<int64_t, int64_t>{i32_min, i32_max}
                                                           : std::pair<int64_t, int64_t>{-1000000, 1000000};
    for (int trial = 0; trial < 12; ++trial) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(trial);
      const auto draw = [&] {
        const auto span = static_cast<uint64_t>(highest - lowest) + 1;
        return lowest + static_cast<int64_t>(rng() % span);
      };
      std::vector<int64_t> values(12);
      for (int64_t& v : values) v = draw();
      Tensor x = int_tensor(values, {3, 4}, dtype);
      if (trial % 2 == 1) x = x.t().contiguous().t();
      int64_t lo = draw(), hi = draw();
      if (lo > hi) std::swap(lo, hi);
      const bool has_lo = trial % 3 != 1, has_hi = trial % 3 != 2;
      const Tensor y = clamp(x, has_lo ? std::optional<double>(static_cast<double>(lo)) : std::nullopt,
                             has_hi ? std::optional<double>(static_cast<double>(hi)) : std::nullopt);
      CHECK(y.dtype() == dtype);
      const std::vector<int64_t> got = ints_of(y);
      for (size_t i = 0; i < values.size(); ++i) {
        CHECK(got[i] == std::clamp(values[i], has_lo ? lo : lowest, has_hi ? hi : highest));
      }
    }
  }
}

TEST_CASE("floor_divide and remainder with the number first by hand: Python's 7 // t and 7 % t") {
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
    CAPTURE(dtype_name(dtype));
    const Tensor b = tensor({2, -2, 3, -3, 5, -5}, {6}, {.dtype = dtype});
    CHECK(remainder(7.0, b).dtype() == dtype);
    CHECK(floor_divide(7.0, b).dtype() == dtype);
    CHECK(doubles_of(floor_divide(7.0, b)) == std::vector<double>{3, -4, 2, -3, 1, -2});
    CHECK(doubles_of(remainder(7.0, b)) == std::vector<double>{1, -1, 1, -2, 2, -3});
    CHECK(doubles_of(floor_divide(-7.0, b)) == std::vector<double>{-4, 3, -3, 2, -2, 1});
    CHECK(doubles_of(-7.0 % b) == std::vector<double>{1, -1, 2, -1, 3, -2});
  }
  // Floats: PyTorch's fmod-based formula (1 // 0.1 is 9), fractions, infinities, division by zero.
  const Tensor b = tensor({0.1, 2.0, -2.0, kInf, -kInf, 0.0}, {6}, kF64);
  CHECK(same_bits(doubles_of(floor_divide(1.0, b)), {9, 0, -1, 0, -1, kInf}));
  CHECK(same_bits(doubles_of(remainder(1.0, b)), {0.09999999999999995, 1, -1, 1, -kInf, NAN}));
  CHECK(same_bits(doubles_of(remainder(5.5, b.slice(0, 1, 3))), {1.5, -0.5}));
  CHECK(doubles_of(floor_divide(1.0, tensor({0.1f}, {1}))) == std::vector<double>{9});
  // Dtypes as the number's other arithmetic: a whole number keeps an integer dtype, a
  // fraction is float32, a mask meets a whole number in int64; uint8 wraps the number (300 is 44).
  const Tensor i32 = int_tensor({3, -4}, {2}, DType::Int32);
  CHECK(ints_of(remainder(10.0, i32)) == std::vector<int64_t>{1, -2});
  CHECK(remainder(7.5, i32).dtype() == DType::Float32);
  CHECK(doubles_of(remainder(7.5, i32)) == std::vector<double>{1.5, -0.5});
  CHECK(doubles_of(floor_divide(7.5, i32)) == std::vector<double>{2, -2});
  const Tensor ones_mask = tensor({1, 1}, {2}, {.dtype = DType::Bool});
  CHECK(remainder(5.0, ones_mask).dtype() == DType::Int64);
  CHECK(ints_of(floor_divide(5.0, ones_mask)) == std::vector<int64_t>{5, 5});
  const Tensor u8 = int_tensor({3, 7, 255, 200}, {4}, DType::UInt8);
  CHECK(floor_divide(200.0, u8).dtype() == DType::UInt8);
  CHECK(ints_of(floor_divide(200.0, u8)) == std::vector<int64_t>{66, 28, 0, 1});
  CHECK(ints_of(remainder(200.0, u8)) == std::vector<int64_t>{2, 4, 200, 0});
  CHECK(ints_of(remainder(300.0, u8)) == std::vector<int64_t>{2, 2, 44, 44});
  // Large int64 values exactly (a double holds -2^62); -2^63 is not below 2^63 in magnitude, so float32.
  CHECK(ints_of(floor_divide(-0x1p62, int_tensor({-1, 3}, {2}, DType::Int64))) ==
        std::vector<int64_t>{4611686018427387904, -1537228672809129302});
  CHECK(ints_of(remainder(-0x1p62, int_tensor({3}, {1}, DType::Int64))) == std::vector<int64_t>{2});
}

TEST_CASE("the number first: an integer divisor with a zero is refused; strided and random values match") {
  const Tensor with_zero = int_tensor({4, 0}, {2}, DType::Int64);
  CHECK_THROWS_WITH_FRAGMENT(remainder(7.0, with_zero), ValueError,
                             "[remainder] integer division by zero: the int64 divisor of shape (2,) holds a zero");
  CHECK_THROWS_WITH_FRAGMENT(floor_divide(7.0, with_zero), ValueError, "[floor_divide] integer division by zero");
  CHECK_THROWS_WITH_FRAGMENT(7.0 % tensor({1, 0}, {2}, {.dtype = DType::Bool}), ValueError, "holds a zero");
  CHECK_THROWS_WITH_FRAGMENT(remainder(7.0, Tensor()), ValueError, "[remainder] input is an undefined tensor");
  CHECK(ints_of(remainder(7.0, int_tensor({4, 0, 3, 5}, {2, 2}, DType::Int64).select(1, 0))) ==
        std::vector<int64_t>{3, 1});  // the view's elements, not the storage's zero
  std::mt19937_64 rng(47);
  for (DType dtype : {DType::Int32, DType::Int64, DType::Float32, DType::Float64}) {
    for (int trial = 0; trial < 6; ++trial) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(trial);
      Generator gen(100 + trial);
      Tensor b;
      if (is_floating(dtype)) {
        b = randn({4, 3}, {.dtype = dtype}, &gen);
      } else {
        std::vector<int64_t> bv(12);
        for (int64_t& v : bv) v = (rng() % 2 == 0 ? 1 : -1) * static_cast<int64_t>(1 + rng() % 40);
        b = int_tensor(bv, {4, 3}, dtype);
      }
      if (trial % 2 == 1) b = b.t();
      const double a = is_floating(dtype) ? static_cast<double>(static_cast<int64_t>(rng() % 2001) - 1000) / 7.0
                                          : static_cast<double>(static_cast<int64_t>(rng() % 2001) - 1000);
      const std::vector<double> vb = doubles_of(b), q = doubles_of(floor_divide(a, b)), r = doubles_of(a % b);
      const double av = dtype == DType::Float32 ? static_cast<float>(a) : a;
      for (size_t i = 0; i < vb.size(); ++i) {
        CAPTURE(vb[i]);
        const long double x = av, y = vb[i], fq = std::floor(x / y);
        CHECK(q[i] == static_cast<double>(fq));
        const double ulp = dtype == DType::Float32 ? 0x1p-23 : 0x1p-52;
        CHECK(std::fabs(r[i] - static_cast<double>(x - fq * y)) <= ulp * std::fabs(vb[i]));
      }
    }
  }
}

TEST_CASE("the number first: remainder's gradient to the divisor is -floor(a / b) (gradcheck, float64)") {
  Tensor b = tensor({2.0, -2.0, 0.75, 10.0}, {4}, kF64).requires_grad_();
  Tensor y = remainder(7.0, b);
  CHECK(y.requires_grad());
  sum(y).backward();
  CHECK(doubles_of(b.grad()) == std::vector<double>{-3, 4, -9, -0.0});
  CHECK_FALSE(floor_divide(7.0, b).requires_grad());
  Generator gen(49);
  for (const Shape& sizes : {Shape{2, 3}, Shape{3, 1, 2}}) {
    CAPTURE(shape_str(sizes));
    check_grad([](const std::vector<Tensor>& in) { return remainder(2.3, in[0]); }, {positive_leaf(sizes, gen)});
    check_grad([](const std::vector<Tensor>& in) { return -5.1 % (in[0] * -1.0); }, {positive_leaf(sizes, gen)});
    check_grad([](const std::vector<Tensor>& in) { return remainder(1.7, in[0].t()); }, {positive_leaf({3, 2}, gen)});
  }
}

TEST_CASE("%= updates in place as += and *= do: tensor and number operands, integers, refusals") {
  Tensor x = tensor({-7, 7, 5.5, -3.5}, {2, 2}, kF64);
  const Tensor alias = x;
  const void* data = x.raw_data();
  x %= tensor({2, -2}, {2}, kF64);  // broadcast into x
  CHECK(doubles_of(alias) == std::vector<double>{1, -1, 1.5, -1.5});
  x %= 1.0;
  CHECK(doubles_of(alias) == std::vector<double>{0, 0, 0.5, 0.5});
  CHECK(x.raw_data() == data);
  Tensor counts = int_tensor({-7, 7, 200}, {3}, DType::Int64);
  counts %= 3.0;
  CHECK(ints_of(counts) == std::vector<int64_t>{2, 1, 2});
  counts %= int_tensor({2, 2, -2}, {3}, DType::Int32);  // cast to int64, as the other in-place ops cast
  CHECK(counts.dtype() == DType::Int64);
  CHECK(ints_of(counts) == std::vector<int64_t>{0, 1, 0});
  Tensor floats = tensor({5.5, -5.5}, {2});
  floats %= int_tensor({2, 2}, {2}, DType::UInt8);
  CHECK(doubles_of(floats) == std::vector<double>{1.5, 0.5});
  Tensor cols = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kF64).t();  // strided destination
  remainder_(cols, 4.0);
  CHECK(doubles_of(cols) == std::vector<double>{1, 0, 2, 1, 3, 2});
  // Refused as add_ and mul_ refuse, with nothing written.
  Tensor ints = int_tensor({5, 6}, {2}, DType::Int32);
  CHECK_THROWS_WITH_FRAGMENT(ints %= 0.5, TypeError, "[remainder_] the int32 tensor modulo 0.5 is floating");
  CHECK_THROWS_WITH_FRAGMENT(ints %= tensor({2.5, 2.5}, {2}), TypeError,
                             "[remainder_] the result of int32 and float32 is floating");
  CHECK_THROWS_WITH_FRAGMENT(ints %= 0.0, ValueError,
                             "[remainder_] integer division by zero: the int32 tensor divided by 0");
  CHECK_THROWS_WITH_FRAGMENT(ints %= int_tensor({3, 0}, {2}, DType::Int32), ValueError,
                             "[remainder_] integer division by zero: the int32 divisor of shape (2,) holds a zero");
  CHECK(ints_of(ints) == std::vector<int64_t>{5, 6});
  Tensor mask = tensor({1, 0}, {2}, {.dtype = DType::Bool});
  CHECK_THROWS_WITH_FRAGMENT(mask %= 2.0, TypeError, "[remainder_] input is a Bool mask");
  CHECK_THROWS_WITH_FRAGMENT(x %= zeros({3}, kF64), ShapeError, "[remainder_]");
  Tensor expanded = ones({1}).expand({3});
  CHECK_THROWS_WITH_FRAGMENT(expanded %= 2.0, ValueError, "[remainder_] the destination (shape (3,), strides (0,))");
  Tensor w = tensor({2.5, -1.5}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  CHECK_THROWS_WITH_FRAGMENT(w %= 1.0, AutogradError, "[remainder_] a leaf tensor that requires grad");
  Tensor h = mul(w, 2.0);
  CHECK_THROWS_WITH_FRAGMENT(h %= w, AutogradError, "use the out-of-place op");
  {
    NoGradGuard guard;
    w %= 1.0;  // an update outside autograd, as optimizers make
  }
  CHECK(doubles_of(w) == std::vector<double>{0.5, 0.5});
  CHECK(w.requires_grad());
}

TEST_CASE("floor_divide_ updates in place as floor_divide computes, with remainder_'s refusals") {
  Tensor x = tensor({7, -7, 7.5, -7.5}, {2, 2}, kF64);
  const Tensor alias = x;
  floor_divide_(x, tensor({2, -2}, {2}, kF64));  // broadcast into x
  CHECK(doubles_of(alias) == std::vector<double>{3, 3, 3, 3});
  floor_divide_(x, -2.0);
  CHECK(doubles_of(alias) == std::vector<double>{-2, -2, -2, -2});
  Tensor counts = int_tensor({-7, 7, 200}, {3}, DType::Int64);
  floor_divide_(counts, 3.0);
  CHECK(ints_of(counts) == std::vector<int64_t>{-3, 2, 66});
  floor_divide_(counts, int_tensor({2, -2, 7}, {3}, DType::Int32));
  CHECK(ints_of(counts) == std::vector<int64_t>{-2, -1, 9});
  Tensor ints = int_tensor({5, 6}, {2}, DType::Int32);
  CHECK_THROWS_WITH_FRAGMENT(floor_divide_(ints, 0.5), TypeError,
                             "[floor_divide_] the int32 tensor floor-divided by 0.5 is floating");
  CHECK_THROWS_WITH_FRAGMENT(floor_divide_(ints, 0.0), ValueError, "[floor_divide_] integer division by zero");
  CHECK_THROWS_WITH_FRAGMENT(floor_divide_(ints, int_tensor({3, 0}, {2}, DType::Int32)), ValueError,
                             "[floor_divide_] integer division by zero");
  CHECK(ints_of(ints) == std::vector<int64_t>{5, 6});
  Tensor w = tensor({2.5}, {1}, {.dtype = DType::Float64, .requires_grad = true});
  CHECK_THROWS_WITH_FRAGMENT(floor_divide_(w, 1.0), AutogradError, "[floor_divide_] a leaf tensor that requires grad");
}

}  // namespace
}  // namespace loom

TEST_CASE("increment_ counts in a 0-d int64 tensor and rejects anything else") {
  loom::Tensor counter = loom::zeros({}, {.dtype = loom::DType::Int64});
  loom::increment_(counter);
  loom::increment_(counter, 41);
  CHECK(counter.item() == 42.0);
  loom::increment_(counter, 8, loom::CounterOrder::AtCaptureEnd);  // no capture on the CPU: at once
  CHECK(counter.item() == 50.0);
  loom::Tensor floats = loom::zeros({});
  CHECK_THROWS_WITH_FRAGMENT(loom::increment_(floats), loom::TypeError,
                             "[increment_] the counter must be one int64 value, got float32 of shape ()");
  loom::Tensor many = loom::zeros({3}, {.dtype = loom::DType::Int64});
  CHECK_THROWS_WITH_FRAGMENT(loom::increment_(many), loom::TypeError, "int64 of shape (3,)");
}
