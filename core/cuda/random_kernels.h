// File: core/cuda/random_kernels.h
// Launchers for the kernels in random.cu (outputs of any floating dtype, any
// strides, at most kMaxDims dims). They return the launch status;
// core/cuda/random.cc checks it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/philox.h"
#include "core/strided.h"

namespace loom::cuda {

// out = in * dropout's mask (random.h's dropout_apply); any floating dtype.
cudaError_t launch_dropout_apply(const Strided& out, const Strided& in, double p, const PhiloxArgs& philox,
                                 cudaStream_t stream);
// out (any floating dtype) = draw of block first_block + i at element i.
cudaError_t launch_fill_random(const Strided& out, const RandomDraw& draw, const PhiloxArgs& philox,
                               cudaStream_t stream);
// base = {seed, offset}, one thread: a captured graph's replay runs it first.
cudaError_t launch_store_philox_base(uint64_t* base, uint64_t seed, uint64_t offset,
                                     cudaStream_t stream);

}  // namespace loom::cuda
