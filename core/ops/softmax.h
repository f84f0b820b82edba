// File: core/ops/softmax.h
// Softmax and log-softmax over one dim, as torch.softmax / torch.log_softmax.
// For a classification loss use cross_entropy on the logits: it fuses the
// log-softmax and is stabler than log(softmax(x)).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace loom {

Tensor softmax(const Tensor& x, int64_t dim);      // dim may be negative
Tensor log_softmax(const Tensor& x, int64_t dim);  // dim may be negative

}  // namespace loom
