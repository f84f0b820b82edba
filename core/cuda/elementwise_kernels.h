// File: core/cuda/elementwise_kernels.h
// Launchers for the kernels in elementwise.cu (float32, float64, bfloat16 and
// float16 computing in float32; operands of one dtype and equal sizes, any
// strides, at most kMaxDims dims). They return the
// launch status; core/cuda/elementwise.cc checks it.
#pragma once

#include <cuda_runtime_api.h>

#include "core/kernel/activation.h"
#include "core/kernel/elementwise.h"
#include "core/strided.h"

namespace loom::cuda {

cudaError_t launch_unary(const Strided& out, const Strided& in, kernel::UnaryOp op,
                         cudaStream_t stream);
cudaError_t launch_activation_forward(const Strided& y, const Strided& x, kernel::ActivationKind kind,
                                      const kernel::ActivationParameters& parameters, cudaStream_t stream);
cudaError_t launch_activation_backward(const Strided& dx, const Strided& dy, const Strided& saved,
                                       kernel::ActivationKind kind, const kernel::ActivationParameters& parameters,
                                       cudaStream_t stream);
cudaError_t launch_add_activation(const Strided& y, const Strided& a, const Strided& b, kernel::ActivationKind kind,
                                  const kernel::ActivationParameters& parameters, cudaStream_t stream);
cudaError_t launch_binary(const Strided& out, const Strided& a, const Strided& b,
                          kernel::BinaryOp op, cudaStream_t stream);
cudaError_t launch_binary_scalar(const Strided& out, const Strided& a, double scalar,
                                 kernel::BinaryOp op, bool scalar_first, cudaStream_t stream);
cudaError_t launch_add_scaled(const Strided& out, const Strided& a, const Strided& b, double alpha,
                              cudaStream_t stream);
cudaError_t launch_clamp(const Strided& out, const Strided& in, double lo, double hi,
                         cudaStream_t stream);
cudaError_t launch_clamp_backward(const Strided& dx, const Strided& dy, const Strided& x, double lo,
                                  double hi, cudaStream_t stream);

}  // namespace loom::cuda
