// File: core/cuda/pad_kernels.h
// Launchers for the kernels in pad.cu (semantics of core/cpu/pad.h). They
// return the launch status; core/cuda/pad.cc checks it.
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernel/pad.h"
#include "core/strided.h"

namespace loom::cuda {

cudaError_t launch_pad(const Strided& out, const Strided& in, const kernel::PadSpec& spec,
                       cudaStream_t stream);
cudaError_t launch_pad_backward(const Strided& dx, const Strided& dy, const kernel::PadSpec& spec,
                                cudaStream_t stream);

}  // namespace loom::cuda
