// File: layers/activation.cc
// Each activation module forwards to its functional op.
#include "layers/activation.h"

#include "core/ops/activation.h"

namespace loom::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }
Tensor Tanh::forward(const Tensor& x) { return loom::tanh(x); }
Tensor GELU::forward(const Tensor& x) { return gelu(x); }
Tensor SiLU::forward(const Tensor& x) { return silu(x); }

}  // namespace loom::nn
