// File: core/anomaly.cc
// Anomaly mode: the guard, the running module's name, and the finite check of each op.
#include "core/anomaly.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/autograd.h"
#include "core/error.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/stream.h"
#endif

namespace loom {

namespace {

thread_local bool anomaly_mode = false;
thread_local std::string running_module;

std::string where(const std::string& module) {
  return module.empty() ? "outside any module" : "in " + module;
}

// "NaN", "inf" or "-inf": the first non-finite value, for the message.
// The values as doubles, read without recording the conversion (which would
// check itself, and so on).
std::vector<double> host_values(const Tensor& t) {
  NoGradGuard no_grad;
  return t.detach().to_vector<double>();
}

std::string first_nonfinite(const Tensor& t) {
  for (double v : host_values(t)) {
    if (std::isnan(v)) return "NaN";  // without a sign: printf's "-nan" reads as a value
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  }
  return "none";
}

std::string describe(const Tensor& t) {
  return fmt::format("{} {} on {}", shape_str(t.sizes()), dtype_name(t.dtype()), t.device().str());
}

// Only a CUDA tensor can be inside a capture; asking the runtime about a CPU
// tensor would fail on a machine without a GPU.
void check_not_capturing(const std::string& op, const Tensor& t) {
  DeviceGuard guard(t.device());
#ifdef LOOM_WITH_CUDA
  if (!t.defined() || !t.device().is_cuda()) return;
  LOOM_CHECK(!cuda::is_capturing(), AutogradError,
             "[anomaly] '{}' ran inside CUDA-graph capture, where anomaly mode cannot read values "
             "back; run the step eagerly (TrainStep's cuda_graph off, the trainers do so under "
             "--detect-anomaly)",
             op);
#else
  (void)op;
  (void)t;
#endif
}

}  // namespace

bool anomaly_mode_enabled() { return anomaly_mode; }

AnomalyGuard::AnomalyGuard(bool enabled) : previous_(anomaly_mode) { anomaly_mode = enabled; }
AnomalyGuard::~AnomalyGuard() { anomaly_mode = previous_; }

AnomalyModuleScope::AnomalyModuleScope(std::string where)
    : outer_(std::exchange(running_module, std::move(where))) {}
AnomalyModuleScope::~AnomalyModuleScope() { running_module = std::move(outer_); }

const std::string& anomaly_module() { return running_module; }

bool all_finite(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype())) return true;
  std::vector<double> values = host_values(t);
  return std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
}

// Why the inputs of an op whose output is not finite explain it, or "" when they are all finite.
std::string nonfinite_input(const std::vector<Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (all_finite(inputs[i])) continue;
    if (inputs[i].is_leaf() && inputs[i].requires_grad()) {
      return fmt::format(
          ": its input {} ({}) is a leaf that requires grad, a parameter, and already held {}: an "
          "optimizer step (lower the learning rate) or the initialisation put it there",
          i, describe(inputs[i]), first_nonfinite(inputs[i]));
    }
    return fmt::format(
        ": its input {} ({}) already held {}, so it came from the data or from an op autograd "
        "does not record (one on tensors that need no grad)",
        i, describe(inputs[i]), first_nonfinite(inputs[i]));
  }
  return "";
}

void check_forward_finite(const std::string& op, const std::string& module,
                          const std::vector<Tensor>& inputs, const Tensor& output) {
  check_not_capturing(op, output);
  if (all_finite(output)) return;
  std::string cause = nonfinite_input(inputs);
  if (cause.empty()) {
    cause = ": its inputs were finite, so this op made it; check its domain (log or sqrt of a "
            "negative, a division by zero, an overflow) or lower the learning rate";
  }
  throw NonFiniteError(fmt::format("[anomaly] the forward of '{}' {} produced {} (output {}){}", op,
                                   where(module), first_nonfinite(output), describe(output), cause));
}

void check_backward_finite(const std::string& op, const std::string& module,
                           const Tensor& grad_output, const std::vector<Tensor>& grads) {
  check_not_capturing(op + " backward", grad_output);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (all_finite(grads[i])) continue;
    throw NonFiniteError(fmt::format(
        "[anomaly] the backward of '{}' (recorded {}) produced {} in the gradient of its input {} "
        "({}){}",
        op, where(module), first_nonfinite(grads[i]), i, describe(grads[i]),
        all_finite(grad_output)
            ? ": the gradient it received was finite, so this op's derivative made it (e.g. the "
              "derivative of sqrt at 0, or of log at 0)"
            : ": the gradient it received already held NaN/inf"));
  }
}

}  // namespace loom
