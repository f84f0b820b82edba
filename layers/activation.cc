// File: layers/activation.cc
// The module is its row's functional op; the row names the module.
#include "layers/activation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "layers/repr.h"

namespace loom::nn {

// The scalars are checked now, so a bad one fails where the model is built.
Activation::Activation(ActivationKind kind, std::vector<double> parameters)
    : kind_(kind), parameters_(std::move(parameters)) {
  activation_parameters(kind, parameters_, kernel::activation_info(kind).module_name);
}

Tensor Activation::forward(const Tensor& x) { return activation(x, kind_, parameters_); }

std::string Activation::type_name() const { return kernel::activation_info(kind_).module_name; }

// "negative_slope=0.01", "min_val=-1.0, max_val=1.0", then the row's fixed part.
std::string Activation::extra_repr() const {
  const kernel::ActivationInfo& row = kernel::activation_info(kind_);
  const kernel::ActivationParameters values = activation_parameters(kind_, parameters_, row.module_name);
  std::vector<std::string> parts;
  for (int i = 0; i < kernel::parameter_count(row); ++i) {
    parts.push_back(fmt::format("{}={}", row.parameter_names[i], python_float(values[i])));
  }
  if (*row.extra_repr != '\0') parts.push_back(row.extra_repr);
  return fmt::format("{}", fmt::join(parts, ", "));
}

GELU::GELU(std::string_view approximate)
    : Activation(approximate == "tanh" ? ActivationKind::GeluTanh : ActivationKind::Gelu) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh", ValueError,
             "[GELU] approximate must be 'none' or 'tanh', got '{}'", approximate);
}

PReLU::PReLU(int64_t num_parameters, double init) : init_(init) {
  LOOM_CHECK(num_parameters >= 1, ValueError, "[PReLU] num_parameters must be >= 1, got {}", num_parameters);
  weight_ = register_parameter("weight", empty({num_parameters}));
  reset_parameters();
}

void PReLU::reset_parameters() {
  NoGradGuard no_grad;
  weight_.fill_(init_);
}

Tensor PReLU::forward(const Tensor& x) { return prelu(x, weight_); }

std::string PReLU::extra_repr() const { return fmt::format("num_parameters={}", weight_.numel()); }

}  // namespace loom::nn
