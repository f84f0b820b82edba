// File: tests/core/ops/sort_test.cc
// sort / argsort / topk / kthvalue / median on the CPU: hand values (ties, NaN, -0, integer
// extremes, Bool), random configurations of every dtype and layout against a
// reference that orders (key, position) pairs with std::sort, gradients, and
// argument errors.
#include "core/ops/sort.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/compare.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};
const TensorOptions kI64 = {.dtype = DType::Int64};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<int64_t> as_ints(const Tensor& t) { return t.contiguous().to_vector<int64_t>(); }

// Equal values, NaN equal to NaN.
bool same_values(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to(DType::Float64).to_vector<double>(), y = b.to(DType::Float64).to_vector<double>();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] != y[i] && !(std::isnan(x[i]) && std::isnan(y[i]))) return false;
  }
  return true;
}

// Rank of a value in torch.sort's ascending order: NaN after everything, -0 as +0.
bool before(double a, double b) { return !std::isnan(a) && (std::isnan(b) || a < b); }

// The positions that sort each line of x along dim, by an independent route:
// std::sort of (value, position) pairs with the position as the tie-break, so
// equal values keep their order in both directions.
Tensor reference_order(const Tensor& x, int64_t dim, bool descending) {
  const Tensor moved = x.transpose(dim, x.dim() - 1).contiguous();
  const std::vector<double> values = moved.to(DType::Float64).to_vector<double>();
  const int64_t n = moved.size(-1), lines = n == 0 ? 0 : moved.numel() / n;
  std::vector<double> order(values.size());
  for (int64_t line = 0; line < lines; ++line) {
    std::vector<int64_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = i;
    const double* v = values.data() + line * n;
    std::sort(pos.begin(), pos.end(), [&](int64_t i, int64_t j) {
      const bool lt = descending ? before(v[j], v[i]) : before(v[i], v[j]);
      const bool gt = descending ? before(v[i], v[j]) : before(v[j], v[i]);
      return lt || (!gt && i < j);
    });
    for (int64_t i = 0; i < n; ++i) order[line * n + i] = static_cast<double>(pos[i]);
  }
  return tensor(order, moved.sizes(), kI64).transpose(dim, x.dim() - 1).contiguous();
}

TEST_CASE("sort orders a row, stably, as torch.sort") {
  const Tensor x = tensor({2, 1, 2, 1, 0}, {5});
  ValuesIndices up = sort(x);
  CHECK(up.values.to_vector<float>() == std::vector<float>{0, 1, 1, 2, 2});
  CHECK(as_ints(up.indices) == std::vector<int64_t>{4, 1, 3, 0, 2});
  ValuesIndices down = sort(x, 0, /*descending=*/true);
  CHECK(down.values.to_vector<float>() == std::vector<float>{2, 2, 1, 1, 0});
  CHECK(as_ints(down.indices) == std::vector<int64_t>{0, 2, 1, 3, 4});
  CHECK(up.indices.dtype() == DType::Int64);
  CHECK(as_ints(argsort(x, 0, true)) == std::vector<int64_t>{0, 2, 1, 3, 4});
}

TEST_CASE("NaN sorts greatest and -0 equals +0") {
  const Tensor x = tensor({kNaN, 1, -kInf, 0, -0.0, kInf}, {6}, kF64);
  CHECK(as_ints(argsort(x)) == std::vector<int64_t>{2, 3, 4, 1, 5, 0});
  CHECK(as_ints(argsort(x, 0, true)) == std::vector<int64_t>{0, 5, 1, 3, 4, 2});
  const std::vector<double> values = sort(x).values.to_vector<double>();
  CHECK(std::signbit(values[2]));  // the values are x's own elements, -0 kept
  CHECK(std::isnan(values[5]));
}

TEST_CASE("integer extremes, uint8 and Bool sort in their own dtype") {
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> raw{hi, -1, lo, hi - 1};
  const Tensor big = from_host(raw.data(), DType::Int64, {4}, kI64);
  CHECK(as_ints(argsort(big)) == std::vector<int64_t>{2, 1, 3, 0});
  CHECK(sort(big).values.to_vector<int64_t>() == std::vector<int64_t>{lo, -1, hi - 1, hi});
  const Tensor bytes = tensor({200, 3, 255, 0}, {4}, {.dtype = DType::UInt8});
  CHECK(sort(bytes).values.dtype() == DType::UInt8);
  CHECK(as_ints(argsort(bytes, 0, true)) == std::vector<int64_t>{2, 0, 1, 3});
  const Tensor mask = tensor({1, 0, 1, 0}, {4}, {.dtype = DType::Bool});
  CHECK(as_ints(argsort(mask)) == std::vector<int64_t>{1, 3, 0, 2});
  CHECK(sort(mask).values.dtype() == DType::Bool);
}

TEST_CASE("topk takes the k largest or smallest, in order, with their positions") {
  const Tensor logits = tensor({0.1, 0.7, 0.2, 0.9, 0.7, -1, 0.3, 0.3}, {2, 4});
  ValuesIndices top = topk(logits, 2);
  CHECK(top.values.sizes() == Shape{2, 2});
  CHECK(top.values.to_vector<float>() == std::vector<float>{0.9f, 0.7f, 0.7f, 0.3f});
  CHECK(as_ints(top.indices) == std::vector<int64_t>{3, 1, 0, 2});
  ValuesIndices bottom = topk(logits, 3, 1, /*largest=*/false);
  CHECK(as_ints(bottom.indices) == std::vector<int64_t>{0, 2, 1, 1, 2, 3});
  ValuesIndices down_cols = topk(logits, 1, 0);
  CHECK(as_ints(down_cols.indices) == std::vector<int64_t>{1, 0, 1, 0});
  CHECK(topk(logits, 0).values.sizes() == Shape{2, 0});
  // Top-5 accuracy, as a user writes it.
  const Tensor scores = tensor({9, 1, 2, 3, 4, 5, 6, 0, 8, 7, 1, 2, 3, 4, 5, 6}, {2, 8});
  const Tensor labels = tensor({0, 2}, {2}, kI64);  // row 1's class 2 scores 1, not in its top 5
  const Tensor hits = (topk(scores, 5).indices == labels.unsqueeze(1)).sum();
  CHECK(hits.to_vector<int64_t>()[0] == 1);
}

TEST_CASE("0-d and empty tensors sort as PyTorch's") {
  const Tensor scalar = full({}, 3.5);
  ValuesIndices s = sort(scalar);
  CHECK(s.values.dim() == 0);
  CHECK(s.values.to_vector<float>()[0] == 3.5f);
  CHECK(s.indices.to_vector<int64_t>()[0] == 0);
  ValuesIndices t = topk(scalar, 1);
  CHECK(t.values.dim() == 0);
  CHECK(t.indices.to_vector<int64_t>()[0] == 0);
  const Tensor none = empty({3, 0});
  CHECK(sort(none, 1).values.sizes() == Shape{3, 0});
  CHECK(sort(none, 0).indices.sizes() == Shape{3, 0});
}

// Random shapes, dims, directions, dtypes (few distinct values, so ties are
// common) and layouts against reference_order; topk against its prefix.
TEST_CASE("random configurations match the reference order") {
  std::mt19937_64 rng(20261204);
  auto between = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::UInt8, DType::Bool};
  for (int trial = 0; trial < 120; ++trial) {
    Shape sizes(between(1, 4));
    for (int64_t& s : sizes) s = between(1, 9);
    const int64_t dim = between(0, static_cast<int64_t>(sizes.size()) - 1);
    const bool descending = between(0, 1) == 1;
    const DType dtype = dtypes[between(0, 5)];
    Generator gen(static_cast<uint64_t>(trial));
    Tensor x = randint(0, between(2, 40), sizes, kF64, &gen);
    if (is_floating(dtype) && trial % 3 == 0) x = randn(sizes, kF64, &gen);
    if (dtype == DType::Float64 && trial % 5 == 0) x = masked_fill(x, gt(x, 1.0), kNaN);
    x = x.to(dtype);
    if (sizes.size() >= 2 && between(0, 1)) x = x.transpose(0, 1);  // a strided input
    CAPTURE(trial);
    CAPTURE(shape_str(x.sizes()));
    CAPTURE(dim);
    CAPTURE(descending);
    CAPTURE(dtype_name(dtype));
    ValuesIndices result = sort(x, dim, descending);
    const Tensor expected = reference_order(x, dim, descending);
    REQUIRE(as_ints(result.indices) == as_ints(expected));
    CHECK(same_values(result.values, gather(x, dim, expected)));
    const int64_t k = between(0, x.size(dim));
    ValuesIndices top = topk(x, k, dim, descending);
    CHECK(as_ints(top.indices) == as_ints(expected.narrow(dim, 0, k)));
  }
}

TEST_CASE("the gradient goes to the positions the values came from") {
  Tensor x = tensor({0.3, -1.2, 2.5, 0.9, 1.7, -0.4}, {2, 3}, kF64).requires_grad_(true);
  ValuesIndices s = sort(x, 1, true);
  s.values.backward(tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kF64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 3, 1, 5, 4, 6});
  CHECK_FALSE(argsort(x).requires_grad());
  CHECK_FALSE(s.indices.requires_grad());
  Generator gen(5);
  const Tensor y = randn({3, 4, 5}, kF64, &gen).requires_grad_(true);
  for (int64_t dim : {0, 1, 2}) {
    CAPTURE(dim);
    GradcheckResult r = gradcheck([dim](const std::vector<Tensor>& in) { return sort(in[0], dim).values; }, {y});
    CHECK_MESSAGE(r.ok, r.message);
    r = gradcheck([dim](const std::vector<Tensor>& in) { return topk(in[0], 2, dim, dim != 1).values; }, {y});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

// --- kthvalue and median -----------------------------------------------------------------

enum class Pick { Kth, Median, NanMedian };

// The positions kthvalue (k) or median picks in each line of x along dim, by
// rank in reference_order: k - 1; the lower median (n - 1) / 2; with NaN in the
// line the first NaN for median, the median of the rest for nanmedian.
Tensor reference_pick(const Tensor& x, int64_t dim, Pick pick, int64_t k) {
  const Tensor order = reference_order(x, dim, false).transpose(dim, x.dim() - 1).contiguous();
  const std::vector<int64_t> positions = as_ints(order);
  const std::vector<double> values = x.transpose(dim, x.dim() - 1).contiguous().to(DType::Float64).to_vector<double>();
  const int64_t n = x.size(dim), lines = x.numel() / n;
  std::vector<double> picked(lines);
  for (int64_t line = 0; line < lines; ++line) {
    const int64_t nans = std::count_if(values.begin() + line * n, values.begin() + (line + 1) * n,
                                       [](double v) { return std::isnan(v); });
    int64_t rank = pick == Pick::Kth ? k - 1 : (n - 1) / 2;
    if (pick == Pick::Median && nans > 0) rank = n - nans;
    if (pick == Pick::NanMedian) rank = std::max<int64_t>(n - nans - 1, 0) / 2;
    picked[line] = static_cast<double>(positions[line * n + rank]);
  }
  Shape sizes = order.sizes();
  sizes.back() = 1;
  return tensor(picked, sizes, kI64).transpose(dim, x.dim() - 1).squeeze(dim).contiguous();
}

TEST_CASE("kthvalue, median and nanmedian pick as torch's") {
  const Tensor x = tensor({3, 1, 2, 1}, {4});
  ValuesIndices second = kthvalue(x, 2);
  CHECK(second.values.item() == 1.0);
  CHECK(second.indices.item() == 3.0);  // the second 1 in sort's stable order
  CHECK(kthvalue(x, 4).values.item() == 3.0);
  CHECK(median(tensor({3, 1, 2, 4}, {4})).item() == 2.0);  // the lower middle, not 2.5
  CHECK(median(tensor({5, 1, 3}, {3}, {.dtype = DType::Int32})).dtype() == DType::Int32);
  CHECK(median(tensor({5, 1, 3}, {3}, {.dtype = DType::Int32})).item() == 3.0);
  const Tensor gaps = tensor({1, kNaN, 3, kNaN, 7, 2, 5, 4}, {2, 4}, kF64);
  ValuesIndices m = median(gaps, 1);
  CHECK(same_values(m.values, tensor({kNaN, 4}, {2}, kF64)));
  CHECK(as_ints(m.indices) == std::vector<int64_t>{1, 3});  // the first NaN
  ValuesIndices nm = nanmedian(gaps, 1, true);
  CHECK(nm.values.sizes() == Shape{2, 1});
  CHECK(same_values(nm.values, tensor({1, 4}, {2, 1}, kF64)));
  CHECK(as_ints(nm.indices) == std::vector<int64_t>{0, 3});
  CHECK(std::isnan(median(gaps).item()));
  CHECK(nanmedian(gaps).item() == 3.0);  // of 1, 3, 7, 2, 5, 4
  CHECK(std::isnan(nanmedian(full({3}, kNaN)).item()));
  CHECK(std::isnan(median(zeros({0})).item()));
  ValuesIndices scalar = median(full({}, 2.5), 0);
  CHECK(scalar.values.dim() == 0);
  CHECK(scalar.indices.item() == 0.0);
  CHECK(kthvalue(full({}, 2.5), 1).values.item() == 2.5);
}

TEST_CASE("kthvalue and median match the reference pick on random configurations") {
  std::mt19937_64 rng(20261205);
  auto between = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::UInt8};
  for (int trial = 0; trial < 120; ++trial) {
    Shape sizes(between(1, 4));
    for (int64_t& s : sizes) s = between(1, 8);
    const int64_t dim = between(0, static_cast<int64_t>(sizes.size()) - 1);
    const DType dtype = dtypes[between(0, 4)];
    const bool keepdim = between(0, 1) == 1;
    Generator gen(static_cast<uint64_t>(trial) + 1000);
    Tensor x = randint(0, between(2, 20), sizes, kF64, &gen);
    if (is_floating(dtype) && trial % 2 == 0) x = masked_fill(x, gt(x, between(3, 15)), kNaN);
    x = x.to(dtype);
    if (sizes.size() >= 2 && between(0, 1)) x = x.transpose(0, 1);
    const int64_t k = between(1, x.size(dim));
    CAPTURE(trial);
    CAPTURE(shape_str(x.sizes()));
    CAPTURE(dim);
    CAPTURE(dtype_name(dtype));
    const std::pair<Pick, ValuesIndices> results[] = {{Pick::Kth, kthvalue(x, k, dim, keepdim)},
                                                      {Pick::Median, median(x, dim, keepdim)},
                                                      {Pick::NanMedian, nanmedian(x, dim, keepdim)}};
    for (const auto& [pick, result] : results) {
      CAPTURE(static_cast<int>(pick));
      const Tensor expected = reference_pick(x, dim, pick, k);
      const Tensor got = keepdim ? result.indices.squeeze(dim) : result.indices;
      REQUIRE(got.sizes() == expected.sizes());
      CHECK(as_ints(got) == as_ints(expected));
      CHECK(result.values.dtype() == x.dtype());
      CHECK(same_values(result.values, gather(x, dim, got.unsqueeze(dim))));
    }
  }
}

TEST_CASE("kthvalue's and median's gradients go to the picked position") {
  Tensor x = tensor({0.3, -1.2, 2.5, 0.9, 1.7, -0.4}, {2, 3}, kF64).requires_grad_(true);
  median(x, 1).values.backward(tensor({1, 2}, {2}, kF64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 0, 0, 2, 0, 0});
  CHECK_FALSE(median(x, 1).indices.requires_grad());
  Generator gen(6);
  const Tensor y = randn({3, 4, 5}, kF64, &gen).requires_grad_(true);
  for (int64_t dim : {0, 1, 2}) {
    CAPTURE(dim);
    GradcheckResult r = gradcheck([dim](const std::vector<Tensor>& in) { return median(in[0], dim).values; }, {y});
    CHECK_MESSAGE(r.ok, r.message);
    r = gradcheck([dim](const std::vector<Tensor>& in) { return kthvalue(in[0], 2, dim, true).values; }, {y});
    CHECK_MESSAGE(r.ok, r.message);
  }
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return nanmedian(in[0]); }, {y});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("kthvalue and median errors name the op, the values and the fix") {
  const Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_FRAGMENT(kthvalue(x, 4), ValueError, "[kthvalue] k = 4 is out of range for dim 1 of size 3");
  CHECK_THROWS_WITH_FRAGMENT(kthvalue(x, 0, 0), ValueError, "k counts from 1 to 2");
  CHECK_THROWS_WITH_FRAGMENT(median(zeros({2, 0}), 1), ValueError, "[median] dim 1 of shape (2, 0) is empty");
  CHECK_THROWS_WITH_FRAGMENT(nanmedian(x, 2), IndexError, "[nanmedian] dim 2 is out of range");
  CHECK_THROWS_WITH_FRAGMENT(median(zeros({0}, kI64)), ValueError, "[median] of an empty int64 tensor");
  CHECK_THROWS_WITH_FRAGMENT(median(Tensor()), ValueError, "[median] x is an undefined tensor");
}

TEST_CASE("sort and topk errors name the op, the values and the fix") {
  const Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_FRAGMENT(topk(x, 4), ValueError, "k = 4 is out of range for dim 1 of size 3");
  CHECK_THROWS_WITH_FRAGMENT(topk(x, -1), ValueError, "k lies in [0, 3]");
  CHECK_THROWS_WITH_FRAGMENT(sort(x, 2), IndexError, "[sort] dim 2 is out of range");
  CHECK_THROWS_WITH_FRAGMENT(sort(Tensor()), ValueError, "[sort] x is an undefined tensor");
  CHECK_THROWS_WITH_FRAGMENT(argsort(x, -3), IndexError, "[sort] dim -3");
}

}  // namespace
}  // namespace loom
