// File: layers/flatten.cc
// Flatten forwards to Tensor::flatten (a view where possible).
#include "layers/flatten.h"

#include <fmt/format.h>

namespace loom::nn {

Tensor Flatten::forward(const Tensor& x) { return x.flatten(start_dim_, end_dim_); }

std::string Flatten::extra_repr() const {
  return fmt::format("start_dim={}, end_dim={}", start_dim_, end_dim_);
}

}  // namespace loom::nn
