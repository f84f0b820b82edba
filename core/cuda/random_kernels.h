// File: core/cuda/random_kernels.h
// Launchers for the kernels in random.cu (float32 and float64 outputs, any
// strides, at most kMaxDims dims). They return the launch status;
// core/cuda/random.cc checks it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/strided.h"

namespace loom::cuda {

cudaError_t launch_dropout_mask(const Strided& mask, double p, uint64_t seed, uint64_t first_block,
                                cudaStream_t stream);
cudaError_t launch_fill_uniform(const Strided& out, uint64_t seed, uint64_t first_block,
                                cudaStream_t stream);
cudaError_t launch_fill_normal(const Strided& out, uint64_t seed, uint64_t first_block,
                               cudaStream_t stream);

}  // namespace loom::cuda
