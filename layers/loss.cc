// File: layers/loss.cc
// Loss objects forward to the functional losses with their stored options.
#include "layers/loss.h"

#include "core/error.h"

namespace loom::nn {

CrossEntropyLoss::CrossEntropyLoss(CrossEntropyOptions options) : options_(options) {
  LOOM_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0, ValueError,
             "[CrossEntropyLoss] label_smoothing must be in [0, 1], got {}",
             options.label_smoothing);
}

Tensor CrossEntropyLoss::operator()(const Tensor& input, const Tensor& target) const {
  return cross_entropy(input, target, options_);
}

Tensor NLLLoss::operator()(const Tensor& input, const Tensor& target) const {
  return nll_loss(input, target, options_);
}

Tensor MSELoss::operator()(const Tensor& input, const Tensor& target) const {
  return mse_loss(input, target, reduction_);
}

}  // namespace loom::nn
