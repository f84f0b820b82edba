// File: layers/init.h
// Weight initialisation as torch.nn.init, drawing from a Generator (the
// default one, seeded with loom::manual_seed, when none is given). Fills
// happen in place without recording grad, so they work on parameters, on any
// device and in any floating dtype; a tensor without elements is left as it is
// (PyTorch warns and does the same). Each takes the tensor by handle, as
// libtorch's do (a copy of a Tensor shares its storage), so a layer's
// `weight()` is filled where it lives, and returns it.
//
//   for (auto& [name, m] : net.named_modules()) {                      // torchvision's ResNet init
//     if (auto conv = std::dynamic_pointer_cast<nn::Conv2d>(m)) {
//       nn::init::kaiming_normal_(conv->weight(), 0, nn::init::FanMode::FanOut, nn::init::Nonlinearity::ReLU);
//     } else if (auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>(m)) {
//       nn::init::ones_(bn->weight());
//       nn::init::zeros_(bn->bias());
//     }
//   }
//   nn::init::xavier_uniform_(fc.weight());           // transformers
//   nn::init::trunc_normal_(pos_embedding, 0, 0.02);  // ViT (the bounds, -2 and 2, are absolute)
#pragma once

#include <cstdint>
#include <optional>

#include "core/generator.h"
#include "core/tensor.h"

namespace loom::nn::init {

// Which fan the Kaiming initialisers scale by: fan_in keeps the forward's
// variance, fan_out the backward's.
enum class FanMode { FanIn, FanOut };

// The activation after the layer, for calculate_gain.
enum class Nonlinearity { Linear, Conv, Sigmoid, Tanh, ReLU, LeakyReLU, SELU };

// torch.nn.init.calculate_gain: 1 for Linear, Conv and Sigmoid, 5/3 for Tanh,
// sqrt(2) for ReLU, sqrt(2 / (1 + slope^2)) for LeakyReLU (slope `param`,
// 0.01 when not given) and 3/4 for SELU. `param` is read by LeakyReLU only.
double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param = std::nullopt);

// The fans of a weight (K, C, R, S...) or (out, in), as
// torch.nn.init._calculate_fan_in_and_fan_out: fan_in is size(1) times the
// product of the dims after it (the receptive field), fan_out size(0) times it.
int64_t fan_in(const Tensor& weight);
int64_t fan_out(const Tensor& weight);

// U(low, high), elementwise independent.
Tensor uniform_(Tensor t, double low, double high, Generator* generator = nullptr);

// N(mean, std^2), elementwise independent.
Tensor normal_(Tensor t, double mean = 0.0, double std = 1.0, Generator* generator = nullptr);

// N(mean, std^2) truncated to [a, b] (absolute bounds, as PyTorch's), drawn by
// inverting the normal CDF over the uniform [cdf(a), cdf(b)], so no value is
// redrawn and every one lies within the bounds.
Tensor trunc_normal_(Tensor t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0,
                     Generator* generator = nullptr);

Tensor constant_(Tensor t, double value);
Tensor zeros_(Tensor t);
Tensor ones_(Tensor t);

// U(-bound, bound) with bound = gain * sqrt(3 / fan), gain
// calculate_gain(nonlinearity, a) and fan the weight's fan_in or fan_out.
// PyTorch's layers use a = sqrt(5) with the default LeakyReLU, which makes
// bound = 1 / sqrt(fan_in).
Tensor kaiming_uniform_(Tensor t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU, Generator* generator = nullptr);

// N(0, std^2) with std = gain / sqrt(fan), gain and fan as kaiming_uniform_'s.
Tensor kaiming_normal_(Tensor t, double a = 0.0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nonlinearity = Nonlinearity::LeakyReLU, Generator* generator = nullptr);

// U(-bound, bound) with bound = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor t, double gain = 1.0, Generator* generator = nullptr);

// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor t, double gain = 1.0, Generator* generator = nullptr);

// What PyTorch's Conv2d and Linear reset_parameters do: weight
// kaiming_uniform_(a = sqrt(5)), bias (when defined) U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void default_weight_and_bias_(Tensor weight, Tensor bias, Generator* generator = nullptr);

}  // namespace loom::nn::init
