// File: layers/identity.h
// Identity, as torch.nn.Identity: forward returns its input (the same tensor),
// a placeholder where a model's structure wants a layer that does nothing
// (a shortcut without projection, a removed head). nn::fuse puts one where it
// fused an activation into the layer before, so a Sequential keeps its indices
// (and state_dict names).
//
//   auto shortcut = stride == 1 ? share_module(nn::Identity()) : share_module(nn::Conv2d(...));
#pragma once

#include <string>

#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Identity"; }
};

}  // namespace loom::nn
