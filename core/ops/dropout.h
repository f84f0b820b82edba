// File: core/ops/dropout.h
// Inverted dropout, as torch.nn.functional.dropout: in training each element is
// zeroed with probability p and the survivors are scaled by 1 / (1 - p), so that
// evaluation needs no rescaling.
#pragma once

#include "core/generator.h"
#include "core/tensor.h"

namespace loom {

// Returns x itself (the same tensor) when !training or p == 0, zeros when p == 1.
// The mask comes from `generator` (the default generator when null): one seed
// and offset give one mask.
Tensor dropout(const Tensor& x, double p, bool training, Generator* generator = nullptr);

}  // namespace loom
