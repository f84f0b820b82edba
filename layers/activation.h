// File: layers/activation.h
// Elementwise activations as modules, for Sequential: ReLU, Sigmoid, Tanh,
// GELU (exact erf form) and SiLU. Any shape and layout; no parameters.
#pragma once

#include <string>

#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReLU"; }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sigmoid"; }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Tanh"; }
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override { return "approximate='none'"; }
};

class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SiLU"; }
};

}  // namespace loom::nn
