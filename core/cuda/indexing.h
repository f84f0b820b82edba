// File: core/cuda/indexing.h
// The GPU twins of core/cpu/indexing.h: same signatures and semantics, queued
// on cuda::current_stream(). scatter_add accumulates with atomicAdd, so the
// order in which repeated indices add up (and so the last bits of a float sum)
// may differ from run to run; it also takes bfloat16 and float16 (integer sums
// are exact). scatter_add_sorted is the deterministic form the ops use under a
// deterministic policy: its caller sorts each line by target. scatter writes in
// parallel: of repeated indices, which value stays is unspecified (the CPU
// keeps the last in the index's row-major order).
#pragma once

#include <cstdint>

#include "core/strided.h"

namespace loom::cuda {

void gather(const Strided& out, const Strided& in_base, int64_t in_dim_stride,
            const Strided& index);
void scatter_add(const Strided& out_base, int64_t out_dim_stride, const Strided& index,
                 const Strided& src);
// scatter_add's sums in the CPU's order, with the CPU's bits: index and src
// contiguous (the same sizes), each line along dim sorted stably by index (so
// src's values meet their target in their original order); a floating dtype.
void scatter_add_sorted(const Strided& out_base, int64_t out_dim_stride, int64_t dim, const Strided& index,
                        const Strided& src);
void scatter(const Strided& out_base, int64_t out_dim_stride, const Strided& index,
             const Strided& src);

}  // namespace loom::cuda
