// File: core/ops/loss.cc
// cross_entropy and nll_loss run one fused kernel per direction over positions
// (n, d1...); the kernels also total the losses, so Sum and Mean cost nothing
// extra. mse_loss is composite.
// N batch, C classes, d1... optional spatial dims.
#include "core/ops/loss.h"

#include <fmt/format.h>

#include <string>

#include "core/autograd.h"
#include "core/cpu/loss.h"
#include "core/error.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"

namespace loom {

namespace {

// "3" for a 1-D target, else the index of row-major element `flat`: "(0, 2, 1)".
std::string position_str(const Shape& sizes, int64_t flat) {
  if (sizes.size() == 1) return std::to_string(flat);
  Shape index(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    index[d] = flat % sizes[d];
    flat /= sizes[d];
  }
  return shape_str(index);
}

// scores (N, C, d1...) float and target (N, d1...) int64 on the CPU.
void check_class_target_shapes(const Tensor& scores, const Tensor& target, std::string_view op,
                               std::string_view scores_name) {
  check_float_tensor(scores, op, scores_name);
  LOOM_CHECK(scores.dim() >= 2, ShapeError,
             "[{}] {} must be (N, C) or (N, C, d1, ...), got shape {}; for one sample, "
             "unsqueeze(0) the {} and the target",
             op, scores_name, shape_str(scores.sizes()), scores_name);
  LOOM_CHECK(target.defined(), ValueError, "[{}] target is undefined", op);
  LOOM_CHECK(target.device() == scores.device(), DeviceError,
             "[{}] {} is on {} but target is on {}; move the target with .to(Device)", op,
             scores_name, scores.device().str(), target.device().str());
  LOOM_CHECK(target.dtype() == DType::Int64, TypeError,
             "[{}] target must hold class indices as int64, got {}; convert with "
             "target.to(DType::Int64)",
             op, dtype_name(target.dtype()));
  Shape expected = scores.sizes();
  expected.erase(expected.begin() + 1);
  LOOM_CHECK(target.sizes() == expected, ShapeError,
             "[{}] target has shape {} but {} of shape {} need a target of shape {} (the {} "
             "without the class dim 1)",
             op, shape_str(target.sizes()), scores_name, shape_str(scores.sizes()),
             shape_str(expected), scores_name);
}

// Every target is a class in [0, C) or ignore_index; the kernels rely on it.
void check_class_range(const Tensor& target, int64_t classes, int64_t ignore_index,
                       std::string_view op) {
  const std::vector<int64_t> values = target.to_vector<int64_t>();
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t t = values[i];
    LOOM_CHECK(t == ignore_index || (t >= 0 && t < classes), IndexError,
               "[{}] target {} at position {} is out of range for {} classes (expected 0 to {}, "
               "or ignore_index {})",
               op, t, position_str(target.sizes(), static_cast<int64_t>(i)), classes, classes - 1,
               ignore_index);
  }
}

void check_class_target(const Tensor& scores, const Tensor& target, int64_t ignore_index,
                        std::string_view op, std::string_view scores_name) {
  check_class_target_shapes(scores, target, op, scores_name);
  check_class_range(target, scores.size(1), ignore_index, op);
}

// The op's output from per-position losses and their total.
Tensor reduce_losses(const Tensor& losses, const cpu::LossTotal& total, Reduction reduction,
                     std::string_view op) {
  switch (reduction) {
    case Reduction::None: return losses;
    case Reduction::Sum: return full({}, total.sum, losses.options());
    case Reduction::Mean:
      return full({}, total.sum / static_cast<double>(total.count), losses.options());
  }
  throw ValueError(fmt::format("[{}] unknown reduction {}", op, static_cast<int>(reduction)));
}

// What multiplies dy at each position in backward: the mean divides by the count
// of non-ignored targets (when it is 0 every position is ignored, so the
// infinite scale is never used).
double grad_scale(Reduction reduction, const cpu::LossTotal& total) {
  return reduction == Reduction::Mean ? 1.0 / static_cast<double>(total.count) : 1.0;
}

// dy as one value per position (N, d1...): itself for None, else a stride-0 view.
Strided per_position(const Tensor& dy, const Tensor& target) {
  return dy.expand(target.sizes()).strided();
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options) {
  check_class_target(logits, target, options.ignore_index, "cross_entropy", "logits");
  const double eps = options.label_smoothing;
  LOOM_CHECK(eps >= 0.0 && eps <= 1.0, ValueError,
             "[cross_entropy] label_smoothing must be in [0, 1], got {}", eps);
  const cpu::CrossEntropyParams params{options.ignore_index, eps};
  // losses (N, d1...), logits (N, C, d1...)
  Tensor losses = empty(target.sizes(), logits.options());
  const cpu::LossTotal total =
      LOOM_KERNEL(logits, cross_entropy_forward, losses.strided(), logits.strided(), target.strided(), params);
  Tensor loss = reduce_losses(losses, total, options.reduction, "cross_entropy");
  if (needs_grad({logits})) {
    const double scale = grad_scale(options.reduction, total);
    record("cross_entropy", {logits}, loss, [logits, target, params, scale](const Tensor& dy) {
      Tensor dlogits = empty_like(logits);
      LOOM_KERNEL(dlogits, cross_entropy_backward, dlogits.strided(), logits.strided(), target.strided(),
                                  per_position(dy, target), scale, params);
      return std::vector<Tensor>{dlogits};
    }, {logits, target});
  }
  return loss;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, NllLossOptions options) {
  check_class_target(log_probs, target, options.ignore_index, "nll_loss", "log_probs");
  // losses (N, d1...), log_probs (N, C, d1...)
  Tensor losses = empty(target.sizes(), log_probs.options());
  const cpu::LossTotal total = LOOM_KERNEL(log_probs, nll_loss_forward, losses.strided(), log_probs.strided(),
                                                     target.strided(), options.ignore_index);
  Tensor loss = reduce_losses(losses, total, options.reduction, "nll_loss");
  if (needs_grad({log_probs})) {
    const double scale = grad_scale(options.reduction, total);
    const Shape sizes = log_probs.sizes();
    const int64_t ignore_index = options.ignore_index;
    record("nll_loss", {log_probs}, loss, [sizes, target, scale, ignore_index](const Tensor& dy) {
      Tensor dlog_probs = empty(sizes, dy.options());
      LOOM_KERNEL(dlog_probs, nll_loss_backward, dlog_probs.strided(), target.strided(), per_position(dy, target),
                             scale, ignore_index);
      return std::vector<Tensor>{dlog_probs};
    }, {target});
  }
  return loss;
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_float_tensor(input, "mse_loss", "input");
  check_float_tensor(target, "mse_loss", "target");
  check_same_dtype_device(input, target, "mse_loss");
  LOOM_CHECK(input.sizes() == target.sizes(), ShapeError,
             "[mse_loss] input has shape {} but target has shape {}; they must match (expand "
             "the target explicitly if broadcasting is meant)",
             shape_str(input.sizes()), shape_str(target.sizes()));
  const Tensor diff = input - target;
  const Tensor squared = diff * diff;
  switch (reduction) {
    case Reduction::None: return squared;
    case Reduction::Sum: return sum(squared);
    case Reduction::Mean: return mean(squared);
  }
  throw ValueError(fmt::format("[mse_loss] unknown reduction {}", static_cast<int>(reduction)));
}

}  // namespace loom
