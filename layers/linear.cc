// File: layers/linear.cc
// Linear: PyTorch-default initialisation and a forward through loom::linear.
#include "layers/linear.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/ops/linalg.h"
#include "layers/init.h"
#include "layers/repr.h"

namespace loom::nn {

Linear::Linear(int64_t in_features, int64_t out_features, LinearOptions options)
    : in_features_(in_features), out_features_(out_features) {
  LOOM_CHECK(in_features > 0 && out_features > 0, ValueError,
             "[Linear] in_features and out_features must be positive, got {} and {}", in_features,
             out_features);
  weight_ = register_parameter("weight", empty({out_features, in_features}));
  if (options.bias) bias_ = register_parameter("bias", empty({out_features}));
  reset_parameters(options.generator);
}

void Linear::reset_parameters(Generator* generator) {
  init::default_weight_and_bias_(weight_, bias_, generator);
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight_, bias_); }

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features_, out_features_,
                     python_bool(bias_.defined()));
}

}  // namespace loom::nn
