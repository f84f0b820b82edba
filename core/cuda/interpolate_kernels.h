// File: core/cuda/interpolate_kernels.h
// Launchers for the kernels in interpolate.cu (semantics of
// core/cpu/interpolate.h). They return the launch status;
// core/cuda/interpolate.cc checks it.
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernel/interpolate.h"
#include "core/strided.h"

namespace loom::cuda {

cudaError_t launch_interpolate(const Strided& y, const Strided& x, const kernel::InterpolateSpec& spec,
                               cudaStream_t stream);
cudaError_t launch_interpolate_backward(const Strided& dx, const Strided& dy,
                                        const kernel::InterpolateSpec& spec, cudaStream_t stream);

}  // namespace loom::cuda
