// File: layers/init.cc
// Initialisers: uniform draws scaled in place under NoGradGuard.
#include "layers/init.h"

#include <cmath>

#include "core/autograd.h"
#include "core/error.h"

namespace loom::nn::init {

int64_t fan_in(const Tensor& weight) {
  LOOM_CHECK(weight.dim() >= 2, ShapeError,
             "[init.fan_in] needs a weight with at least 2 dims (out, in, ...), got shape {}",
             shape_str(weight.sizes()));
  int64_t fan = 1;
  for (int64_t d = 1; d < weight.dim(); ++d) fan *= weight.size(d);
  return fan;
}

Tensor& uniform_(Tensor& t, double low, double high, Generator* generator) {
  LOOM_CHECK(low <= high, ValueError, "[init.uniform_] needs low <= high, got low {} high {}", low,
             high);
  NoGradGuard no_grad;
  return t.uniform_(low, high, generator);
}

Tensor& kaiming_uniform_(Tensor& t, double a, Generator* generator) {
  const int64_t fan = fan_in(t);
  LOOM_CHECK(fan > 0, ValueError, "[init.kaiming_uniform_] weight of shape {} has fan_in 0",
             shape_str(t.sizes()));
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan));
  return uniform_(t, -bound, bound, generator);
}

Tensor& constant_(Tensor& t, double value) {
  NoGradGuard no_grad;
  return t.fill_(value);
}

void default_weight_and_bias_(Tensor& weight, Tensor& bias, Generator* generator) {
  kaiming_uniform_(weight, std::sqrt(5.0), generator);
  if (!bias.defined()) return;
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in(weight)));
  uniform_(bias, -bound, bound, generator);
}

}  // namespace loom::nn::init
