// File: core/cuda/optim_kernels.h
// Launchers for the multi-tensor kernels in optim.cu: one launch updates every
// tensor of a slot table (float32 or float64, all of one dtype, each a dense
// array). The table and the update's scalars live in device memory, written by
// small store kernels (not host copies), so that every launch here can be
// captured into a CUDA graph. They return the launch status; core/cuda/optim.cc
// checks it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/kernel/optim_scalars.h"

namespace loom::cuda {

// Adam with amsgrad: exp_avg, exp_avg_sq, max_exp_avg_sq; centered RMSprop with
// momentum: square_avg, momentum_buffer, grad_avg.
constexpr int kMaxSlotStates = 3;

// One tensor of a multi-tensor launch. `param` is the array updated in place (for
// the clipping kernels: the gradient), `grad` the gradient read, `state` the
// optimizer's buffers in the optimizer's order (unused ones null). All have
// `numel` elements laid out alike.
struct TensorSlot {
  void* param = nullptr;
  const void* grad = nullptr;
  void* state[kMaxSlotStates] = {};
  int64_t numel = 0;
  int64_t first_chunk = 0;  // chunks of the slots before this one (set by the uploader)

  bool operator==(const TensorSlot&) const = default;
};

// Each block of a multi-tensor kernel works on chunks of kChunkSize elements
// of one tensor: a tensor of n elements has ceil(n / kChunkSize) chunks.
// Small chunks: a thread then walks only a few elements, and the latency of
// its dependent loads, not bandwidth, bounds these small updates.
constexpr int64_t kChunkSize = 512;

// The scalars of one update (declared with the optimizers). The kernels read
// them from device memory: a step's scalars are written before its launch, so
// a replayed graph picks up the current learning rate.
using optim::AdagradScalars;
using optim::AdamScalars;
using optim::RmspropScalars;
using optim::SgdScalars;
using optim::UpdateScalars;

// dst[0 .. count) = src[0 .. count) (host), through kernel arguments.
cudaError_t launch_store_slots(TensorSlot* dst, const TensorSlot* src, int count,
                               cudaStream_t stream);
// *dst = value, through a kernel argument. Scalars: each alternative of UpdateScalars.
template <class Scalars>
cudaError_t launch_store_scalars(Scalars* dst, const Scalars& value, cudaStream_t stream);

// The update its scalars' type names (SgdScalars: SGD, AdamScalars: Adam or
// AdamW, RmspropScalars: RMSprop, AdagradScalars: Adagrad) over every slot. `slots` points to `num_slots`
// device-resident slots whose chunks total num_chunks; `scalars` to device
// memory. When `skip_unless_finite` (a float in device memory: the step's loss)
// is not null and holds NaN or +-inf, the launch changes nothing: the decision
// is made on the device, so a replayed CUDA graph skips a bad step without a
// host read.
template <class Scalars>
cudaError_t launch_update(const TensorSlot* slots, int num_slots, int64_t num_chunks, DType dtype,
                          const Scalars* scalars, const float* skip_unless_finite,
                          cudaStream_t stream);
// The device-side record of skipped steps: counts[0] += 1 and, when *loss is
// NaN or +-inf, counts[1] += 1 and (the first time) counts[2] = counts[0], the
// 1-based number of the first skipped step. One thread.
cudaError_t launch_count_nonfinite(const float* loss, int64_t* counts, cudaStream_t stream);
// partials[c] = sum of param^2 over chunk c (in double), then total[0] = sum of
// the partials, in a fixed order: the result does not depend on the launch.
cudaError_t launch_sum_of_squares(const TensorSlot* slots, int num_slots, int64_t num_chunks,
                                  DType dtype, double* partials, double* total,
                                  cudaStream_t stream);
// param *= factor.
cudaError_t launch_scale(const TensorSlot* slots, int num_slots, int64_t num_chunks, DType dtype,
                         double factor, cudaStream_t stream);

}  // namespace loom::cuda
