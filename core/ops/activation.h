// File: core/ops/activation.h
// Elementwise activations, each one row of core/cpu/activation_math.h: the
// generic op `activation` and a named function per row. On the GPU a row with
// a cuDNN pointwise mode runs as a cuDNN graph where one has an engine, else
// (and on the CPU) as Loom's kernel for the same row. Backward saves what the
// row says (the input, or the output for relu, sigmoid and tanh).
#pragma once

#include <optional>
#include <string_view>

#include "core/cpu/activation_math.h"
#include "core/tensor.h"

namespace loom {

using cpu::ActivationKind;

// y = f(x) for `kind`; `parameter` is the row's scalar (its default when not
// given); a parameter for a row without one is a ValueError.
Tensor activation(const Tensor& x, ActivationKind kind, std::optional<double> parameter = std::nullopt);

Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
// approximate: "none" (the erf form, PyTorch's default) or "tanh".
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor silu(const Tensor& x);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor softplus(const Tensor& x, double beta = 1.0);

}  // namespace loom
