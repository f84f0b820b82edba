// File: core/ops/dropout.h
// Inverted dropout, as torch.nn.functional.dropout: in training each element is
// zeroed with probability p and the survivors are scaled by 1 / (1 - p), so that
// evaluation needs no rescaling. dropout2d drops whole channels.
#pragma once

#include "core/generator.h"
#include "core/tensor.h"

namespace loom {

// Returns x itself (the same tensor) when !training or p == 0, zeros when p == 1.
// The mask comes from `generator` (the default generator when null): one seed
// and offset give one mask.
Tensor dropout(const Tensor& x, double p, bool training, Generator* generator = nullptr);

// Channel dropout, as torch.nn.functional.dropout2d: x (N, C, H, W); in
// training each of the N * C channels is zeroed whole with probability p and
// the rest scaled by 1 / (1 - p). The (N, C) mask is drawn as dropout draws
// an (N, C) tensor's (same generator, same Philox stream).
Tensor dropout2d(const Tensor& x, double p, bool training, Generator* generator = nullptr);

}  // namespace loom
