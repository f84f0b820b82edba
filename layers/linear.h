// File: layers/linear.h
// Linear, as torch.nn.Linear: y = x . weight^T + bias over the last dim.
//
//   nn::Linear fc(3136, 128);
//   Tensor y = fc(x);  // x (B, 3136) -> y (B, 128); any leading dims (*, in) work
#pragma once

#include <cstdint>
#include <string>

#include "core/generator.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

struct LinearOptions {
  bool bias = true;
  Generator* generator = nullptr;  // for the initial weights; the default generator when null
};

class Linear : public Module {
 public:
  // weight (out, in) and bias (out), initialised as PyTorch does.
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});

  Tensor forward(const Tensor& x) override;  // x (*, in) -> (*, out)
  void reset_parameters(Generator* generator = nullptr);

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias
  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

 private:
  int64_t in_features_;
  int64_t out_features_;
  Tensor weight_;
  Tensor bias_;
};

}  // namespace loom::nn
