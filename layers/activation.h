// File: layers/activation.h
// Elementwise activations as modules, for Sequential: one generic
// nn::Activation for every row of core/cpu/activation_math.h, and PyTorch's
// named modules (ReLU, Sigmoid, Tanh, GELU, SiLU, ELU, LeakyReLU, Softplus) as
// presets of it. Any shape and layout; no parameters (the scalar is a setting,
// as in PyTorch).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/ops/activation.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

class Activation : public Module {
 public:
  // `parameter`: the row's scalar, its default when not given.
  explicit Activation(ActivationKind kind, std::optional<double> parameter = std::nullopt);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override;  // PyTorch's class name, "LeakyReLU"
  std::string extra_repr() const override;

  ActivationKind kind() const { return kind_; }
  std::optional<double> parameter() const { return parameter_; }

 private:
  ActivationKind kind_;
  std::optional<double> parameter_;
};

class ReLU : public Activation {
 public:
  ReLU() : Activation(ActivationKind::Relu) {}
};

class Sigmoid : public Activation {
 public:
  Sigmoid() : Activation(ActivationKind::Sigmoid) {}
};

class Tanh : public Activation {
 public:
  Tanh() : Activation(ActivationKind::Tanh) {}
};

class GELU : public Activation {
 public:
  // approximate: "none" (erf) or "tanh".
  explicit GELU(std::string_view approximate = "none");
};

class SiLU : public Activation {
 public:
  SiLU() : Activation(ActivationKind::Silu) {}
};

class ELU : public Activation {
 public:
  explicit ELU(double alpha = 1.0) : Activation(ActivationKind::Elu, alpha) {}
};

class LeakyReLU : public Activation {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : Activation(ActivationKind::LeakyRelu, negative_slope) {}
};

class Softplus : public Activation {
 public:
  explicit Softplus(double beta = 1.0) : Activation(ActivationKind::Softplus, beta) {}
};

}  // namespace loom::nn
