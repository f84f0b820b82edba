// File: layers/softmax.cc
// Softmax and LogSoftmax forward to their functional ops.
#include "layers/softmax.h"

#include <fmt/format.h>

#include "core/ops/softmax.h"

namespace loom::nn {

Tensor Softmax::forward(const Tensor& x) { return softmax(x, dim_); }
std::string Softmax::extra_repr() const { return fmt::format("dim={}", dim_); }

Tensor LogSoftmax::forward(const Tensor& x) { return log_softmax(x, dim_); }
std::string LogSoftmax::extra_repr() const { return fmt::format("dim={}", dim_); }

}  // namespace loom::nn
