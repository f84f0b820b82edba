// File: layers/dropout.cc
// Dropout and Dropout2d: p checked at construction; the training flag picks
// mask or identity.
#include "layers/dropout.h"

#include "core/error.h"
#include "core/ops/dropout.h"
#include "layers/repr.h"

namespace loom::nn {

Dropout::Dropout(double p, Generator* generator) : p_(p), generator_(generator) {
  LOOM_CHECK(p >= 0.0 && p <= 1.0, ValueError, "[Dropout] probability p must be in [0, 1], got {}",
             p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training(), generator_); }

std::string Dropout::extra_repr() const { return "p=" + python_float(p_) + ", inplace=False"; }

Dropout2d::Dropout2d(double p, Generator* generator) : p_(p), generator_(generator) {
  LOOM_CHECK(p >= 0.0 && p <= 1.0, ValueError,
             "[Dropout2d] probability p must be in [0, 1], got {}", p);
}

Tensor Dropout2d::forward(const Tensor& x) { return dropout2d(x, p_, is_training(), generator_); }

std::string Dropout2d::extra_repr() const { return "p=" + python_float(p_) + ", inplace=False"; }

}  // namespace loom::nn
