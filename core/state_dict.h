// File: core/state_dict.h
// A model's or optimizer's named tensors in a fixed order, with PyTorch's names
// ("0.weight", "1.running_mean", ...): what checkpoints save and load.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace loom {

using StateDict = std::vector<std::pair<std::string, Tensor>>;

}  // namespace loom
