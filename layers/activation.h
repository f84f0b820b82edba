// File: layers/activation.h
// Elementwise activations as modules, for Sequential: one generic
// nn::Activation for every row of core/kernel/activation.h, and PyTorch's
// named modules (ReLU, ReLU6, Sigmoid, Tanh, GELU, SiLU, ELU, LeakyReLU,
// Softplus, Mish, Hardswish, Hardtanh) as presets of it. Any shape and
// layout; no parameters (the scalars are settings, as in PyTorch). PReLU, whose
// slopes are parameters, is a module of its own.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/ops/activation.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

class Activation : public Module {
 public:
  // `parameters`: the row's scalars in the order of its names, its defaults
  // for the rest (ValueError as loom::activation_parameters).
  explicit Activation(ActivationKind kind, std::vector<double> parameters = {});

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override;  // PyTorch's class name, "LeakyReLU"
  std::string extra_repr() const override;

  ActivationKind kind() const { return kind_; }
  const std::vector<double>& parameters() const { return parameters_; }  // as given

 private:
  ActivationKind kind_;
  std::vector<double> parameters_;
};

class ReLU : public Activation {
 public:
  ReLU() : Activation(ActivationKind::Relu) {}
};

class ReLU6 : public Activation {
 public:
  ReLU6() : Activation(ActivationKind::Relu6) {}
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
  explicit ELU(double alpha = 1.0) : Activation(ActivationKind::Elu, {alpha}) {}
};

class LeakyReLU : public Activation {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : Activation(ActivationKind::LeakyRelu, {negative_slope}) {}
};

class Softplus : public Activation {
 public:
  explicit Softplus(double beta = 1.0) : Activation(ActivationKind::Softplus, {beta}) {}
};

class Mish : public Activation {
 public:
  Mish() : Activation(ActivationKind::Mish) {}
};

class Hardswish : public Activation {
 public:
  Hardswish() : Activation(ActivationKind::Hardswish) {}
};

class Hardtanh : public Activation {
 public:
  // min_val < max_val.
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0)
      : Activation(ActivationKind::Hardtanh, {min_val, max_val}) {}
};

// PReLU, as torch.nn.PReLU over loom::prelu: a learnt slope for x < 0, one for
// every channel or (num_parameters 1) one shared; parameter weight
// (num_parameters) = init.
//   nn::PReLU act(64);  // after a Conv2d with 64 output channels
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);

  Tensor forward(const Tensor& x) override;
  void reset_parameters();

  const Tensor& weight() const { return weight_; }
  std::string type_name() const override { return "PReLU"; }
  std::string extra_repr() const override;  // "num_parameters=1"

 private:
  double init_;
  Tensor weight_;
};

}  // namespace loom::nn
