// File: core/cuda/norm_kernels.h
// Launchers for the batch-norm kernels in norm.cu: the GPU twins of
// core/cpu/norm.h (float32 and float64, any strides, at most kMaxDims dims; x,
// y, dx, dy may also be bfloat16 / float16 with float32 per-channel vectors). An
// optional operand is a null pointer when absent. The kernels that sum over
// each channel take `scratch`: batch_norm_scratch_bytes(x) bytes of device
// memory, used only by the launch's own kernels. They return the launch status;
// core/cuda/norm.cc checks it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/strided.h"

namespace loom::cuda {

cudaError_t launch_batch_norm_running_stats(const Strided& save_mean, const Strided& save_invstd,
                                            const Strided& running_mean,
                                            const Strided& running_var, double eps,
                                            cudaStream_t stream);
// weight and bias may be null (1 and 0).
cudaError_t launch_batch_norm_forward(const Strided& y, const Strided& x, const Strided& mean,
                                      const Strided& invstd, const Strided* weight,
                                      const Strided* bias, cudaStream_t stream);
// The eval backward; writes each of dx, dweight, dbias that is not null. weight
// may be null (1).
cudaError_t launch_batch_norm_backward_eval(const Strided* dx, const Strided* dweight,
                                            const Strided* dbias, const Strided& dy,
                                            const Strided& x, const Strided& mean,
                                            const Strided& invstd, const Strided* weight,
                                            void* scratch, cudaStream_t stream);

// Training: batch mean and 1 / sqrt(biased var + eps) per channel, blending
// the running statistics (unbiased var) when running_mean is not null.
cudaError_t launch_batch_norm_batch_stats(const Strided& save_mean, const Strided& save_invstd,
                                          const Strided& x, double eps,
                                          const Strided* running_mean, const Strided* running_var,
                                          double momentum, void* scratch, cudaStream_t stream);
// The training backward; writes each of dx, dweight, dbias that is not null.
cudaError_t launch_batch_norm_backward_training(const Strided* dx, const Strided* dweight,
                                                const Strided* dbias, const Strided& dy,
                                                const Strided& x, const Strided& mean,
                                                const Strided& invstd, const Strided* weight,
                                                void* scratch, cudaStream_t stream);
// The scratch the three launches above take for `x`.
size_t batch_norm_scratch_bytes(const Strided& x);

}  // namespace loom::cuda
