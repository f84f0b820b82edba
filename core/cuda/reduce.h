// File: core/cuda/reduce.h
// The GPU twins of core/cpu/reduce.h: same signatures and semantics (keepdim
// outputs, NaN propagates through Max and Min and counts as the max in
// max_along, ties go to the first occurrence). Work is queued on
// cuda::current_stream().
//
// Unlike the CPU, sums accumulate in the tensor's dtype (float for float32, as
// PyTorch's GPU reductions do): each thread sums a strided share of an output's
// elements serially, a block adds its threads' partials, and a long extent's
// slices are added in slice order (reduce.cu), an order fixed by the shapes. A
// float32 sum of R standard normals then differs from the CPU's double sum by
// ~1e-6 * sqrt(R) (3e-3 at R = 1e6).
// bfloat16 and float16 (GPU-only dtypes) accumulate in float32 and round the
// result once, so a bf16 bias gradient is as exact as its 8-bit mantissa allows.
#pragma once

#include <cstdint>

#include "core/kernel/reduce.h"
#include "core/strided.h"

namespace loom::cuda {

using kernel::ReduceOp;

// The output keeps every dim; a dim is reduced where out has size 1 and in does not.
void reduce(const Strided& out, const Strided& in, ReduceOp op);

// Max along `dim` with the index of its first occurrence (NaN counts as max).
// values and indices (int64) have the input's sizes with sizes[dim] = 1.
void max_along(const Strided& values, const Strided& indices, const Strided& in, int64_t dim);

// The backward of max_along: dx[.., indices[..], ..] += dy[..] along `dim`.
// dy and indices have dx's sizes with sizes[dim] = 1.
void scatter_add_along(const Strided& dx, const Strided& dy, const Strided& indices, int64_t dim);

}  // namespace loom::cuda
