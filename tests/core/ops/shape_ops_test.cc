// File: tests/core/ops/shape_ops_test.cc
// cat and stack: hand cases, a naive index-by-index reference over every dim
// (strided inputs, several dtypes), dtype promotion, backward slices,
// gradcheck, and argument errors. split, chunk, unflatten and flip; tril, triu and repeat
// against PyTorch's values by hand and a naive reference on random shapes.
#include "core/ops/shape_ops.h"

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

bool shares_storage(const Tensor& a, const Tensor& b) { return a.storage().get() == b.storage().get(); }

// cat of row-major 3-D tensors along `dim`, element by element.
Tensor naive_cat3(const std::vector<Tensor>& tensors, int64_t dim) {
  Shape sizes = tensors[0].sizes();
  sizes[dim] = 0;
  for (const Tensor& t : tensors) sizes[dim] += t.size(dim);
  std::vector<double> out(numel_of(sizes));
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    const std::vector<double> v = t.to_vector<double>();
    const Shape& s = t.sizes();
    for (int64_t i = 0; i < s[0]; ++i) {
      for (int64_t j = 0; j < s[1]; ++j) {
        for (int64_t k = 0; k < s[2]; ++k) {
          Shape at = {i, j, k};
          at[dim] += start;
          out[(at[0] * sizes[1] + at[1]) * sizes[2] + at[2]] = v[(i * s[1] + j) * s[2] + k];
        }
      }
    }
    start += t.size(dim);
  }
  return tensor(out, sizes, {.dtype = tensors[0].dtype()});
}

TEST_CASE("cat by hand along dim 0 and dim 1") {
  const Tensor a = tensor({1, 2, 3, 4}, {2, 2}), b = tensor({5, 6}, {1, 2});
  CHECK_CLOSE(cat({a, b}), tensor({1, 2, 3, 4, 5, 6}, {3, 2}), 0, 0);
  const Tensor c = tensor({1, 2}, {2, 1}), d = tensor({3, 4, 5, 6}, {2, 2});
  CHECK_CLOSE(cat({c, d}, 1), tensor({1, 3, 4, 2, 5, 6}, {2, 3}), 0, 0);
  CHECK_CLOSE(cat({c, d, c}, -1), tensor({1, 3, 4, 1, 2, 5, 6, 2}, {2, 4}), 0, 0);
  CHECK_CLOSE(cat({a}), a, 0, 0);
}

TEST_CASE("cat keeps the inputs' shared memory format, as PyTorch's does, and its values") {
  Generator gen(52);
  const Tensor a = randn({2, 3, 4, 5}, kF64, &gen), b = randn({2, 2, 4, 5}, kF64, &gen);
  const Tensor a_cl = a.contiguous(MemoryFormat::ChannelsLast), b_cl = b.contiguous(MemoryFormat::ChannelsLast);
  for (int64_t dim : {0, 1, 3}) {
    CAPTURE(dim);
    const Tensor x = dim == 1 ? b : a, x_cl = dim == 1 ? b_cl : a_cl;
    const Tensor both = cat({a_cl, x_cl}, dim);
    CHECK(both.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK_CLOSE(both, cat({a, x}, dim), 0, 0);
    CHECK(cat({a, x}, dim).is_contiguous());
    const Tensor mixed = cat({a_cl, x}, dim);  // no shared format: row-major, as PyTorch
    CHECK(mixed.is_contiguous());
    CHECK_CLOSE(mixed, cat({a, x}, dim), 0, 0);
  }
}

TEST_CASE("cat matches a naive reference along every dim, for strided inputs and any dtype") {
  Generator gen(51);
  for (int64_t dim : {0, 1, 2}) {
    CAPTURE(dim);
    Shape s1 = {2, 3, 4}, s2 = {2, 3, 4};
    s2[dim] = 1;
    const Tensor a = randn({4, 3, 2}, kF64, &gen).transpose(0, 2);  // (2, 3, 4), strided
    const Tensor b = randn(s2, kF64, &gen);
    const Tensor c = randn(s1, kF64, &gen);
    CHECK_CLOSE(cat({a, b, c}, dim), naive_cat3({a, b, c}, dim), 0, 0);
    const Tensor ai = randint(-50, 50, s1, {.dtype = DType::Int64}, &gen);
    const Tensor bi = randint(-50, 50, s2, {.dtype = DType::Int64}, &gen);
    const Tensor joined = cat({ai, bi}, dim);
    CHECK(joined.dtype() == DType::Int64);
    CHECK_CLOSE(joined, naive_cat3({ai, bi}, dim), 0, 0);
  }
}

TEST_CASE("cat backward hands each input its slice of dy") {
  Tensor a = tensor({1, 2, 3, 4}, {2, 2}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor frozen = zeros({2, 1}, kF64);
  Tensor b = tensor({5, 6, 7, 8, 9, 10}, {2, 3}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor y = cat({a, frozen, b}, 1);  // (2, 6)
  y.backward(tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 6}, kF64));
  CHECK_CLOSE(a.grad(), tensor({1, 2, 7, 8}, {2, 2}, kF64), 0, 0);
  CHECK_CLOSE(b.grad(), tensor({4, 5, 6, 10, 11, 12}, {2, 3}, kF64), 0, 0);
  CHECK_FALSE(frozen.grad().defined());
}

TEST_CASE("cat does not record under NoGradGuard or for inputs without grad") {
  const Tensor a = randn({2, 2}, {.dtype = DType::Float64, .requires_grad = true});
  CHECK_FALSE(cat({zeros({1, 2}), ones({1, 2})}).requires_grad());
  NoGradGuard guard;
  CHECK_FALSE(cat({a, a}).requires_grad());
}

TEST_CASE("cat gradcheck over several inputs, dim 0 and dim 1") {
  Generator gen(52);
  const TensorOptions grad64 = {.dtype = DType::Float64, .requires_grad = true};
  const Tensor a = randn({2, 3}, grad64, &gen), b = randn({1, 3}, grad64, &gen),
               c = randn({3, 3}, grad64, &gen);
  GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& in) {
        return cat({in[0], in[1], in[2]}, 0);
      },
      {a, b, c});
  CHECK_MESSAGE(r.ok, r.message);
  const Tensor d = randn({3, 2, 2}, grad64, &gen), e = randn({3, 1, 2}, grad64, &gen);
  r = gradcheck(
      [](const std::vector<Tensor>& in) {
        return cat({in[0], in[1], in[0].transpose(1, 2)}, 1) * 2.0;
      },
      {d, e});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("cat rejects empty lists and mismatched inputs") {
  CHECK_THROWS_WITH_FRAGMENT(cat({}), ValueError, "[cat] expected a non-empty list of tensors");
  CHECK_THROWS_WITH_FRAGMENT(cat({zeros({2, 3}), Tensor()}), ValueError,
                             "[cat] tensor 1 is undefined");
  CHECK_THROWS_WITH_FRAGMENT(cat({zeros({2, 3}), zeros({3, 3})}, 1), ShapeError,
                             "[cat] sizes must match except in dim 1: tensor 0 has shape (2, 3) "
                             "but tensor 1 has shape (3, 3)");
  CHECK_THROWS_WITH_FRAGMENT(cat({zeros({2, 3}), zeros({2, 3, 1})}), ShapeError,
                             "tensor 1 has shape (2, 3, 1)");
  CHECK_THROWS_WITH_FRAGMENT(cat({zeros({2, 3})}, 2), IndexError,
                             "[cat] dim 2 is out of range for a 2-D tensor");
  CHECK_THROWS_WITH_FRAGMENT(cat({zeros({2}), zeros({})}), ShapeError,
                             "[cat] tensor 1 is zero-dimensional, which cannot be concatenated");
}

TEST_CASE("cat skips 1-D tensors without elements whatever the other shapes, as torch.cat") {
  Tensor all = empty({0});  // an accumulator grown in a loop
  for (int i = 0; i < 3; ++i) all = cat({all, full({2, 3}, i)});
  CHECK(all.sizes() == Shape{6, 3});
  CHECK_CLOSE(all, cat({full({2, 3}, 0), full({2, 3}, 1), full({2, 3}, 2)}), 0, 0);
  CHECK(cat({zeros({2, 3}), empty({0}), ones({1, 3})}).sizes() == Shape{3, 3});
  CHECK(cat({empty({0}), zeros({2, 3}), empty({0})}, -1).sizes() == Shape{2, 3});
  // Skipped tensors still count for the dtype, and the result is (0,) when all are skipped.
  CHECK(cat({empty({0}, {.dtype = DType::Float64}), zeros({2, 2})}, 1).dtype() == DType::Float64);
  CHECK(cat({empty({0}, {.dtype = DType::Int64}), empty({0}, {.dtype = DType::Int32})}).sizes() == Shape{0});
  CHECK(cat({empty({0}, {.dtype = DType::Int64}), empty({0}, {.dtype = DType::Int32})}).dtype() == DType::Int64);
  // Every other tensor is checked against the first one not skipped, and dim against its rank.
  CHECK_THROWS_WITH_FRAGMENT(cat({empty({0}), zeros({2, 3}), empty({0}), zeros({3, 3})}, 1), ShapeError,
                             "tensor 1 has shape (2, 3) but tensor 3 has shape (3, 3)");
  CHECK_THROWS_WITH_FRAGMENT(cat({zeros({0, 3}), zeros({2, 4})}), ShapeError, "tensor 1 has shape (2, 4)");
  CHECK_THROWS_WITH_FRAGMENT(cat({empty({0}), zeros({2, 3})}, 2), IndexError, "for a 2-D tensor");
  // Gradients: the skipped input's is empty, the others' their slices.
  Tensor skipped = empty({0}).requires_grad_(true);
  Tensor x = randn({2, 3}).requires_grad_(true);
  Tensor y = cat({skipped, x, skipped}, 1);
  mul(y, y).sum().backward();
  CHECK(skipped.grad().sizes() == Shape{0});
  CHECK_CLOSE(x.grad(), mul(x, 2.0), 0, 0);
  Tensor lone = empty({0}).requires_grad_(true);
  Tensor z = cat({lone});
  CHECK(z.requires_grad());
  z.sum().backward();
  CHECK(lone.grad().sizes() == Shape{0});
}

TEST_CASE("cat promotes mixed dtypes as torch.cat, and each input's gradient keeps its dtype") {
  const Tensor i64 = tensor({1, 2}, {2}, {.dtype = DType::Int64});
  const Tensor f32 = tensor({0.5, 1.5}, {2});
  const Tensor mask = tensor({1, 0}, {2}, {.dtype = DType::Bool});
  const Tensor u8 = tensor({7, 8}, {2}, {.dtype = DType::UInt8});
  const Tensor i32 = tensor({3, 4}, {2}, {.dtype = DType::Int32});
  Tensor joined = cat({i64, f32});
  CHECK(joined.dtype() == DType::Float32);
  CHECK_CLOSE(joined, tensor({1, 2, 0.5, 1.5}, {4}), 0, 0);
  CHECK(cat({mask, u8}).dtype() == DType::UInt8);
  CHECK_CLOSE(cat({mask, u8}), tensor({1, 0, 7, 8}, {4}, {.dtype = DType::UInt8}), 0, 0);
  CHECK(cat({u8, i32}).dtype() == DType::Int32);
  CHECK(cat({f32, zeros({2}, kF64), i32}).dtype() == DType::Float64);
  // A float32 leaf with a float64 one: the float32 leaf's gradient is float32.
  Tensor a = tensor({1, 2}, {2}, {.requires_grad = true});
  Tensor b = tensor({3}, {1}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor y = cat({a, b});
  CHECK(y.dtype() == DType::Float64);
  y.backward(tensor({10, 20, 30}, {3}, kF64));
  CHECK(a.grad().dtype() == DType::Float32);
  CHECK_CLOSE(a.grad(), tensor({10, 20}, {2}), 0, 0);
  CHECK_CLOSE(b.grad(), tensor({30}, {1}, kF64), 0, 0);
}

TEST_CASE("promote_types follows torch.promote_types") {
  using D = DType;
  CHECK(promote_types(D::BFloat16, D::Float32) == D::Float32);
  CHECK(promote_types(D::Float16, D::BFloat16) == D::Float32);
  CHECK(promote_types(D::Float16, D::Float64) == D::Float64);
  CHECK(promote_types(D::Int64, D::BFloat16) == D::BFloat16);
  CHECK(promote_types(D::Bool, D::Float16) == D::Float16);
  CHECK(promote_types(D::UInt8, D::Int32) == D::Int32);
  CHECK(promote_types(D::Int64, D::Int32) == D::Int64);
  CHECK(promote_types(D::Bool, D::UInt8) == D::UInt8);
  CHECK(promote_types(D::Bool, D::Bool) == D::Bool);
}

TEST_CASE("stack joins along a new dim, any position, with cat's promotion and gradient") {
  const Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3}), b = tensor({7, 8, 9, 10, 11, 12}, {2, 3});
  CHECK_CLOSE(stack({a, b}), tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3}), 0, 0);
  CHECK_CLOSE(stack({a, b}, 1), tensor({1, 2, 3, 7, 8, 9, 4, 5, 6, 10, 11, 12}, {2, 2, 3}), 0, 0);
  CHECK_CLOSE(stack({a, b}, -1), tensor({1, 7, 2, 8, 3, 9, 4, 10, 5, 11, 6, 12}, {2, 3, 2}), 0, 0);
  CHECK(stack({a, b.to(DType::Int64)}).dtype() == DType::Float32);
  Generator gen(53);
  const TensorOptions grad64 = {.dtype = DType::Float64, .requires_grad = true};
  const Tensor c = randn({2, 3}, grad64, &gen), d = randn({2, 3}, grad64, &gen);
  GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& in) { return stack({in[0], in[1], in[0]}, 1); }, {c, d});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK_THROWS_WITH_FRAGMENT(stack({}), ValueError, "[stack] expected a non-empty list");
  CHECK_THROWS_WITH_FRAGMENT(stack({a, zeros({3, 2})}), ShapeError,
                             "[stack] every tensor must have the same shape: tensor 0 has shape "
                             "(2, 3) but tensor 1 has shape (3, 2)");
  CHECK_THROWS_WITH_FRAGMENT(stack({a, b}, 3), IndexError,
                             "[stack] dim 3 is out of range for stacking tensors of shape (2, 3) "
                             "(expected a dim in [-3, 2])");
}

TEST_CASE("split and chunk cut views as torch.split and torch.chunk do") {
  const Tensor x = arange(20, kF64).view({10, 2});
  const std::vector<Tensor> chunks = chunk(x, 4);  // ceil(10 / 4) = 3: 3, 3, 3, 1
  REQUIRE(chunks.size() == 4);
  CHECK(chunks[0].sizes() == Shape{3, 2});
  CHECK(chunks[3].sizes() == Shape{1, 2});
  CHECK(chunks[3].to_vector<double>() == std::vector<double>{18, 19});
  CHECK(chunks[1].storage_offset() == 6);  // a view, no copy
  CHECK(chunk(arange(6, kF64), 4).size() == 3);  // 2, 2, 2: fewer than asked, as torch.chunk
  const std::vector<Tensor> columns = chunk(x, 2, -1);
  CHECK(columns[1].to_vector<double>() == std::vector<double>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19});
  const std::vector<Tensor> pieces = split(x, 4);
  REQUIRE(pieces.size() == 3);
  CHECK(pieces[2].sizes() == Shape{2, 2});
  const std::vector<Tensor> listed = split(x, {1, 0, 9});
  REQUIRE(listed.size() == 3);
  CHECK(listed[1].sizes() == Shape{0, 2});
  CHECK(listed[2].to_vector<double>()[0] == 2);

  // Each piece's gradient lands in its slice of x.
  const Tensor w = arange(6, {.dtype = DType::Float64}).view({3, 2}).requires_grad_(true);
  const std::vector<Tensor> halves = chunk(w, 2, 1);
  add(mul(sum(halves[0]), 2.0), mul(sum(halves[1]), 3.0)).backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, 3, 2, 3, 2, 3});

  CHECK_THROWS_WITH_FRAGMENT(split(x, {3, 3}), ShapeError,
                             "[split] sizes (3, 3) add up to 6 but dim 0 of shape (10, 2) has 10");
  CHECK_THROWS_WITH_FRAGMENT(split(x, 0), ValueError, "[split] split_size must be > 0, got 0");
  CHECK_THROWS_WITH_FRAGMENT(chunk(x, 0), ValueError, "[chunk] chunks must be > 0, got 0");
  CHECK_THROWS_WITH_FRAGMENT(chunk(x, 2, 2), IndexError, "[chunk] dim 2 is out of range");
  CHECK_THROWS_WITH_FRAGMENT(split(full({}, 1.0), 1), ShapeError, "[split] a zero-dimensional tensor");
}

TEST_CASE("unflatten splits one dim as torch.unflatten over random shapes, dims and factors, as a view") {
  std::mt19937 rng(5);
  auto between = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 60; ++trial) {
    Shape sizes;
    for (int64_t d = between(1, 4); d > 0; --d) sizes.push_back(between(1, 4));
    const int64_t dim = between(0, static_cast<int64_t>(sizes.size()) - 1);
    // The chosen dim grows by a random factor so that it has more to split.
    sizes[dim] *= between(1, 6);
    // Divisors > 1 until nothing is left, then maybe a 1 somewhere (always, for a size of 1).
    Shape factors;
    for (int64_t rest = sizes[dim]; rest > 1;) {
      std::vector<int64_t> divisors;
      for (int64_t f = 2; f <= rest; ++f) {
        if (rest % f == 0) divisors.push_back(f);
      }
      factors.push_back(divisors[between(0, static_cast<int64_t>(divisors.size()) - 1)]);
      rest /= factors.back();
    }
    if (factors.empty() || between(0, 2) == 0) {
      factors.insert(factors.begin() + between(0, static_cast<int64_t>(factors.size())), 1);
    }
    Shape expected_sizes(sizes.begin(), sizes.begin() + dim);
    expected_sizes.insert(expected_sizes.end(), factors.begin(), factors.end());
    expected_sizes.insert(expected_sizes.end(), sizes.begin() + dim + 1, sizes.end());
    Shape asked = factors;
    if (between(0, 1) == 1) asked[between(0, static_cast<int64_t>(asked.size()) - 1)] = -1;
    // A transposed x (when it has two dims to swap) has other strides; splitting one dim still views it.
    Tensor x = arange(numel_of(sizes), kF64).view(sizes);
    if (sizes.size() >= 2 && between(0, 1) == 1) x = x.transpose(0, 1).contiguous().transpose(0, 1);
    const int64_t signed_dim = between(0, 1) == 1 ? dim - static_cast<int64_t>(sizes.size()) : dim;
    CAPTURE(shape_str(sizes));
    CAPTURE(dim);
    CAPTURE(shape_str(asked));
    const Tensor y = unflatten(x, signed_dim, asked);
    REQUIRE(y.sizes() == expected_sizes);
    CHECK(shares_storage(y, x));
    CHECK(y.to_vector<double>() == x.contiguous().view(expected_sizes).to_vector<double>());
    CHECK(y.flatten(dim, dim + static_cast<int64_t>(factors.size()) - 1).to_vector<double>() ==
          x.to_vector<double>());
  }
}

TEST_CASE("unflatten of a channels-last image, its gradient, and its errors") {
  Generator gen(3);
  const Tensor x = randn({2, 6, 3, 4}, kF64, &gen).contiguous(MemoryFormat::ChannelsLast);
  const Tensor y = unflatten(x, 1, {2, 3});
  CHECK(y.sizes() == Shape{2, 2, 3, 3, 4});
  CHECK(shares_storage(y, x));
  CHECK(y.at({1, 1, 2, 0, 3}) == x.at({1, 5, 0, 3}));

  const Tensor w = arange(12, kF64).view({3, 4}).requires_grad_(true);
  sum(mul(unflatten(w, 1, {2, 2}), arange(12, kF64).view({3, 2, 2}))).backward();
  CHECK(w.grad().to_vector<double>() == arange(12, kF64).to_vector<double>());

  const Tensor z = zeros({2, 12});
  CHECK_THROWS_WITH_FRAGMENT(unflatten(z, 1, {5, 2}), ShapeError,
                             "[unflatten] sizes (5, 2) multiply to 10 but dim 1 of shape (2, 12) has 12");
  CHECK_THROWS_WITH_FRAGMENT(unflatten(z, 1, {5, -1}), ShapeError,
                             "[unflatten] dim 1 of shape (2, 12) has 12 elements, which sizes (5, -1) cannot split");
  CHECK_THROWS_WITH_FRAGMENT(unflatten(z, 1, {-1, -1}), ValueError, "[unflatten] only one size may be -1");
  CHECK_THROWS_WITH_FRAGMENT(unflatten(z, 1, {-2, -6}), ValueError, "sizes must be >= 0 or one -1, got (-2, -6)");
  CHECK_THROWS_WITH_FRAGMENT(unflatten(z, 1, {}), ValueError, "[unflatten] sizes must name at least one dim");
  CHECK_THROWS_WITH_FRAGMENT(unflatten(z, 2, {3, 4}), IndexError, "[unflatten] dim 2 is out of range");
  CHECK_THROWS_WITH_FRAGMENT(unflatten(z, 1, {int64_t{1} << 40, int64_t{1} << 40}), ShapeError,
                             "multiply past int64");
  CHECK(unflatten(zeros({3, 0}), 1, {0, 5}).sizes() == Shape{3, 0, 5});
  CHECK_THROWS_WITH_FRAGMENT(unflatten(zeros({3, 0}), 1, {0, -1}), ShapeError, "cannot split");
}

TEST_CASE("flip reverses the listed dims, copies, and sends the gradient back flipped") {
  const Tensor x = arange(12, kF64).view({2, 3, 2});
  CHECK(flip(x, {0}).to_vector<double>() == std::vector<double>{6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5});
  CHECK(flip(x, {-1}).to_vector<double>() == std::vector<double>{1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10});
  CHECK(flip(x, {1, 2}).to_vector<double>() == std::vector<double>{5, 4, 3, 2, 1, 0, 11, 10, 9, 8, 7, 6});
  CHECK(flip(x.transpose(0, 2), {0}).to_vector<double>() == std::vector<double>{1, 7, 3, 9, 5, 11, 0, 6, 2, 8, 4, 10});
  const Tensor copy = flip(x, {});
  CHECK_FALSE(copy.is_same(x));
  CHECK(copy.to_vector<double>() == x.to_vector<double>());
  CHECK(flip(full({}, 3.0, kF64), {}).item() == 3);

  Generator gen(62);
  const Tensor w = randn({2, 3, 4}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return flip(in[0], {0, 2}); }, {w});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK_THROWS_WITH_FRAGMENT(flip(x, {1, -2}), ValueError, "[flip] dim 1 appears twice in (1, -2)");
  CHECK_THROWS_WITH_FRAGMENT(flip(x, {3}), IndexError, "[flip] dim 3 is out of range");
}

// tril (lower) or triu of a row-major (batch, rows, cols) tensor, element by element.
std::vector<double> naive_triangle(const Tensor& x, int64_t diagonal, bool lower) {
  std::vector<double> v = x.to_vector<double>();
  const int64_t rows = x.size(-2), cols = x.size(-1);
  for (size_t e = 0; e < v.size(); ++e) {
    const auto i = static_cast<int64_t>(e) / cols % rows, j = static_cast<int64_t>(e) % cols;
    if (lower ? j - i > diagonal : j - i < diagonal) v[e] = 0;
  }
  return v;
}

// x.repeat(repeats) element by element: output index (o_0, ..., o_k) reads x at
// o_i mod size(i) in x's dims (the last x.dim() of the output's).
std::vector<double> naive_repeat(const Tensor& x, const Shape& repeats) {
  const std::vector<double> v = x.to_vector<double>();
  const auto lead = static_cast<int64_t>(repeats.size()) - x.dim();
  Shape sizes = repeats;
  for (int64_t d = 0; d < x.dim(); ++d) sizes[lead + d] *= x.size(d);
  std::vector<double> out(numel_of(sizes));
  for (int64_t e = 0; e < static_cast<int64_t>(out.size()); ++e) {
    int64_t rest = e, source = 0, scale = 1;
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= lead; --d) {
      const int64_t size = x.size(d - lead);
      source += rest % sizes[d] % size * scale;
      scale *= size;
      rest /= sizes[d];
    }
    out[e] = v[source];
  }
  return out;
}

TEST_CASE("tril and triu keep PyTorch's triangles for every diagonal, batched too") {
  const Tensor x = arange(1.0, 13.0, 1.0, kF64).view({3, 4});
  using V = std::vector<double>;
  CHECK(tril(x).to_vector<double>() == V{1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0});
  CHECK(triu(x).to_vector<double>() == V{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12});
  CHECK(tril(x, 1).to_vector<double>() == V{1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12});
  CHECK(triu(x, 1).to_vector<double>() == V{0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12});
  CHECK(tril(x, -1).to_vector<double>() == V{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  CHECK(triu(x, -1).to_vector<double>() == V{1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12});
  CHECK(tril(x, 5).to_vector<double>() == x.to_vector<double>());
  CHECK(triu(x, 5).to_vector<double>() == V(12, 0));
  CHECK(tril(x, -5).to_vector<double>() == V(12, 0));
  CHECK(triu(x, -5).to_vector<double>() == x.to_vector<double>());
  // Diagonals far past the edges, which the mask clamps before comparing.
  CHECK(tril(x, INT64_MAX).to_vector<double>() == x.to_vector<double>());
  CHECK(triu(x, INT64_MIN).to_vector<double>() == x.to_vector<double>());
  CHECK(tril(x, INT64_MIN).to_vector<double>() == V(12, 0));

  const Tensor batch = arange(1.0, 13.0, 1.0, kF64).view({2, 3, 2});
  CHECK(tril(batch).to_vector<double>() == V{1, 0, 3, 4, 5, 6, 7, 0, 9, 10, 11, 12});
  CHECK(triu(batch, -1).to_vector<double>() == V{1, 2, 3, 4, 0, 6, 7, 8, 9, 10, 0, 12});
  CHECK(tril(x.t()).to_vector<double>() == V{1, 0, 0, 2, 6, 0, 3, 7, 11, 4, 8, 12});  // a strided x
  CHECK(tril(zeros({2, 0, 3})).sizes() == Shape{2, 0, 3});
  CHECK_FALSE(tril(x).is_same(x));
}

TEST_CASE("tril and triu take Bool and int64 tensors and keep their dtype") {
  const Tensor mask = tensor({1, 1, 0, 1, 1, 1}, {2, 3}, {.dtype = DType::Bool});
  CHECK(tril(mask).dtype() == DType::Bool);
  CHECK(tril(mask).to_vector<bool>() == std::vector<bool>{true, false, false, true, true, false});
  CHECK(triu(mask, 1).to_vector<bool>() == std::vector<bool>{false, true, false, false, false, true});
  const int64_t base = (int64_t{1} << 53) + 1;  // not a double: the values must not pass through one
  const std::vector<int64_t> values = {base - 7, base + 3, base + 9, base + 4};
  const Tensor big = from_host(values.data(), DType::Int64, {2, 2}, {.dtype = DType::Int64});
  CHECK(triu(big).dtype() == DType::Int64);
  CHECK(triu(big).to_vector<int64_t>() == std::vector<int64_t>{base - 7, base + 3, 0, base + 4});
  CHECK(tril(big, -1).to_vector<int64_t>() == std::vector<int64_t>{0, 0, base + 9, 0});
}

TEST_CASE("tril and triu match a naive reference on random shapes, diagonals and dtypes") {
  Generator gen(71);
  std::mt19937 rng(71);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 40; ++trial) {
    const Shape sizes = {pick(1, 3), pick(0, 6), pick(0, 6)};
    const int64_t diagonal = pick(-7, 7);
    const DType dtype = std::array{DType::Float64, DType::Float32, DType::Int64, DType::Bool}[trial % 4];
    CAPTURE(shape_str(sizes));
    CAPTURE(diagonal);
    CAPTURE(dtype_name(dtype));
    const Tensor x = randint(-9, 10, sizes, {.dtype = DType::Int64}, &gen).to(dtype);
    const Tensor lower = tril(x, diagonal), upper = triu(x, diagonal);
    CHECK(lower.dtype() == dtype);
    CHECK(lower.sizes() == sizes);
    CHECK(lower.to_vector<double>() == naive_triangle(x, diagonal, true));
    CHECK(upper.to_vector<double>() == naive_triangle(x, diagonal, false));
  }
}

TEST_CASE("tril and triu backward zero dy's dropped triangle; gradcheck in float64") {
  Tensor w = ones({3, 3}, {.dtype = DType::Float64, .requires_grad = true});
  tril(w).backward(arange(1.0, 10.0, 1.0, kF64).view({3, 3}));
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 0, 0, 4, 5, 0, 7, 8, 9});
  Generator gen(72);
  const Tensor x = randn({2, 3, 4}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  for (int64_t diagonal : {-1, 0, 2}) {
    CAPTURE(diagonal);
    GradcheckResult r = gradcheck([diagonal](const std::vector<Tensor>& in) { return tril(in[0], diagonal); }, {x});
    CHECK_MESSAGE(r.ok, r.message);
    r = gradcheck([diagonal](const std::vector<Tensor>& in) { return triu(in[0].transpose(1, 2), diagonal); }, {x});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("tril and triu reject tensors of fewer than two dims") {
  CHECK_THROWS_WITH_FRAGMENT(tril(arange(3)), ShapeError,
                             "[tril] needs a tensor of 2 or more dims (its last two are the matrices), got "
                             "shape (3,); unsqueeze(0) a vector");
  CHECK_THROWS_WITH_FRAGMENT(triu(full({}, 1.0)), ShapeError, "[triu] needs a tensor of 2 or more dims");
  CHECK_THROWS_WITH_FRAGMENT(tril(Tensor()), ValueError, "[tril] x is undefined");
}

TEST_CASE("repeat tiles as torch.Tensor.repeat: new leading dims, zero repeats, a copy") {
  const Tensor x = tensor({1, 2, 3, 4}, {2, 2}, kF64);
  using V = std::vector<double>;
  const Tensor tiled = repeat(x, {2, 3});
  CHECK(tiled.sizes() == Shape{4, 6});
  CHECK(tiled.to_vector<double>() == V{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4, 1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4});
  const Tensor deeper = x.repeat({2, 1, 2});
  CHECK(deeper.sizes() == Shape{2, 2, 4});
  CHECK(deeper.to_vector<double>() == V{1, 2, 1, 2, 3, 4, 3, 4, 1, 2, 1, 2, 3, 4, 3, 4});
  CHECK(repeat(tensor({1, 2, 3}, {3}), {2, 2}).to_vector<double>() == V{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  CHECK(repeat(tensor({1, 2}, {2}), {0, 2}).sizes() == Shape{0, 4});
  CHECK(repeat(tensor({1, 2}, {2}), {3, 0}).sizes() == Shape{3, 0});
  CHECK(repeat(full({}, 5.0), {}).sizes() == Shape{});
  CHECK(repeat(full({}, 5.0), {3}).to_vector<double>() == V{5, 5, 5});
  const Tensor same = repeat(x, {1, 1});
  CHECK(same.to_vector<double>() == x.to_vector<double>());
  CHECK(same.storage() != x.storage());  // a copy even when nothing repeats, as torch's
  CHECK(repeat(x.t(), {1, 2}).to_vector<double>() == V{1, 3, 1, 3, 2, 4, 2, 4});
  CHECK(repeat(x.t(), {1, 1}).is_contiguous());  // a dense copy of a strided x, as torch's
}

TEST_CASE("repeat keeps Bool and int64 values and dtypes") {
  const Tensor mask = tensor({1, 0}, {2}, {.dtype = DType::Bool});
  CHECK(repeat(mask, {2}).dtype() == DType::Bool);
  CHECK(repeat(mask, {2, 2}).to_vector<bool>() == std::vector<bool>{true, false, true, false, true, false, true,
                                                                     false});
  const int64_t big = (int64_t{1} << 53) + 1;  // not a double: the values must not pass through one
  const std::vector<int64_t> values = {big, big + 1};
  const Tensor ids = from_host(values.data(), DType::Int64, {2}, {.dtype = DType::Int64});
  CHECK(repeat(ids, {1, 2}).to_vector<int64_t>() == std::vector<int64_t>{big, big + 1, big, big + 1});
}

TEST_CASE("repeat matches a naive reference on random shapes and repeats") {
  Generator gen(73);
  std::mt19937 rng(73);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 60; ++trial) {
    // Up to 6 dims, so up to 6 repeated ones: more than one pass of three.
    Shape sizes(static_cast<size_t>(pick(0, 4)));
    for (int64_t& s : sizes) s = sizes.size() <= 3 ? pick(0, 3) : pick(1, 2);
    Shape repeats(sizes.size() + static_cast<size_t>(pick(0, 2)));
    for (int64_t& r : repeats) r = repeats.size() <= 4 ? pick(0, 3) : pick(0, 2);
    const DType dtype = std::array{DType::Float64, DType::Int64, DType::Bool, DType::Float32}[trial % 4];
    CAPTURE(shape_str(sizes));
    CAPTURE(shape_str(repeats));
    CAPTURE(dtype_name(dtype));
    Tensor x = randint(-9, 10, sizes, {.dtype = DType::Int64}, &gen).to(dtype);
    if (x.dim() >= 2 && trial % 3 == 0) x = x.transpose(0, 1);  // strided inputs too
    const Tensor out = repeat(x, repeats);
    CHECK(out.dtype() == dtype);
    CHECK(out.to_vector<double>() == naive_repeat(x, repeats));
  }
}

TEST_CASE("repeat backward sums dy over the copies; gradcheck in float64") {
  Tensor w = zeros({2}, {.dtype = DType::Float64, .requires_grad = true});
  repeat(w, {2, 3}).backward(arange(1.0, 13.0, 1.0, kF64).view({2, 6}));
  // w[0] is read at columns 0, 2, 4 of both rows: 1 + 3 + 5 + 7 + 9 + 11.
  CHECK(w.grad().to_vector<double>() == std::vector<double>{36, 42});
  Generator gen(74);
  const Tensor x = randn({2, 3}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  for (const Shape& repeats : {Shape{2, 1}, Shape{3, 2, 2}, Shape{1, 0}, Shape{1, 1}}) {
    CAPTURE(shape_str(repeats));
    const GradcheckResult r =
        gradcheck([repeats](const std::vector<Tensor>& in) { return in[0].repeat(repeats); }, {x});
    CHECK_MESSAGE(r.ok, r.message);
  }
  // Seven repeated dims of an 8-dim x: three passes (3 + 3 + 1 repeated dims).
  const Tensor deep = randn({2, 1, 2, 1, 2, 1, 1, 2}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const Shape repeats{2, 1, 2, 2, 2, 3, 2, 1, 2};
  const Tensor tiled = deep.repeat(repeats);
  CHECK(tiled.sizes() == Shape{2, 2, 2, 4, 2, 6, 2, 1, 4});
  CHECK(tiled.to_vector<double>() == naive_repeat(deep.detach(), repeats));
  const GradcheckResult r =
      gradcheck([repeats](const std::vector<Tensor>& in) { return in[0].repeat(repeats); }, {deep});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("repeat backward in every float dtype: the float64 sums, rounded") {
  Generator gen(75);
  const Tensor source = randint(-4, 5, {2, 3, 4}, {.dtype = DType::Int64}, &gen);
  for (const Shape& repeats : {Shape{2, 1, 3, 2}, Shape{1, 2, 1}, Shape{2, 2, 2, 1, 3, 2}}) {
    const Tensor dy = randint(-4, 5, repeat(source, repeats).sizes(), {.dtype = DType::Int64}, &gen);
    Tensor reference = source.to(DType::Float64).requires_grad_(true);
    repeat(reference, repeats).backward(dy.to(DType::Float64));
    for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
      CAPTURE(shape_str(repeats));
      CAPTURE(dtype_name(dtype));
      Tensor x = source.to(dtype).requires_grad_(true);
      repeat(x, repeats).backward(dy.to(dtype));
      CHECK(x.grad().dtype() == dtype);
      CHECK(x.grad().to_vector<double>() == reference.grad().to_vector<double>());
    }
  }
}

TEST_CASE("repeat rejects too few or negative repeats") {
  const Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_FRAGMENT(repeat(x, {2}), ShapeError,
                             "[repeat] needs a repeat count for each of x's 2 dims, got repeats (2,) for shape "
                             "(2, 3); pass 1 for the dims to keep");
  CHECK_THROWS_WITH_FRAGMENT(x.repeat({2, -1}), ValueError, "[repeat] repeats must be >= 0, got (2, -1)");
  CHECK_THROWS_WITH_FRAGMENT(repeat(x, {INT64_MAX, 2}), ValueError,
                             "[repeat] repeats (9223372036854775807, 2) of shape (2, 3) overflow 64 bits");
  CHECK_THROWS_WITH_FRAGMENT(repeat(Tensor(), {1}), ValueError, "[repeat] x is undefined");
}

// out[..., c, h r + i, w r + j] = x[..., c r^2 + i r + j, h, w], index by index.
Tensor naive_pixel_shuffle(const Tensor& x, int64_t r) {
  const std::vector<double> in = x.to_vector<double>();
  const int64_t c_in = x.size(-3), h = x.size(-2), w = x.size(-1), c_out = c_in / (r * r);
  const int64_t lead = x.numel() / (c_in * h * w);
  std::vector<double> out(in.size());
  for (int64_t n = 0; n < lead; ++n) {
    for (int64_t c = 0; c < c_out; ++c) {
      for (int64_t y = 0; y < h * r; ++y) {
        for (int64_t z = 0; z < w * r; ++z) {
          const int64_t source = ((n * c_in + c * r * r + (y % r) * r + z % r) * h + y / r) * w + z / r;
          out[((n * c_out + c) * h * r + y) * w * r + z] = in[source];
        }
      }
    }
  }
  Shape sizes = x.sizes();
  sizes[sizes.size() - 3] = c_out;
  sizes[sizes.size() - 2] = h * r;
  sizes[sizes.size() - 1] = w * r;
  return tensor(out, sizes, kF64);
}

TEST_CASE("pixel_shuffle moves channel c r^2 + i r + j to pixel (h r + i, w r + j); pixel_unshuffle undoes it") {
  Generator gen(71);
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t r = 1 + trial % 3, c = 1 + trial % 2, h = 1 + (trial * 5) % 4, w = 1 + (trial * 3) % 5;
    Shape sizes = trial % 3 == 0 ? Shape{c * r * r, h, w} : Shape{2, c * r * r, h, w};
    if (trial % 4 == 1) sizes.insert(sizes.begin(), 2);  // (2, 2, C r^2, H, W)
    CAPTURE(shape_str(sizes));
    CAPTURE(r);
    Tensor x = randn(sizes, kF64, &gen);
    if (sizes.size() == 4 && trial % 2 == 0) x = x.contiguous(MemoryFormat::ChannelsLast);
    const Tensor y = pixel_shuffle(x, r);
    CHECK_CLOSE(y, naive_pixel_shuffle(x, r), 0, 0);
    CHECK(y.is_contiguous(x.suggest_memory_format()));
    const Tensor back = pixel_unshuffle(y, r);
    CHECK(back.sizes() == x.sizes());
    CHECK_CLOSE(back, x, 0, 0);
    CHECK(back.is_contiguous(y.suggest_memory_format()));  // y of 1 channel reads as NCHW
  }
}

TEST_CASE("pixel_shuffle and pixel_unshuffle: gradcheck, and errors") {
  Generator gen(72);
  const Tensor x = randn({2, 8, 2, 3}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return pixel_shuffle(in[0], 2); }, {x});
  CHECK_MESSAGE(r.ok, r.message);
  const Tensor z = randn({1, 2, 4, 6}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  r = gradcheck(
      [](const std::vector<Tensor>& in) { return pixel_unshuffle(in[0].contiguous(MemoryFormat::ChannelsLast), 2); },
      {z});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK_THROWS_WITH_FRAGMENT(pixel_shuffle(zeros({2, 6, 3, 3}), 2), ShapeError,
                             "[pixel_shuffle] x of shape (2, 6, 3, 3) has 6 channels (dim -3), not divisible by "
                             "upscale_factor^2 = 4");
  CHECK_THROWS_WITH_FRAGMENT(pixel_unshuffle(zeros({1, 1, 4, 5}), 2), ShapeError,
                             "[pixel_unshuffle] x of shape (1, 1, 4, 5) has height 4 and width 5");
  CHECK_THROWS_WITH_FRAGMENT(pixel_shuffle(zeros({4, 4}), 2), ShapeError,
                             "[pixel_shuffle] x must have at least 3 dims");
  CHECK_THROWS_WITH_FRAGMENT(pixel_unshuffle(zeros({1, 4, 4}), 0), ValueError,
                             "[pixel_unshuffle] downscale_factor must be >= 1, got 0");
}

}  // namespace
}  // namespace loom
