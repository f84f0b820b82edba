// File: tests/core/ops/norm_test.cc
// The norm family: batch_norm's hand-checked values and running-stat updates,
// direct mean/var formulas over a grid of modes, dtypes and layouts; layer,
// group and instance norm against per-row loops in float64 on random
// configurations; gradcheck, and PyTorch's argument checks.
// N batch, C channels, L elements per sample and channel, M = N * L.
#include "core/ops/norm.h"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/elementwise.h"
#include "core/ops/fused.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

constexpr DType kF64 = DType::Float64;

Tensor f64(const std::vector<double>& values, const Shape& sizes) {
  return tensor(values, sizes, {.dtype = kF64});
}

Tensor requiring_grad(Tensor t) {
  t.requires_grad_(true);
  return t;
}

// ---------------------------------------------------------------------------
// Naive reference: direct per-channel formulas over row-major values, x as (N, C, L).

struct NaiveBatchNorm {
  Tensor y;                                       // float64
  std::vector<double> running_mean, running_var;  // after the update (empty if untracked)
};

std::vector<double> values_or_empty(const Tensor& t) {
  return t.defined() ? t.to_vector<double>() : std::vector<double>{};
}

NaiveBatchNorm naive_batch_norm(const Tensor& x, const Tensor& running_mean,
                                const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                                const BatchNormOptions& o) {
  const std::vector<double> in = x.to_vector<double>();
  const std::vector<double> w = values_or_empty(weight), b = values_or_empty(bias);
  const int64_t N = x.size(0), C = x.size(1), L = x.numel() / (N * C);
  const double M = static_cast<double>(N * L);
  NaiveBatchNorm out{Tensor(), values_or_empty(running_mean), values_or_empty(running_var)};
  std::vector<double> y(in.size());
  for (int64_t c = 0; c < C; ++c) {
    auto at = [&](int64_t n, int64_t l) { return (n * C + c) * L + l; };
    double mean = 0, var = 0;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t l = 0; l < L; ++l) mean += in[at(n, l)] / M;
    }
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t l = 0; l < L; ++l) var += (in[at(n, l)] - mean) * (in[at(n, l)] - mean) / M;
    }
    if (!o.training) {
      mean = out.running_mean[c];
      var = out.running_var[c];
    } else if (!out.running_mean.empty()) {
      out.running_mean[c] = (1 - o.momentum) * out.running_mean[c] + o.momentum * mean;
      out.running_var[c] = (1 - o.momentum) * out.running_var[c] + o.momentum * var * M / (M - 1);
    }
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t l = 0; l < L; ++l) {
        double xhat = (in[at(n, l)] - mean) / std::sqrt(var + o.eps);
        y[at(n, l)] = xhat * (w.empty() ? 1.0 : w[c]) + (b.empty() ? 0.0 : b[c]);
      }
    }
  }
  out.y = tensor(y, x.sizes(), {.dtype = kF64});
  return out;
}

// Random inputs in several layouts; the op must accept any strides.
std::vector<std::pair<std::string, Tensor>> layouts(DType dtype, Generator& gen) {
  const TensorOptions options = {.dtype = dtype};
  return {
      {"2d", randn({6, 3}, options, &gen)},
      {"2d_transposed", randn({3, 6}, options, &gen).t()},
      {"nchw", randn({2, 3, 4, 5}, options, &gen) * 2.0 + 1.0},
      {"channels_last", randn({2, 3, 4, 5}, options, &gen).contiguous(MemoryFormat::ChannelsLast)},
      {"sliced", randn({2, 6, 4, 9}, options, &gen).slice(1, 0, 6, 2).slice(3, 2, 7)},
  };
}

struct Params {
  Tensor running_mean, running_var, weight, bias;
};

Params random_params(int64_t C, DType dtype, bool affine, bool tracked, Generator& gen) {
  const TensorOptions options = {.dtype = dtype};
  Params p;
  if (tracked) {
    p.running_mean = randn({C}, options, &gen);
    p.running_var = rand({C}, options, &gen) + 0.5;
  }
  if (affine) {
    p.weight = randn({C}, options, &gen);
    p.bias = randn({C}, options, &gen);
  }
  return p;
}

// ---------------------------------------------------------------------------
// Hand-checked cases. x (N=2, C=2): channel 0 is {1, 3} (mean 2, biased var 1,
// unbiased 2), channel 1 is {10, 20} (mean 15, biased var 25, unbiased 50).

const std::vector<double> kX = {1, 10, 3, 20};

TEST_CASE("batch_norm training: by hand, with the running-stat update") {
  Tensor x = tensor(kX, {2, 2});
  Tensor weight = tensor({2, 3}, {2});
  Tensor bias = tensor({0.5, -1}, {2});
  Tensor running_mean = zeros({2}), running_var = ones({2});
  Tensor y = batch_norm(x, running_mean, running_var, weight, bias, {.eps = 0.0});
  // xhat = [[-1, -1], [1, 1]]
  CHECK_CLOSE(y, tensor({-1.5, -4, 2.5, 2}, {2, 2}), 1e-6, 1e-6);
  // running = 0.9 * running + 0.1 * batch stat, with the unbiased variance
  CHECK_CLOSE(running_mean, tensor({0.2, 1.5}, {2}), 1e-6, 0);
  CHECK_CLOSE(running_var, tensor({1.1, 5.9}, {2}), 1e-6, 0);
  CHECK_FALSE(running_mean.requires_grad());
}

TEST_CASE("batch_norm training: momentum compounds over steps, by hand") {
  Tensor x = tensor(kX, {2, 2});
  Tensor running_mean = zeros({2}), running_var = zeros({2});
  const BatchNormOptions options = {.momentum = 0.5};
  batch_norm(x, running_mean, running_var, Tensor(), Tensor(), options);
  batch_norm(x, running_mean, running_var, Tensor(), Tensor(), options);
  // 0 -> 0.5 s -> 0.75 s for each batch statistic s
  CHECK_CLOSE(running_mean, tensor({1.5, 11.25}, {2}), 1e-6, 0);
  CHECK_CLOSE(running_var, tensor({1.5, 37.5}, {2}), 1e-6, 0);
}

TEST_CASE("batch_norm training backward: by hand") {
  Tensor x = requiring_grad(f64(kX, {2, 2}));
  Tensor weight = requiring_grad(f64({2, 3}, {2}));
  Tensor bias = requiring_grad(f64({0.5, -1}, {2}));
  Tensor y = batch_norm(x, Tensor(), Tensor(), weight, bias, {.eps = 0.0});
  y.backward(f64({1, 2, 3, 4}, {2, 2}));
  CHECK_CLOSE(bias.grad(), f64({4, 6}, {2}), 1e-12, 0);    // sum dy
  CHECK_CLOSE(weight.grad(), f64({2, 2}, {2}), 1e-12, 0);  // sum dy * xhat
  // Two samples normalize to exactly -1 and +1 whatever x is, so dx = 0.
  CHECK_CLOSE(x.grad(), f64({0, 0, 0, 0}, {2, 2}), 0, 1e-12);
}

TEST_CASE("batch_norm eval: running statistics, by hand, left unchanged") {
  Tensor x = requiring_grad(f64(kX, {2, 2}));
  Tensor weight = requiring_grad(f64({2, 3}, {2}));
  Tensor bias = requiring_grad(f64({0.5, -1}, {2}));
  Tensor running_mean = f64({1, 10}, {2});
  Tensor running_var = f64({4, 25}, {2});
  Tensor y =
      batch_norm(x, running_mean, running_var, weight, bias, {.training = false, .eps = 0.0});
  // xhat = [[0, 0], [1, 2]]
  CHECK_CLOSE(y, f64({0.5, -1, 2.5, 5}, {2, 2}), 1e-12, 0);
  CHECK_CLOSE(running_mean, f64({1, 10}, {2}), 0, 0);
  CHECK_CLOSE(running_var, f64({4, 25}, {2}), 0, 0);
  y.backward(f64({1, 2, 3, 4}, {2, 2}));
  CHECK_CLOSE(x.grad(), f64({1, 1.2, 3, 2.4}, {2, 2}), 1e-12, 0);  // dy * weight / sqrt(var)
  CHECK_CLOSE(weight.grad(), f64({3, 8}, {2}), 1e-12, 0);
  CHECK_CLOSE(bias.grad(), f64({4, 6}, {2}), 1e-12, 0);
}

// ---------------------------------------------------------------------------
// Against the naive formulas.

TEST_CASE("batch_norm matches direct mean/var formulas over modes, dtypes and layouts") {
  Generator gen(21);
  for (DType dtype : {DType::Float32, kF64}) {
    const double tol = dtype == kF64 ? 1e-10 : 1e-4;
    for (const auto& [layout, x] : layouts(dtype, gen)) {
      for (bool training : {true, false}) {
        for (bool affine : {true, false}) {
          for (bool tracked : {true, false}) {
            if (!training && !tracked) continue;  // eval needs running stats (error case below)
            CAPTURE(layout);
            INFO("dtype ", dtype_name(dtype), " training ", training, " affine ", affine,
                 " tracked ", tracked);
            Params p = random_params(x.size(1), dtype, affine, tracked, gen);
            const BatchNormOptions options = {.training = training, .momentum = 0.3};
            NaiveBatchNorm expected =
                naive_batch_norm(x, p.running_mean, p.running_var, p.weight, p.bias, options);
            Tensor y = batch_norm(x, p.running_mean, p.running_var, p.weight, p.bias, options);
            CHECK(y.dtype() == dtype);
            CHECK_CLOSE(y, expected.y, tol, tol);
            if (tracked) {
              CHECK_CLOSE(p.running_mean,
                          tensor(expected.running_mean, {x.size(1)}, {.dtype = kF64}), tol, tol);
              CHECK_CLOSE(p.running_var, tensor(expected.running_var, {x.size(1)}, {.dtype = kF64}),
                          tol, tol);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("batch_norm keeps a channels-last input channels-last") {
  Generator gen(2);
  Tensor x = randn({2, 3, 4, 5}, {}, &gen).contiguous(MemoryFormat::ChannelsLast);
  Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor());
  CHECK(y.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_FALSE(y.is_contiguous());
}

// ---------------------------------------------------------------------------
// Gradients w.r.t. x, weight and bias.

TEST_CASE("batch_norm gradcheck: training and eval, affine or not") {
  Generator gen(9);
  for (const auto& [layout, x] : layouts(kF64, gen)) {
    for (bool training : {true, false}) {
      for (bool affine : {true, false}) {
        CAPTURE(layout);
        INFO("training ", training, " affine ", affine);
        Params p = random_params(x.size(1), kF64, affine, /*tracked=*/!training || affine, gen);
        const BatchNormOptions options = {.training = training};
        std::vector<Tensor> inputs = {requiring_grad(x)};
        if (affine) {
          inputs.push_back(requiring_grad(p.weight));
          inputs.push_back(requiring_grad(p.bias));
        }
        GradcheckResult r = gradcheck(
            [&](const std::vector<Tensor>& in) {
              return affine
                         ? batch_norm(in[0], p.running_mean, p.running_var, in[1], in[2], options)
                         : batch_norm(in[0], p.running_mean, p.running_var, Tensor(), Tensor(),
                                      options);
            },
            inputs);
        CHECK_MESSAGE(r.ok, r.message);
      }
    }
  }
}

TEST_CASE("batch_norm gradcheck: weight alone or bias alone requiring grad") {
  Generator gen(10);
  Tensor x = randn({4, 3, 2, 2}, {.dtype = kF64}, &gen);
  Tensor weight = randn({3}, {.dtype = kF64}, &gen), bias = randn({3}, {.dtype = kF64}, &gen);
  GradcheckResult w_only = gradcheck(
      [&](const std::vector<Tensor>& in) { return batch_norm(x, Tensor(), Tensor(), in[0], bias); },
      {requiring_grad(weight.clone())});
  CHECK_MESSAGE(w_only.ok, w_only.message);
  GradcheckResult b_only = gradcheck(
      [&](const std::vector<Tensor>& in) {
        return batch_norm(x, Tensor(), Tensor(), weight, in[0]);
      },
      {requiring_grad(bias.clone())});
  CHECK_MESSAGE(b_only.ok, b_only.message);
}

// ---------------------------------------------------------------------------
// Bad arguments.

TEST_CASE("batch_norm rejects bad arguments like PyTorch, printing the values") {
  Tensor x = zeros({4, 3, 2, 2});
  Tensor c3 = ones({3});
  CHECK_THROWS_WITH_FRAGMENT(batch_norm(zeros({5}), Tensor(), Tensor(), Tensor(), Tensor()),
                             ShapeError,
                             "[batch_norm] expects input (N, C) or (N, C, H, W) but "
                             "got shape (5,)");
  CHECK_THROWS_WITH_FRAGMENT(batch_norm(x, Tensor(), Tensor(), ones({4}), Tensor()), ShapeError,
                             "[batch_norm] weight has shape (4,) but input (4, 3, 2, 2) has 3 "
                             "channels");
  CHECK_THROWS_WITH_FRAGMENT(batch_norm(x, c3, ones({3, 1}), Tensor(), Tensor()), ShapeError,
                             "running_var has shape (3, 1)");
  CHECK_THROWS_WITH_FRAGMENT(
      batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), {.training = false}), ValueError,
      "[batch_norm] eval mode (training = false) normalizes by running_mean and running_var");
  CHECK_THROWS_WITH_FRAGMENT(batch_norm(x, c3, Tensor(), Tensor(), Tensor()), ValueError,
                             "only running_mean was given");
  CHECK_THROWS_WITH_FRAGMENT(
      batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor()), ValueError,
      "[batch_norm] Expected more than 1 value per channel when training, got input size (1, 3)");
  CHECK_THROWS_WITH_FRAGMENT(
      batch_norm(zeros({1, 3, 1, 1}), c3, c3, Tensor(), Tensor()), ValueError,
      "Expected more than 1 value per channel when training, got input size (1, 3, 1, 1)");
  // One value per channel is fine in eval mode, as in PyTorch.
  CHECK(
      batch_norm(zeros({1, 3}), zeros({3}), c3, Tensor(), Tensor(), {.training = false}).sizes() ==
      Shape{1, 3});
  CHECK_THROWS_WITH_FRAGMENT(
      batch_norm(x, Tensor(), Tensor(), ones({3}, {.dtype = kF64}), Tensor()), TypeError,
      "[batch_norm]");
  CHECK_THROWS_WITH_FRAGMENT(
      batch_norm(zeros({4, 3}, {.dtype = DType::Int64}), Tensor(), Tensor(), Tensor(), Tensor()),
      TypeError, "[batch_norm]");
}

// An empty batch in training through `norm` (batch_norm, batch_norm_relu with a
// residual, instance_norm): an empty output of the input's shape and layout, the
// running statistics as they were, zero weight and bias gradients, as in PyTorch.
void check_empty_batch(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                  const Tensor&)>& norm,
                       const Shape& sizes, MemoryFormat format, bool affine) {
  CAPTURE(shape_str(sizes));
  CAPTURE(std::string(memory_format_name(format)));
  CAPTURE(affine);
  const int64_t c = sizes[1];
  Tensor x = zeros(sizes).contiguous(format).requires_grad_();
  Tensor running_mean = f64({0.5, -1, 2}, {3}).to(DType::Float32), running_var = full({c}, 2.0);
  Tensor weight = affine ? full({c}, 3.0, {.requires_grad = true}) : Tensor();
  Tensor bias = affine ? full({c}, -1.0, {.requires_grad = true}) : Tensor();
  const Tensor y = norm(x, running_mean, running_var, weight, bias);
  CHECK(y.sizes() == x.sizes());
  CHECK(y.impl() != x.impl());  // a new tensor, not the input handed back
  CHECK(running_mean.to_vector<double>() == std::vector<double>{0.5, -1, 2});
  CHECK(running_var.to_vector<double>() == std::vector<double>(3, 2.0));
  sum(y).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().sizes() == x.sizes());
  for (const Tensor& t : {weight, bias}) {
    if (!t.defined()) continue;
    REQUIRE(t.grad().defined());
    CHECK(t.grad().to_vector<double>() == std::vector<double>(3, 0.0));
  }
}

TEST_CASE("batch_norm, batch_norm_relu and instance_norm of an empty batch in training, as PyTorch") {
  const auto bn = [](const Tensor& x, const Tensor& m, const Tensor& v, const Tensor& w, const Tensor& b) {
    return batch_norm(x, m, v, w, b, {.training = true});
  };
  const auto bn_relu = [](const Tensor& x, const Tensor& m, const Tensor& v, const Tensor& w, const Tensor& b) {
    return batch_norm_relu(x, m, v, w, b, {.training = true}, zeros(x.sizes()));
  };
  const auto in = [](const Tensor& x, const Tensor& m, const Tensor& v, const Tensor& w, const Tensor& b) {
    return instance_norm(x, m, v, w, b, {.use_input_stats = true});
  };
  for (const bool affine : {true, false}) {
    for (const MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      check_empty_batch(bn, {0, 3, 4, 5}, format, affine);
      check_empty_batch(bn_relu, {0, 3, 4, 5}, format, affine);
      check_empty_batch(in, {0, 3, 4, 5}, format, affine);
    }
    check_empty_batch(bn, {0, 3}, MemoryFormat::Contiguous, affine);
    check_empty_batch(bn, {0, 3, 7}, MemoryFormat::Contiguous, affine);
  }
  // One value per channel is still refused; none is not one.
  CHECK_THROWS_AS(batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor()), ValueError);
}

// A per-sample loop in float64: the reference for layer_norm over the last `k` dims.
Tensor naive_layer_norm(const Tensor& x, int64_t k, const Tensor& w, const Tensor& b, double eps) {
  std::vector<double> v = x.to_vector<double>();
  const int64_t d = numel_of(Shape(x.sizes().end() - k, x.sizes().end()));
  std::vector<double> wv = w.defined() ? w.to_vector<double>() : std::vector<double>(d, 1.0);
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(d, 0.0);
  for (size_t start = 0; start < v.size(); start += d) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += v[start + i] / d;
    for (int64_t i = 0; i < d; ++i) var += (v[start + i] - mean) * (v[start + i] - mean) / d;
    for (int64_t i = 0; i < d; ++i) v[start + i] = (v[start + i] - mean) / std::sqrt(var + eps) * wv[i] + bv[i];
  }
  return tensor(v, x.sizes(), {.dtype = kF64});
}

TEST_CASE("layer_norm: by hand") {
  // (1, 3, 5): mean 3, biased variance 8/3.
  const Tensor y = layer_norm(f64({1, 3, 5}, {1, 3}), {3}, f64({1, 2, 1}, {3}), f64({0, 0, 1}, {3}), 0.0);
  const double s = std::sqrt(8.0 / 3);
  CHECK_CLOSE(y, f64({-2 / s, 0, 2 / s + 1}, {1, 3}), 1e-15, 1e-15);
}

TEST_CASE("layer_norm matches a per-sample loop: ranks, affine or not, strided and channels-last inputs") {
  Generator gen(31);
  const Tensor x = randn({2, 3, 4, 5}, {.dtype = kF64}, &gen);
  for (int64_t k : {1, 2, 3}) {
    const Shape shape(x.sizes().end() - k, x.sizes().end());
    const Tensor w = randn(shape, {.dtype = kF64}, &gen), b = randn(shape, {.dtype = kF64}, &gen);
    for (bool affine : {true, false}) {
      CAPTURE(k);
      CAPTURE(affine);
      const Tensor wa = affine ? w : Tensor(), ba = affine ? b : Tensor();
      const Tensor expected = naive_layer_norm(x, k, wa, ba, 1e-5);
      CHECK_CLOSE(layer_norm(x, shape, wa, ba), expected, 1e-12, 1e-12);
      CHECK_CLOSE(layer_norm(x.contiguous(MemoryFormat::ChannelsLast), shape, wa, ba), expected, 1e-12, 1e-12);
      CHECK_CLOSE(layer_norm(x.transpose(0, 1).transpose(0, 1), shape, wa, ba), expected, 1e-12, 1e-12);
    }
  }
}

TEST_CASE("layer_norm gradcheck: x, weight and bias") {
  Generator gen(32);
  const Tensor x = requiring_grad(randn({3, 2, 4}, {.dtype = kF64}, &gen));
  const Tensor w = requiring_grad(randn({2, 4}, {.dtype = kF64}, &gen));
  const Tensor b = requiring_grad(randn({2, 4}, {.dtype = kF64}, &gen));
  GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& in) { return layer_norm(in[0], {2, 4}, in[1], in[2]); }, {x, w, b});
  CHECK_MESSAGE(r.ok, r.message);
  r = gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {4}, Tensor(), Tensor()); }, {x});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("layer_norm rejects shapes that do not match") {
  const Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_FRAGMENT(layer_norm(x, {4}, Tensor(), Tensor()), ValueError,
                             "[layer_norm] input (2, 3) does not end in normalized_shape (4,)");
  CHECK_THROWS_WITH_FRAGMENT(layer_norm(x, {3}, zeros({2}), Tensor()), ValueError,
                             "[layer_norm] weight has shape (2,), expected normalized_shape (3,)");
  CHECK_THROWS_WITH_FRAGMENT(layer_norm(x, {3}, Tensor(), Tensor(), -1), ValueError, "eps must be non-negative");
}


// ---------------------------------------------------------------------------
// group_norm and instance_norm: a per-(sample, group) loop in float64 over x
// (N, C, L...) row-major; instance norm is the case groups = C.

Tensor naive_group_norm(const Tensor& x, int64_t groups, const Tensor& w, const Tensor& b, double eps) {
  std::vector<double> v = x.contiguous().to_vector<double>();
  const int64_t c = x.size(1), l = x.numel() / (x.size(0) * c), d = c / groups * l;
  std::vector<double> wv = w.defined() ? w.to_vector<double>() : std::vector<double>(c, 1.0);
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(c, 0.0);
  for (size_t start = 0; start < v.size(); start += d) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += v[start + i] / d;
    for (int64_t i = 0; i < d; ++i) var += (v[start + i] - mean) * (v[start + i] - mean) / d;
    for (int64_t i = 0; i < d; ++i) {
      const auto channel = static_cast<int64_t>((start + i) / l) % c;
      v[start + i] = (v[start + i] - mean) / std::sqrt(var + eps) * wv[channel] + bv[channel];
    }
  }
  return tensor(v, x.sizes(), {.dtype = kF64});
}

// A seeded random configuration: x (N, C, H, W) or (N, C, L) with C = groups *
// channels per group, odd sizes included.
struct GroupCase {
  Shape sizes;
  int64_t groups = 1;
  bool affine = true, channels_last = false;
};

GroupCase random_group_case(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return static_cast<int64_t>(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  GroupCase g;
  g.groups = pick(1, 4);
  const int64_t c = g.groups * pick(1, 3);
  g.sizes = pick(0, 1) ? Shape{pick(1, 3), c, pick(1, 5), pick(2, 5)} : Shape{pick(1, 3), c, pick(2, 7)};
  g.affine = pick(0, 2) > 0;
  g.channels_last = g.sizes.size() == 4 && pick(0, 1) == 1;
  return g;
}

TEST_CASE("group_norm and instance_norm match a per-group loop on random configurations") {
  std::mt19937 rng(36);
  Generator gen(36);
  for (int k = 0; k < 40; ++k) {
    const GroupCase g = random_group_case(rng);
    CAPTURE(k);
    CAPTURE(shape_str(g.sizes));
    CAPTURE(g.groups);
    const int64_t c = g.sizes[1];
    Tensor x = randn(g.sizes, {.dtype = kF64}, &gen);
    if (g.channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
    const Tensor w = g.affine ? randn({c}, {.dtype = kF64}, &gen) : Tensor();
    const Tensor b = g.affine ? randn({c}, {.dtype = kF64}, &gen) : Tensor();
    CHECK_CLOSE(group_norm(x, g.groups, w, b, 1e-5), naive_group_norm(x, g.groups, w, b, 1e-5), 1e-12, 1e-12);
    CHECK_CLOSE(instance_norm(x, Tensor(), Tensor(), w, b), naive_group_norm(x, c, w, b, 1e-5), 1e-12, 1e-12);
    CHECK(group_norm(x, g.groups, w, b).is_contiguous(g.channels_last ? MemoryFormat::ChannelsLast
                                                                      : MemoryFormat::Contiguous));
  }
}

TEST_CASE("group_norm and instance_norm gradcheck on random configurations: x, weight and bias") {
  std::mt19937 rng(37);
  Generator gen(37);
  for (int k = 0; k < 8; ++k) {
    const GroupCase g = random_group_case(rng);
    CAPTURE(k);
    CAPTURE(shape_str(g.sizes));
    const int64_t c = g.sizes[1], groups = g.groups;
    Tensor x = randn(g.sizes, {.dtype = kF64}, &gen);
    if (g.channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
    x.requires_grad_(true);
    const Tensor w = requiring_grad(randn({c}, {.dtype = kF64}, &gen));
    const Tensor b = requiring_grad(randn({c}, {.dtype = kF64}, &gen));
    GradcheckResult r = gradcheck(
        [groups](const std::vector<Tensor>& in) { return group_norm(in[0], groups, in[1], in[2]); }, {x, w, b});
    CHECK_MESSAGE(r.ok, r.message);
    r = gradcheck([](const std::vector<Tensor>& in) { return instance_norm(in[0], {}, {}, in[1], in[2]); },
                  {x, w, b});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("instance_norm: running statistics blend the instances' mean and unbiased var, eval uses them") {
  Generator gen(38);
  const Tensor x = randn({3, 2, 4, 5}, {.dtype = kF64}, &gen);
  Tensor running_mean = f64({0.5, -1}, {2}), running_var = f64({2, 3}, {2});
  const Tensor y = instance_norm(x, running_mean, running_var, {}, {}, {.momentum = 0.25});
  CHECK_CLOSE(y, naive_group_norm(x, 2, {}, {}, 1e-5), 1e-12, 1e-12);
  const std::vector<double> v = x.to_vector<double>();
  for (int64_t ch = 0; ch < 2; ++ch) {
    double mean_sum = 0, var_sum = 0;
    for (int64_t n = 0; n < 3; ++n) {
      const double* p = v.data() + (n * 2 + ch) * 20;
      double mean = 0, ss = 0;
      for (int i = 0; i < 20; ++i) mean += p[i] / 20;
      for (int i = 0; i < 20; ++i) ss += (p[i] - mean) * (p[i] - mean);
      mean_sum += mean / 3;
      var_sum += ss / 19 / 3;
    }
    CHECK(running_mean.to_vector<double>()[ch] ==
          doctest::Approx(0.75 * (ch == 0 ? 0.5 : -1.0) + 0.25 * mean_sum).epsilon(1e-12));
    CHECK(running_var.to_vector<double>()[ch] ==
          doctest::Approx(0.75 * (ch == 0 ? 2.0 : 3.0) + 0.25 * var_sum).epsilon(1e-12));
  }
  const Tensor w = f64({2, 3}, {2}), b = f64({-1, 1}, {2});
  CHECK_CLOSE(instance_norm(x, running_mean, running_var, w, b, {.use_input_stats = false}),
              batch_norm(x, running_mean, running_var, w, b, {.training = false}), 0, 0);
}

TEST_CASE("group_norm: by hand, on a 2-D input with one sample, as PyTorch allows") {
  // Groups (1, 3) and (5, 7): each mean +-1 around its mean, variance 1.
  CHECK_CLOSE(group_norm(f64({1, 3, 5, 7}, {1, 4}), 2, {}, {}, 0.0), f64({-1, 1, -1, 1}, {1, 4}), 1e-15, 1e-15);
  CHECK_CLOSE(group_norm(f64({1, 3, 5, 7}, {1, 4}), 2, f64({1, 2, 3, 4}, {4}), f64({0, 0, 0, 1}, {4}), 0.0),
              f64({-1, 2, -3, 5}, {1, 4}), 1e-15, 1e-15);
}

TEST_CASE("group_norm and instance_norm reject bad arguments, printing the values") {
  const Tensor x = zeros({2, 6, 3, 3});
  CHECK_THROWS_WITH_FRAGMENT(group_norm(x, 4), ValueError,
                             "[group_norm] Expected number of channels in input to be divisible by "
                             "num_groups, but got input of shape (2, 6, 3, 3) and num_groups=4");
  CHECK_THROWS_WITH_FRAGMENT(group_norm(x, 3, zeros({3})), ShapeError,
                             "[group_norm] weight has shape (3,) but input (2, 6, 3, 3) has 6 channels");
  CHECK_THROWS_WITH_FRAGMENT(group_norm(x, 3, {}, {}, -1), ValueError, "[group_norm] eps must be non-negative");
  CHECK_THROWS_WITH_FRAGMENT(instance_norm(zeros({2, 6, 1, 1})), ValueError,
                             "[instance_norm] Expected more than 1 spatial element when training");
  CHECK_THROWS_WITH_FRAGMENT(instance_norm(x, {}, {}, {}, {}, {.use_input_stats = false}), ValueError,
                             "[instance_norm] eval mode (training = false) normalizes by running_mean");
  CHECK_THROWS_WITH_FRAGMENT(instance_norm(x, zeros({6}), {}), ValueError,
                             "[instance_norm] running_mean and running_var must be given together");
}

}  // namespace
}  // namespace loom
