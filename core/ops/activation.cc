// File: core/ops/activation.cc
// One op for every activation row: the forward kernel (cuDNN graph or Loom
// kernel), and an autograd node that saves what the row says.
#include "core/ops/activation.h"

#include "core/autograd.h"
#include "core/cpu/activation.h"
#include "core/error.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#ifdef LOOM_WITH_CUDA
#include "core/cudnn/pointwise.h"
#endif

namespace loom {

namespace {

bool forward_by_cudnn(const Tensor& y, const Tensor& x, ActivationKind kind, double parameter) {
  DeviceGuard guard(x.device());
#ifdef LOOM_WITH_CUDA
  return x.device().is_cuda() && cudnn::activation_forward(kind, parameter, y.strided(), x.strided());
#else
  return false;
#endif
}

bool backward_by_cudnn(const Tensor& dx, const Tensor& dy, const Tensor& saved, ActivationKind kind,
                       double parameter) {
  DeviceGuard guard(saved.device());
#ifdef LOOM_WITH_CUDA
  return saved.device().is_cuda() &&
         cudnn::activation_backward(kind, parameter, dx.strided(), dy.strided(), saved.strided());
#else
  return false;
#endif
}

double parameter_of(const cpu::ActivationInfo& row, std::optional<double> parameter) {
  LOOM_CHECK(!parameter || *row.parameter_name != '\0', ValueError,
             "[{}] takes no parameter, got {}; call it without one", row.name, *parameter);
  return parameter.value_or(row.default_parameter);
}

}  // namespace

Tensor activation(const Tensor& x, ActivationKind kind, std::optional<double> parameter_in) {
  const cpu::ActivationInfo& row = cpu::activation_info(kind);
  check_float_tensor(x, row.name);
  const double parameter = parameter_of(row, parameter_in);
  Tensor y = empty_like(x);
  if (!forward_by_cudnn(y, x, kind, parameter)) {
    LOOM_KERNEL(y, activation_forward, y.strided(), x.strided(), kind, parameter);
  }
  if (needs_grad({x})) {
    Tensor saved = row.saved == cpu::Saved::Output ? y.detach() : x.detach();
    record(row.name, {x}, y, [saved, kind, parameter](const Tensor& dy_in) {
      Tensor dx = empty_like(saved);
      Tensor dy = dy_in.contiguous(saved.suggest_memory_format());
      if (!backward_by_cudnn(dx, dy, saved, kind, parameter)) {
        LOOM_KERNEL(dx, activation_backward, dx.strided(), dy.strided(), saved.strided(), kind, parameter);
      }
      return std::vector<Tensor>{dx};
    }, {saved});
  }
  return y;
}

Tensor relu(const Tensor& x) { return activation(x, ActivationKind::Relu); }
Tensor sigmoid(const Tensor& x) { return activation(x, ActivationKind::Sigmoid); }
Tensor tanh(const Tensor& x) { return activation(x, ActivationKind::Tanh); }
Tensor silu(const Tensor& x) { return activation(x, ActivationKind::Silu); }
Tensor elu(const Tensor& x, double alpha) { return activation(x, ActivationKind::Elu, alpha); }
Tensor softplus(const Tensor& x, double beta) { return activation(x, ActivationKind::Softplus, beta); }

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return activation(x, ActivationKind::LeakyRelu, negative_slope);
}

Tensor gelu(const Tensor& x, std::string_view approximate) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh", ValueError,
             "[gelu] approximate must be 'none' or 'tanh', got '{}'", approximate);
  return activation(x, approximate == "tanh" ? ActivationKind::GeluTanh : ActivationKind::Gelu);
}

}  // namespace loom
