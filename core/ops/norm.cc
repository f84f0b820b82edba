// File: core/ops/norm.cc
// batch_norm: validate like PyTorch, take batch or running statistics, normalize, and
// record a backward that calls the explicit bn backward kernel.
// N batch, C channels, M = N * H * W values per channel.
// A bfloat16 / float16 x (GPU only, as autocast produces) keeps float32
// weight, bias and statistics: y and dx come in x's dtype, dweight and dbias
// in float32, and all the math runs in float32.
#include "core/ops/norm.h"

#include <optional>
#include <string_view>

#include "core/autograd.h"
#include "core/cpu/layer_norm.h"
#include "core/cpu/norm.h"
#include "core/cuda/layer_norm.h"
#include "core/cudnn/norm.h"
#include "core/error.h"
#include "core/kernel/norm.h"
#include "core/onednn/norm.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/norm_internal.h"
#include "core/ops/reduction.h"
#include "core/trace.h"

namespace loom {
namespace {

constexpr std::string_view kOp = "batch_norm";

}  // namespace

namespace norm_detail {

DType channel_dtype(const Tensor& x) { return kernel::statistics_dtype(x.dtype()); }

TensorOptions channel_options(const Tensor& x) {
  TensorOptions options = x.options();
  options.dtype = channel_dtype(x);
  options.memory_format = MemoryFormat::Contiguous;
  return options;
}

void check_channel_operand(std::string_view op, const Tensor& v, std::string_view name,
                           const Tensor& x) {
  if (!v.defined()) return;
  check_float_tensor(v, op, name);
  if (is_half_precision(x.dtype())) {
    LOOM_CHECK(v.dtype() == DType::Float32, TypeError,
               "[{}] input has dtype {} but {} has dtype {}; a bfloat16 / float16 input "
               "keeps float32 weight, bias and running statistics (convert them with "
               ".to(DType::Float32))",
               op, dtype_name(x.dtype()), name, dtype_name(v.dtype()));
    LOOM_CHECK(v.device() == x.device(), DeviceError,
               "[{}] input is on {} but {} is on {}; move it with .to(Device)", op,
               x.device().str(), name, v.device().str());
  } else {
    check_same_dtype_device(x, v, op);
  }
  LOOM_CHECK(v.dim() == 1 && v.size(0) == x.size(1), ShapeError,
             "[{}] {} has shape {} but input {} has {} channels; expected ({},)", op, name,
             shape_str(v.sizes()), shape_str(x.sizes()), x.size(1), x.size(1));
}

void check_channel_norm_args(std::string_view op, const Tensor& x, const Tensor& running_mean,
                             const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                             bool training) {
  check_float_tensor(x, op);
  LOOM_CHECK(x.dim() >= 2, ShapeError,
             "[{}] expects input (N, C) or (N, C, H, W) but got shape {}", op,
             shape_str(x.sizes()));
  check_channel_operand(op, weight, "weight", x);
  check_channel_operand(op, bias, "bias", x);
  check_channel_operand(op, running_mean, "running_mean", x);
  check_channel_operand(op, running_var, "running_var", x);
  LOOM_CHECK(running_mean.defined() == running_var.defined(), ValueError,
             "[{}] running_mean and running_var must be given together, but only {} was given",
             op, running_mean.defined() ? "running_mean" : "running_var");
  LOOM_CHECK(training || running_mean.defined(), ValueError,
             "[{}] eval mode (training = false) normalizes by running_mean and running_var, but "
             "they were not given; pass them or use training = true",
             op);
  // As in PyTorch, one value per channel is refused (its variance is 0/0) but
  // none is not: an empty batch normalizes to an empty output (batch_norm).
  const int64_t per_channel = x.size(1) == 0 ? 0 : x.numel() / x.size(1);
  LOOM_CHECK(!training || per_channel != 1, ValueError,
             "[{}] Expected more than 1 value per channel when training, got input size {}; use "
             "a larger batch or eval mode (training = false)",
             op, shape_str(x.sizes()));
}

}  // namespace norm_detail

namespace {

using norm_detail::channel_options;

// y * weight + bias per channel (dim 1) of y (N, C, ...), each undefined or
// (C); a 16-bit y composes in the float32 of its weight and returns in its dtype.
Tensor channel_affine(const Tensor& y, const Tensor& weight, const Tensor& bias) {
  Shape channel_shape(static_cast<size_t>(y.dim()), 1);
  channel_shape[1] = y.size(1);
  Tensor out = y;
  if (weight.defined()) out = out * weight.view(channel_shape);
  if (bias.defined()) out = out + bias.view(channel_shape);
  return out.dtype() == y.dtype() ? out : out.to(y.dtype());
}

// A batch with no elements has no statistics to take: as in PyTorch, the output
// is empty and the running statistics stay as they are; weight and bias get
// zero gradients, the sums of the affine map over no elements.
Tensor empty_batch_output(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor y = channel_affine(x, weight, bias);
  return y.impl() == x.impl() ? x.clone() : y;  // a new tensor, as with parameters
}

// Training statistics; the running ones are buffers, blended in place outside the tape.
void take_batch_stats(const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                      const Tensor& running_mean, const Tensor& running_var,
                      const BatchNormOptions& options) {
  std::optional<kernel::RunningStats> running;
  if (running_mean.defined()) {
    NoGradGuard no_grad;
    check_inplace(running_mean, kOp);
    check_inplace(running_var, kOp);
    running = kernel::RunningStats{running_mean.strided(), running_var.strided(), options.momentum};
  }
  cpu::batch_norm_batch_stats(save_mean.strided(), save_invstd.strided(), x.strided(), options.eps,
                              running);
}

// Training on the CPU's oneDNN tier: the statistics, y and the running
// statistics' blend in one primitive; false where the tier does not take x.
bool batch_norm_training_onednn(const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd,
                                const Tensor& x, const Tensor& running_mean,
                                const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                                const BatchNormOptions& options) {
  if (!on_onednn_tier(x)) return false;
  std::optional<kernel::RunningStats> running;
  if (running_mean.defined()) {
    NoGradGuard no_grad;
    check_inplace(running_mean, kOp);
    check_inplace(running_var, kOp);
    running = kernel::RunningStats{running_mean.strided(), running_var.strided(), options.momentum};
  }
  return onednn::batch_norm_training_forward(y.strided(), save_mean.strided(), save_invstd.strided(),
                                             x.strided(), strided_or_none(weight),
                                             strided_or_none(bias), options.eps, running);
}

// --- GPU training: one cuDNN NORM_FORWARD graph computes y, the batch
// statistics and the running-statistics update; NORM_BACKWARD gives dx, dweight
// and dbias. Non-affine or untracked calls get stand-in tensors.

Tensor or_filled(const Tensor& t, int64_t channels, const Tensor& x, double value) {
  return t.defined() ? t.detach().contiguous() : full({channels}, value, channel_options(x));
}

Tensor batch_norm_training_gpu(const Tensor& x_in, const Tensor& running_mean,
                               const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                               const BatchNormOptions& options) {
  DeviceGuard guard(x_in.device());
  const int64_t c = x_in.size(1);
  MemoryFormat format = x_in.suggest_memory_format();
  Tensor x = x_in.detach().contiguous(format);
  Tensor rm = or_filled(running_mean, c, x, 0.0), rv = or_filled(running_var, c, x, 1.0);
  if (running_mean.defined()) {
    NoGradGuard no_grad;
    check_inplace(running_mean, kOp);
    check_inplace(running_var, kOp);
  }
  Tensor w = or_filled(weight, c, x, 1.0), b = or_filled(bias, c, x, 0.0);
  Tensor save_mean = empty({c}, channel_options(x)), save_invstd = empty({c}, channel_options(x));
  Tensor y = empty_like(x);
  const cudnn::BatchNormTrainingArgs args{
      .y = y.strided(), .save_mean = save_mean.strided(), .save_invstd = save_invstd.strided(),
      .x = x.strided(), .weight = w.strided(), .bias = b.strided(),
      .running_mean = rm.strided(), .running_var = rv.strided(), .eps = options.eps,
      .momentum = options.momentum};
  cudnn::batch_norm_forward_training(args);
  if (running_mean.defined() && rm.raw_data() != running_mean.raw_data()) {  // a non-contiguous running stat
    NoGradGuard no_grad;
    Tensor(running_mean).copy_(rm);
    Tensor(running_var).copy_(rv);
  }
  if (!needs_grad({x_in, weight, bias})) return y;
  const bool need_weight = weight.defined() && weight.requires_grad();
  const bool need_bias = bias.defined() && bias.requires_grad();
  record("batch_norm", {x_in, weight, bias}, y,
         [=](const Tensor& dy_in) -> std::vector<Tensor> {
           Tensor dy = dy_in.contiguous(format);
           Tensor dx = empty_like(x), dw = empty({c}, channel_options(x)),
                  db = empty({c}, channel_options(x));
           cudnn::batch_norm_backward({.dx = dx.strided(), .dweight = dw.strided(),
                                       .dbias = db.strided(), .dy = dy.strided(), .x = x.strided(),
                                       .weight = w.strided(), .save_mean = save_mean.strided(),
                                       .save_invstd = save_invstd.strided()});
           return {dx, need_weight ? dw : Tensor(), need_bias ? db : Tensor()};
         },
         {x, w});
  return y;
}

// dx, dweight, dbias from the statistics the forward used (cpu/norm.h has the formulas).
void record_batch_norm_backward(Tensor& y, const Tensor& x, const Tensor& weight,
                                const Tensor& bias, const Tensor& save_mean,
                                const Tensor& save_invstd, bool training) {
  const bool need_x = x.requires_grad();
  const bool need_weight = weight.defined() && weight.requires_grad();
  const bool need_bias = bias.defined() && bias.requires_grad();
  std::vector<Tensor> saved = {x};
  if (weight.defined()) saved.push_back(weight);
  record(
      "batch_norm", {x, weight, bias}, y,
      [=](const Tensor& dy) -> std::vector<Tensor> {
        Tensor dx = need_x ? empty_like(x) : Tensor();
        Tensor dweight = need_weight ? empty_like(weight) : Tensor();
        Tensor dbias = need_bias ? empty_like(bias) : Tensor();
        if (need_x && on_onednn_tier(x) &&
            onednn::batch_norm_backward(dx.strided(), strided_or_none(dweight),
                                        strided_or_none(dbias),
                                        dy.contiguous(x.suggest_memory_format()).strided(),
                                        x.strided(), save_mean.strided(), save_invstd.strided(),
                                        strided_or_none(weight), training)) {
          return {dx, dweight, dbias};
        }
        LOOM_KERNEL(dy, batch_norm_backward, strided_or_none(dx), strided_or_none(dweight),
                                 strided_or_none(dbias), dy.strided(), x.strided(),
                                 save_mean.strided(), save_invstd.strided(),
                                 strided_or_none(weight), training);
        return {dx, dweight, dbias};
      },
      saved);
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, BatchNormOptions options) {
  trace::OpScope trace("batch_norm");
  const auto attributes = [&] {
    return std::vector<trace::Attribute>{
        {"training", int64_t{options.training}}, {"momentum", options.momentum}, {"eps", options.eps}};
  };
  if (trace.substituting()) {  // fusion by tracing: this norm may be part of a fused chain
    if (auto y = trace.substitute({x, running_mean, running_var, weight, bias}, attributes())) return *y;
  }
  auto traced = [&](const Tensor& y) {
    if (trace.recording()) trace.record({x, running_mean, running_var, weight, bias}, y, attributes());
    return y;
  };
  norm_detail::check_channel_norm_args(kOp, x, running_mean, running_var, weight, bias,
                                       options.training);
  if (options.training && x.numel() == 0) return traced(empty_batch_output(x, weight, bias));
  if (x.device().is_cuda() && options.training) {
    return traced(batch_norm_training_gpu(x, running_mean, running_var, weight, bias, options));
  }
  // save_mean, save_invstd (C): what normalized x, whichever statistics they came from.
  Tensor save_mean = empty({x.size(1)}, channel_options(x));
  Tensor save_invstd = empty({x.size(1)}, channel_options(x));
  Tensor y = empty_like(x);
  if (!options.training || !batch_norm_training_onednn(y, save_mean, save_invstd, x, running_mean,
                                                       running_var, weight, bias, options)) {
    if (options.training) {
      take_batch_stats(save_mean, save_invstd, x, running_mean, running_var, options);
    } else {
      LOOM_KERNEL(x, batch_norm_running_stats, save_mean.strided(), save_invstd.strided(),
                  running_mean.strided(), running_var.strided(), options.eps);
    }
    const bool fast = on_onednn_tier(x) &&
                      onednn::batch_norm_forward(y.strided(), x.strided(), save_mean.strided(),
                                                 save_invstd.strided(), strided_or_none(weight),
                                                 strided_or_none(bias));
    if (!fast) {
      LOOM_KERNEL(x, batch_norm_forward, y.strided(), x.strided(), save_mean.strided(),
                  save_invstd.strided(), strided_or_none(weight), strided_or_none(bias));
    }
  }
  if (needs_grad({x, weight, bias})) {
    record_batch_norm_backward(y, x, weight, bias, save_mean, save_invstd, options.training);
  }
  return traced(y);
}

namespace {

void check_layer_norm_args(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                           const Tensor& bias, double eps) {
  check_float_tensor(x, "layer_norm");
  const auto k = static_cast<int64_t>(normalized_shape.size());
  LOOM_CHECK(k >= 1 && x.dim() >= k &&
                 Shape(x.sizes().end() - k, x.sizes().end()) == normalized_shape,
             ValueError,
             "[layer_norm] input {} does not end in normalized_shape {}; pass the sizes of the "
             "trailing dims to normalize over",
             shape_str(x.sizes()), shape_str(normalized_shape));
  for (const auto& [t, name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    LOOM_CHECK(!t->defined() || t->sizes() == normalized_shape, ValueError,
               "[layer_norm] {} has shape {}, expected normalized_shape {}", name,
               shape_str(t->sizes()), shape_str(normalized_shape));
  }
  LOOM_CHECK(eps >= 0, ValueError, "[layer_norm] eps must be non-negative, got {}", eps);
}

// Whether `dims` are x's last dims, in order (the rows normalize_rows takes).
bool trailing_dims(const Tensor& x, const Shape& dims) {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != x.dim() - static_cast<int64_t>(dims.size() - i)) return false;
  }
  return !dims.empty();
}

// weight or bias, already a dense (D) vector (normalize_rows), as an operand of
// the cuDNN graph, which takes no absent one: ones or zeros stand in.
Tensor row_operand(const Tensor& t, int64_t d, const Tensor& x, double stand_in) {
  return t.defined() ? t : full({d}, stand_in, x.options());
}

// Layer norm of the rows of x (N, D) on x's device: the CPU's kernels; on the
// GPU, cuDNN's graphs for float32 (weight and bias stand in when absent) and
// Loom's kernels for the other dtypes and beneath cuDNN (core/cuda/layer_norm.h).
void layer_norm_rows_forward(const Tensor& y, const Tensor& mean, const Tensor& invstd, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t d = x.size(1);
  if (x.device().is_cpu()) {
    cpu::layer_norm_forward(y.strided(), mean.strided(), invstd.strided(), x.strided(), strided_or_none(weight),
                            strided_or_none(bias), eps);
  } else if (x.dtype() == DType::Float32) {
    const Tensor w = row_operand(weight, d, x, 1.0), b = row_operand(bias, d, x, 0.0);
    cudnn::layer_norm_forward({.y = y.strided(), .mean = mean.strided(), .inv_variance = invstd.strided(),
                               .x = x.strided(), .weight = w.strided(), .bias = b.strided(), .eps = eps});
  } else {
    cuda::layer_norm_forward(y.strided(), mean.strided(), invstd.strided(), x.strided(), strided_or_none(weight),
                             strided_or_none(bias), eps);
  }
}

// dx, and dweight / dbias where defined, of layer_norm_rows_forward.
void layer_norm_rows_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                              const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight) {
  const int64_t d = x.size(1);
  if (x.device().is_cpu()) {
    cpu::layer_norm_backward(dx.strided(), strided_or_none(dweight), strided_or_none(dbias), dy.strided(),
                             x.strided(), mean.strided(), invstd.strided(), strided_or_none(weight));
  } else if (x.dtype() == DType::Float32) {
    const Tensor w = row_operand(weight, d, x, 1.0);
    const Tensor dw = dweight.defined() ? dweight : empty({d}, x.options());
    const Tensor db = dbias.defined() ? dbias : empty({d}, x.options());
    cudnn::layer_norm_backward({.dx = dx.strided(), .dweight = dw.strided(), .dbias = db.strided(),
                                .dy = dy.strided(), .x = x.strided(), .weight = w.strided(),
                                .mean = mean.strided(), .inv_variance = invstd.strided()});
  } else {
    cuda::layer_norm_backward(dx.strided(), strided_or_none(dweight), strided_or_none(dbias), dy.strided(),
                              x.strided(), mean.strided(), invstd.strided(), strided_or_none(weight));
  }
}

// Whether the row kernels take x with this weight and bias: a dtype they have
// on x's device (the CPU's float32 and float64; every floating dtype on the
// GPU), weight and bias of that dtype on that device or absent, and values.
bool rows_take(const Tensor& x, int64_t d, const Tensor& weight, const Tensor& bias) {
  const DType dtype = x.dtype();
  const auto same_or_absent = [&](const Tensor& t) {
    return !t.defined() || (t.dtype() == dtype && t.device() == x.device());
  };
  const bool dtype_ok = x.device().is_cuda() ? is_floating(dtype)
                                             : x.device().is_cpu() && (dtype == DType::Float32 ||
                                                                       dtype == DType::Float64);
  return dtype_ok && same_or_absent(weight) && same_or_absent(bias) && x.numel() > 0 && d > 0;
}

// Layer norm over the trailing dims of x, holding D = numel / rows values
// each, on the row kernels of its device (one pass forward, one backward, where
// the composed ops took eight and a dozen); nullopt where they do not take it
// (rows_take), for the composed ops, where mixed dtypes promote.
std::optional<Tensor> normalize_rows(const Tensor& x_in, int64_t d, const Tensor& weight_in, const Tensor& bias_in,
                                     double eps) {
  if (!rows_take(x_in, d, weight_in, bias_in)) return std::nullopt;
  DeviceGuard guard(x_in.device());
  const int64_t n = x_in.numel() / d;
  const Tensor x = x_in.detach().contiguous().view({n, d});
  const auto row_vector = [d](const Tensor& t) { return t.defined() ? t.detach().contiguous().view({d}) : t; };
  const Tensor weight = row_vector(weight_in), bias = row_vector(bias_in);
  TensorOptions statistics = x.options();
  statistics.dtype = kernel::statistics_dtype(x.dtype());
  Tensor y = empty_like(x), mean = empty({n}, statistics), invstd = empty({n}, statistics);
  layer_norm_rows_forward(y, mean, invstd, x, weight, bias, eps);
  Tensor out = y.view(x_in.sizes());
  if (!needs_grad({x_in, weight_in, bias_in})) return out;
  const Shape weight_shape = weight_in.defined() ? weight_in.sizes() : Shape{};
  const Shape bias_shape = bias_in.defined() ? bias_in.sizes() : Shape{};
  record("layer_norm", {x_in, weight_in, bias_in}, out,
         [=](const Tensor& dy_in) -> std::vector<Tensor> {
           const Tensor dy = dy_in.contiguous().view({n, d});
           Tensor dx = empty_like(x);
           Tensor dw = weight.defined() ? empty({d}, x.options()) : Tensor();
           Tensor db = bias.defined() ? empty({d}, x.options()) : Tensor();
           layer_norm_rows_backward(dx, dw, db, dy, x, mean, invstd, weight);
           return {dx.view(x_in.sizes()), dw.defined() ? dw.view(weight_shape) : Tensor(),
                   db.defined() ? db.view(bias_shape) : Tensor()};
         },
         {x, weight, mean, invstd});
  return out;
}

Shape dims_from(int64_t first, int64_t rank) {
  Shape dims;
  for (int64_t d = first; d < rank; ++d) dims.push_back(d);
  return dims;
}

}  // namespace

Tensor normalize(const Tensor& x, const Shape& reduce_dims, double eps) {
  if (trailing_dims(x, reduce_dims)) {
    const int64_t d = numel_of(Shape(x.sizes().end() - static_cast<int64_t>(reduce_dims.size()), x.sizes().end()));
    if (std::optional<Tensor> y = normalize_rows(x, d, Tensor(), Tensor(), eps)) return *y;
  }
  const Tensor centered = x - mean(x, reduce_dims, /*keepdim=*/true);
  const Tensor variance = mean(centered * centered, reduce_dims, /*keepdim=*/true);
  return centered / sqrt(variance + eps);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  trace::OpScope trace("layer_norm");
  auto traced = [&](const Tensor& y) {
    if (trace.recording()) {
      trace.record({x, weight, bias}, y, {{"normalized_shape", normalized_shape}, {"eps", eps}});
    }
    return y;
  };
  check_layer_norm_args(x, normalized_shape, weight, bias, eps);
  if (std::optional<Tensor> y = normalize_rows(x, numel_of(normalized_shape), weight, bias, eps)) {
    return traced(*y);
  }
  // A 16-bit x with float32 weight or bias (a half-precision model's input
  // beside float32 parameters) computes in float32 and returns in x's dtype,
  // rounded once, as PyTorch's mixed-dtype layer norm does.
  const auto float32_operand = [](const Tensor& t) { return t.defined() && t.dtype() == DType::Float32; };
  const bool mixed = is_half_precision(x.dtype()) && (float32_operand(weight) || float32_operand(bias));
  Tensor y = normalize(mixed ? x.to(DType::Float32) : x,
                       dims_from(x.dim() - static_cast<int64_t>(normalized_shape.size()), x.dim()), eps);
  if (weight.defined()) y = y * weight;  // broadcast over the leading dims
  if (bias.defined()) y = y + bias;
  return traced(mixed ? y.to(x.dtype()) : y);
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  trace::OpScope trace("group_norm");
  check_float_tensor(x, "group_norm");
  LOOM_CHECK(x.dim() >= 2 && num_groups > 0 && x.size(1) % num_groups == 0, ValueError,
             "[group_norm] Expected number of channels in input to be divisible by num_groups, "
             "but got input of shape {} and num_groups={}; pick num_groups dividing C",
             shape_str(x.sizes()), num_groups);
  LOOM_CHECK(eps >= 0, ValueError, "[group_norm] eps must be non-negative, got {}", eps);
  norm_detail::check_channel_operand("group_norm", weight, "weight", x);
  norm_detail::check_channel_operand("group_norm", bias, "bias", x);
  const MemoryFormat format = x.suggest_memory_format();
  // (N, G, C / G * H * W): each group's values as one row.
  const int64_t per_group = numel_of(Shape(x.sizes().begin() + 1, x.sizes().end())) / num_groups;
  const Tensor rows = normalize(x.reshape({x.size(0), num_groups, per_group}), {2}, eps);
  Tensor y = channel_affine(rows.view(x.sizes()), weight, bias);
  if (format == MemoryFormat::ChannelsLast) y = y.contiguous(format);
  if (trace.recording()) {
    trace.record({x, weight, bias}, y, {{"num_groups", num_groups}, {"eps", eps}});
  }
  return y;
}

namespace {

// Blends running statistics (C) in place toward the batch average of each
// instance's mean and unbiased variance, as PyTorch's instance_norm.
void update_instance_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                           const InstanceNormOptions& options) {
  NoGradGuard no_grad;
  check_inplace(running_mean, "instance_norm");
  check_inplace(running_var, "instance_norm");
  const Shape dims = dims_from(2, x.dim());
  const int64_t m = x.numel() / (x.size(0) * x.size(1));
  const Tensor xf = x.to(norm_detail::channel_dtype(x));
  const Tensor instance_mean = mean(xf, dims, /*keepdim=*/true);
  const Tensor centered = xf - instance_mean;
  const Tensor unbiased = sum(centered * centered, dims) / static_cast<double>(m - 1);
  const double k = options.momentum;
  Tensor(running_mean).copy_(running_mean * (1 - k) + mean(instance_mean.view({x.size(0), x.size(1)}), {0}) * k);
  Tensor(running_var).copy_(running_var * (1 - k) + mean(unbiased, {0}) * k);
}

}  // namespace

Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight, const Tensor& bias, InstanceNormOptions options) {
  trace::OpScope trace("instance_norm");
  norm_detail::check_channel_norm_args("instance_norm", x, running_mean, running_var, weight, bias,
                                       options.use_input_stats);
  LOOM_CHECK(!options.use_input_stats || x.dim() >= 3, ShapeError,
             "[instance_norm] expects input (N, C, L) or (N, C, H, W) but got shape {}; a (N, C) "
             "input has one value per instance",
             shape_str(x.sizes()));
  const int64_t per_instance = x.dim() < 3 ? 0 : numel_of(Shape(x.sizes().begin() + 2, x.sizes().end()));
  LOOM_CHECK(!options.use_input_stats || per_instance > 1, ValueError,
             "[instance_norm] Expected more than 1 spatial element when training, got input size "
             "{}; use a larger input or use_input_stats = false",
             shape_str(x.sizes()));
  Tensor y;
  if (!options.use_input_stats) {  // batch norm's eval: the running statistics per channel
    y = batch_norm(x, running_mean, running_var, weight, bias,
                   {.training = false, .momentum = options.momentum, .eps = options.eps});
  } else if (x.numel() == 0) {
    y = empty_batch_output(x, weight, bias);
  } else {
    if (running_mean.defined()) update_instance_stats(x, running_mean, running_var, options);
    y = channel_affine(normalize(x, dims_from(2, x.dim()), options.eps), weight, bias);
  }
  if (trace.recording()) {
    trace.record({x, running_mean, running_var, weight, bias}, y,
                 {{"use_input_stats", int64_t{options.use_input_stats}},
                  {"momentum", options.momentum}, {"eps", options.eps}});
  }
  return y;
}

}  // namespace loom
