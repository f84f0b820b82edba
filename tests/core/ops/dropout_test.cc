// File: tests/core/ops/dropout_test.cc
// dropout: mask statistics, the documented Philox draw order, seeding,
// identity cases, backward through the mask drawn again (none kept), gradcheck, and argument
// errors; dropout2d: whole channels, dropout's mask draws, layouts, gradients.
#include "core/ops/dropout.h"

#include <doctest/doctest.h>

#include "core/autograd_memory.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

// The kept fraction of a dropout of ones, checking every value is 0 or `scale`.
double kept_fraction(const Tensor& y, double scale) {
  const std::vector<double> values = y.to_vector<double>();
  int64_t kept = 0, other = 0;
  for (double v : values) {
    if (v == scale)
      ++kept;
    else if (v != 0.0)
      ++other;
  }
  CHECK_MESSAGE(other == 0, other << " values are neither 0 nor " << scale);
  return static_cast<double>(kept) / static_cast<double>(values.size());
}

TEST_CASE("dropout keeps about 1 - p of 100k elements, each scaled by exactly 1 / (1 - p)") {
  Generator gen(7);
  const Tensor x = ones({100000});
  auto check_near = [](double kept, double expected, double tolerance) {
    CHECK(kept >= expected - tolerance);
    CHECK(kept <= expected + tolerance);
  };
  check_near(kept_fraction(dropout(x, 0.5, true, &gen), 2.0), 0.5, 0.01);
  check_near(kept_fraction(dropout(x, 0.2, true, &gen), 1.25), 0.8, 0.01);
  check_near(kept_fraction(dropout(ones({10000}, kF64), 0.9, true, &gen), 1.0 / (1.0 - 0.9)), 0.1,
             0.01);
}

TEST_CASE("dropout draws element i from lane i % 4 of Philox block offset + i / 4") {
  Generator gen(1234);
  gen.reserve(10);  // a non-zero starting offset
  const double p = 0.3;
  const Tensor x = randn({3, 7}, kF64, &gen);  // 21 elements: the last block is partial
  const uint64_t offset = gen.offset();
  const Tensor y = dropout(x, p, true, &gen);
  CHECK(gen.offset() == offset + 6);
  const std::vector<double> xs = x.to_vector<double>();
  std::vector<double> expected(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const uint32_t bits = philox(1234, offset + i / 4)[i % 4];
    expected[i] = uniform_float(bits) < p ? 0.0 : xs[i] / (1.0 - p);
  }
  CHECK_CLOSE(y, tensor(expected, {3, 7}, kF64), 1e-15, 0);
}

TEST_CASE("dropout: same seed, same mask; another seed or a later draw, another mask") {
  const Tensor x = ones({4096});
  Generator a(99), b(99), c(100);
  const Tensor first = dropout(x, 0.5, true, &a);
  CHECK_CLOSE(first, dropout(x, 0.5, true, &b), 0, 0);
  CHECK_FALSE(testing::close_report(first, dropout(x, 0.5, true, &c), 0, 0).empty());
  CHECK_FALSE(testing::close_report(first, dropout(x, 0.5, true, &a), 0, 0).empty());
  manual_seed(5);
  const Tensor from_default = dropout(x, 0.5, true);
  manual_seed(5);
  CHECK_CLOSE(from_default, dropout(x, 0.5, true), 0, 0);
}

TEST_CASE("dropout masks logical elements, whatever the layout") {
  Generator a(3), b(3);
  const Tensor x = randn({2, 3, 4, 5}, kF64, &a);
  b.set_state(a.seed(), a.offset());
  const Tensor channels_last = x.contiguous(MemoryFormat::ChannelsLast);
  CHECK_CLOSE(dropout(channels_last, 0.5, true, &a), dropout(x, 0.5, true, &b), 0, 0);
  const Tensor transposed = x.transpose(1, 3);
  b.set_state(a.seed(), a.offset());
  CHECK_CLOSE(dropout(transposed, 0.5, true, &a), dropout(transposed.contiguous(), 0.5, true, &b),
              0, 0);
}

TEST_CASE("dropout is the identity when not training or p == 0, and zeros when p == 1") {
  const Tensor x = randn({5, 6});
  CHECK(dropout(x, 0.5, false).is_same(x));
  CHECK(dropout(x, 0.0, true).is_same(x));
  CHECK_CLOSE(dropout(x, 1.0, true), zeros({5, 6}), 0, 0);
}

TEST_CASE("dropout backward multiplies dy by the forward's mask, drawn again, and keeps no mask") {
  Generator gen(8);
  Tensor x = randn({6, 5}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const Tensor dy = randn({6, 5}, kF64, &gen);
  const Tensor y = dropout(x, 0.3, true, &gen);
  dropout(ones({9}, kF64), 0.5, true, &gen);  // the generator moves on; the backward replays y's draws
  y.backward(dy);
  const std::vector<double> ys = y.to_vector<double>(), dys = dy.to_vector<double>();
  std::vector<double> expected(ys.size());
  for (size_t i = 0; i < ys.size(); ++i) expected[i] = ys[i] == 0.0 ? 0.0 : dys[i] / 0.7;
  CHECK_CLOSE(x.grad(), tensor(expected, {6, 5}, kF64), 1e-14, 0);
}

TEST_CASE("a dropout node keeps nothing for its backward") {
  Generator gen(10);
  const Tensor x = randn({64, 32}, {.requires_grad = true}, &gen);
  const Tensor loss = sum(dropout(x * 2.0, 0.3, true, &gen));  // x * 2: a tensor only dropout holds
  for (const SavedTensorBytes& row : release_saved_tensors(loss)) {
    CAPTURE(row.op);
    if (row.op == "dropout") CHECK(row.bytes == 0);
  }
}

TEST_CASE("dropout gradcheck with a fixed mask") {
  // The function re-seeds a local generator on every call, so each evaluation
  // drops the same elements.
  Generator gen(9);
  const Tensor x2 = randn({4, 5}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const Tensor x3 = randn({2, 3, 4}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& in) {
        Generator local(21);
        return dropout(in[0], 0.4, true, &local);
      },
      {x2});
  CHECK_MESSAGE(r.ok, r.message);
  r = gradcheck(
      [](const std::vector<Tensor>& in) {
        Generator local(22);
        return dropout(in[0].transpose(0, 2), 0.7, true, &local);
      },
      {x3});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("dropout rejects p outside [0, 1] and non-float inputs") {
  const Tensor x = ones({3});
  CHECK_THROWS_WITH_FRAGMENT(dropout(x, 1.5, true), ValueError,
                             "[dropout] probability p must be in [0, 1], got 1.5");
  CHECK_THROWS_WITH_FRAGMENT(dropout(x, -0.1, false), ValueError, "got -0.1");
  CHECK_THROWS_WITH_FRAGMENT(dropout(ones({3}, {.dtype = DType::Int64}), 0.5, true), TypeError,
                             "[dropout] input has dtype int64");
}

TEST_CASE("dropout2d zeroes whole channels, drawn as dropout draws an (N, C) mask") {
  Generator gen(31), twin(31);
  const Tensor x = randn({3, 5, 4, 6}, kF64, &gen);
  const Tensor y = dropout2d(x, 0.4, true, &twin);
  Generator replay(31);  // where twin started
  const Tensor scale = dropout(ones({3, 5}, kF64), 0.4, true, &replay);  // 0 or 1 / 0.6
  int64_t dropped = 0;
  for (int64_t n = 0; n < 3; ++n) {
    for (int64_t c = 0; c < 5; ++c) {
      const double s = scale.at({n, c});
      dropped += s == 0.0;
      CHECK_CLOSE(y.select(0, n).select(0, c), mul(x.select(0, n).select(0, c), s), 1e-15, 0);
    }
  }
  CHECK(dropped > 0);
  CHECK(dropped < 15);
  CHECK(twin.offset() == replay.offset());
}

TEST_CASE("dropout2d: identity cases, any layout, gradient through the channel mask") {
  const Tensor x = randn({2, 3, 4, 4}, {.dtype = DType::Float64, .requires_grad = true});
  CHECK(dropout2d(x, 0.5, false).is_same(x));
  CHECK(dropout2d(x, 0.0, true).is_same(x));
  CHECK(dropout2d(x.detach(), 1.0, true).to_vector<double>() == std::vector<double>(96, 0.0));
  Generator a(5), b(5);
  const Tensor nhwc = x.detach().contiguous(MemoryFormat::ChannelsLast);
  const Tensor y = dropout2d(nhwc, 0.5, true, &a);
  CHECK(y.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_CLOSE(y, dropout2d(x.detach(), 0.5, true, &b), 0, 0);
  GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& in) {
        Generator local(23);
        return dropout2d(in[0], 0.5, true, &local);
      },
      {x});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK_THROWS_WITH_FRAGMENT(dropout2d(ones({3, 4, 4}), 0.5, true), ShapeError,
                             "[dropout2d] x must be (N, C, H, W), got shape (3, 4, 4)");
  CHECK_THROWS_WITH_FRAGMENT(dropout2d(ones({1, 1, 1, 1}), 2.0, true), ValueError,
                             "[dropout2d] probability p must be in [0, 1], got 2");
}

}  // namespace
}  // namespace loom
