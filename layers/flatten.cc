// File: layers/flatten.cc
// Flatten forwards to Tensor::flatten (a view where possible), Unflatten to
// loom::unflatten.
#include "layers/flatten.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/ops/shape_ops.h"

namespace loom::nn {

Tensor Flatten::forward(const Tensor& x) { return x.flatten(start_dim_, end_dim_); }

std::string Flatten::extra_repr() const {
  return fmt::format("start_dim={}, end_dim={}", start_dim_, end_dim_);
}

Unflatten::Unflatten(int64_t dim, Shape sizes) : dim_(dim), sizes_(std::move(sizes)) {
  const bool valid = !sizes_.empty() && std::ranges::all_of(sizes_, [](int64_t s) { return s >= -1; }) &&
                     std::ranges::count(sizes_, -1) <= 1;
  LOOM_CHECK(valid, ValueError, "[Unflatten] sizes must be one or more sizes >= 0 with at most one -1, got {}",
             shape_str(sizes_));
}

Tensor Unflatten::forward(const Tensor& x) { return unflatten(x, dim_, sizes_); }

// PyTorch's repr: a one-element size prints as (n,).
std::string Unflatten::extra_repr() const {
  const std::string sizes = sizes_.size() == 1 ? fmt::format("({},)", sizes_[0]) : shape_str(sizes_);
  return fmt::format("dim={}, unflattened_size={}", dim_, sizes);
}

}  // namespace loom::nn
