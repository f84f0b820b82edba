// File: layers/activation.cc
// The module is its row's functional op; the row names the module.
#include "layers/activation.h"

#include <fmt/format.h>

#include "core/error.h"
#include "layers/repr.h"

namespace loom::nn {

Activation::Activation(ActivationKind kind, std::optional<double> parameter)
    : kind_(kind), parameter_(parameter) {
  const cpu::ActivationInfo& row = cpu::activation_info(kind);
  LOOM_CHECK(!parameter || *row.parameter_name != '\0', ValueError,
             "[{}] takes no parameter, got {}; construct it without one", row.module_name, *parameter);
}

Tensor Activation::forward(const Tensor& x) { return activation(x, kind_, parameter_); }

std::string Activation::type_name() const { return cpu::activation_info(kind_).module_name; }

std::string Activation::extra_repr() const {
  const cpu::ActivationInfo& row = cpu::activation_info(kind_);
  if (*row.parameter_name == '\0') return row.extra_repr;
  std::string repr = fmt::format("{}={}", row.parameter_name,
                                 python_float(parameter_.value_or(row.default_parameter)));
  return *row.extra_repr == '\0' ? repr : fmt::format("{}, {}", repr, row.extra_repr);
}

GELU::GELU(std::string_view approximate)
    : Activation(approximate == "tanh" ? ActivationKind::GeluTanh : ActivationKind::Gelu) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh", ValueError,
             "[GELU] approximate must be 'none' or 'tanh', got '{}'", approximate);
}

}  // namespace loom::nn
