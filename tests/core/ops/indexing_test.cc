// File: tests/core/ops/indexing_test.cc
// gather and index_select: hand values along each dim, a naive reference on
// strided and channels-last inputs, repeated indices in the backward (they
// accumulate), float64 gradcheck and argument errors. scatter, scatter_add,
// index_add, bincount, masked_select and nonzero: PyTorch's documented
// examples, random configurations against naive loops (every dim, transposed
// operands, repeated indices, integer dtypes), gradcheck and errors.
#include "core/ops/indexing.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
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

// Calls fn(i) for every multi-index i of `sizes`, in row-major order.
template <class Fn>
void for_each_index(const Shape& sizes, Fn&& fn) {
  Shape i(sizes.size(), 0);
  for (int64_t k = 0; k < numel_of(sizes); ++k) {
    fn(i);
    for (auto d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
      if (++i[d] < sizes[d]) break;
      i[d] = 0;
    }
  }
}

// scatter / scatter_add by a loop over the index in row-major order (later writes win).
Tensor naive_scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, bool add) {
  Tensor out = x.detach().clone();
  for_each_index(index.sizes(), [&](const Shape& i) {
    Shape target = i;
    target[dim] = static_cast<int64_t>(index.at(i));
    out.set(target, add ? out.at(target) + src.at(i) : src.at(i));
  });
  return out;
}

// A random int64 index of `sizes` in [0, high): repeated values are common.
Tensor random_index(const Shape& sizes, int64_t high, Generator& gen) {
  return randint(0, high, sizes, kI64, &gen);
}

// An index of `sizes` whose values along `dim` are distinct in every line (a
// prefix of a random permutation of [0, high)): scatter's writes then never collide.
Tensor unique_index(const Shape& sizes, int64_t dim, int64_t high, Generator& gen) {
  Shape wide = sizes;
  wide[dim] = high;
  return argsort(randn(wide, kF64, &gen), dim).narrow(dim, 0, sizes[dim]).contiguous();
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

TEST_CASE("scatter_add, scatter and index_add give PyTorch's documented examples") {
  // torch.Tensor.scatter_add_'s example.
  const Tensor src = ones({2, 5});
  CHECK(v(scatter_add(zeros({3, 5}), 0, tensor({0, 1, 2, 0, 0}, {1, 5}, kI64), src)) ==
        std::vector<double>{1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0});
  CHECK(v(scatter_add(zeros({3, 5}), 0, tensor({0, 1, 2, 0, 0, 0, 1, 2, 2, 2}, {2, 5}, kI64), src)) ==
        std::vector<double>{2, 0, 0, 1, 1, 0, 2, 0, 0, 0, 0, 0, 2, 1, 1});
  // torch.Tensor.scatter_'s examples: src larger than the index, and a value.
  const Tensor counting = arange(1, 11, 1, {}).reshape({2, 5});
  CHECK(v(scatter(zeros({3, 5}), 0, tensor({0, 1, 2, 0}, {1, 4}, kI64), counting)) ==
        std::vector<double>{1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0});
  CHECK(v(scatter(zeros({3, 5}), 1, tensor({0, 1, 2, 0, 1, 4}, {2, 3}, kI64), counting)) ==
        std::vector<double>{1, 2, 3, 0, 0, 6, 7, 0, 0, 8, 0, 0, 0, 0, 0});
  CHECK(v(scatter(full({2, 4}, 2.0, kF64), 1, tensor({2, 3}, {2, 1}, kI64), 1.23)) ==
        std::vector<double>{2, 2, 1.23, 2, 2, 2, 2, 1.23});
  // torch.Tensor.index_add_'s example, with alpha 1 and -1.
  const Tensor t = tensor({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  const Tensor rows = tensor({0, 4, 2}, {3}, kI64);
  CHECK(v(index_add(ones({5, 3}), 0, rows, t)) ==
        std::vector<double>{2, 3, 4, 1, 1, 1, 8, 9, 10, 1, 1, 1, 5, 6, 7});
  CHECK(v(index_add(ones({5, 3}), 0, rows, t, -1.0)) ==
        std::vector<double>{0, -1, -2, 1, 1, 1, -6, -7, -8, 1, 1, 1, -3, -4, -5});
}

TEST_CASE("scatter keeps the last of repeated indices on the CPU; scatter_add adds them all") {
  const Tensor index = tensor({0, 0, 2, 0}, {4}, kI64), src = tensor({5, 6, 7, 8}, {4});
  CHECK(v(scatter(zeros({3}), 0, index, src)) == std::vector<double>{8, 0, 7});
  CHECK(v(scatter_add(zeros({3}), 0, index, src)) == std::vector<double>{19, 0, 7});
  CHECK(v(index_add(zeros({3}), 0, index, src, 2.0)) == std::vector<double>{38, 0, 14});
  // 0-d operands, and an empty index (x's copy, as PyTorch).
  CHECK(scatter_add(full({}, 1.0), 0, zeros({}, kI64), full({}, 2.0)).item() == 3.0);
  CHECK(scatter(full({}, 1.0), 0, zeros({}, kI64), 4.0).item() == 4.0);
  CHECK(v(scatter_add(ones({2}), 0, zeros({0}, kI64), ones({3, 3}))) == std::vector<double>{1, 1});
}

TEST_CASE("scatter and scatter_add match a naive loop on every dim, layout and dtype") {
  Generator gen(71);
  std::mt19937_64 rng(71);
  auto between = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 40; ++trial) {
    const Shape x_sizes = {between(1, 5), between(1, 6), between(1, 4)};
    const int64_t dim = between(0, 2);
    Shape index_sizes(3), src_sizes(3);
    for (int64_t d = 0; d < 3; ++d) {
      index_sizes[d] = d == dim ? between(0, 7) : between(1, x_sizes[d]);
      src_sizes[d] = index_sizes[d] + between(0, 2);
    }
    const DType dtype = std::vector<DType>{DType::Float64, DType::Float32, DType::Int64, DType::Int32}[trial % 4];
    const TensorOptions options = {.dtype = dtype};
    Tensor x = randint(-9, 10, x_sizes, options, &gen), src = randint(-9, 10, src_sizes, options, &gen);
    Tensor index = random_index(index_sizes, x_sizes[dim], gen);
    if (trial % 3 == 1) {  // transposed views of the same values
      x = x.transpose(0, 2).contiguous().transpose(0, 2);
      src = src.transpose(1, 2).contiguous().transpose(1, 2);
      index = index.transpose(0, 1).contiguous().transpose(0, 1);
    }
    CAPTURE(trial);
    CAPTURE(dim);
    CHECK_CLOSE(scatter_add(x, dim, index, src), naive_scatter(x, dim, index, src, true), 0, 0);
    CHECK_CLOSE(scatter(x, dim, index, src), naive_scatter(x, dim, index, src, false), 0, 0);
    CHECK(scatter_add(x, dim, index, src).dtype() == dtype);
    CHECK_CLOSE(scatter(x, dim - 3, index, -2.0), naive_scatter(x, dim, index, full(index_sizes, -2.0), false),
                0, 0);
  }
  // Any dtype scatters: Bool and uint8 included.
  const Tensor flags = scatter(zeros({4}, {.dtype = DType::Bool}), 0, tensor({1, 3}, {2}, kI64), 1.0);
  CHECK(v(flags) == std::vector<double>{0, 1, 0, 1});
  CHECK(v(scatter(zeros({3}, {.dtype = DType::UInt8}), 0, tensor({2}, {1}, kI64), 200.0)) ==
        std::vector<double>{0, 0, 200});
}

TEST_CASE("index_add matches adding slices one by one") {
  Generator gen(72);
  const Tensor x = randn({4, 5, 6}, kF64, &gen).transpose(0, 2);  // (6, 5, 4), strided
  for (int64_t dim = 0; dim < 3; ++dim) {
    const Tensor index = random_index({7}, x.size(dim), gen);
    Shape source_sizes = x.sizes();
    source_sizes[dim] = 7;
    const Tensor source = randn(source_sizes, kF64, &gen);
    Tensor expected = x.clone();
    const std::vector<int64_t> ids = index.to_vector<int64_t>();
    for (int64_t k = 0; k < 7; ++k) {
      Tensor slot = expected.select(dim, ids[k]);
      slot.copy_(slot + source.select(dim, k) * 0.5);
    }
    CAPTURE(dim);
    CHECK_CLOSE(index_add(x, dim, index, source, 0.5), expected, 1e-15, 1e-15);
  }
  const Tensor counts = index_add(zeros({3}, kI64), 0, tensor({2, 2, 0}, {3}, {.dtype = DType::Int32}),
                                  tensor({1, 2, 3}, {3}, kI64), 3.0);
  CHECK(counts.dtype() == DType::Int64);
  CHECK(counts.to_vector<int64_t>() == std::vector<int64_t>{9, 0, 9});
}

TEST_CASE("scatter, scatter_add and index_add pass the float64 gradcheck") {
  Generator gen(73);
  Tensor x = randn({4, 5, 3}, kF64, &gen).requires_grad_(true);
  Tensor src = randn({4, 6, 3}, kF64, &gen).requires_grad_(true);  // wider than the index: zeros there
  const Tensor repeated = random_index({4, 4, 3}, 5, gen), distinct = unique_index({4, 4, 3}, 1, 5, gen);
  GradcheckResult r = gradcheck(
      [&](const std::vector<Tensor>& in) { return scatter_add(in[0], 1, repeated, in[1]); }, {x, src});
  CHECK_MESSAGE(r.ok, r.message);
  r = gradcheck([&](const std::vector<Tensor>& in) { return scatter(in[0], 1, distinct, in[1]); }, {x, src});
  CHECK_MESSAGE(r.ok, r.message);
  r = gradcheck([&](const std::vector<Tensor>& in) { return scatter(in[0], -2, repeated, 0.5); }, {x});
  CHECK_MESSAGE(r.ok, r.message);
  Tensor source = randn({4, 7, 3}, kF64, &gen).requires_grad_(true);
  const Tensor ids = random_index({7}, 5, gen);
  r = gradcheck([&](const std::vector<Tensor>& in) { return index_add(in[0], 1, ids, in[1], 2.5); }, {x, source});
  CHECK_MESSAGE(r.ok, r.message);
  // The gradients by hand: scatter zeroes the written places, src gets dy gathered there.
  Tensor a = zeros({3}, kF64).requires_grad_(true), b = zeros({2}, kF64).requires_grad_(true);
  scatter(a, 0, tensor({2, 2}, {2}, kI64), b).backward(tensor({1, 2, 3}, {3}, kF64));
  CHECK(v(a.grad()) == std::vector<double>{1, 2, 0});
  CHECK(v(b.grad()) == std::vector<double>{3, 3});
}

TEST_CASE("bincount counts as torch.bincount, a confusion matrix included") {
  const Tensor x = tensor({2, 4, 1, 0, 0}, {5}, kI64);
  const Tensor counts = bincount(x);
  CHECK(counts.dtype() == DType::Int64);
  CHECK(counts.to_vector<int64_t>() == std::vector<int64_t>{2, 1, 1, 0, 1});
  CHECK(bincount(x, {}, 7).to_vector<int64_t>() == std::vector<int64_t>{2, 1, 1, 0, 1, 0, 0});
  const Tensor w = tensor({0, 0.25, 0.5, 0.75, 1}, {5});
  const Tensor weighted = bincount(x, w);
  CHECK(weighted.dtype() == DType::Float32);
  CHECK(v(weighted) == std::vector<double>{1.75, 0.5, 0, 0, 0.25});
  CHECK(bincount(x, w.to(DType::Float64)).dtype() == DType::Float64);
  CHECK(bincount(x, tensor({1, 2, 3, 4, 5}, {5}, kI64)).dtype() == DType::Float64);  // PyTorch: double
  CHECK(v(bincount(x, tensor({1, 2, 3, 4, 5}, {5}, kI64))) == std::vector<double>{9, 3, 1, 0, 2});
  CHECK(bincount(zeros({0}, kI64)).sizes() == Shape{0});
  CHECK(bincount(zeros({0}, kI64), {}, 3).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0});
  CHECK(bincount(tensor({3, 3}, {2}, {.dtype = DType::UInt8})).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 0, 0, 2});
  // A confusion matrix of 3 classes: rows are the labels, columns the predictions.
  const int64_t C = 3;
  const Tensor y = tensor({0, 1, 2, 2, 1, 0}, {6}, kI64), pred = tensor({0, 2, 2, 1, 1, 0}, {6}, kI64);
  const Tensor confusion = bincount(y * C + pred, {}, C * C).reshape({C, C});
  CHECK(confusion.to_vector<int64_t>() == std::vector<int64_t>{2, 0, 0, 0, 1, 1, 0, 1, 1});
  // Random labels against a loop.
  Generator gen(74);
  const Tensor labels = randint(0, 17, {300}, {.dtype = DType::Int32}, &gen);
  const Tensor scores = randn({300}, kF64, &gen);
  std::vector<double> expected(20, 0), expected_weighted(20, 0);
  const std::vector<int64_t> ids = labels.to_vector<int64_t>();
  const std::vector<double> s = v(scores);
  for (size_t i = 0; i < ids.size(); ++i) {
    expected[ids[i]] += 1;
    expected_weighted[ids[i]] += s[i];
  }
  CHECK(v(bincount(labels, {}, 20)) == expected);
  CHECK_CLOSE(bincount(labels, scores, 20), tensor(expected_weighted, {20}, kF64), 1e-14, 1e-14);
}

TEST_CASE("masked_select and nonzero pick in row-major order, as PyTorch") {
  const Tensor x = tensor({1, -2, 3, -4, 5, -6}, {2, 3});
  CHECK(v(masked_select(x, x > 0.0)) == std::vector<double>{1, 3, 5});
  // The mask broadcasts over x and x over the mask.
  const Tensor row_mask = tensor({1, 0, 1}, {3}).to(DType::Bool);
  CHECK(v(masked_select(x, row_mask)) == std::vector<double>{1, 3, -4, -6});
  const Tensor column = tensor({7, 8}, {2, 1});
  CHECK(v(masked_select(column, x > 0.0)) == std::vector<double>{7, 7, 8});
  CHECK(masked_select(x, x > 10.0).sizes() == Shape{0});
  // torch.nonzero's examples.
  const Tensor first = nonzero(tensor({1, 1, 1, 0, 1}, {5}, kI64));
  CHECK(first.dtype() == DType::Int64);
  CHECK(first.sizes() == Shape{4, 1});
  CHECK(v(first) == std::vector<double>{0, 1, 2, 4});
  const Tensor diagonal =
      tensor({0.6, 0, 0, 0, 0, 0.4, 0, 0, 0, 0, 1.2, 0, 0, 0, 0, -0.4}, {4, 4});
  CHECK(v(nonzero(diagonal)) == std::vector<double>{0, 0, 1, 1, 2, 2, 3, 3});
  CHECK(v(argwhere(diagonal.t())) == std::vector<double>{0, 0, 1, 1, 2, 2, 3, 3});
  CHECK(v(nonzero(tensor({0, NAN, 0}, {3}))) == std::vector<double>{1});
  CHECK(nonzero(full({}, 3.0)).sizes() == Shape{1, 0});
  CHECK(nonzero(zeros({})).sizes() == Shape{0, 0});
  CHECK(nonzero(zeros({2, 0, 3})).sizes() == Shape{0, 3});
  CHECK(v(nonzero(tensor({0, 1, 1, 0}, {2, 2}).to(DType::Bool))) == std::vector<double>{0, 1, 1, 0});
}

TEST_CASE("masked_select and nonzero match a loop on random shapes and layouts") {
  Generator gen(75);
  for (const Shape& sizes : std::vector<Shape>{{7}, {3, 4}, {2, 3, 4}, {2, 1, 3, 5}}) {
    Tensor x = randn(sizes, kF64, &gen);
    Tensor mask = randn(sizes, kF64, &gen) > 0.3;
    if (sizes.size() >= 2) {  // transposed views
      x = x.transpose(0, -1).contiguous().transpose(0, -1);
      mask = mask.transpose(0, -1).contiguous().transpose(0, -1);
    }
    std::vector<double> selected, coordinates;
    for_each_index(sizes, [&](const Shape& i) {
      if (mask.at(i) == 0) return;
      selected.push_back(x.at(i));
      for (int64_t c : i) coordinates.push_back(static_cast<double>(c));
    });
    CAPTURE(shape_str(sizes));
    CHECK(v(masked_select(x, mask)) == selected);
    const Tensor where_true = nonzero(mask);
    CHECK(where_true.sizes() == Shape{static_cast<int64_t>(selected.size()), static_cast<int64_t>(sizes.size())});
    CHECK(v(where_true) == coordinates);
    CHECK(v(nonzero(x * mask)) == coordinates);
  }
}

TEST_CASE("masked_select passes the float64 gradcheck, broadcast x included") {
  Generator gen(76);
  Tensor x = randn({3, 1, 4}, kF64, &gen).requires_grad_(true);
  const Tensor mask = randn({3, 5, 4}, kF64, &gen) > 0.0;
  GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) { return masked_select(in[0], mask); }, {x});
  CHECK_MESSAGE(r.ok, r.message);
  Tensor y = randn({2, 3}, kF64, &gen).requires_grad_(true);
  masked_select(y, tensor({1, 0, 1}, {3}).to(DType::Bool)).sum().backward();
  CHECK(v(y.grad()) == std::vector<double>{1, 0, 1, 1, 0, 1});
}

TEST_CASE("scatter family errors name the op, the problem and the fix") {
  const Tensor x = zeros({2, 3});
  const Tensor index = tensor({0, 1, 2, 1}, {2, 2}, kI64);
  CHECK_THROWS_WITH_FRAGMENT(scatter_add(x, 1, tensor({0, 3}, {1, 2}, kI64), ones({1, 2})), IndexError,
                             "[scatter_add] index 3 (element 1 of the index");
  CHECK_THROWS_WITH_FRAGMENT(scatter(x, 0, index, ones({2, 2})), IndexError, "[scatter] index 2 (element 2");
  CHECK_THROWS_WITH_FRAGMENT(scatter(x, 1, tensor({-1}, {1, 1}, kI64), 1.0), IndexError, "index -1");
  CHECK_THROWS_WITH_FRAGMENT(scatter_add(x, 1, zeros({2}, kI64), ones({2})), ShapeError,
                             "[scatter_add] index of shape (2,) does not fit x of shape (2, 3)");
  CHECK_THROWS_WITH_FRAGMENT(scatter_add(x, 1, index, ones({2, 1})), ShapeError, "and src of shape (2, 1)");
  CHECK_THROWS_WITH_FRAGMENT(scatter(x, 1, zeros({3, 1}, kI64), 1.0), ShapeError, "does not fit");
  CHECK_THROWS_WITH_FRAGMENT(scatter_add(x, 1, index, ones({2, 2}, kF64)), TypeError,
                             "[scatter_add] src has dtype float64 but x has float32");
  CHECK_THROWS_WITH_FRAGMENT(scatter_add(x, 1, index.to(DType::Float32), ones({2, 2})), TypeError,
                             "convert with .to(DType::Int64)");
  CHECK_THROWS_WITH_FRAGMENT(
      scatter_add(zeros({2, 3}, {.dtype = DType::UInt8}), 1, index, ones({2, 2}, {.dtype = DType::UInt8})),
      TypeError, "[scatter_add] cannot add up uint8 on the CPU");
  CHECK_THROWS_WITH_FRAGMENT(scatter_add(x, 2, index, ones({2, 2})), IndexError, "dim 2 is out of range");
  CHECK_THROWS_WITH_FRAGMENT(index_add(x, 0, tensor({0, 2}, {2}, kI64), ones({2, 3})), IndexError,
                             "[index_add] index 2 (element 1");
  CHECK_THROWS_WITH_FRAGMENT(index_add(x, 0, zeros({1, 2}, kI64), ones({2, 3})), ShapeError, "must be 1-D");
  CHECK_THROWS_WITH_FRAGMENT(index_add(x, 0, zeros({2}, kI64), ones({2, 2})), ShapeError,
                             "[index_add] source of shape (2, 2) does not fit x of shape (2, 3)");
  CHECK_THROWS_WITH_FRAGMENT(index_add(zeros({2}, kI64), 0, zeros({1}, kI64), ones({1}, kI64), 0.5), TypeError,
                             "alpha 0.5 is not a whole number");
  CHECK_THROWS_WITH_FRAGMENT(bincount(tensor({1, -1, 2}, {3}, kI64)), ValueError,
                             "[bincount] x must hold non-negative integers, got a smallest value of -1");
  CHECK_THROWS_WITH_FRAGMENT(bincount(tensor({1, 2}, {2})), TypeError, "[bincount] x must hold integers");
  CHECK_THROWS_WITH_FRAGMENT(bincount(zeros({2, 2}, kI64)), ShapeError, "[bincount] x must be 1-D");
  CHECK_THROWS_WITH_FRAGMENT(bincount(zeros({2}, kI64), {}, -1), ValueError, "minlength must be >= 0");
  CHECK_THROWS_WITH_FRAGMENT(bincount(zeros({2}, kI64), ones({3})), ShapeError, "weights must be 1-D with x's 2");
  CHECK_THROWS_WITH_FRAGMENT(masked_select(x, ones({2, 3})), TypeError, "[masked_select] mask must be Bool");
  CHECK_THROWS_WITH_FRAGMENT(masked_select(x, ones({4}) > 0.0), ShapeError, "masked_select");
}

}  // namespace loom
