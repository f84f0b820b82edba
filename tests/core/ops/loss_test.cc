// File: tests/core/ops/loss_test.cc
// cross_entropy, nll_loss and mse_loss: hand values, naive log-sum-exp loops on
// random inputs for every reduction (with ignore_index and label smoothing, 2-D
// and 4-D; class indices and class probabilities; one sample's scores),
// gradcheck, and argument errors.
#include "core/ops/loss.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/reduction.h"
#include "core/ops/softmax.h"
#include "tests/testing.h"

namespace loom {
namespace {

// N batch, C classes, S positions per sample (the product of the spatial dims).
const TensorOptions kF64 = {.dtype = DType::Float64};
const TensorOptions kI64 = {.dtype = DType::Int64};
constexpr Reduction kReductions[] = {Reduction::None, Reduction::Mean, Reduction::Sum};

// Per-position losses of scores (N, C, d1...), as PyTorch defines them, with
// the reduction applied at the end.
struct NaiveLosses {
  std::vector<double> values;  // (N, d1...), 0 where ignored
  Shape sizes;
  double sum = 0.0;
  int64_t count = 0;

  Tensor reduced(Reduction reduction) const {
    if (reduction == Reduction::None) return tensor(values, sizes, kF64);
    const double total = reduction == Reduction::Sum ? sum : sum / static_cast<double>(count);
    return tensor({total}, {}, kF64);
  }
};

// The `classes` values of position s of sample n in the row-major values x of a
// (N, C, d1...) tensor with `positions` positions per sample.
std::vector<double> class_row(const std::vector<double>& x, int64_t classes, int64_t positions, int64_t n,
                              int64_t s) {
  std::vector<double> row(classes);
  for (int64_t c = 0; c < classes; ++c) row[c] = x[(n * classes + c) * positions + s];
  return row;
}

// log sum_c exp(row[c]), shifted by the maximum: -log p[c] = log_sum_exp - row[c].
double log_sum_exp(const std::vector<double>& row) {
  double max = -std::numeric_limits<double>::infinity(), total = 0.0;
  for (double v : row) max = std::max(max, v);
  for (double v : row) total += std::exp(v - max);
  return max + std::log(total);
}

// loss(scores of one position, target class) for every non-ignored position.
template <class LossFn>
NaiveLosses naive_losses(const Tensor& scores, const Tensor& target, int64_t ignore_index,
                         LossFn&& loss_of) {
  const std::vector<double> x = scores.to_vector<double>();
  const std::vector<int64_t> t = target.to_vector<int64_t>();
  const int64_t n_batch = scores.size(0), classes = scores.size(1);
  const int64_t positions = scores.numel() / (n_batch * classes);
  NaiveLosses out{std::vector<double>(t.size(), 0.0), target.sizes()};
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t s = 0; s < positions; ++s) {
      const int64_t target_class = t[n * positions + s];
      if (target_class == ignore_index) continue;
      const double loss = loss_of(class_row(x, classes, positions, n, s), target_class);
      out.values[n * positions + s] = loss;
      out.sum += loss;
      ++out.count;
    }
  }
  return out;
}

NaiveLosses naive_cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                double eps) {
  return naive_losses(
      logits, target, ignore_index, [eps](const std::vector<double>& row, int64_t t) {
        double mean_logit = 0.0;
        for (double v : row) mean_logit += v / static_cast<double>(row.size());
        const double lse = log_sum_exp(row);
        return (1.0 - eps) * (lse - row[t]) + eps * (lse - mean_logit);
      });
}

NaiveLosses naive_nll(const Tensor& log_probs, const Tensor& target, int64_t ignore_index) {
  return naive_losses(log_probs, target, ignore_index,
                      [](const std::vector<double>& row, int64_t t) { return -row[t]; });
}

// Random class indices in [0, classes) with every third position set to `ignore_index`.
Tensor random_targets(const Shape& sizes, int64_t classes, int64_t ignore_index, Generator& gen) {
  std::vector<double> t = randint(0, classes, sizes, kI64, &gen).to_vector<double>();
  for (size_t i = 0; i < t.size(); i += 3) t[i] = static_cast<double>(ignore_index);
  return tensor(t, sizes, kI64);
}

// ---------------------------------------------------------------------------
// cross_entropy

TEST_CASE("cross_entropy on a 2x3 case by hand") {
  // Row 0: uniform logits, loss log 3. Row 1: lse(1, 2, 3) - 3 = 0.40760596...
  Tensor logits =
      tensor({0, 0, 0, 1, 2, 3}, {2, 3}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor target = tensor({1, 2}, {2}, kI64);
  const double row0 = std::log(3.0), row1 = 0.4076059644443806;
  CHECK_CLOSE(cross_entropy(logits, target, {.reduction = Reduction::None}),
              tensor({row0, row1}, {2}, kF64), 1e-12, 0);
  CHECK_CLOSE(cross_entropy(logits, target, {.reduction = Reduction::Sum}),
              tensor({row0 + row1}, {}, kF64), 1e-12, 0);
  const Tensor loss = cross_entropy(logits, target);
  CHECK_CLOSE(loss, tensor({(row0 + row1) / 2}, {}, kF64), 1e-12, 0);

  // Mean: (softmax - one-hot) / N.
  loss.backward();
  const double p0 = 0.09003057317038046, p1 = 0.24472847105479764, p2 = 0.6652409557748219;
  CHECK_CLOSE(logits.grad(),
              tensor({1.0 / 6, -1.0 / 3, 1.0 / 6, p0 / 2, p1 / 2, (p2 - 1) / 2}, {2, 3}, kF64),
              1e-12, 1e-15);

  // Ignoring row 0 leaves row 1 alone, and the mean divides by 1 target.
  const Tensor ignored = tensor({-100, 2}, {2}, kI64);
  CHECK_CLOSE(cross_entropy(logits, ignored), tensor({row1}, {}, kF64), 1e-12, 0);
  CHECK_CLOSE(cross_entropy(logits, ignored, {.reduction = Reduction::None}),
              tensor({0.0, row1}, {2}, kF64), 1e-12, 0);

  // Smoothing 0.3: row 0 is unchanged (every -log p is log 3); in row 1 the mean
  // -log p is lse - 2, one more than the NLL, so the loss grows by 0.3.
  CHECK_CLOSE(cross_entropy(logits, target, {.reduction = Reduction::None, .label_smoothing = 0.3}),
              tensor({row0, row1 + 0.3}, {2}, kF64), 1e-12, 0);
}

TEST_CASE("cross_entropy matches naive loops: reductions, ignore_index, smoothing") {
  Generator gen(21);
  const int64_t ignore = -100;
  const Tensor logits2 = randn({7, 5}, kF64, &gen) * 3.0;
  const Tensor target2 = random_targets({7}, 5, ignore, gen);
  const Tensor logits4 = randn({2, 4, 3, 5}, kF64, &gen) * 3.0;  // (N, C, H, W)
  const Tensor target4 = random_targets({2, 3, 5}, 4, ignore, gen);
  for (double eps : {0.0, 0.1, 1.0}) {
    const NaiveLosses naive2 = naive_cross_entropy(logits2, target2, ignore, eps);
    const NaiveLosses naive4 = naive_cross_entropy(logits4, target4, ignore, eps);
    for (Reduction reduction : kReductions) {
      CAPTURE(eps);
      CAPTURE(static_cast<int>(reduction));
      const CrossEntropyOptions options{.reduction = reduction, .label_smoothing = eps};
      CHECK_CLOSE(cross_entropy(logits2, target2, options), naive2.reduced(reduction), 1e-12,
                  1e-12);
      CHECK_CLOSE(cross_entropy(logits4, target4, options), naive4.reduced(reduction), 1e-12,
                  1e-12);
    }
  }
}

TEST_CASE("cross_entropy with an in-range ignore_index, float32 and strided inputs") {
  Generator gen(22);
  // ignore_index 1 is also a class: its targets drop out of the loss and the mean.
  const Tensor logits = randn({4, 3, 2, 3}, kF64, &gen).contiguous(MemoryFormat::ChannelsLast);
  const Tensor target = randint(0, 3, {4, 3, 2}, kI64, &gen).transpose(1, 2);  // (N, H, W), strided
  REQUIRE(!target.is_contiguous());
  const NaiveLosses naive = naive_cross_entropy(logits, target, 1, 0.2);
  REQUIRE(naive.count < target.numel());
  for (Reduction reduction : kReductions) {
    const CrossEntropyOptions options{
        .reduction = reduction, .ignore_index = 1, .label_smoothing = 0.2};
    CHECK_CLOSE(cross_entropy(logits, target, options), naive.reduced(reduction), 1e-12, 1e-12);
    CHECK_CLOSE(cross_entropy(logits.to(DType::Float32), target, options), naive.reduced(reduction),
                1e-5, 1e-5);
  }
  // (C, N) transposed to (N, C).
  const Tensor transposed = randn({6, 5}, kF64, &gen).t();
  const Tensor target2 = randint(0, 6, {5}, kI64, &gen);
  CHECK_CLOSE(cross_entropy(transposed, target2),
              naive_cross_entropy(transposed, target2, -100, 0).reduced(Reduction::Mean), 1e-12, 0);
}

TEST_CASE("cross_entropy with every target ignored: the mean is NaN, the gradient zero") {
  Tensor logits = randn({3, 4}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor target = full({3}, -100, kI64);
  const Tensor loss = cross_entropy(logits, target);
  CHECK(std::isnan(loss.item()));
  CHECK(cross_entropy(logits, target, {.reduction = Reduction::Sum}).item() == 0.0);
  loss.backward();
  CHECK_CLOSE(logits.grad(), zeros({3, 4}, kF64), 0, 0);
}

TEST_CASE("cross_entropy gradcheck w.r.t. logits: reductions, smoothing, 2-D and 4-D") {
  Generator gen(23);
  const Tensor logits2 = randn({5, 4}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const Tensor target2 = random_targets({5}, 4, -100, gen);
  const Tensor logits4 =
      randn({2, 3, 2, 2}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const Tensor target4 = random_targets({2, 2, 2}, 3, -100, gen);
  for (double eps : {0.0, 0.25}) {
    for (Reduction reduction : kReductions) {
      CAPTURE(eps);
      CAPTURE(static_cast<int>(reduction));
      const CrossEntropyOptions options{.reduction = reduction, .label_smoothing = eps};
      GradcheckResult r = gradcheck(
          [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], target2, options); },
          {logits2});
      CHECK_MESSAGE(r.ok, r.message);
      r = gradcheck(
          [&](const std::vector<Tensor>& in) {
            return cross_entropy(in[0].contiguous(MemoryFormat::ChannelsLast), target4, options);
          },
          {logits4});
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
}

// -sum_c target'[c] log p[c] at each position of logits (N, C, d1...), with
// target' = (1 - eps) target + eps / C, as PyTorch defines it: (N, d1...).
Tensor naive_probability_losses(const Tensor& logits, const Tensor& probabilities, double eps) {
  const std::vector<double> x = logits.to_vector<double>(), q = probabilities.to_vector<double>();
  const int64_t n_batch = logits.size(0), classes = logits.size(1);
  const int64_t positions = logits.numel() / (n_batch * classes);
  std::vector<double> losses(n_batch * positions, 0.0);
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t s = 0; s < positions; ++s) {
      const std::vector<double> row = class_row(x, classes, positions, n, s);
      const std::vector<double> target = class_row(q, classes, positions, n, s);
      const double lse = log_sum_exp(row);
      for (int64_t c = 0; c < classes; ++c) {
        const double smoothed = (1.0 - eps) * target[c] + eps / static_cast<double>(classes);
        losses[n * positions + s] += smoothed * (lse - row[c]);
      }
    }
  }
  Shape sizes = logits.sizes();
  sizes.erase(sizes.begin() + 1);
  return tensor(losses, sizes, kF64);
}

TEST_CASE("cross_entropy with class probabilities: a naive loop, and one-hot rows give the class indices' losses") {
  Generator gen(41);
  for (const Shape& sizes : {Shape{6, 5}, Shape{2, 4, 3, 2}}) {
    CAPTURE(sizes.size());
    const Tensor logits = randn(sizes, kF64, &gen).contiguous(sizes.size() == 4 ? MemoryFormat::ChannelsLast
                                                                                 : MemoryFormat::Contiguous);
    const Tensor probabilities = softmax(randn(sizes, kF64, &gen), 1);
    Shape label_sizes = sizes;
    label_sizes.erase(label_sizes.begin() + 1);
    const Tensor labels = randint(0, sizes[1], label_sizes, kI64, &gen);
    // one_hot puts the classes last: move them to dim 1, as the logits have them.
    Tensor rows = one_hot(labels, sizes[1]).to(DType::Float64);
    if (sizes.size() == 4) rows = rows.permute({0, 3, 1, 2});
    for (double eps : {0.0, 0.2}) {
      CAPTURE(eps);
      const Tensor naive = naive_probability_losses(logits, probabilities, eps);
      const double positions = static_cast<double>(naive.numel());
      CHECK_CLOSE(cross_entropy(logits, probabilities, {.reduction = Reduction::None, .label_smoothing = eps}),
                  naive, 1e-12, 1e-12);
      CHECK_CLOSE(cross_entropy(logits, probabilities, {.reduction = Reduction::Sum, .label_smoothing = eps}),
                  sum(naive), 1e-12, 1e-12);
      CHECK_CLOSE(cross_entropy(logits, probabilities, {.label_smoothing = eps}), sum(naive) / positions, 1e-12,
                  1e-12);
      for (Reduction reduction : kReductions) {
        const CrossEntropyOptions options{.reduction = reduction, .label_smoothing = eps};
        CHECK_CLOSE(cross_entropy(logits, rows, options), cross_entropy(logits, labels, options), 1e-12, 1e-12);
      }
    }
  }
}

TEST_CASE("cross_entropy with class probabilities: gradcheck w.r.t. logits and target, dtypes, no positions") {
  Generator gen(42);
  const Tensor logits = randn({2, 3, 2, 2}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const Tensor target = softmax(randn({2, 3, 2, 2}, kF64, &gen), 1).requires_grad_();
  for (double eps : {0.0, 0.25}) {
    for (Reduction reduction : kReductions) {
      CAPTURE(eps);
      CAPTURE(static_cast<int>(reduction));
      const CrossEntropyOptions options{.reduction = reduction, .label_smoothing = eps};
      const GradcheckResult r = gradcheck(
          [&](const std::vector<Tensor>& in) {
            return cross_entropy(in[0].contiguous(MemoryFormat::ChannelsLast), in[1], options);
          },
          {logits, target});
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
  const Tensor logits64 = randn({4, 6}, kF64, &gen), soft32 = softmax(randn({4, 6}, {}, &gen), 1);
  const Tensor mixed = cross_entropy(logits64, soft32);  // the target computes in the logits' dtype
  CHECK(mixed.dtype() == DType::Float64);
  CHECK_CLOSE(mixed, cross_entropy(logits64, soft32.to(DType::Float64)), 0, 0);
  CHECK(std::isnan(cross_entropy(zeros({0, 3}), zeros({0, 3})).item()));  // the mean of no positions
}

TEST_CASE("one sample's scores (C) take a 0-D class index, or (C) probabilities, as a batch of one") {
  Generator gen(43);
  const Tensor logits = randn({5}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const Tensor label = full({}, 3.0, kI64);
  const Tensor probabilities = softmax(randn({5}, kF64, &gen), 0);
  for (Reduction reduction : kReductions) {
    CAPTURE(static_cast<int>(reduction));
    const CrossEntropyOptions options{.reduction = reduction, .label_smoothing = 0.1};
    for (const Tensor& target : {label, probabilities}) {
      const Tensor one = cross_entropy(logits, target, options);
      CHECK(one.dim() == 0);
      CHECK_CLOSE(one, cross_entropy(logits.unsqueeze(0), target.unsqueeze(0), options).reshape({}), 0, 0);
    }
    const Tensor nll = nll_loss(log_softmax(logits, 0), label, {.reduction = reduction});
    CHECK(nll.dim() == 0);
    CHECK_CLOSE(nll, cross_entropy(logits, label, {.reduction = reduction}), 1e-12, 1e-12);
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], label, options); }, {logits});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("cross_entropy rejects bad targets and options") {
  const Tensor logits = zeros({4, 10});
  CHECK_THROWS_WITH_FRAGMENT(
      cross_entropy(logits, tensor({1, 2, 3, 12}, {4}, kI64)), IndexError,
      "[cross_entropy] target 12 at position 3 is out of range for 10 classes");
  CHECK_THROWS_WITH_FRAGMENT(
      cross_entropy(zeros({2, 3, 2, 2}), tensor({0, 1, 2, 0, 1, 2, -1, 0}, {2, 2, 2}, kI64)),
      IndexError, "target -1 at position (1, 1, 0) is out of range for 3 classes");
  CHECK_THROWS_WITH_FRAGMENT(
      cross_entropy(logits, zeros({4})), TypeError,
      "[cross_entropy] target must hold class indices as int64, got float32");
  CHECK_THROWS_WITH_FRAGMENT(
      cross_entropy(logits, zeros({3}, kI64)), ShapeError,
      "target has shape (3,) but logits of shape (4, 10) need a target of shape (4,)");
  CHECK_THROWS_WITH_FRAGMENT(cross_entropy(zeros({2, 3, 4, 4}), zeros({2, 4, 5}, kI64)), ShapeError,
                             "need a target of shape (2, 4, 4)");
  CHECK_THROWS_WITH_FRAGMENT(
      cross_entropy(zeros({}), zeros({}, kI64)), ShapeError,
      "[cross_entropy] logits must be (C), (N, C) or (N, C, d1, ...), got shape ()");
  CHECK_THROWS_WITH_FRAGMENT(cross_entropy(logits, zeros({4}, kI64), {.label_smoothing = 1.5}),
                             ValueError,
                             "[cross_entropy] label_smoothing must be in [0, 1], got 1.5");
  CHECK_THROWS_WITH_FRAGMENT(cross_entropy(zeros({4, 10}, kI64), zeros({4}, kI64)), TypeError,
                             "[cross_entropy] logits has dtype int64");
  CHECK_THROWS_WITH_FRAGMENT(cross_entropy(logits, zeros({4, 10}, kI64)), TypeError,
                             "[cross_entropy] a target of the logits' shape (4, 10) holds class probabilities, so it "
                             "must be floating, got int64; class indices are int64 of shape (4,)");
  CHECK_THROWS_WITH_FRAGMENT(cross_entropy(logits, zeros({4, 10}), {.ignore_index = 0}), ValueError,
                             "[cross_entropy] ignore_index 0 applies to class-index targets, not to class "
                             "probabilities");
  CHECK_THROWS_WITH_FRAGMENT(cross_entropy(zeros({10}), zeros({3}, kI64)), ShapeError,
                             "[cross_entropy] logits of shape (10,) (one sample's C scores) need a 0-D class index or "
                             "C class probabilities as target, got shape (3,)");
  CHECK_THROWS_WITH_FRAGMENT(cross_entropy(logits, Tensor()), ValueError, "[cross_entropy] target is undefined");
}

// ---------------------------------------------------------------------------
// nll_loss

TEST_CASE("nll_loss by hand and composed with log_softmax") {
  const Tensor log_probs = tensor({-1, -2, -3, -0.5, -1.5, -2.5}, {2, 3}, kF64);
  const Tensor target = tensor({2, 0}, {2}, kI64);
  CHECK_CLOSE(nll_loss(log_probs, target, {.reduction = Reduction::None}),
              tensor({3, 0.5}, {2}, kF64), 0, 0);
  CHECK_CLOSE(nll_loss(log_probs, target), tensor({1.75}, {}, kF64), 0, 0);
  CHECK_CLOSE(nll_loss(log_probs, target, {.reduction = Reduction::Sum, .ignore_index = 0}),
              tensor({3}, {}, kF64), 0, 0);

  Generator gen(31);
  const Tensor logits = randn({6, 5}, kF64, &gen);
  const Tensor labels = random_targets({6}, 5, -100, gen);
  CHECK_CLOSE(nll_loss(log_softmax(logits, 1), labels), cross_entropy(logits, labels), 1e-12,
              1e-12);
}

TEST_CASE("nll_loss matches a naive reference for every reduction, 2-D and 4-D") {
  Generator gen(32);
  const Tensor scores2 = randn({8, 6}, kF64, &gen);
  const Tensor target2 = random_targets({8}, 6, 3, gen);
  const Tensor scores4 = randn({3, 4, 2, 5}, kF64, &gen).contiguous(MemoryFormat::ChannelsLast);
  const Tensor target4 = random_targets({3, 2, 5}, 4, -100, gen);
  for (Reduction reduction : kReductions) {
    CHECK_CLOSE(nll_loss(scores2, target2, {.reduction = reduction, .ignore_index = 3}),
                naive_nll(scores2, target2, 3).reduced(reduction), 1e-12, 1e-12);
    CHECK_CLOSE(nll_loss(scores4, target4, {.reduction = reduction}),
                naive_nll(scores4, target4, -100).reduced(reduction), 1e-12, 1e-12);
  }
}

TEST_CASE("nll_loss gradcheck w.r.t. log_probs") {
  Generator gen(33);
  const Tensor scores2 = randn({5, 3}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const Tensor target2 = random_targets({5}, 3, -100, gen);
  const Tensor scores3 = randn({2, 4, 3}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const Tensor target3 = random_targets({2, 3}, 4, -100, gen);
  for (Reduction reduction : kReductions) {
    CAPTURE(static_cast<int>(reduction));
    GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& in) {
          return nll_loss(in[0], target2, {.reduction = reduction});
        },
        {scores2});
    CHECK_MESSAGE(r.ok, r.message);
    r = gradcheck(
        [&](const std::vector<Tensor>& in) {
          return nll_loss(in[0], target3, {.reduction = reduction});
        },
        {scores3});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("nll_loss rejects bad targets") {
  CHECK_THROWS_WITH_FRAGMENT(nll_loss(zeros({2, 3}), tensor({5, 0}, {2}, kI64)), IndexError,
                             "[nll_loss] target 5 at position 0 is out of range for 3 classes");
  CHECK_THROWS_WITH_FRAGMENT(nll_loss(zeros({2, 3}), zeros({2}, {.dtype = DType::Int32})),
                             TypeError,
                             "[nll_loss] target must hold class indices as int64, got int32");
  CHECK_THROWS_WITH_FRAGMENT(nll_loss(zeros({2, 3, 4}), zeros({2, 3}, kI64)), ShapeError,
                             "[nll_loss] target has shape (2, 3) but log_probs of shape (2, 3, 4) "
                             "need a target of shape (2, 4)");
  CHECK_THROWS_WITH_FRAGMENT(nll_loss(zeros({3}), zeros({3})), ShapeError,
                             "[nll_loss] log_probs of shape (3,) (one sample's C scores) need a 0-D class index as "
                             "target, got shape (3,)");
}

// ---------------------------------------------------------------------------
// mse_loss

TEST_CASE("mse_loss by hand and against a naive reference") {
  const Tensor input = tensor({1, 2, 3}, {3}, kF64), target = tensor({0, 2, 5}, {3}, kF64);
  CHECK_CLOSE(mse_loss(input, target, Reduction::None), tensor({1, 0, 4}, {3}, kF64), 0, 0);
  CHECK_CLOSE(mse_loss(input, target), tensor({5.0 / 3}, {}, kF64), 1e-15, 0);
  CHECK_CLOSE(mse_loss(input, target, Reduction::Sum), tensor({5}, {}, kF64), 0, 0);

  Generator gen(41);
  const Tensor a = randn({3, 4, 5}, kF64, &gen).transpose(0, 2);  // (5, 4, 3), strided
  const Tensor b = randn({5, 4, 3}, kF64, &gen);
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  std::vector<double> squared(va.size());
  double total = 0.0;
  for (size_t i = 0; i < va.size(); ++i) {
    squared[i] = (va[i] - vb[i]) * (va[i] - vb[i]);
    total += squared[i];
  }
  CHECK_CLOSE(mse_loss(a, b, Reduction::None), tensor(squared, {5, 4, 3}, kF64), 1e-12, 1e-12);
  CHECK_CLOSE(mse_loss(a, b, Reduction::Sum), tensor({total}, {}, kF64), 1e-12, 1e-12);
  CHECK_CLOSE(mse_loss(a, b), tensor({total / 60}, {}, kF64), 1e-12, 1e-12);
}

TEST_CASE("mse_loss gradcheck w.r.t. both inputs") {
  Generator gen(42);
  const Tensor a = randn({3, 4}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  const Tensor b = randn({3, 4}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  for (Reduction reduction : kReductions) {
    CAPTURE(static_cast<int>(reduction));
    GradcheckResult r = gradcheck(
        [reduction](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], reduction); },
        {a, b});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("mse_loss rejects mismatched shapes and dtypes") {
  CHECK_THROWS_WITH_FRAGMENT(mse_loss(zeros({2, 3}), zeros({3, 2})), ShapeError,
                             "[mse_loss] input has shape (2, 3) but target has shape (3, 2)");
  CHECK_THROWS_WITH_FRAGMENT(mse_loss(zeros({2, 3}), zeros({2, 3}, kF64)), TypeError,
                             "[mse_loss] operands have different dtypes, float32");
}

}  // namespace
}  // namespace loom
