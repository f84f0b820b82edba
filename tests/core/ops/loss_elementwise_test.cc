// File: tests/core/ops/loss_elementwise_test.cc
// The elementwise losses beside mse_loss (l1_loss, smooth_l1_loss, huber_loss,
// binary_cross_entropy_with_logits, binary_cross_entropy, kl_div): hand values,
// naive per-element formulas on random strided inputs for every reduction,
// extreme logits, probabilities of 0 and 1, the gradient at the kinks,
// gradcheck, and argument errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
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
const TensorOptions kI64 = {.dtype = DType::Int64};
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

// -w [t log x + (1 - t) log(1 - x)], each log at least -100, as PyTorch's binary_cross_entropy.
double bce_of_probability(double x, double t, double weight = 1) {
  return -weight * (t * std::max(std::log(x), -100.0) + (1 - t) * std::max(std::log(1 - x), -100.0));
}

TEST_CASE("binary_cross_entropy matches the formula on strided probabilities, with a weight") {
  Generator gen(55);
  const Tensor x = (rand({4, 3, 5}, kF64, &gen) * 0.96 + 0.02).permute({0, 2, 1});  // (4, 5, 3), strided
  const Tensor t = rand({4, 5, 3}, kF64, &gen);
  const Tensor weight = rand({5, 1}, kF64, &gen) + 0.5;
  const std::vector<double> w = weight.to_vector<double>();
  for (Reduction reduction : kReductions) {
    CAPTURE(static_cast<int>(reduction));
    CHECK_CLOSE(binary_cross_entropy(x, t, {.reduction = reduction}),
                naive(x, t, reduction, [](double v, double target) { return bce_of_probability(v, target); }),
                1e-12, 1e-12);
    // Element i of the row-major (4, 5, 3) input has row (i / 3) % 5.
    const std::vector<double> xs = x.to_vector<double>(), ts = t.to_vector<double>();
    std::vector<double> expected(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) expected[i] = bce_of_probability(xs[i], ts[i], w[(i / 3) % 5]);
    const Tensor want = tensor(expected, {4, 5, 3}, kF64);
    const Tensor got = binary_cross_entropy(x, t, {.reduction = reduction, .weight = weight});
    CHECK_CLOSE(got, reduction == Reduction::None ? want : reduction == Reduction::Sum ? sum(want) : mean(want),
                1e-12, 1e-12);
  }
  // The probabilities of sigmoid(logits) give binary_cross_entropy_with_logits' loss.
  const Tensor logits = randn({6, 2}, kF64, &gen);
  const Tensor labels = rand({6, 2}, kF64, &gen);
  CHECK_CLOSE(binary_cross_entropy(sigmoid(logits), labels), binary_cross_entropy_with_logits(logits, labels),
              1e-12, 1e-12);
}

TEST_CASE("binary_cross_entropy at probabilities 0 and 1: the logs clamp at -100, the gradient stays finite") {
  const Tensor x = tensor({0, 1, 0, 1, 0.5}, {5}, kF64Grad), t = tensor({0, 1, 1, 0, 0.25}, {5}, kF64);
  const Tensor loss = binary_cross_entropy(x, t, {.reduction = Reduction::None});
  CHECK_CLOSE(loss, tensor({0, 0, 100, 100, std::log(2.0)}, {5}, kF64), 1e-15, 0);
  sum(loss).backward();
  // -t / x + (1 - t) / (1 - x), each term 0 where its log is clamped.
  CHECK_CLOSE(x.grad(), tensor({1, -1, 0, 0, 1}, {5}, kF64), 1e-15, 0);
  // A saturated fp32 sigmoid is exactly 1.
  Tensor logits = tensor({30.0f, -120.0f}, {2}).requires_grad_(true);
  const Tensor saturated =
      binary_cross_entropy(sigmoid(logits), tensor({0.0f, 1.0f}, {2}), {.reduction = Reduction::Sum});
  CHECK_CLOSE(saturated, tensor({200.0f}, {}), 0, 0);
  saturated.backward();
  CHECK(all(isfinite(logits.grad())).item());
}

TEST_CASE("binary_cross_entropy gradcheck w.r.t. probabilities, targets and the weight") {
  Generator gen(56);
  const Tensor x = (rand({3, 4}, kF64, &gen) * 0.8 + 0.1).requires_grad_(true);
  const Tensor t = rand({3, 4}, kF64, &gen).requires_grad_(true);
  const Tensor weight = (rand({4}, kF64, &gen) + 0.5).requires_grad_(true);
  for (Reduction reduction : kReductions) {
    CAPTURE(static_cast<int>(reduction));
    const GradcheckResult r = gradcheck(
        [reduction](const std::vector<Tensor>& in) {
          return binary_cross_entropy(in[0], in[1], {.reduction = reduction, .weight = in[2]});
        },
        {x, t, weight});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

// p (log p - q), 0 where p is 0, as torch.nn.functional.kl_div.
double kl_term(double q, double p) { return p == 0 ? -p * q : p * (std::log(p) - q); }

TEST_CASE("kl_div matches p (log p - q) for every reduction, BatchMean and log_target included") {
  Generator gen(57);
  const Tensor q = log_softmax(randn({5, 4, 3}, kF64, &gen), 1).transpose(1, 2);  // (5, 3, 4), strided
  Tensor p = softmax(randn({5, 3, 4}, kF64, &gen), 2);
  p = masked_fill(p, lt(rand({5, 3, 4}, kF64, &gen), 0.2), 0.0);  // some classes impossible
  for (Reduction reduction : kReductions) {
    CAPTURE(static_cast<int>(reduction));
    CHECK_CLOSE(kl_div(q, p, {.reduction = reduction}), naive(q, p, reduction, kl_term), 1e-12, 1e-12);
  }
  const Tensor total = naive(q, p, Reduction::Sum, kl_term);
  CHECK_CLOSE(kl_div(q, p, {.reduction = Reduction::BatchMean}), total / 5.0, 1e-12, 1e-12);
  // Every p > 0 here: log_target takes log p and gives the same losses.
  const Tensor positive = softmax(randn({5, 3, 4}, kF64, &gen), 2);
  for (Reduction reduction : {Reduction::None, Reduction::Mean, Reduction::Sum, Reduction::BatchMean}) {
    CAPTURE(static_cast<int>(reduction));
    CHECK_CLOSE(kl_div(q, log(positive), {.reduction = reduction, .log_target = true}),
                kl_div(q, positive, {.reduction = reduction}), 1e-12, 1e-12);
  }
  // KL(p || p) = 0, and a 0-D input's BatchMean is its sum.
  CHECK_CLOSE(kl_div(log(positive), positive, {.reduction = Reduction::BatchMean}), tensor({0.0}, {}, kF64), 0, 1e-15);
  const Tensor q0 = tensor({-1.5}, {}, kF64), p0 = tensor({0.25}, {}, kF64);
  CHECK_CLOSE(kl_div(q0, p0, {.reduction = Reduction::BatchMean}), tensor({kl_term(-1.5, 0.25)}, {}, kF64), 1e-15,
              0);
}

TEST_CASE("kl_div gradcheck w.r.t. input and target; a target of 0 gives a finite gradient") {
  Generator gen(58);
  const Tensor q = log_softmax(randn({3, 4}, kF64, &gen), 1).detach().requires_grad_(true);
  const Tensor p = softmax(randn({3, 4}, kF64, &gen), 1).detach().requires_grad_(true);
  for (bool log_target : {false, true}) {
    for (Reduction reduction : {Reduction::None, Reduction::Mean, Reduction::Sum, Reduction::BatchMean}) {
      CAPTURE(log_target);
      CAPTURE(static_cast<int>(reduction));
      const GradcheckResult r = gradcheck(
          [&](const std::vector<Tensor>& in) {
            return kl_div(in[0], log_target ? log(in[1]) : in[1], {.reduction = reduction, .log_target = log_target});
          },
          {q, p});
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
  Tensor target = tensor({0.0, 0.5, 0.5}, {3}, kF64Grad);
  Tensor input = tensor({-1.0, -0.5, -2.0}, {3}, kF64Grad);
  kl_div(input, target, {.reduction = Reduction::Sum}).backward();
  CHECK_CLOSE(input.grad(), tensor({0.0, -0.5, -0.5}, {3}, kF64), 0, 0);
  // d/dp p (log p - q) = log p + 1 - q; at p = 0 only -q is left (p log p has no slope there to take).
  CHECK_CLOSE(target.grad(), tensor({1.0, std::log(0.5) + 1.5, std::log(0.5) + 3.0}, {3}, kF64), 1e-15, 0);
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
  CHECK_THROWS_WITH_FRAGMENT(binary_cross_entropy(tensor({0.5, 1.5}, {1, 2}), zeros({1, 2})), ValueError,
                             "[binary_cross_entropy] input 1.5 at position (0, 1) is not a probability in [0, 1]");
  CHECK_THROWS_WITH_FRAGMENT(binary_cross_entropy(tensor({NAN}, {1}), zeros({1})), ValueError,
                             "[binary_cross_entropy] input nan at position");
  CHECK_THROWS_WITH_FRAGMENT(binary_cross_entropy(full({2}, 0.5), zeros({2}), {.weight = zeros({3})}), ShapeError,
                             "[binary_cross_entropy] shapes (3,) and (2,) cannot be broadcast");
  CHECK_THROWS_WITH_FRAGMENT(kl_div(zeros({2}), zeros({3})), ShapeError, "[kl_div] input has shape (2,)");
  // BatchMean is kl_div's alone.
  for (const auto& [op, loss] : std::vector<std::pair<std::string, std::function<Tensor()>>>{
           {"mse_loss", [] { return mse_loss(zeros({2}), zeros({2}), Reduction::BatchMean); }},
           {"binary_cross_entropy",
            [] { return binary_cross_entropy(zeros({2}), zeros({2}), {.reduction = Reduction::BatchMean}); }},
           {"cross_entropy",
            [] { return cross_entropy(zeros({2, 3}), zeros({2}, kI64), {.reduction = Reduction::BatchMean}); }},
           {"nll_loss", [] { return nll_loss(zeros({2, 3}), zeros({2}, kI64), {.reduction = Reduction::BatchMean}); }},
       }) {
    CAPTURE(op);
    CHECK_THROWS_WITH_FRAGMENT(loss(), ValueError,
                               "[" + op + "] reduction must be None, Mean or Sum, got 3 (BatchMean, which is kl_div's");
  }
}

}  // namespace
}  // namespace loom
