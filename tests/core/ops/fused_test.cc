// File: tests/core/ops/fused_test.cc
// The fused ops on the CPU: hand-computed cases, equality with the unfused
// composite (forward and every input gradient) over layouts and configs,
// float64 gradcheck, the fusion switch, and the argument errors.
//
// N batch, C channels, H, W input, K out channels, R, S filter.
#include "core/ops/fused.h"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kFloat64 = {.dtype = DType::Float64};

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor leaf(const Tensor& t) { return t.detach().clone().requires_grad_(true); }

// Runs `fused` and `composite` on separate leaves holding the same values,
// backpropagates one random gradient through both, and compares the output and
// every input's gradient. The two share their kernels, so they agree to rounding.
void check_matches_composite(const OpFn& fused, const OpFn& composite,
                             const std::vector<Tensor>& inputs, Generator& gen) {
  std::vector<Tensor> a, b;
  for (const Tensor& t : inputs) {
    a.push_back(t.defined() ? leaf(t) : Tensor());
    b.push_back(t.defined() ? leaf(t) : Tensor());
  }
  Tensor ya = fused(a), yb = composite(b);
  CHECK_CLOSE(ya, yb, 1e-6, 1e-6);
  Tensor dy = randn(yb.sizes(), {.dtype = yb.dtype()}, &gen);
  ya.backward(dy);
  yb.backward(dy);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    CAPTURE(i);
    REQUIRE(a[i].grad().defined());
    CHECK_CLOSE(a[i].grad(), b[i].grad(), 1e-6, 1e-6);
  }
}

void check_gradcheck(const OpFn& op, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.defined() ? leaf(t.to(DType::Float64)) : Tensor());
  GradcheckResult r = gradcheck(op, leaves);
  CHECK_MESSAGE(r.ok, r.message);
}

// x (N, C, H, W) in a layout: 0 contiguous, 1 channels-last, 2 a transposed view.
Tensor in_layout(const Tensor& x, int layout) {
  if (layout == 1) return x.contiguous(MemoryFormat::ChannelsLast);
  if (layout == 2) return x.transpose(2, 3).contiguous().transpose(2, 3);
  return x;
}

}  // namespace

// ---- conv2d_bias_relu and relu_conv2d ---------------------------------------------------

TEST_CASE("conv2d_bias_relu and relu_conv2d on a hand-computed 1x1 case") {
  Tensor x = tensor({1, -2, 3, -4}, {1, 1, 2, 2});
  Tensor w = tensor({2}, {1, 1, 1, 1}), b = tensor({-1}, {1});
  // conv: 2x - 1 = (1, -5, 5, -9); relu after: (1, 0, 5, 0)
  CHECK_CLOSE(conv2d_bias_relu(x, w, b), tensor({1, 0, 5, 0}, {1, 1, 2, 2}), 0, 0);
  // relu first: (1, 0, 3, 0); conv: (1, -1, 5, -1)
  CHECK_CLOSE(relu_conv2d(x, w, b), tensor({1, -1, 5, -1}, {1, 1, 2, 2}), 0, 0);
}

TEST_CASE("conv2d_bias_relu and relu_conv2d equal their composites, forward and backward") {
  Generator gen(7);
  const Conv2dOptions configs[] = {{}, {.stride = {2, 1}, .padding = {1, 2}},
                                   {.padding = {1, 1}, .dilation = {2, 1}, .groups = 2}};
  for (const Conv2dOptions& o : configs) {
    for (int layout : {0, 1, 2}) {
      for (bool with_bias : {true, false}) {
        CAPTURE(layout);
        CAPTURE(with_bias);
        CAPTURE(o.groups);
        Tensor x = in_layout(randn({2, 4, 7, 6}, {}, &gen), layout);
        Tensor w = randn({6, 4 / o.groups, 3, 3}, {}, &gen);
        Tensor b = with_bias ? randn({6}, {}, &gen) : Tensor();
        check_matches_composite([&](auto& in) { return conv2d_bias_relu(in[0], in[1], in[2], o); },
                                [&](auto& in) { return relu(conv2d(in[0], in[1], in[2], o)); },
                                {x, w, b}, gen);
        check_matches_composite([&](auto& in) { return relu_conv2d(in[0], in[1], in[2], o); },
                                [&](auto& in) { return conv2d(relu(in[0]), in[1], in[2], o); },
                                {x, w, b}, gen);
      }
    }
  }
}

TEST_CASE("conv2d_bias_relu keeps conv2d's output layout") {
  Generator gen(8);
  Tensor x = randn({2, 3, 5, 5}, {}, &gen).contiguous(MemoryFormat::ChannelsLast);
  Tensor w = randn({4, 3, 3, 3}, {}, &gen);
  CHECK(conv2d_bias_relu(x, w).is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(relu_conv2d(x, w).is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(conv2d_bias_relu(x.contiguous(), w).is_contiguous());
}

TEST_CASE("conv2d_bias_relu and relu_conv2d gradcheck") {
  Generator gen(9);
  const Conv2dOptions configs[] = {{.padding = {1, 1}}, {.stride = {2, 2}, .groups = 2}};
  for (const Conv2dOptions& o : configs) {
    Tensor x = randn({2, 2, 5, 4}, kFloat64, &gen), w = randn({2, 2 / o.groups, 3, 3}, kFloat64, &gen);
    Tensor b = randn({2}, kFloat64, &gen);
    check_gradcheck([&](auto& in) { return conv2d_bias_relu(in[0], in[1], in[2], o); }, {x, w, b});
    check_gradcheck([&](auto& in) { return relu_conv2d(in[0], in[1], in[2], o); }, {x, w, b});
  }
}

TEST_CASE("conv2d_bias_relu and relu_conv2d reject bad arguments with the values") {
  Tensor x = randn({1, 3, 5, 5}), w = randn({4, 2, 3, 3});
  CHECK_THROWS_WITH_FRAGMENT(conv2d_bias_relu(x, w), ShapeError,
                             "[conv2d] input has 3 channels but weight expects 2");
  CHECK_THROWS_WITH_FRAGMENT(relu_conv2d(x, randn({4, 3, 3, 3}), randn({5})), ShapeError,
                             "[conv2d] bias must have shape (4,)");
  CHECK_THROWS_WITH_FRAGMENT(conv2d_bias_relu(x, randn({4, 3, 7, 7})), ShapeError,
                             "gives an empty output (0x0)");
  CHECK_THROWS_WITH_FRAGMENT(conv2d_bias_relu(x, randn({4, 3, 3, 3}), Tensor(), {.stride = {0, 1}}),
                             ValueError, "stride must be positive, got (0, 1)");
  CHECK_THROWS_WITH_FRAGMENT(conv2d_bias_relu(x, randn({4, 3, 3, 3}, kFloat64)), TypeError,
                             "[conv2d]");
}

// ---- batch_norm_relu --------------------------------------------------------------------

TEST_CASE("batch_norm_relu on a hand-computed case, with and without a residual") {
  // One channel, values (1, 3): mean 2, biased var 1; eps 0 makes invstd exactly 1.
  Tensor x = tensor({1, 3}, {2, 1, 1, 1});
  Tensor rm = zeros({1}), rv = ones({1});
  Tensor y = batch_norm_relu(x, rm, rv, Tensor(), Tensor(), {.eps = 0.0});
  CHECK_CLOSE(y, tensor({0, 1}, {2, 1, 1, 1}), 0, 1e-7);  // relu(-1, 1)
  // running: 0.9 * 0 + 0.1 * 2 and 0.9 * 1 + 0.1 * 2 (the unbiased variance)
  CHECK_CLOSE(rm, tensor({0.2}, {1}), 1e-6, 0);
  CHECK_CLOSE(rv, tensor({1.1}, {1}), 1e-6, 0);
  Tensor z = tensor({2, -1.5}, {2, 1, 1, 1});
  Tensor yz = batch_norm_relu(x, Tensor(), Tensor(), Tensor(), Tensor(), {.eps = 0.0}, z);
  CHECK_CLOSE(yz, tensor({1, 0}, {2, 1, 1, 1}), 0, 1e-7);  // relu(-1 + 2, 1 - 1.5)
}

TEST_CASE("batch_norm_relu equals relu(batch_norm(...) + residual), forward, backward, running stats") {
  Generator gen(11);
  for (int layout : {0, 1, 2}) {
    for (bool training : {true, false}) {
      for (bool with_residual : {false, true}) {
        CAPTURE(layout);
        CAPTURE(training);
        CAPTURE(with_residual);
        Tensor x = in_layout(add(randn({3, 4, 5, 3}, {}, &gen), 0.3), layout);
        Tensor gamma = add(rand({4}, {}, &gen), 0.5), beta = randn({4}, {}, &gen);
        Tensor z = with_residual ? in_layout(randn({3, 4, 5, 3}, {}, &gen), 2 - layout) : Tensor();
        Tensor rm_a = randn({4}, {}, &gen), rv_a = add(rand({4}, {}, &gen), 0.5);
        Tensor rm_b = rm_a.clone(), rv_b = rv_a.clone();
        BatchNormOptions o{.training = training, .momentum = 0.2};
        check_matches_composite(
            [&](auto& in) { return batch_norm_relu(in[0], rm_a, rv_a, in[1], in[2], o, in[3]); },
            [&](auto& in) {
              Tensor y = batch_norm(in[0], rm_b, rv_b, in[1], in[2], o);
              return relu(in[3].defined() ? add(y, in[3]) : y);
            },
            {x, gamma, beta, z}, gen);
        CHECK_CLOSE(rm_a, rm_b, 1e-6, 1e-7);
        CHECK_CLOSE(rv_a, rv_b, 1e-6, 1e-7);
      }
    }
  }
}

TEST_CASE("batch_norm_relu writes running statistics given as strided views") {
  Generator gen(12);
  Tensor x = randn({4, 3, 2, 2}, {}, &gen);
  Tensor stats = zeros({3, 2});
  Tensor rm = stats.select(1, 0), rv = stats.select(1, 1);  // stride 2
  rv.fill_(1.0);
  Tensor rm_ref = zeros({3}), rv_ref = ones({3});
  batch_norm_relu(x, rm, rv, Tensor(), Tensor());
  batch_norm(x, rm_ref, rv_ref, Tensor(), Tensor());
  CHECK_CLOSE(rm, rm_ref, 1e-6, 1e-7);
  CHECK_CLOSE(rv, rv_ref, 1e-6, 1e-7);
}

TEST_CASE("batch_norm_relu gradcheck: affine or not, with a residual or not") {
  Generator gen(13);
  for (bool affine : {true, false}) {
    for (bool with_residual : {false, true}) {
      CAPTURE(affine);
      CAPTURE(with_residual);
      Tensor x = add(randn({3, 2, 3, 2}, kFloat64, &gen), 0.2);
      Tensor gamma = affine ? add(rand({2}, kFloat64, &gen), 0.5) : Tensor();
      Tensor beta = affine ? randn({2}, kFloat64, &gen) : Tensor();
      Tensor z = with_residual ? randn({3, 2, 3, 2}, kFloat64, &gen) : Tensor();
      check_gradcheck(
          [](auto& in) { return batch_norm_relu(in[0], Tensor(), Tensor(), in[1], in[2], {}, in[3]); },
          {x, gamma, beta, z});
    }
  }
}

TEST_CASE("batch_norm_relu rejects bad arguments with the values") {
  Tensor x = randn({2, 3, 4, 4});
  CHECK_THROWS_WITH_FRAGMENT(batch_norm_relu(x, Tensor(), Tensor(), ones({4}), Tensor()),
                             ShapeError, "[batch_norm_relu] weight has shape (4,) but input");
  CHECK_THROWS_WITH_FRAGMENT(
      batch_norm_relu(x, Tensor(), Tensor(), Tensor(), Tensor(), {}, randn({2, 3, 4, 5})),
      ShapeError, "residual has shape (2, 3, 4, 5) but input has (2, 3, 4, 4)");
  CHECK_THROWS_WITH_FRAGMENT(batch_norm_relu(x, zeros({3}), Tensor(), Tensor(), Tensor()),
                             ValueError, "only running_mean was given");
  CHECK_THROWS_WITH_FRAGMENT(batch_norm_relu(randn({1, 3, 1, 1}), Tensor(), Tensor(), Tensor(), Tensor()),
                             ValueError, "input size (1, 3, 1, 1)");
}

// ---- batch_norm_activation ----------------------------------------------------------------

// A draw's scalars for the rows that take some (the rest use their defaults).
std::vector<double> drawn_parameters(ActivationKind kind, Generator& gen) {
  const int count = kernel::parameter_count(kernel::activation_info(kind));
  if (count == 0) return {};
  const double a = rand({1}, kFloat64, &gen).item();
  if (count == 1) return {0.2 + a};
  return {-0.5 - a, 0.25 + a};  // Hardtanh's (min_val, max_val)
}

TEST_CASE("batch_norm_activation equals act(batch_norm(...) + residual) for every row, in every layout") {
  Generator gen(16);
  for (ActivationKind kind : kernel::kActivationKinds) {
    for (int layout : {0, 1, 2}) {
      for (bool with_residual : {false, true}) {
        CAPTURE(kernel::activation_info(kind).name);
        CAPTURE(layout);
        CAPTURE(with_residual);
        const std::vector<double> p = drawn_parameters(kind, gen);
        Tensor x = in_layout(add(randn({3, 4, 5, 3}, {}, &gen), 0.3), layout);
        // gammas up to 8.5: ReLU6's and Hardtanh's outputs reach both bounds
        Tensor gamma = add(mul(rand({4}, {}, &gen), 8.0), 0.5), beta = randn({4}, {}, &gen);
        Tensor z = with_residual ? in_layout(randn({3, 4, 5, 3}, {}, &gen), 2 - layout) : Tensor();
        Tensor rm_a = randn({4}, {}, &gen), rv_a = add(rand({4}, {}, &gen), 0.5);
        Tensor rm_b = rm_a.clone(), rv_b = rv_a.clone();
        BatchNormOptions o{.momentum = 0.2};
        check_matches_composite(
            [&](auto& in) { return batch_norm_activation(in[0], rm_a, rv_a, in[1], in[2], o, kind, p, in[3]); },
            [&](auto& in) {
              Tensor y = batch_norm(in[0], rm_b, rv_b, in[1], in[2], o);
              return activation(in[3].defined() ? add(y, in[3]) : y, kind, p);
            },
            {x, gamma, beta, z}, gen);
        CHECK_CLOSE(rm_a, rm_b, 1e-6, 1e-7);
        CHECK_CLOSE(rv_a, rv_b, 1e-6, 1e-7);
      }
    }
  }
}

TEST_CASE("batch_norm_activation gradcheck in float64: every row, NCHW and channels-last") {
  Generator gen(17);
  for (ActivationKind kind : kernel::kActivationKinds) {
    for (bool channels_last : {false, true}) {
      const bool with_residual = channels_last;
      CAPTURE(kernel::activation_info(kind).name);
      CAPTURE(channels_last);
      const std::vector<double> p = drawn_parameters(kind, gen);
      Tensor x = in_layout(add(randn({3, 2, 3, 2}, kFloat64, &gen), 0.2), channels_last ? 1 : 0);
      Tensor gamma = add(mul(rand({2}, kFloat64, &gen), 6.0), 0.5), beta = randn({2}, kFloat64, &gen);
      Tensor z = with_residual ? randn({3, 2, 3, 2}, kFloat64, &gen) : Tensor();
      check_gradcheck(
          [&](auto& in) { return batch_norm_activation(in[0], Tensor(), Tensor(), in[1], in[2], {}, kind, p, in[3]); },
          {x, gamma, beta, z});
    }
  }
}

// A residual block's output feeds the next block's convolution and its
// shortcut: autograd hands the norm's node both gradients, which its backward
// adds itself. One consumer reads y in NCHW whatever y's layout is.
TEST_CASE("batch_norm_activation whose output is used twice: gradcheck in float64, every row") {
  Generator gen(18);
  for (ActivationKind kind : kernel::kActivationKinds) {
    for (bool channels_last : {false, true}) {
      CAPTURE(kernel::activation_info(kind).name);
      CAPTURE(channels_last);
      const std::vector<double> p = drawn_parameters(kind, gen);
      Tensor x = in_layout(add(randn({3, 2, 3, 2}, kFloat64, &gen), 0.2), channels_last ? 1 : 0);
      Tensor gamma = add(mul(rand({2}, kFloat64, &gen), 6.0), 0.5), beta = randn({2}, kFloat64, &gen);
      Tensor z = randn({3, 2, 3, 2}, kFloat64, &gen);
      check_gradcheck(
          [&](auto& in) {
            Tensor y = batch_norm_activation(in[0], Tensor(), Tensor(), in[1], in[2], {}, kind, p, in[3]);
            return add(mul(y, 0.5), mul(y.contiguous(), in[3]));
          },
          {x, gamma, beta, z});
    }
  }
}

TEST_CASE("batch_norm_activation: ReLU6 by hand, and bad scalars named") {
  Tensor x = tensor({-4, 0, 4, 8}, {4, 1, 1, 1});  // mean 2, biased variance 20
  // 4 (x - 2) / sqrt(20) + 1, clipped to [0, 6]: both bounds and the linear part.
  Tensor y = batch_norm_activation(x, Tensor(), Tensor(), full({1}, 4.0), full({1}, 1.0), {.eps = 0.0},
                                   ActivationKind::Relu6);
  const double s = 1.0 / std::sqrt(20.0);
  CHECK_CLOSE(y, tensor({0, 0, 1 + 8 * s, 6}, {4, 1, 1, 1}), 1e-6, 1e-6);
  CHECK_THROWS_WITH_FRAGMENT(batch_norm_activation(x, Tensor(), Tensor(), Tensor(), Tensor(), {},
                                                   ActivationKind::Hardtanh, {1.0, -1.0}),
                             ValueError, "[batch_norm_activation] min_val (1) must be below max_val (-1)");
  CHECK_THROWS_WITH_FRAGMENT(batch_norm_activation(x, Tensor(), Tensor(), ones({2}), Tensor(), {},
                                                   ActivationKind::Silu),
                             ShapeError, "[batch_norm_activation] weight has shape (2,) but input");
}

// ---- linear_relu ------------------------------------------------------------------------

TEST_CASE("linear_relu on a hand-computed case") {
  Tensor x = tensor({1, -1}, {1, 2});
  Tensor w = tensor({1, 2, 3, -1}, {2, 2}), b = tensor({0, 1}, {2});
  // x . w^T + b = (1 - 2 + 0, 3 + 1 + 1) = (-1, 5)
  CHECK_CLOSE(linear_relu(x, w, b), tensor({0, 5}, {1, 2}), 0, 0);
}

TEST_CASE("linear_relu equals relu(linear(...)), forward and backward") {
  Generator gen(14);
  const Shape x_shapes[] = {{5, 7}, {2, 3, 7}, {7}};
  for (const Shape& xs : x_shapes) {
    for (bool with_bias : {true, false}) {
      CAPTURE(shape_str(xs));
      CAPTURE(with_bias);
      Tensor x = randn(xs, {}, &gen);
      Tensor w = randn({7, 4}, {}, &gen).t();  // a transposed (4, 7) weight
      Tensor b = with_bias ? randn({4}, {}, &gen) : Tensor();
      check_matches_composite([](auto& in) { return linear_relu(in[0], in[1], in[2]); },
                              [](auto& in) { return relu(linear(in[0], in[1], in[2])); }, {x, w, b},
                              gen);
    }
  }
}

TEST_CASE("linear_relu gradcheck") {
  Generator gen(15);
  for (const Shape& xs : {Shape{4, 3}, Shape{2, 2, 3}}) {
    Tensor x = randn(xs, kFloat64, &gen), w = randn({5, 3}, kFloat64, &gen), b = randn({5}, kFloat64, &gen);
    check_gradcheck([](auto& in) { return linear_relu(in[0], in[1], in[2]); }, {x, w, b});
  }
}

TEST_CASE("linear_relu rejects bad arguments with the values") {
  CHECK_THROWS_WITH_FRAGMENT(linear_relu(randn({2, 3}), randn({4, 5})), ShapeError,
                             "[linear] input of shape (2, 3) has 3 features");
  CHECK_THROWS_WITH_FRAGMENT(linear_relu(randn({2, 3}), randn({4, 3}), randn({3})), ShapeError,
                             "bias must have shape (4,)");
}

// ---- the switch -------------------------------------------------------------------------

TEST_CASE("FusionGuard turns fusion off for its scope; CPU results do not depend on it") {
  Generator gen(16);
  Tensor x = randn({2, 3, 4, 4}, {}, &gen), w = randn({2, 3, 3, 3}, {}, &gen);
  Tensor fused = conv2d_bias_relu(x, w);
  REQUIRE(fusion_enabled());
  {
    FusionGuard off(false);
    CHECK_FALSE(fusion_enabled());
    CHECK_CLOSE(conv2d_bias_relu(x, w), fused, 0, 0);
  }
  CHECK(fusion_enabled());
}

}  // namespace loom
