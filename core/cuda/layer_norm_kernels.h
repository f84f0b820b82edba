// File: core/cuda/layer_norm_kernels.h
// Launchers for the layer-norm kernels in layer_norm.cu (the shapes and dtypes
// of core/cuda/layer_norm.h, checked by layer_norm.cc). An absent operand is a
// null pointer. They return the launch status.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "core/strided.h"

namespace loom::cuda {

cudaError_t launch_layer_norm_forward(const Strided& y, const Strided& mean, const Strided& invstd,
                                      const Strided& x, const Strided* weight, const Strided* bias, double eps,
                                      cudaStream_t stream);

// Bytes of scratch the column sums of dweight and dbias take for x (N, D).
size_t layer_norm_backward_scratch_bytes(const Strided& x);

// dx, and dweight / dbias where not null (then `scratch` holds
// layer_norm_backward_scratch_bytes(x)).
cudaError_t launch_layer_norm_backward(const Strided& dx, const Strided* dweight, const Strided* dbias,
                                       const Strided& dy, const Strided& x, const Strided& mean,
                                       const Strided& invstd, const Strided* weight, void* scratch,
                                       cudaStream_t stream);

}  // namespace loom::cuda
