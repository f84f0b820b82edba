// File: layers/init.h
// Weight initialisation as torch.nn.init, drawing from a Generator (the
// default one, seeded with loom::manual_seed, when none is given). Fills
// happen in place without recording grad, so they work on parameters.
//
//   nn::init::kaiming_uniform_(weight, std::sqrt(5.0));  // PyTorch's Conv2d / Linear default
#pragma once

#include <cstdint>

#include "core/generator.h"
#include "core/tensor.h"

namespace loom::nn::init {

// fan_in of a weight (K, C, R, S...) or (out, in): size(1) times the product
// of the dims after it, as torch.nn.init._calculate_fan_in_and_fan_out.
int64_t fan_in(const Tensor& weight);

// U(low, high), elementwise independent.
Tensor& uniform_(Tensor& t, double low, double high, Generator* generator = nullptr);

// U(-bound, bound) with bound = gain * sqrt(3 / fan_in) and the leaky-ReLU gain
// sqrt(2 / (1 + a^2)) (mode fan_in). PyTorch's layers use a = sqrt(5), which
// makes bound = 1 / sqrt(fan_in).
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, Generator* generator = nullptr);

Tensor& constant_(Tensor& t, double value);

// What PyTorch's Conv2d and Linear reset_parameters do: weight
// kaiming_uniform_(a = sqrt(5)), bias (when defined) U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void default_weight_and_bias_(Tensor& weight, Tensor& bias, Generator* generator = nullptr);

}  // namespace loom::nn::init
