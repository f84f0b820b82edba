// File: core/ops/activation.cc
// One op for every activation row: the forward kernel (cuDNN graph, oneDNN
// primitive or Loom kernel), and an autograd node that saves what the row says.
#include "core/ops/activation.h"
#include "core/ops/activation_internal.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <span>
#include <string>

#include "core/autograd.h"
#include "core/cpu/activation.h"
#include "core/cudnn/activation.h"
#include "core/error.h"
#include "core/onednn/eltwise.h"
#include "core/ops/compare.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/trace.h"

namespace loom {

namespace activation_detail {

void forward_kernel(const Tensor& y, const Tensor& x, ActivationKind kind,
                    const kernel::ActivationParameters& parameters) {
  if (x.device().is_cuda()) {
    DeviceGuard guard(x.device());
    if (cudnn::activation_forward(kind, parameters, y.strided(), x.strided())) return;
  }
  if (on_onednn_tier(x) && onednn::activation_forward(y.strided(), x.strided(), kind, parameters)) return;
  LOOM_KERNEL(y, activation_forward, y.strided(), x.strided(), kind, parameters);
}

void backward_kernel(const Tensor& dx, const Tensor& dy, const Tensor& saved, ActivationKind kind,
                     const kernel::ActivationParameters& parameters, const Tensor& dy_addend) {
  if (saved.device().is_cuda()) {
    DeviceGuard guard(saved.device());
    if (cudnn::activation_backward(kind, parameters, dx.strided(), dy.strided(), saved.strided(),
                                   strided_or_none(dy_addend))) {
      return;
    }
  }
  if (dy_addend.defined()) {
    backward_kernel(dx, add(dy, dy_addend), saved, kind, parameters);
    return;
  }
  if (on_onednn_tier(saved) &&
      onednn::activation_backward(dx.strided(), dy.strided(), saved.strided(), kind, parameters)) {
    return;
  }
  LOOM_KERNEL(dx, activation_backward, dx.strided(), dy.strided(), saved.strided(), kind, parameters);
}

}  // namespace activation_detail

kernel::ActivationParameters activation_parameters(ActivationKind kind, const std::vector<double>& given,
                                                std::string_view who) {
  const kernel::ActivationInfo& row = kernel::activation_info(kind);
  const int count = kernel::parameter_count(row);
  LOOM_CHECK(count > 0 || given.empty(), ValueError, "[{}] takes no parameter, got {}; call it without one",
             who, fmt::join(given, ", "));
  LOOM_CHECK(static_cast<int>(given.size()) <= count, ValueError,
             "[{}] takes at most {} parameter{} ({}), got {}: {}", who, count, count == 1 ? "" : "s",
             fmt::join(std::span(row.parameter_names).first(static_cast<size_t>(count)), ", "), given.size(),
             fmt::join(given, ", "));
  kernel::ActivationParameters p = row.default_parameters;
  std::copy(given.begin(), given.end(), p.begin());
  LOOM_CHECK(count < 2 || p[0] < p[1], ValueError, "[{}] {} ({}) must be below {} ({}); swap them", who,
             row.parameter_names[0], p[0], row.parameter_names[1], p[1]);
  return p;
}

Tensor activation(const Tensor& x, ActivationKind kind, const std::vector<double>& given) {
  const kernel::ActivationInfo& row = kernel::activation_info(kind);
  trace::OpScope trace(row.name);
  check_float_tensor(x, row.name);
  const kernel::ActivationParameters parameters = activation_parameters(kind, given, row.name);
  const auto attributes = [&] {
    return std::vector<trace::Attribute>{
        {"parameters", std::vector<double>(parameters.begin(), parameters.end())}};
  };
  if (trace.substituting()) {  // fusion by tracing: this activation may end a fused chain
    if (auto y = trace.substitute({x}, attributes())) return *y;
  }
  Tensor y = empty_like(x);
  activation_detail::forward_kernel(y, x, kind, parameters);
  if (needs_grad({x})) {
    // A clipping row keeps y, which the next op usually keeps too, and differentiates
    // there with Loom's kernel (kernel::ActivationInfo::derivative_from_output).
    const bool loom_kernel = row.derivative_from_output;
    Tensor saved = row.saved == kernel::Saved::Output || loom_kernel ? y.detach() : x.detach();
    record(row.name, {x}, y, [saved, kind, parameters, loom_kernel](const Tensor& dy_in) {
      Tensor dx = empty_like(saved);
      Tensor dy = dy_in.contiguous(saved.suggest_memory_format());
      if (loom_kernel) {
        DeviceGuard guard(saved.device());
        LOOM_KERNEL(dx, activation_backward, dx.strided(), dy.strided(), saved.strided(), kind, parameters);
      } else {
        activation_detail::backward_kernel(dx, dy, saved, kind, parameters);
      }
      return std::vector<Tensor>{dx};
    }, {saved});
  }
  if (trace.recording()) trace.record({x}, y, attributes());
  return y;
}

Tensor relu(const Tensor& x) { return activation(x, ActivationKind::Relu); }
Tensor relu6(const Tensor& x) { return activation(x, ActivationKind::Relu6); }
Tensor sigmoid(const Tensor& x) { return activation(x, ActivationKind::Sigmoid); }
Tensor tanh(const Tensor& x) { return activation(x, ActivationKind::Tanh); }
Tensor silu(const Tensor& x) { return activation(x, ActivationKind::Silu); }
Tensor elu(const Tensor& x, double alpha) { return activation(x, ActivationKind::Elu, {alpha}); }
Tensor softplus(const Tensor& x, double beta) { return activation(x, ActivationKind::Softplus, {beta}); }
Tensor mish(const Tensor& x) { return activation(x, ActivationKind::Mish); }
Tensor hardswish(const Tensor& x) { return activation(x, ActivationKind::Hardswish); }

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return activation(x, ActivationKind::LeakyRelu, {negative_slope});
}

Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  return activation(x, ActivationKind::Hardtanh, {min_val, max_val});
}

Tensor gelu(const Tensor& x, std::string_view approximate) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh", ValueError,
             "[gelu] approximate must be 'none' or 'tanh', got '{}'", approximate);
  return activation(x, approximate == "tanh" ? ActivationKind::GeluTanh : ActivationKind::Gelu);
}

Tensor prelu(const Tensor& x, const Tensor& weight) {
  check_float_tensor(x, "prelu", "x");
  check_float_tensor(weight, "prelu", "weight");
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  LOOM_CHECK(weight.dim() <= 1 && (weight.numel() == 1 || weight.numel() == channels), ShapeError,
             "[prelu] weight of shape {} must hold 1 slope or one per channel ({}: dim 1 of x's shape {})",
             shape_str(weight.sizes()), channels, shape_str(x.sizes()));
  LOOM_CHECK(weight.device() == x.device(), DeviceError,
             "[prelu] x is on {} but weight is on {}; move the module with .to(Device)", x.device().str(),
             weight.device().str());
  Shape slope_sizes;  // 0-D for one slope, else (C, 1, ...) against x (N, C, ...)
  if (weight.numel() > 1) {
    slope_sizes.assign(static_cast<size_t>(x.dim() - 1), 1);
    slope_sizes[0] = channels;
  }
  const Tensor slope = weight.to(x.dtype()).reshape(slope_sizes);
  return where(gt(x, 0.0), x, slope * x);
}

}  // namespace loom
