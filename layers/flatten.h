// File: layers/flatten.h
// Flatten, as torch.nn.Flatten: merges dims start_dim..end_dim into one, by
// default everything but the batch dim: (N, C, H, W) -> (N, C * H * W).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_dim_(start_dim), end_dim_(end_dim) {}
  // A view where the strides allow one (NCHW), else a copy in NCHW order, so a
  // channels-last input flattens to the same features as a contiguous one.
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;

 private:
  int64_t start_dim_;
  int64_t end_dim_;
};

}  // namespace loom::nn
