// File: core/ops/indexing_internal.h
// gather without the index checks, for ops whose index Loom made itself (sort's
// positions): the public gather copies a GPU index to the host to check its
// range, which such an index need not pay.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace loom::indexing_detail {

// gather(x, dim, index) for an int64 index on x's device, every value in
// [0, x.size(dim)), of x's number of dims; differentiable as gather.
Tensor gather_in_range(const Tensor& x, int64_t dim, const Tensor& index);

}  // namespace loom::indexing_detail
