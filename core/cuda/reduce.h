// File: core/cuda/reduce.h
// The GPU twins of core/cpu/reduce.h: same signatures and semantics (keepdim
// outputs, NaN propagates through Max and Min and counts as the max in
// max_along, ties go to the first occurrence). Work is queued on
// cuda::current_stream().
//
// Unlike the CPU, sums accumulate in the tensor's dtype (float for float32, as
// PyTorch's GPU reductions): each thread sums a strided share serially, then the
// block combines the partials as a tree. A float32 sum of R elements is then off
// by about sqrt(R / 256) * 6e-8 * sum |x| rather than double's negligible error.
#pragma once

#include <cstdint>

#include "core/cpu/reduce.h"
#include "core/strided.h"

namespace loom::cuda {

using cpu::ReduceOp;

// The output keeps every dim; a dim is reduced where out has size 1 and in does not.
void reduce(const Strided& out, const Strided& in, ReduceOp op);

// Max along `dim` with the index of its first occurrence (NaN counts as max).
// values and indices (int64) have the input's sizes with sizes[dim] = 1.
void max_along(const Strided& values, const Strided& indices, const Strided& in, int64_t dim);

// The backward of max_along: dx[.., indices[..], ..] += dy[..] along `dim`.
// dy and indices have dx's sizes with sizes[dim] = 1.
void scatter_add_along(const Strided& dx, const Strided& dy, const Strided& indices, int64_t dim);

}  // namespace loom::cuda
