// File: layers/dropout.h
// Dropout, as torch.nn.Dropout: in training mode each element is zeroed with
// probability p and the rest scaled by 1 / (1 - p); in eval mode the input
// passes through unchanged. Dropout2d, as torch.nn.Dropout2d, zeroes whole
// channels of an (N, C, H, W) input instead.
//
//   nn::Dropout drop(0.25);        // masks from the default generator
//   nn::Dropout seeded(0.25, &gen);  // masks from `gen`, which must outlive the layer
//   nn::Dropout2d channels(0.1);   // each (n, c) plane kept or zeroed whole
#pragma once

#include <string>

#include "core/generator.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* generator = nullptr);
  Tensor forward(const Tensor& x) override;
  double p() const { return p_; }
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;

 private:
  double p_;
  Generator* generator_;  // null: the default generator
};

class Dropout2d : public Module {
 public:
  explicit Dropout2d(double p = 0.5, Generator* generator = nullptr);
  Tensor forward(const Tensor& x) override;
  double p() const { return p_; }
  std::string type_name() const override { return "Dropout2d"; }
  std::string extra_repr() const override;

 private:
  double p_;
  Generator* generator_;  // null: the default generator
};

}  // namespace loom::nn
