// File: core/ops/loss.cc
// cross_entropy and nll_loss run one fused kernel per direction over positions
// (n, d1...); the kernels also total the losses, so Sum and Mean cost nothing
// extra. On the GPU the totals stay in device memory (nothing waits for the
// host, so a training step can be captured into a CUDA graph). The regression
// losses, the binary cross-entropies and kl_div are composites of elementwise ops.
// N batch, C classes, d1... optional spatial dims.
#include "core/ops/loss.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/cpu/loss.h"
#include "core/cuda/capture.h"
#include "core/cuda/loss.h"
#include "core/error.h"
#include "core/ops/activation.h"
#include "core/ops/compare.h"
#include "core/ops/dispatch.h"
#include "core/ops/distance.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/softmax.h"
#include "core/shape.h"

namespace loom {

namespace {


// A class-index target's shape: the scores' (N, C, d1...) without the class dim 1.
Shape class_target_shape(const Tensor& scores) {
  Shape shape = scores.sizes();
  if (shape.size() >= 2) shape.erase(shape.begin() + 1);
  return shape;
}

// None, Mean or Sum: Reduction::BatchMean is kl_div's alone, as PyTorch's "batchmean".
void check_reduction(Reduction reduction, std::string_view op) {
  LOOM_CHECK(reduction == Reduction::None || reduction == Reduction::Mean || reduction == Reduction::Sum,
             ValueError, "[{}] reduction must be None, Mean or Sum, got {}{}", op, static_cast<int>(reduction),
             reduction == Reduction::BatchMean ? " (BatchMean, which is kl_div's alone)" : "");
}

// A defined target on the scores' device, whatever form it takes.
void check_target_device(const Tensor& scores, const Tensor& target, std::string_view op,
                         std::string_view scores_name) {
  LOOM_CHECK(target.defined(), ValueError, "[{}] target is undefined", op);
  LOOM_CHECK(target.device() == scores.device(), DeviceError,
             "[{}] {} is on {} but target is on {}; move the target with .to(Device)", op,
             scores_name, scores.device().str(), target.device().str());
}

// scores (N, C, d1...) float and target (N, d1...) int64 on the scores' device.
void check_class_target_shapes(const Tensor& scores, const Tensor& target, std::string_view op,
                               std::string_view scores_name) {
  check_float_tensor(scores, op, scores_name);
  LOOM_CHECK(scores.dim() >= 2, ShapeError,
             "[{}] {} must be (C), (N, C) or (N, C, d1, ...), got shape {}", op, scores_name,
             shape_str(scores.sizes()));
  check_target_device(scores, target, op, scores_name);
  LOOM_CHECK(target.dtype() == DType::Int64, TypeError,
             "[{}] target must hold class indices as int64, got {}; convert with "
             "target.to(DType::Int64)",
             op, dtype_name(target.dtype()));
  const Shape expected = class_target_shape(scores);
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

bool capturing_graph(const Tensor& t) {
  DeviceGuard guard(t.device());
  return t.device().is_cuda() && cuda::is_capturing();
}

// The CPU checks the target's classes before its kernels run. The GPU kernels
// flag the first bad one in their device totals (and write NaN losses), which
// run_forward reads back after the launch: a few bytes, not the whole target.
void check_class_target(const Tensor& scores, const Tensor& target, int64_t ignore_index,
                        std::string_view op, std::string_view scores_name) {
  check_class_target_shapes(scores, target, op, scores_name);
  if (!target.device().is_cuda()) check_class_range(target, scores.size(1), ignore_index, op);
}

// The op's output from per-position losses and their total.
Tensor reduce_losses(const Tensor& losses, const kernel::LossTotal& total, Reduction reduction,
                     std::string_view op) {
  switch (reduction) {
    case Reduction::None: return losses;
    case Reduction::Sum: return full({}, total.sum, losses.options());
    case Reduction::Mean:
      return full({}, total.sum / static_cast<double>(total.count), losses.options());
    case Reduction::BatchMean: break;  // refused by check_reduction on entry
  }
  throw ValueError(fmt::format("[{}] unknown reduction {}", op, static_cast<int>(reduction)));
}

// What multiplies dy at each position in backward: the mean divides by the count
// of non-ignored targets (when it is 0 every position is ignored, so the
// infinite scale is never used). The CPU knows the count; on the GPU it stays
// in the forward's device totals, which the backward kernel reads.
struct GradScale {
  double host = 1.0;
  Tensor device_totals;  // uint8 bytes of a cuda::LossTotals
  bool mean = false;
};

struct LossForward {
  Tensor loss;
  GradScale scale;
};

cuda::LossScale device_scale(const GradScale& s) {
  return {static_cast<const cuda::LossTotals*>(s.device_totals.raw_data()), s.mean};
}

// A class-index target, its scores' class count and the index it skips.
struct ClassTarget {
  const Tensor& target;
  int64_t classes;
  int64_t ignore_index;
};

// Runs cpu_forward() -> kernel::LossTotal on the CPU, or cuda_forward(cuda::LossOutputs)
// on the GPU, and makes the op's output from the per-position `losses`. Outside a
// CUDA-graph capture the GPU's totals are read back to name a bad target (an
// IndexError, as the CPU's check raises); inside one the NaN losses say it.
template <class CpuForward, class CudaForward>
LossForward run_forward(const Tensor& losses, const ClassTarget& classes, Reduction reduction, std::string_view op,
                        CpuForward&& cpu_forward, CudaForward&& cuda_forward) {
  if (losses.device().is_cuda()) {
    DeviceGuard guard(losses.device());
    Tensor totals = empty({static_cast<int64_t>(sizeof(cuda::LossTotals))},
                          {.dtype = DType::UInt8, .device = losses.device()});
    Tensor loss = reduction == Reduction::None ? losses : empty({}, losses.options());
    auto* device_totals = static_cast<cuda::LossTotals*>(totals.raw_data());
    cuda_forward(cuda::LossOutputs{device_totals, reduction == Reduction::None ? nullptr : loss.raw_data(),
                                   reduction == Reduction::Mean});
    if (!cuda::is_capturing()) {
      cuda::read_totals(device_totals, classes.target.strided(), classes.classes, classes.ignore_index, op);
    }
    return {loss, {.host = 1.0, .device_totals = totals, .mean = reduction == Reduction::Mean}};
  }
  const kernel::LossTotal total = cpu_forward();
  const double scale = reduction == Reduction::Mean ? 1.0 / static_cast<double>(total.count) : 1.0;
  return {reduce_losses(losses, total, reduction, op), {.host = scale, .device_totals = Tensor(), .mean = false}};
}

// dy as one value per position (N, d1...): itself for None, else a stride-0 view.
Strided per_position(const Tensor& dy, const Tensor& target) {
  return dy.expand(target.sizes()).strided();
}


// bf16/fp16 scores (autocast's logits) are computed in fp32, as torch.autocast
// does for its losses; the cast's backward returns the gradient in their dtype.
Tensor in_fp32(const Tensor& scores) {
  return is_half_precision(scores.dtype()) ? scores.to(DType::Float32) : scores;
}

// The same for cross_entropy, whose GPU kernels read 16-bit logits as fp32 and
// write their gradient in the logits' dtype (rounded once, as the cast's
// backward would): two conversion kernels fewer, the same bits.
Tensor cross_entropy_scores(const Tensor& logits) {
  return logits.device().is_cuda() ? logits : in_fp32(logits);
}

// Per-position losses: fp32 for 16-bit scores, else the scores' dtype.
TensorOptions loss_options(const Tensor& scores) {
  TensorOptions options = scores.options();
  if (is_half_precision(options.dtype)) options.dtype = DType::Float32;
  return options;
}

// One sample's scores (C) and target (a 0-D class index, or (C) probabilities
// for cross_entropy) as a batch of one; the reduction then runs on that batch,
// and Reduction::None's (1) losses become 0-D, as PyTorch's unbatched losses.
template <class BatchedLoss>
Tensor unbatched(const Tensor& scores, const Tensor& target, Reduction reduction, std::string_view op,
                 std::string_view scores_name, bool probabilities_allowed, BatchedLoss&& batched) {
  check_target_device(scores, target, op, scores_name);
  const bool probabilities = probabilities_allowed && target.sizes() == scores.sizes();
  LOOM_CHECK(target.dim() == 0 || probabilities, ShapeError,
             "[{}] {} of shape {} (one sample's C scores) need a 0-D class index{} as target, got shape {}",
             op, scores_name, shape_str(scores.sizes()), probabilities_allowed ? " or C class probabilities" : "",
             shape_str(target.sizes()));
  Tensor losses = batched(scores.unsqueeze(0), target.unsqueeze(0));
  return reduction == Reduction::None ? losses.squeeze(0) : losses;
}

// Per-position losses reduced as `reduction` says (BatchMean is kl_div's own).
Tensor reduce_elementwise(const Tensor& losses, Reduction reduction, std::string_view op) {
  check_reduction(reduction, op);
  switch (reduction) {
    case Reduction::Sum: return sum(losses);
    case Reduction::Mean: return mean(losses);
    default: return losses;  // None
  }
}

// Class probabilities, as PyTorch's cross_entropy takes a target of the logits'
// shape (mixup, distillation): loss = -sum_c target'[c] * log_softmax(logits)[c]
// with target' = (1 - eps) * target + eps / C, a composite of differentiable ops
// (the target's gradient included); Mean divides by the positions N * d1 * ...
Tensor probability_cross_entropy(const Tensor& logits_in, const Tensor& target,
                                 const CrossEntropyOptions& options) {
  check_float_tensor(logits_in, "cross_entropy", "logits");
  LOOM_CHECK(is_floating(target.dtype()), TypeError,
             "[cross_entropy] a target of the logits' shape {} holds class probabilities, so it must be floating, "
             "got {}; class indices are int64 of shape {} (the logits without the class dim 1)",
             shape_str(logits_in.sizes()), dtype_name(target.dtype()), shape_str(class_target_shape(logits_in)));
  check_target_device(logits_in, target, "cross_entropy", "logits");
  LOOM_CHECK(options.ignore_index < 0, ValueError,
             "[cross_entropy] ignore_index {} applies to class-index targets, not to class probabilities; "
             "leave it at -100 (or give a probability row of zeros to leave a position out)",
             options.ignore_index);
  const Tensor logits = in_fp32(logits_in);
  const double eps = options.label_smoothing, classes = static_cast<double>(logits.size(1));
  Tensor probabilities = target.to(logits.dtype());
  if (eps > 0.0) probabilities = probabilities * (1.0 - eps) + eps / classes;
  // Mean over no positions is NaN, as torch's.
  return reduce_elementwise(-sum(log_softmax(logits, 1) * probabilities, {1}), options.reduction, "cross_entropy");
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, CrossEntropyOptions options) {
  const double eps = options.label_smoothing;
  LOOM_CHECK(eps >= 0.0 && eps <= 1.0, ValueError,
             "[cross_entropy] label_smoothing must be in [0, 1], got {}", eps);
  LOOM_CHECK(logits_in.defined(), ValueError, "[cross_entropy] logits is undefined");
  check_reduction(options.reduction, "cross_entropy");
  if (logits_in.dim() == 1) {
    return unbatched(logits_in, target, options.reduction, "cross_entropy", "logits", true,
                     [&](const Tensor& x, const Tensor& t) { return cross_entropy(x, t, options); });
  }
  if (logits_in.dim() >= 2 && target.defined() && target.sizes() == logits_in.sizes()) {
    return probability_cross_entropy(logits_in, target, options);
  }
  check_class_target(logits_in, target, options.ignore_index, "cross_entropy", "logits");
  const Tensor logits = cross_entropy_scores(logits_in);
  const kernel::CrossEntropyParams params{options.ignore_index, eps};
  // losses (N, d1...), logits (N, C, d1...)
  Tensor losses = empty(target.sizes(), loss_options(logits));
  LossForward f = run_forward(
      losses, {target, logits.size(1), options.ignore_index}, options.reduction, "cross_entropy",
      [&] { return cpu::cross_entropy_forward(losses.strided(), logits.strided(), target.strided(), params); },
      [&](const cuda::LossOutputs& out) {
        cuda::cross_entropy_forward(losses.strided(), logits.strided(), target.strided(), params, out);
      });
  if (needs_grad({logits})) {
    record("cross_entropy", {logits}, f.loss, [logits, target, params, scale = f.scale](const Tensor& dy) {
      Tensor dlogits = empty_like(logits);
      const Strided dloss = per_position(dy, target);
      if (dlogits.device().is_cuda()) {
        DeviceGuard guard(dlogits.device());
        cuda::cross_entropy_backward(dlogits.strided(), logits.strided(), target.strided(), dloss,
                                     device_scale(scale), params);
        return std::vector<Tensor>{dlogits};
      }
      cpu::cross_entropy_backward(dlogits.strided(), logits.strided(), target.strided(), dloss,
                                  scale.host, params);
      return std::vector<Tensor>{dlogits};
    }, {logits, target});
  }
  return f.loss;
}

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& target, NllLossOptions options) {
  check_reduction(options.reduction, "nll_loss");
  if (log_probs_in.defined() && log_probs_in.dim() == 1) {
    return unbatched(log_probs_in, target, options.reduction, "nll_loss", "log_probs", false,
                     [&](const Tensor& x, const Tensor& t) { return nll_loss(x, t, options); });
  }
  check_class_target(log_probs_in, target, options.ignore_index, "nll_loss", "log_probs");
  const Tensor log_probs = in_fp32(log_probs_in);
  // losses (N, d1...), log_probs (N, C, d1...)
  Tensor losses = empty(target.sizes(), log_probs.options());
  const int64_t ignore_index = options.ignore_index;
  LossForward f = run_forward(
      losses, {target, log_probs.size(1), ignore_index}, options.reduction, "nll_loss",
      [&] {
        return cpu::nll_loss_forward(losses.strided(), log_probs.strided(), target.strided(), ignore_index);
      },
      [&](const cuda::LossOutputs& out) {
        cuda::nll_loss_forward(losses.strided(), log_probs.strided(), target.strided(), ignore_index, out);
      });
  if (needs_grad({log_probs})) {
    const Shape sizes = log_probs.sizes();
    record("nll_loss", {log_probs}, f.loss, [sizes, target, scale = f.scale, ignore_index](const Tensor& dy) {
      Tensor dlog_probs = empty(sizes, dy.options());
      const Strided dloss = per_position(dy, target);
      if (dlog_probs.device().is_cuda()) {
        DeviceGuard guard(dlog_probs.device());
        cuda::nll_loss_backward(dlog_probs.strided(), target.strided(), dloss, device_scale(scale), ignore_index);
        return std::vector<Tensor>{dlog_probs};
      }
      cpu::nll_loss_backward(dlog_probs.strided(), target.strided(), dloss, scale.host, ignore_index);
      return std::vector<Tensor>{dlog_probs};
    }, {target});
  }
  return f.loss;
}

namespace {

// input and target of an elementwise loss: floating, one shape and device, and
// one dtype, except that 16-bit ones are computed in fp32 (as torch.autocast
// computes these losses; the cast's backward returns their gradient in their
// dtype), so the loss of bf16 predictions is fp32.
std::pair<Tensor, Tensor> elementwise_loss_operands(const Tensor& input, const Tensor& target, std::string_view op) {
  check_float_tensor(input, op, "input");
  check_float_tensor(target, op, "target");
  LOOM_CHECK(input.sizes() == target.sizes(), ShapeError,
             "[{}] input has shape {} but target has shape {}; they must match (expand "
             "the target explicitly if broadcasting is meant)",
             op, shape_str(input.sizes()), shape_str(target.sizes()));
  const bool half = is_half_precision(input.dtype()) || is_half_precision(target.dtype());
  std::pair<Tensor, Tensor> operands{half ? input.to(DType::Float32) : input,
                                     half ? target.to(DType::Float32) : target};
  check_same_dtype_device(operands.first, operands.second, op);
  return operands;
}

// 0.5 d^2 where |d| < beta, else |d| - 0.5 beta: smooth_l1_loss's terms (beta > 0).
Tensor smooth_l1_terms(const Tensor& d, double beta) {
  const Tensor magnitude = abs(d);
  return where(magnitude < beta, d * d * (0.5 / beta), magnitude - 0.5 * beta);
}

// An optional weight of a loss: undefined, or floating on the input's device
// (in the loss's dtype, `input`'s, or 16-bit and cast to it) with a shape that
// broadcasts to the input's (not beyond it).
Tensor loss_weight(const Tensor& weight, const Tensor& input, std::string_view op, std::string_view name) {
  if (!weight.defined()) return weight;
  check_float_tensor(weight, op, name);
  const Tensor w = is_half_precision(weight.dtype()) ? weight.to(input.dtype()) : weight;
  check_same_dtype_device(input, w, op);
  LOOM_CHECK(broadcast_shapes(w.sizes(), input.sizes(), op) == input.sizes(), ShapeError,
             "[{}] {} of shape {} does not broadcast to the input's shape {}", op, name, shape_str(w.sizes()),
             shape_str(input.sizes()));
  return w;
}

// Every value of `input` is a probability in [0, 1], as PyTorch checks (NaN is
// not). Inside a CUDA-graph capture nothing can be read back: the loss is NaN.
void check_probabilities(const Tensor& input, std::string_view op) {
  if (input.numel() == 0 || capturing_graph(input)) return;
  if (!any(logical_not(logical_and(ge(input, 0.0), le(input, 1.0)))).item()) return;
  const std::vector<double> values = input.contiguous().to_vector<double>();
  const auto bad = std::find_if(values.begin(), values.end(), [](double v) { return !(v >= 0.0 && v <= 1.0); });
  throw ValueError(fmt::format(
      "[{}] input {} at position {} is not a probability in [0, 1]; apply sigmoid first, or give the logits to "
      "binary_cross_entropy_with_logits",
      op, *bad, position_str(input.sizes(), bad - values.begin())));
}

// max(log x, -100), as PyTorch clamps binary_cross_entropy's logs; where x is 0
// the gradient is 0 (log's 1 / x would make it NaN).
Tensor clamped_log(const Tensor& x) {
  const Tensor zero = eq(x, 0.0);
  return masked_fill(clamp(log(masked_fill(x, zero, 1.0)), -100.0, std::nullopt), zero, -100.0);
}

}  // namespace

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const auto [input, target] = elementwise_loss_operands(input_in, target_in, "mse_loss");
  const Tensor diff = input - target;
  return reduce_elementwise(diff * diff, reduction, "mse_loss");
}

Tensor l1_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const auto [input, target] = elementwise_loss_operands(input_in, target_in, "l1_loss");
  return reduce_elementwise(abs(input - target), reduction, "l1_loss");
}

Tensor smooth_l1_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction, double beta) {
  LOOM_CHECK(beta >= 0, ValueError, "[smooth_l1_loss] beta must be >= 0, got {}", beta);
  const auto [input, target] = elementwise_loss_operands(input_in, target_in, "smooth_l1_loss");
  // beta 0 is l1; the quadratic branch would divide by it (a NaN gradient even where unselected).
  const Tensor d = input - target;
  return reduce_elementwise(beta == 0 ? abs(d) : smooth_l1_terms(d, beta), reduction, "smooth_l1_loss");
}

Tensor huber_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction, double delta) {
  LOOM_CHECK(delta > 0, ValueError, "[huber_loss] delta must be > 0, got {}", delta);
  const auto [input, target] = elementwise_loss_operands(input_in, target_in, "huber_loss");
  return reduce_elementwise(smooth_l1_terms(input - target, delta) * delta, reduction, "huber_loss");
}

Tensor binary_cross_entropy_with_logits(const Tensor& input_in, const Tensor& target_in,
                                        const BceWithLogitsOptions& options) {
  constexpr std::string_view kOp = "binary_cross_entropy_with_logits";
  const auto [input, target] = elementwise_loss_operands(input_in, target_in, kOp);
  const Tensor weight = loss_weight(options.weight, input, kOp, "weight");
  const Tensor pos_weight = loss_weight(options.pos_weight, input, kOp, "pos_weight");
  // -log sigmoid(x) = softplus(-x) and -log(1 - sigmoid(x)) = x + softplus(-x), so the loss
  // -t log sigmoid(x) - (1 - t) log(1 - sigmoid(x)) is one smooth expression: no log of a
  // rounded probability, and a gradient exact at every x (no kink of abs or relu at 0).
  const Tensor positive = softplus(neg(input));
  const Tensor scaled = pos_weight.defined() ? positive * (1.0 + (pos_weight - 1.0) * target) : positive;
  Tensor losses = rsub(target, 1.0) * input + scaled;
  if (weight.defined()) losses = losses * weight;
  return reduce_elementwise(losses, options.reduction, kOp);
}

Tensor binary_cross_entropy(const Tensor& input_in, const Tensor& target_in, const BceOptions& options) {
  constexpr std::string_view kOp = "binary_cross_entropy";
  const auto [input, target] = elementwise_loss_operands(input_in, target_in, kOp);
  check_probabilities(input, kOp);
  const Tensor weight = loss_weight(options.weight, input, kOp, "weight");
  Tensor losses = neg(target * clamped_log(input) + rsub(target, 1.0) * clamped_log(rsub(input, 1.0)));
  if (weight.defined()) losses = losses * weight;
  return reduce_elementwise(losses, options.reduction, kOp);
}

Tensor kl_div(const Tensor& input_in, const Tensor& target_in, const KlDivOptions& options) {
  const auto [input, target] = elementwise_loss_operands(input_in, target_in, "kl_div");
  Tensor losses;
  if (options.log_target) {
    losses = exp(target) * (target - input);
  } else {
    // p log p is 0 at p = 0; log's gradient 1 / p there would be inf.
    losses = target * log(masked_fill(target, eq(target, 0.0), 1.0)) - target * input;
  }
  if (options.reduction != Reduction::BatchMean) return reduce_elementwise(losses, options.reduction, "kl_div");
  return input.dim() == 0 ? sum(losses) : sum(losses) / static_cast<double>(input.size(0));
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginOptions& options) {
  constexpr std::string_view kOp = "triplet_margin_loss";
  LOOM_CHECK(anchor.defined() && positive.defined() && negative.defined(), ValueError,
             "[{}] anchor, positive and negative must be defined tensors", kOp);
  LOOM_CHECK(anchor.dim() == positive.dim() && positive.dim() == negative.dim(), ShapeError,
             "[{}] anchor, positive and negative must have one rank, got shapes {}, {} and {}", kOp,
             shape_str(anchor.sizes()), shape_str(positive.sizes()), shape_str(negative.sizes()));
  LOOM_CHECK(anchor.dim() == 1 || anchor.dim() == 2, ShapeError,
             "[{}] expects (N, D) embeddings or one (D) sample, got shape {}", kOp, shape_str(anchor.sizes()));
  check_reduction(options.reduction, kOp);
  const Tensor to_positive = pairwise_distance(anchor, positive, options.p, options.eps);
  Tensor to_negative = pairwise_distance(anchor, negative, options.p, options.eps);
  if (options.swap) to_negative = minimum(to_negative, pairwise_distance(positive, negative, options.p, options.eps));
  return reduce_elementwise(clamp(to_positive - to_negative + options.margin, 0.0, std::nullopt), options.reduction,
                            kOp);
}

Tensor cosine_embedding_loss(const Tensor& x1_in, const Tensor& x2_in, const Tensor& target,
                             const CosineEmbeddingOptions& options) {
  constexpr std::string_view kOp = "cosine_embedding_loss";
  LOOM_CHECK(target.defined() && (target.dim() == 0 || target.dim() == 1), ShapeError,
             "[{}] target must be (N) for (N, D) inputs or 0-D for one (D) pair, got {}", kOp,
             target.defined() ? shape_str(target.sizes()) : std::string("an undefined tensor"));
  const auto [x1, x2] = elementwise_loss_operands(x1_in, x2_in, kOp);
  LOOM_CHECK(x1.dim() == target.dim() + 1 && (target.dim() == 0 || x1.size(0) == target.size(0)), ShapeError,
             "[{}] a target of shape {} needs inputs of shape {}, got {}", kOp, shape_str(target.sizes()),
             target.dim() == 0 ? "(D)" : fmt::format("({}, D)", target.size(0)), shape_str(x1.sizes()));
  check_reduction(options.reduction, kOp);
  // PyTorch's own cosine here, with 1e-12 added to each squared length.
  constexpr double kSquaredLengthEps = 1e-12;
  const Shape last{-1};
  const Tensor dot = sum(x1 * x2, last);
  const Tensor lengths = sqrt((sum(x1 * x1, last) + kSquaredLengthEps) * (sum(x2 * x2, last) + kSquaredLengthEps));
  const Tensor cos = dot / lengths;
  const Tensor t = target.to(x1.device());
  const Tensor similar = masked_fill(rsub(cos, 1.0), ne(t, 1.0), 0.0);
  const Tensor dissimilar = masked_fill(clamp(cos - options.margin, 0.0, std::nullopt), ne(t, -1.0), 0.0);
  return reduce_elementwise(similar + dissimilar, options.reduction, kOp);
}

}  // namespace loom
