// File: core/cpu/reduce.h
// Reductions. The output keeps every dim (keepdim); a dim is reduced where the
// output has size 1 and the input does not. Accumulates in double.
#pragma once

#include "core/kernel/reduce.h"
#include "core/strided.h"

namespace loom::cpu {

void reduce(const Strided& out, const Strided& in, kernel::ReduceOp op);

// Max along `dim` with the index of its first occurrence (NaN counts as max).
// values and indices (int64) have the input's sizes with sizes[dim] = 1.
void max_along(const Strided& values, const Strided& indices, const Strided& in, int64_t dim);

// The backward of max_along: dx[.., indices[..], ..] += dy[..] along `dim`.
// dy and indices have dx's sizes with sizes[dim] = 1.
void scatter_add_along(const Strided& dx, const Strided& dy, const Strided& indices, int64_t dim);

}  // namespace loom::cpu
