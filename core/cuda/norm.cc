// File: core/cuda/norm.cc
// Checked launches of the batch-norm kernels on the current stream.
#include "core/cuda/norm.h"

#include "core/cuda/allocator.h"
#include "core/cuda/norm_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

namespace {

const Strided* pointer_or_null(const std::optional<Strided>& v) { return v ? &*v : nullptr; }

}  // namespace

void batch_norm_running_stats(const Strided& save_mean, const Strided& save_invstd,
                              const Strided& running_mean, const Strided& running_var,
                              double eps) {
  LOOM_CUDA_CHECK(launch_batch_norm_running_stats(save_mean, save_invstd, running_mean,
                                                  running_var, eps, current_stream()));
}

void batch_norm_forward(const Strided& y, const Strided& x, const Strided& mean,
                        const Strided& invstd, const std::optional<Strided>& weight,
                        const std::optional<Strided>& bias) {
  check_kernel_rank(x, "batch_norm");
  LOOM_CUDA_CHECK(launch_batch_norm_forward(y, x, mean, invstd, pointer_or_null(weight),
                                            pointer_or_null(bias), current_stream()));
}

void batch_norm_batch_stats(const Strided& save_mean, const Strided& save_invstd, const Strided& x,
                            double eps, const std::optional<kernel::RunningStats>& running) {
  check_kernel_rank(x, "batch_norm");
  LOOM_CUDA_CHECK(launch_with_scratch(batch_norm_scratch_bytes(x), [&](void* scratch) {
    return launch_batch_norm_batch_stats(save_mean, save_invstd, x, eps, running ? &running->mean : nullptr,
                                         running ? &running->var : nullptr, running ? running->momentum : 0.0,
                                         scratch, current_stream());
  }));
}

void batch_norm_backward(const std::optional<Strided>& dx, const std::optional<Strided>& dweight,
                         const std::optional<Strided>& dbias, const Strided& dy, const Strided& x,
                         const Strided& mean, const Strided& invstd,
                         const std::optional<Strided>& weight, bool training) {
  check_kernel_rank(x, "batch_norm");
  const auto launch = training ? launch_batch_norm_backward_training : launch_batch_norm_backward_eval;
  LOOM_CUDA_CHECK(launch_with_scratch(batch_norm_scratch_bytes(x), [&](void* scratch) {
    return launch(pointer_or_null(dx), pointer_or_null(dweight), pointer_or_null(dbias), dy, x, mean, invstd,
                  pointer_or_null(weight), scratch, current_stream());
  }));
}

}  // namespace loom::cuda
