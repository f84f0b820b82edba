// File: tests/core/ops/indexing_test.cc
// gather and index_select: hand values along each dim, a naive reference on
// strided and channels-last inputs, repeated indices in the backward (they
// accumulate), float64 gradcheck and argument errors.
#include "core/ops/indexing.h"

#include <doctest/doctest.h>

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

// index_select by concatenating x.select(dim, k) slices: the naive reference.
Tensor naive_index_select(const Tensor& x, int64_t dim, const std::vector<int64_t>& index) {
  std::vector<Tensor> slices;
  for (int64_t k : index) slices.push_back(x.select(dim, k).unsqueeze(dim));
  return cat(slices, dim);
}

}  // namespace

TEST_CASE("gather picks along a dim, as torch.gather") {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(v(gather(x, 1, tensor({2, 0, 1, 1}, {2, 2}, kI64))) == std::vector<double>{3, 1, 5, 5});
  CHECK(v(gather(x, 0, tensor({1, 0, 1}, {1, 3}, kI64))) == std::vector<double>{4, 2, 6});
  Tensor logits = tensor({0.1, 0.9, 0.8, 0.2}, {2, 2});
  Tensor picked = gather(logits, -1, tensor({1, 0}, {2}, kI64).unsqueeze(1));
  CHECK(picked.sizes() == Shape{2, 1});
  CHECK(v(picked) == std::vector<double>{0.9f, 0.8f});
}

TEST_CASE("index_select matches stacked slices on any layout and dtype") {
  Generator gen(5);
  Tensor x = randn({3, 4, 5, 6}, {}, &gen).contiguous(MemoryFormat::ChannelsLast);
  const std::vector<int64_t> idx = {2, 0, 2, 1};
  for (int64_t dim = 0; dim < 4; ++dim) {
    std::vector<int64_t> in_range;
    for (int64_t k : idx) in_range.push_back(k % x.size(dim));
    Tensor index = tensor(std::vector<double>(in_range.begin(), in_range.end()), {4}, kI64);
    CAPTURE(dim);
    CHECK_CLOSE(index_select(x, dim, index), naive_index_select(x, dim, in_range), 0, 0);
    CHECK_CLOSE(index_select(x.transpose(1, 3), dim, index),
                naive_index_select(x.transpose(1, 3), dim, in_range), 0, 0);
  }
  Tensor ints = tensor({10, 20, 30}, {3}, kI64);
  CHECK(v(index_select(ints, 0, tensor({2, 2, 0}, {3}, {.dtype = DType::Int32}))) ==
        std::vector<double>{30, 30, 10});
}

TEST_CASE("the backward scatter-adds: repeated indices accumulate") {
  Tensor table = zeros({3, 2}, kF64).requires_grad_(true);
  Tensor rows = index_select(table, 0, tensor({1, 1, 2, 1}, {4}, kI64));
  sum(rows * tensor({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, kF64)).backward();
  CHECK(v(table.grad()) == std::vector<double>{0, 0, 1 + 3 + 7, 2 + 4 + 8, 5, 6});
}

TEST_CASE("gather and index_select pass the float64 gradcheck") {
  Generator gen(6);
  Tensor x = randn({3, 4, 5}, kF64, &gen).requires_grad_(true);
  Tensor index = randint(0, 4, {3, 6, 5}, kI64, &gen);
  GradcheckResult r =
      gradcheck([&](const std::vector<Tensor>& in) { return gather(in[0], 1, index); }, {x});
  CHECK_MESSAGE(r.ok, r.message);
  Tensor rows = tensor({4, 0, 4, 2}, {4}, kI64);
  r = gradcheck([&](const std::vector<Tensor>& in) { return index_select(in[0], 2, rows); }, {x});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("indexing errors name the op, the bad index and the fix") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_FRAGMENT(index_select(x, 1, tensor({0, 3}, {2}, kI64)), IndexError,
                             "[index_select] index 3 (element 1 of the index");
  CHECK_THROWS_WITH_FRAGMENT(index_select(x, 0, tensor({-1}, {1}, kI64)), IndexError, "index -1");
  CHECK_THROWS_WITH_FRAGMENT(index_select(x, 0, tensor({0}, {1})), TypeError,
                             "convert with .to(DType::Int64)");
  CHECK_THROWS_WITH_FRAGMENT(index_select(x, 0, zeros({1, 1}, kI64)), ShapeError, "must be 1-D");
  CHECK_THROWS_WITH_FRAGMENT(gather(x, 0, zeros({2}, kI64)), ShapeError, "[gather] index of shape");
  CHECK_THROWS_WITH_FRAGMENT(gather(x, 0, zeros({2, 4}, kI64)), ShapeError, "does not fit");
}

TEST_CASE("one_hot marks each index's class, inferring the count from the largest index") {
  const Tensor labels = tensor({2, 0, 1, 2}, {2, 2}, kI64);
  const Tensor rows = one_hot(labels);
  CHECK(rows.dtype() == DType::Int64);
  CHECK(rows.sizes() == Shape{2, 2, 3});
  CHECK(rows.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(one_hot(tensor({1}, {1}, kI64), 4).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0, 0});
  CHECK(one_hot(zeros({0}, kI64), 5).sizes() == Shape{0, 5});
  CHECK(one_hot(full({}, 2.0, kI64), 3).sizes() == Shape{3});
  CHECK_THROWS_WITH_FRAGMENT(one_hot(labels, 2), IndexError,
                             "[one_hot] indices must lie in [0, 2), got values from 0 to 2");
  CHECK_THROWS_WITH_FRAGMENT(one_hot(tensor({-1, 0}, {2}, kI64)), IndexError, "got values from -1 to 0");
  CHECK_THROWS_WITH_FRAGMENT(one_hot(zeros({0}, kI64)), ValueError, "[one_hot] cannot infer num_classes");
  CHECK_THROWS_WITH_FRAGMENT(one_hot(zeros({2})), TypeError,
                             "[one_hot] indices must be int64 class indices, got float32");
}

}  // namespace loom
