// File: layers/flatten.h
// Flatten, as torch.nn.Flatten: merges dims start_dim..end_dim into one, by
// default everything but the batch dim: (N, C, H, W) -> (N, C * H * W).
// Unflatten, as torch.nn.Unflatten, splits one dim back into several:
//   nn::Unflatten(1, {64, 7, 7})  // (N, 3136) -> (N, 64, 7, 7), a decoder's first step
#pragma once

#include <cstdint>
#include <string>

#include "core/shape.h"
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

class Unflatten : public Module {
 public:
  // `sizes` multiply to the input's size at `dim`; one may be -1 (inferred).
  // Checked here for what needs no input (at least one size, each >= 0 or one -1).
  Unflatten(int64_t dim, Shape sizes);
  Tensor forward(const Tensor& x) override;  // loom::unflatten: a view of x
  std::string type_name() const override { return "Unflatten"; }
  std::string extra_repr() const override;

 private:
  int64_t dim_;
  Shape sizes_;
};

}  // namespace loom::nn
