// File: core/ops/activation.h
#pragma once

#include "core/tensor.h"

namespace loom {

Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact (erf) form, as PyTorch's default
Tensor silu(const Tensor& x);

}  // namespace loom
