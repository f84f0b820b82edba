// File: core/cuda/conv_wgrad_mma_kernels.h
// Launchers for the tensor-core weight gradient in conv_wgrad_mma.cu (see conv_wgrad_mma.h). They return
// the launch status; conv_wgrad_mma.cc checks it and the operands.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernel/conv.h"
#include "core/strided.h"

namespace loom::cuda {

// True when one output row's tile and its input window fit a block's shared memory.
bool conv_wgrad_mma_fits(const Strided& dw, const Strided& dy, const Strided& x, const kernel::ConvParams& p);
// The float32 partial sums the first stage writes: 0 where the shape does not fit or the driver refuses the
// kernel (whose launch then returns the driver's error).
int64_t conv_wgrad_mma_partials(const Strided& dw, const Strided& dy, const Strided& x,
                                const kernel::ConvParams& p);
// dw (K, C, R, S) = sum over N, P, Q of dy (N, K, P, Q) times x's window element; partials is float32
// scratch of conv_wgrad_mma_partials elements.
cudaError_t launch_conv_wgrad_mma(const Strided& dw, const Strided& dy, const Strided& x,
                                  const kernel::ConvParams& p, float* partials, cudaStream_t stream);

}  // namespace loom::cuda
