// File: core/cudnn/variant_pointers.h
// The pointers a plan runs with (plan.h), apart from the plan itself, so that
// headers core/ops includes can name them without cuDNN's types.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace loom::cudnn {

// (uid, pointer) for every non-virtual tensor of the graph; by-value tensors
// point to host scalars.
using VariantPointers = std::vector<std::pair<int64_t, const void*>>;

}  // namespace loom::cudnn
