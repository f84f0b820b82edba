// File: tests/core/ops/compare_test.cc
// Comparisons into Bool masks (hand values, broadcasting, mixed dtypes, NaN,
// scalars, operators), counting with sum/mean on a mask, and where /
// masked_fill: values, gradients (float64 gradcheck, broadcast operands) and
// argument errors; logical ops and the mask operators, mul with masks, and
// isclose / allclose / equal, and the NaN / infinity tests with nan_to_num.
#include "core/ops/compare.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};
const TensorOptions kI64 = {.dtype = DType::Int64};

std::vector<double> v(const Tensor& t) { return testing::values(t); }

}  // namespace

TEST_CASE("comparisons give Bool masks, tensor-tensor with broadcasting") {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor({2, 2, 2}, {3});
  CHECK((a == b).dtype() == DType::Bool);
  CHECK((a == b).sizes() == Shape{2, 3});
  CHECK(v(a == b) == std::vector<double>{0, 1, 0, 0, 0, 0});
  CHECK(v(a != b) == std::vector<double>{1, 0, 1, 1, 1, 1});
  CHECK(v(a < b) == std::vector<double>{1, 0, 0, 0, 0, 0});
  CHECK(v(a <= b) == std::vector<double>{1, 1, 0, 0, 0, 0});
  CHECK(v(a > b) == std::vector<double>{0, 0, 1, 1, 1, 1});
  CHECK(v(a >= b) == std::vector<double>{0, 1, 1, 1, 1, 1});
  CHECK(v(ge(a.t(), b.unsqueeze(1))) == std::vector<double>{0, 1, 1, 1, 1, 1});
}

TEST_CASE("comparisons against numbers, and across dtypes") {
  Tensor a = tensor({-1, 0, 2.5}, {3});
  CHECK(v(a > 0) == std::vector<double>{0, 0, 1});
  CHECK(v(a == 2.5) == std::vector<double>{0, 0, 1});
  CHECK(v(le(a, 0.0)) == std::vector<double>{1, 1, 0});
  Tensor labels = tensor({0, 2, 2}, {3}, kI64);
  CHECK(v(labels == tensor({0, 2, 1}, {3}, kI64)) == std::vector<double>{1, 1, 0});
  CHECK(v(labels == tensor({0, 2, 2.5}, {3})) == std::vector<double>{1, 1, 0});  // float wins
  const int64_t above[] = {(int64_t{1} << 53) + 1}, at[] = {int64_t{1} << 53};
  Tensor big = from_host(above, DType::Int64, {1}, kI64);  // int64s compare exactly
  CHECK(v(eq(big, from_host(at, DType::Int64, {1}, kI64))) == std::vector<double>{0});
}

// PyTorch rounds the number to a floating tensor's dtype before comparing
// (torch 1.13: torch.tensor([0.1]) == 0.1 is True, > 0.1 False).
TEST_CASE("a floating tensor compares with a number in its own dtype, as PyTorch does") {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    CAPTURE(dtype_name(dtype));
    const Tensor a = tensor({0.1, 0.3, 1e30}, {3}, {.dtype = dtype});
    CHECK(v(a == 0.1) == std::vector<double>{1, 0, 0});  // 1e30 is inf in float16, finite in the others
    CHECK(v(a > 0.1) == std::vector<double>{0, 1, 1});
    CHECK(v(a <= 0.3) == std::vector<double>{1, 1, 0});
    CHECK(v(a != 0.3) == std::vector<double>{1, 0, 1});
  }
  CHECK(v(tensor({0.1}, {1}, kF64) == 0.1) == std::vector<double>{1});
  CHECK(v(tensor({0.1}, {1}, kF64) == static_cast<double>(0.1f)) == std::vector<double>{0});
  CHECK(v(tensor({2, 3}, {2}, kI64) < 2.5) == std::vector<double>{1, 0});
}

// torch 1.13: an integer tensor and a Python float promote to float32, where
// 16777217 and 16777216.5 both round to 16777216.
TEST_CASE("an integer or Bool tensor compares with a fractional number in float32, a whole one exactly") {
  const Tensor a = tensor({16777217, 2, 3}, {3}, {.dtype = DType::Int32});
  CHECK(v(a < 16777216.5) == std::vector<double>{0, 1, 1});
  CHECK(v(a == 16777216.5) == std::vector<double>{1, 0, 0});
  CHECK(v(a > 2.5) == std::vector<double>{1, 0, 1});
  CHECK(v(a <= 2.5) == std::vector<double>{0, 1, 0});
  CHECK(v(a == 16777217.0) == std::vector<double>{1, 0, 0});  // whole: exact, in double
  CHECK(v(a == 16777216.0) == std::vector<double>{0, 0, 0});
  const Tensor b = tensor({1, 0}, {2}) > 0;
  CHECK(v(b > 0.5) == std::vector<double>{1, 0});
  CHECK(v(b == 0.5) == std::vector<double>{0, 0});
  CHECK(scalar_comparison_dtype(DType::Int64, 2.5) == DType::Float32);
  CHECK(scalar_comparison_dtype(DType::Int64, 2.0) == DType::Float64);
  CHECK(scalar_comparison_dtype(DType::Bool, INFINITY) == DType::Float64);
  CHECK(scalar_comparison_dtype(DType::BFloat16, 2.5) == DType::BFloat16);
}

TEST_CASE("NaN compares unequal to everything, itself included") {
  Tensor a = tensor({NAN, 1}, {2});
  CHECK(v(a == a) == std::vector<double>{0, 1});
  CHECK(v(a != a) == std::vector<double>{1, 0});
  CHECK(v(a < 2) == std::vector<double>{0, 1});
}

TEST_CASE("(pred == y).sum() counts the matches; mean is the fraction") {
  Tensor logits = tensor({0.1, 0.9, 0.8, 0.2, 0.3, 0.7, 0.6, 0.4}, {4, 2});
  Tensor y = tensor({1, 0, 0, 0}, {4}, kI64);
  Tensor correct = (logits.argmax(1) == y).sum();
  CHECK(correct.dtype() == DType::Int64);
  CHECK(correct.dim() == 0);
  CHECK(correct.item() == 3);
  CHECK((logits.argmax(1) == y).mean().item() == doctest::Approx(0.75));
  Tensor per_row = sum(tensor({1, 0, 1, 1}, {2, 2}) > 0, {1});
  CHECK(per_row.dtype() == DType::Int64);
  CHECK(v(per_row) == std::vector<double>{1, 2});
  Tensor total = sum(tensor({1, 2, 3}, {3}, kI64));
  CHECK(total.dtype() == DType::Int64);
  CHECK(total.item() == 6);
  CHECK_THROWS_WITH_FRAGMENT(mean(tensor({1, 2}, {2}, kI64)), TypeError,
                             "[mean] input has dtype int64");
}

TEST_CASE("where selects elementwise with broadcasting; gradients go where selected") {
  Tensor cond = tensor({1, 0, 1}, {3}) > 0;
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kF64).requires_grad_(true);
  Tensor b = full({1}, -1.0, kF64).requires_grad_(true);
  Tensor y = where(cond, a, b);
  CHECK(v(y) == std::vector<double>{1, -1, 3, 4, -1, 6});
  sum(y * tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kF64)).backward();
  CHECK(v(a.grad()) == std::vector<double>{1, 0, 3, 4, 0, 6});
  CHECK(v(b.grad()) == std::vector<double>{7});  // 2 + 5: b broadcast to the unselected places
}

TEST_CASE("where and masked_fill pass the float64 gradcheck") {
  Generator gen(3);
  Tensor a = randn({3, 4}, kF64, &gen).requires_grad_(true);
  Tensor b = randn({4}, kF64, &gen).requires_grad_(true);
  Tensor cond = randn({3, 1}, kF64, &gen) > 0;
  GradcheckResult r =
      gradcheck([&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); }, {a, b});
  CHECK_MESSAGE(r.ok, r.message);
  Tensor mask = randn({3, 4}, kF64, &gen) > 0.5;
  r = gradcheck([&](const std::vector<Tensor>& in) { return masked_fill(in[0], mask, 7.0); }, {a});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("masked_fill writes the value where the mask is true, in x's dtype") {
  Tensor x = tensor({1, 2, 3, 4}, {2, 2}, kI64);
  Tensor y = masked_fill(x, tensor({1, 0}, {2}) > 0, -9);
  CHECK(y.dtype() == DType::Int64);
  CHECK(v(y) == std::vector<double>{-9, 2, -9, 4});
  Tensor z = masked_fill(tensor({1, 2}, {2}), tensor({0, 1}, {2}) > 0, -INFINITY);
  CHECK(v(z)[1] == -INFINITY);
}

TEST_CASE("comparison, where and masked_fill errors name the op and the values") {
  Tensor a = zeros({2, 3});
  CHECK_THROWS_WITH_FRAGMENT(a == zeros({4}), ShapeError, "[eq]");
  CHECK_THROWS_WITH_FRAGMENT(where(a, a, a), TypeError, "[where] the mask has dtype float32");
  CHECK_THROWS_WITH_FRAGMENT(where(a > 0, a, zeros({3}, kF64)), TypeError,
                             "[where] a has dtype float32 and b float64");
  CHECK_THROWS_WITH_FRAGMENT(masked_fill(a, zeros({3, 3}) > 0, 1.0), ShapeError, "[masked_fill]");
  CHECK_THROWS_WITH_FRAGMENT(lt(Tensor(), a), ValueError, "[lt] a is an undefined tensor");
}

// ---- logical ops, operators on masks, mul with masks ---------------------------------

TEST_CASE("logical ops: truth of any dtype (NaN is true), broadcasting, Bool results") {
  const Tensor a = tensor({0, 1, -2, NAN}, {4});
  const Tensor b = tensor({1, 1, 0, 0}, {4}, kI64);
  CHECK(logical_and(a, b).dtype() == DType::Bool);
  CHECK(v(logical_and(a, b)) == std::vector<double>{0, 1, 0, 0});
  CHECK(v(logical_or(a, b)) == std::vector<double>{1, 1, 1, 1});
  CHECK(v(logical_xor(a, b)) == std::vector<double>{1, 0, 1, 1});
  CHECK(v(logical_not(a)) == std::vector<double>{1, 0, 0, 0});
  // (2, 1) against (3,): (2, 3)
  const Tensor rows = tensor({1, 0}, {2, 1}, {.dtype = DType::Bool});
  const Tensor cols = tensor({1, 0, 1}, {3}, {.dtype = DType::Bool});
  CHECK(logical_and(rows, cols).sizes() == Shape{2, 3});
  CHECK(v(logical_and(rows, cols)) == std::vector<double>{1, 0, 1, 0, 0, 0});
  CHECK(v(logical_or(rows, cols)) == std::vector<double>{1, 1, 1, 1, 0, 1});
  CHECK(v(logical_xor(rows, cols)) == std::vector<double>{0, 1, 0, 1, 0, 1});
}

TEST_CASE("operators &, |, ^, ~ combine Bool masks and refuse other dtypes") {
  const Tensor x = tensor({-1, 0, 2, 3}, {4});
  const Tensor positive = x > 0, small = x < 3;
  CHECK(v(positive & small) == std::vector<double>{0, 0, 1, 0});
  CHECK(v(positive | small) == std::vector<double>{1, 1, 1, 1});
  CHECK(v(positive ^ small) == std::vector<double>{1, 1, 0, 1});
  CHECK(v(~positive) == std::vector<double>{1, 1, 0, 0});
  CHECK(v(~(~positive)) == v(positive));
  CHECK_THROWS_WITH_FRAGMENT(x & positive, TypeError,
                             "[operator&] takes Bool masks, got float32 (4,) and bool (4,)");
  CHECK_THROWS_WITH_FRAGMENT(~tensor({1, 2}, {2}, kI64), TypeError,
                             "[operator~] takes Bool masks, got int64 (2,); Loom has no integer "
                             "bitwise ops");
  CHECK_THROWS_WITH_FRAGMENT(logical_and(positive, Tensor()), ValueError,
                             "[logical_and] input is an undefined tensor");
}

TEST_CASE("mul takes masks as PyTorch: mask * mask is Bool, mask * x keeps x's dtype") {
  const Tensor m = tensor({1, 0, 1}, {3}, {.dtype = DType::Bool});
  const Tensor n = tensor({1, 1, 0}, {3}, {.dtype = DType::Bool});
  CHECK((m * n).dtype() == DType::Bool);
  CHECK(v(m * n) == std::vector<double>{1, 0, 0});
  CHECK((m * 2.5).dtype() == DType::Float32);
  CHECK(v(m * 2.5) == std::vector<double>{2.5, 0, 2.5});
  Tensor x = tensor({1, 2, 3}, {3}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor y = mul(m, x);
  CHECK(y.dtype() == DType::Float64);
  CHECK(v(y) == std::vector<double>{1, 0, 3});
  (x * m).sum().backward();
  CHECK(v(x.grad()) == std::vector<double>{1, 0, 1});
  GradcheckResult r = gradcheck([&m](const std::vector<Tensor>& in) { return in[0] * m.unsqueeze(0); },
                                {randn({2, 3}, {.dtype = DType::Float64, .requires_grad = true})});
  CHECK_MESSAGE(r.ok, r.message);
}

// ---- isclose / allclose / equal -------------------------------------------------------

TEST_CASE("isclose: |a - b| <= atol + rtol |b|, infinities, NaN with and without equal_nan") {
  const double inf = INFINITY;
  const Tensor a = tensor({1.0, 1.0, 100.0, inf, inf, -inf, NAN, NAN, 0.0}, {9}, kF64);
  const Tensor b = tensor({1.0 + 1e-9, 1.1, 100.01, inf, -inf, 1.0, NAN, 1.0, 1e-9}, {9}, kF64);
  CHECK(isclose(a, b).dtype() == DType::Bool);
  CHECK(v(isclose(a, b)) == std::vector<double>{1, 0, 0, 1, 0, 0, 0, 0, 1});
  CHECK(v(isclose(a, b, 1e-5, 1e-8, /*equal_nan=*/true)) ==
        std::vector<double>{1, 0, 0, 1, 0, 0, 1, 0, 1});
  // 100 against 100.01 is within rtol 1e-4 of |b|, not within 1e-5.
  CHECK(v(isclose(a, b, 1e-4)) == std::vector<double>{1, 0, 1, 1, 0, 0, 0, 0, 1});
  CHECK(v(isclose(a, b, 0, 0)) == std::vector<double>{0, 0, 0, 1, 0, 0, 0, 0, 0});
  // Broadcasting, and integers (compared in float64).
  CHECK(v(isclose(tensor({1, 2, 3}, {3}, kI64), tensor({2}, {1}, kI64), 0.5)) ==
        std::vector<double>{1, 1, 1});
  CHECK(v(isclose(tensor({1, 2, 3}, {3}, kI64), tensor({2}, {1}, kI64), 0.4)) ==
        std::vector<double>{0, 1, 0});
}

TEST_CASE("isclose in float32 compares in float32, as torch.isclose") {
  // 1 + 2^-23 and 1 differ by one float32 ulp: close at rtol 2^-23, not at 2^-24.
  const Tensor a = tensor({1.0 + std::ldexp(1.0, -23)}, {1});
  const Tensor b = tensor({1.0}, {1});
  CHECK(v(isclose(a, b, std::ldexp(1.0, -23), 0)) == std::vector<double>{1});
  CHECK(v(isclose(a, b, std::ldexp(1.0, -24), 0)) == std::vector<double>{0});
}

TEST_CASE("allclose and equal as PyTorch's") {
  const Tensor a = tensor({1, 2, 3}, {3}, kF64);
  CHECK(allclose(a, a + 1e-9));
  CHECK_FALSE(allclose(a, a + 1e-3));
  CHECK(allclose(a, a + 1e-3, 1e-2));
  CHECK(allclose(tensor({NAN}, {1}), tensor({NAN}, {1}), 1e-5, 1e-8, true));
  CHECK_FALSE(allclose(tensor({NAN}, {1}), tensor({NAN}, {1})));
  CHECK(allclose(zeros({0}), zeros({0})));
  CHECK(equal(a, a.clone()));
  CHECK(equal(a, tensor({1, 2, 3}, {3}, kI64)));  // values, not dtypes, as torch.equal
  CHECK_FALSE(equal(a, tensor({1, 2, 4}, {3}, kF64)));
  CHECK_FALSE(equal(a, tensor({1, 2, 3}, {1, 3}, kF64)));  // sizes differ: no broadcasting
  CHECK_FALSE(equal(tensor({NAN}, {1}), tensor({NAN}, {1})));
  CHECK_THROWS_WITH_FRAGMENT(isclose(a, a.to(DType::Float32)), TypeError,
                             "[isclose] a has dtype float64 and b float32");
  CHECK_THROWS_WITH_FRAGMENT(allclose(a, a, -1e-5), ValueError,
                             "[isclose] rtol and atol must be >= 0, got rtol -1e-05 and atol 1e-08");
}

TEST_CASE("maximum and minimum: broadcast values, NaN, and PyTorch's half gradient at ties") {
  Tensor a = tensor({1, 2, 3}, {3}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor b = tensor({1, 5, 0}, {3}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor high = maximum(a, b), low = minimum(a, b);
  CHECK(high.to_vector<double>() == std::vector<double>{1, 5, 3});
  CHECK(low.to_vector<double>() == std::vector<double>{1, 2, 0});
  sum(high).backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{0.5, 0, 1});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{0.5, 1, 0});
  a.set_grad(Tensor());
  b.set_grad(Tensor());
  sum(low).backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{0.5, 1, 0});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{0.5, 0, 1});

  // (2, 1) against (3): a (2, 3) result; NaN on either side wins; ties of infinities and of huge values stay exact.
  const Tensor column = tensor({0, 10}, {2, 1}, kF64), row = tensor({-1, 4, 20}, {3}, kF64);
  CHECK(maximum(column, row).to_vector<double>() == std::vector<double>{0, 4, 20, 10, 10, 20});
  CHECK(minimum(column, row).sizes() == Shape{2, 3});
  const double inf = std::numeric_limits<double>::infinity(), huge = std::numeric_limits<double>::max();
  const std::vector<double> odd = maximum(tensor({std::nan(""), 1, inf, huge}, {4}, kF64),
                                          tensor({0, std::nan(""), inf, huge}, {4}, kF64))
                                      .to_vector<double>();
  CHECK(std::isnan(odd[0]));
  CHECK(std::isnan(odd[1]));
  CHECK(odd[2] == inf);
  CHECK(odd[3] == huge);
  CHECK(maximum(tensor({3, -2}, {2}, kI64), tensor({1, 5}, {2}, kI64)).to_vector<int64_t>() ==
        std::vector<int64_t>{3, 5});

  Generator gen(61);
  const Tensor x = randn({3, 4}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const Tensor y = randn({4}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  for (auto op : {maximum, minimum}) {
    const GradcheckResult r = gradcheck([op](const std::vector<Tensor>& in) { return op(in[0], in[1]); }, {x, y});
    CHECK_MESSAGE(r.ok, r.message);
  }
  CHECK_THROWS_WITH_FRAGMENT(maximum(zeros({2}), zeros({2}, kF64)), TypeError,
                             "[maximum] a has dtype float32 and b float64");
  CHECK_THROWS_WITH_FRAGMENT(minimum(zeros({2}), zeros({3})), ShapeError, "(2,)");
}

}  // namespace loom

namespace loom {

TEST_CASE("isnan, isinf, isposinf, isneginf, isfinite and nan_to_num as PyTorch's") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const Tensor x = tensor({1, nan, inf, -inf, 0, -2.5}, {2, 3}, kF64);
  CHECK(v(isnan(x)) == std::vector<double>{0, 1, 0, 0, 0, 0});
  CHECK(v(isinf(x)) == std::vector<double>{0, 0, 1, 1, 0, 0});
  CHECK(v(isposinf(x)) == std::vector<double>{0, 0, 1, 0, 0, 0});
  CHECK(v(isneginf(x)) == std::vector<double>{0, 0, 0, 1, 0, 0});
  CHECK(v(isfinite(x)) == std::vector<double>{1, 0, 0, 0, 1, 1});
  CHECK(isnan(x).dtype() == DType::Bool);
  CHECK(isfinite(x).sizes() == Shape{2, 3});
  const Tensor labels = tensor({3, -1}, {2}, kI64);
  CHECK(v(isnan(labels)) == std::vector<double>{0, 0});
  CHECK(v(isinf(labels)) == std::vector<double>{0, 0});
  CHECK(v(isfinite(labels)) == std::vector<double>{1, 1});
  CHECK(v(nan_to_num(x)) == std::vector<double>{1, 0, std::numeric_limits<double>::max(),
                                               std::numeric_limits<double>::lowest(), 0, -2.5});
  CHECK(v(nan_to_num(x, 7, 8, -9)) == std::vector<double>{1, 7, 8, -9, 0, -2.5});
  const Tensor f = tensor({nan, inf, -inf}, {3});
  CHECK(v(nan_to_num(f)) == std::vector<double>{0, std::numeric_limits<float>::max(),
                                               std::numeric_limits<float>::lowest()});
  CHECK(nan_to_num(f).dtype() == DType::Float32);
  CHECK(v(nan_to_num(labels)) == std::vector<double>{3, -1});
  CHECK_THROWS_WITH_FRAGMENT(isnan(Tensor()), ValueError, "[isnan]");
}

TEST_CASE("nan_to_num's gradient passes where x is finite") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  Tensor x = tensor({1, nan, inf, -inf, 3}, {5}, {.dtype = DType::Float64, .requires_grad = true});
  sum(nan_to_num(x) * 2.0).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 0, 0, 0, 2});
  Generator gen(62);
  const Tensor y = randn({3, 4}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return nan_to_num(in[0]); }, {y});
  CHECK_MESSAGE(r.ok, r.message);
}

}  // namespace loom
