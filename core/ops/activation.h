// File: core/ops/activation.h
// Elementwise activations, each one row of core/kernel/activation.h: the
// generic op `activation` and a named function per row (PyTorch's
// torch.nn.functional names). On the GPU a row with a cuDNN pointwise mode
// runs as a cuDNN graph where one has an engine, else (and on the CPU) as
// Loom's kernel for the same row. Backward saves what the row says (the
// input, or the output for relu, sigmoid and tanh).
#pragma once

#include <string_view>
#include <vector>

#include "core/kernel/activation.h"
#include "core/tensor.h"

namespace loom {

using kernel::ActivationKind;

// The scalars given for `kind`'s row, in the order of its parameter names
// (LeakyReLU: {negative_slope}; Hardtanh: {min_val, max_val}), with the row's
// defaults for the rest. ValueError, naming `who`, for more scalars than the
// row has names, or a range (a row with two: Hardtanh) whose bounds are not
// in increasing order.
kernel::ActivationParameters activation_parameters(ActivationKind kind, const std::vector<double>& given,
                                                std::string_view who);

// y = f(x) for `kind` with `parameters` as above.
Tensor activation(const Tensor& x, ActivationKind kind, const std::vector<double>& parameters = {});

Tensor relu(const Tensor& x);
Tensor relu6(const Tensor& x);  // min(max(x, 0), 6)
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
// approximate: "none" (the erf form, PyTorch's default) or "tanh".
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor silu(const Tensor& x);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor softplus(const Tensor& x, double beta = 1.0);
Tensor mish(const Tensor& x);
Tensor hardswish(const Tensor& x);
// min(max(x, min_val), max_val); min_val < max_val.
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);

// max(0, x) + weight * min(0, x), as torch.nn.functional.prelu: weight holds one
// slope, or one per channel (dim 1 of x; an x of fewer than 2 dims has one
// channel), on x's device. A floating weight of another dtype is cast to x's
// (differentiably: a float32 weight under bf16 autocast gets a float32 gradient).
// Differentiable in x and weight; at x = 0 x's gradient is the slope, as PyTorch's.
Tensor prelu(const Tensor& x, const Tensor& weight);

}  // namespace loom
