// File: tests/core/ops/loss_elementwise_test.cc
// The elementwise losses beside mse_loss (l1_loss, smooth_l1_loss, huber_loss,
// binary_cross_entropy_with_logits): hand values,
// naive per-element formulas on random strided inputs for every reduction,
// extreme logits, the gradient at the kinks, gradcheck, and argument errors.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/loss.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};
const TensorOptions kF64Grad = {.dtype = DType::Float64, .requires_grad = true};
constexpr Reduction kReductions[] = {Reduction::None, Reduction::Mean, Reduction::Sum};

using Elementwise = std::function<double(double input, double target)>;

// loss(input[i], target[i]) for every element, reduced as `reduction` says.
Tensor naive(const Tensor& input, const Tensor& target, Reduction reduction, const Elementwise& loss) {
  const std::vector<double> x = input.to_vector<double>(), t = target.to_vector<double>();
  std::vector<double> values(x.size());
  double total = 0;
  for (size_t i = 0; i < x.size(); ++i) total += values[i] = loss(x[i], t[i]);
  if (reduction == Reduction::None) return tensor(values, input.sizes(), kF64);
  return tensor({reduction == Reduction::Sum ? total : total / static_cast<double>(x.size())}, {}, kF64);
}

double smooth_l1(double d, double beta) {
  return std::abs(d) < beta ? 0.5 * d * d / beta : std::abs(d) - 0.5 * beta;
}

// -w [p t log s + (1 - t) log(1 - s)], s = sigmoid(x), as PyTorch's docs write it.
double bce(double x, double t, double pos_weight = 1, double weight = 1) {
  const double s = 1 / (1 + std::exp(-x));
  return -weight * (pos_weight * t * std::log(s) + (1 - t) * std::log(1 - s));
}

TEST_CASE("l1, smooth_l1 and huber losses by hand") {
  const Tensor input = tensor({0.0, 0.5, 3.0, -2.0}, {4}, kF64), target = tensor({0.0, 0.0, 1.0, 0.0}, {4}, kF64);
  // d = 0, 0.5, 2, -2
  CHECK_CLOSE(l1_loss(input, target, Reduction::None), tensor({0, 0.5, 2, 2}, {4}, kF64), 0, 0);
  CHECK_CLOSE(smooth_l1_loss(input, target, Reduction::None), tensor({0, 0.125, 1.5, 1.5}, {4}, kF64), 0, 0);
  CHECK_CLOSE(smooth_l1_loss(input, target, Reduction::None, 4.0), tensor({0, 0.03125, 0.5, 0.5}, {4}, kF64),
              1e-15, 0);
  CHECK_CLOSE(smooth_l1_loss(input, target, Reduction::None, 0.0), tensor({0, 0.5, 2, 2}, {4}, kF64), 0, 0);
  CHECK_CLOSE(huber_loss(input, target, Reduction::None, 0.25), tensor({0, 0.09375, 0.46875, 0.46875}, {4}, kF64),
              1e-15, 0);
  CHECK_CLOSE(huber_loss(input, target), tensor({(0.125 + 1.5 + 1.5) / 4}, {}, kF64), 1e-15, 0);
  CHECK_CLOSE(l1_loss(input, target, Reduction::Sum), tensor({4.5}, {}, kF64), 0, 0);
}

TEST_CASE("regression losses match naive formulas on strided inputs, every reduction") {
  Generator gen(51);
  const Tensor a = (randn({3, 4, 5}, kF64, &gen) * 2.0).transpose(0, 2);  // (5, 4, 3), strided
  const Tensor b = randn({5, 4, 3}, kF64, &gen);
  for (Reduction reduction : kReductions) {
    CAPTURE(static_cast<int>(reduction));
    CHECK_CLOSE(l1_loss(a, b, reduction), naive(a, b, reduction, [](double x, double t) { return std::abs(x - t); }),
                1e-12, 1e-12);
    for (double beta : {0.0, 0.3, 1.0, 2.5}) {
      CAPTURE(beta);
      const Tensor expected = naive(a, b, reduction, [beta](double x, double t) { return smooth_l1(x - t, beta); });
      CHECK_CLOSE(smooth_l1_loss(a, b, reduction, beta), expected, 1e-12, 1e-12);
      if (beta == 0) continue;
      const Tensor huber = naive(a, b, reduction, [beta](double x, double t) { return beta * smooth_l1(x - t, beta); });
      CHECK_CLOSE(huber_loss(a, b, reduction, beta), huber, 1e-12, 1e-12);
    }
  }
}

TEST_CASE("regression losses: gradcheck away from the kinks, and PyTorch's gradient at them") {
  Generator gen(52);
  const Tensor a = randn({3, 4}, kF64Grad, &gen), b = randn({3, 4}, kF64Grad, &gen);
  for (Reduction reduction : kReductions) {
    CAPTURE(static_cast<int>(reduction));
    const std::vector<std::function<Tensor(const std::vector<Tensor>&)>> losses = {
        [reduction](const std::vector<Tensor>& in) { return l1_loss(in[0], in[1], reduction); },
        [reduction](const std::vector<Tensor>& in) { return smooth_l1_loss(in[0], in[1], reduction, 0.7); },
        [reduction](const std::vector<Tensor>& in) { return smooth_l1_loss(in[0], in[1], reduction, 0.0); },
        [reduction](const std::vector<Tensor>& in) { return huber_loss(in[0], in[1], reduction, 1.3); },
    };
    for (const auto& loss : losses) {
      const GradcheckResult r = gradcheck(loss, {a, b});
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
  // d = 0: every one of them has gradient 0 there (sign(0) = 0 for l1, d / beta for the rest).
  Tensor x = tensor({1.5, -0.5}, {2}, kF64Grad);
  const Tensor t = tensor({1.5, -0.5}, {2}, kF64);
  for (const Tensor& loss : {l1_loss(x, t), smooth_l1_loss(x, t), smooth_l1_loss(x, t, Reduction::Mean, 0.0),
                             huber_loss(x, t)}) {
    x.set_grad(Tensor());
    loss.backward();
    CHECK_CLOSE(x.grad(), zeros({2}, kF64), 0, 0);
  }
}

TEST_CASE("binary_cross_entropy_with_logits matches -log sigmoid, with weights and pos_weight") {
  Generator gen(53);
  const Tensor x = (randn({4, 3, 5}, kF64, &gen) * 3.0).permute({0, 2, 1});  // (4, 5, 3), strided
  const Tensor t = rand({4, 5, 3}, kF64, &gen);
  const Tensor weight = rand({5, 1}, kF64, &gen) + 0.5, pos_weight = rand({3}, kF64, &gen) * 4.0;
  const std::vector<double> w = weight.to_vector<double>(), p = pos_weight.to_vector<double>();
  for (Reduction reduction : kReductions) {
    CAPTURE(static_cast<int>(reduction));
    CHECK_CLOSE(binary_cross_entropy_with_logits(x, t, {.reduction = reduction}),
                naive(x, t, reduction, [](double v, double target) { return bce(v, target); }), 1e-12, 1e-12);
    // Element i of the row-major (4, 5, 3) input has class i % 3 and row (i / 3) % 5.
    const std::vector<double> xs = x.to_vector<double>(), ts = t.to_vector<double>();
    std::vector<double> expected(xs.size());
    double total = 0;
    for (size_t i = 0; i < xs.size(); ++i) total += expected[i] = bce(xs[i], ts[i], p[i % 3], w[(i / 3) % 5]);
    const Tensor got = binary_cross_entropy_with_logits(
        x, t, {.reduction = reduction, .weight = weight, .pos_weight = pos_weight});
    const Tensor want = reduction == Reduction::None ? tensor(expected, {4, 5, 3}, kF64)
                        : reduction == Reduction::Sum ? tensor({total}, {}, kF64)
                                                      : tensor({total / 60}, {}, kF64);
    CHECK_CLOSE(got, want, 1e-12, 1e-12);
  }
}

TEST_CASE("binary_cross_entropy_with_logits stays finite and exact for extreme logits") {
  // log(1 + e^-100) = 3.7e-44: no probability is formed, so nothing rounds to 0 or 1 first.
  const Tensor x = tensor({100, -100, 100, -100, 0}, {5}, kF64Grad), t = tensor({1, 0, 0, 1, 0.25}, {5}, kF64);
  const Tensor loss = binary_cross_entropy_with_logits(x, t, {.reduction = Reduction::None});
  CHECK_CLOSE(loss, tensor({std::exp(-100.0), 0, 100, 100, std::log(2.0)}, {5}, kF64), 1e-12, 1e-40);
  sum(loss).backward();
  // sigmoid(x) - t; at x = 0 that is 0.5 - t exactly (no kink of abs or relu there).
  CHECK_CLOSE(x.grad(), tensor({-std::exp(-100.0), 0, 1, -1, 0.25}, {5}, kF64), 1e-12, 1e-40);

  const Tensor xf = tensor({90, -90, 0}, {3}), tf = tensor({1, 0, 1}, {3});
  CHECK_CLOSE(binary_cross_entropy_with_logits(xf, tf, {.reduction = Reduction::None}),
              tensor({0, 0, static_cast<float>(std::log(2.0))}, {3}), 1e-6, 1e-30);
}

TEST_CASE("binary_cross_entropy_with_logits gradcheck w.r.t. logits, targets and both weights") {
  Generator gen(54);
  const Tensor x = (randn({3, 4}, kF64, &gen) * 2.0).requires_grad_(true);
  const Tensor t = rand({3, 4}, kF64, &gen).requires_grad_(true);
  const Tensor weight = (rand({3, 1}, kF64, &gen) + 0.5).requires_grad_(true);
  const Tensor pos_weight = (rand({4}, kF64, &gen) + 0.5).requires_grad_(true);
  for (Reduction reduction : kReductions) {
    CAPTURE(static_cast<int>(reduction));
    const GradcheckResult plain = gradcheck(
        [reduction](const std::vector<Tensor>& in) {
          return binary_cross_entropy_with_logits(in[0], in[1], {.reduction = reduction});
        },
        {x, t});
    CHECK_MESSAGE(plain.ok, plain.message);
    const GradcheckResult weighted = gradcheck(
        [reduction](const std::vector<Tensor>& in) {
          return binary_cross_entropy_with_logits(in[0], in[1],
                                                  {.reduction = reduction, .weight = in[2], .pos_weight = in[3]});
        },
        {x, t, weight, pos_weight});
    CHECK_MESSAGE(weighted.ok, weighted.message);
  }
}

TEST_CASE("elementwise losses name the op and the operand that does not fit") {
  CHECK_THROWS_WITH_FRAGMENT(l1_loss(zeros({2, 3}), zeros({3, 2})), ShapeError,
                             "[l1_loss] input has shape (2, 3) but target has shape (3, 2)");
  CHECK_THROWS_WITH_FRAGMENT(huber_loss(zeros({2}), zeros({2}, kF64)), TypeError,
                             "[huber_loss] operands have different dtypes, float32");
  CHECK_THROWS_WITH_FRAGMENT(smooth_l1_loss(zeros({2}), zeros({2}), Reduction::Mean, -0.5), ValueError,
                             "[smooth_l1_loss] beta must be >= 0, got -0.5");
  CHECK_THROWS_WITH_FRAGMENT(l1_loss(zeros({2}, {.dtype = DType::Int64}), zeros({2}, {.dtype = DType::Int64})),
                             TypeError, "[l1_loss] input has dtype int64");
  CHECK_THROWS_WITH_FRAGMENT(binary_cross_entropy_with_logits(zeros({4, 3}), zeros({4, 3}), {.pos_weight = zeros({4})}),
                             ShapeError, "[binary_cross_entropy_with_logits]");
  CHECK_THROWS_WITH_FRAGMENT(
      binary_cross_entropy_with_logits(zeros({4, 3}), zeros({4, 3}), {.weight = zeros({2, 4, 3})}), ShapeError,
      "[binary_cross_entropy_with_logits] weight of shape (2, 4, 3) does not broadcast to the input's shape (4, 3)");
  CHECK_THROWS_WITH_FRAGMENT(
      binary_cross_entropy_with_logits(zeros({4, 3}), zeros({4, 3}), {.weight = zeros({3}, kF64)}), TypeError,
      "[binary_cross_entropy_with_logits] operands have different dtypes");
}

}  // namespace
}  // namespace loom
