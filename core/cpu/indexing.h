// File: core/cpu/indexing.h
// Reading, writing and accumulating along one dim at int64 indices: the kernels
// behind loom::gather, index_select, embedding, scatter, scatter_add and
// index_add (core/ops/indexing.h) and gather's backward (scatter-add).
//
// All take the indexed operand as a "base" view: its strides with the indexed
// dim's stride set to 0, over the index's sizes, plus that dim's stride apart.
// Element i then lives at base_offset(i) + index[i] * dim_stride, whatever the
// layout. Indices are in range (the ops check).
#pragma once

#include <cstdint>

#include "core/strided.h"

namespace loom::cpu {

// out[i] = in[base(i) + index[i] * in_dim_stride]; out, index and in_base have
// equal sizes; out and in share one dtype (any).
void gather(const Strided& out, const Strided& in_base, int64_t in_dim_stride,
            const Strided& index);
// out[base(i) + index[i] * out_dim_stride] += src[i]; out_base, index and src
// have equal sizes; float32, float64, int32 or int64 (integers wrap around on
// overflow). Repeated indices accumulate, in row-major order of the index.
void scatter_add(const Strided& out_base, int64_t out_dim_stride, const Strided& index,
                 const Strided& src);
// out[base(i) + index[i] * out_dim_stride] = src[i], any dtype; out_base, index
// and src have equal sizes. Writes go in row-major order of the index, so of
// repeated indices the last one's value stays.
void scatter(const Strided& out_base, int64_t out_dim_stride, const Strided& index,
             const Strided& src);

}  // namespace loom::cpu
