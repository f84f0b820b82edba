// File: core/cuda/norm.cc
// Checked launches of the batch-norm kernels on the current stream.
#include "core/cuda/norm.h"

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
  LOOM_CUDA_CHECK(launch_batch_norm_batch_stats(
      save_mean, save_invstd, x, eps, running ? &running->mean : nullptr,
      running ? &running->var : nullptr, running ? running->momentum : 0.0, current_stream()));
}

void batch_norm_backward(const std::optional<Strided>& dx, const std::optional<Strided>& dweight,
                         const std::optional<Strided>& dbias, const Strided& dy, const Strided& x,
                         const Strided& mean, const Strided& invstd,
                         const std::optional<Strided>& weight, bool training) {
  check_kernel_rank(x, "batch_norm");
  const auto launch = training ? launch_batch_norm_backward_training : launch_batch_norm_backward_eval;
  LOOM_CUDA_CHECK(launch(pointer_or_null(dx), pointer_or_null(dweight), pointer_or_null(dbias), dy,
                         x, mean, invstd, pointer_or_null(weight), current_stream()));
}

namespace {

constexpr int64_t kMostRowChannels = 256;  // one block's threads (the partials kernel)

// Channels innermost, then the other dims in order, with no gaps.
bool dense_rows(const Strided& t) {
  if (t.dim() < 2 || (t.sizes[1] != 1 && t.strides[1] != 1)) return false;
  int64_t expected = t.sizes[1];
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    if (d == 1) continue;
    if (t.sizes[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

}  // namespace

bool batch_norm_rows_supported(const Strided& x, std::initializer_list<const Strided*> others) {
  if (x.dim() < 2 || x.sizes[1] > kMostRowChannels || x.numel() == 0 || !dense_rows(x)) return false;
  for (const Strided* t : others) {
    if (t != nullptr && (t->sizes != x.sizes || !dense_rows(*t))) return false;
  }
  return true;
}

size_t batch_norm_rows_scratch_bytes(const Strided& x) {
  return cuda::batch_norm_rows_scratch_bytes(x.numel() / x.sizes[1], x.sizes[1]);
}

void batch_norm_backward_rows(const BatchNormRowsBackward& a, void* scratch) {
  const std::optional<Strided>& dx = a.dx;
  LOOM_CHECK(batch_norm_rows_supported(a.x, {&a.dy, dx ? &*dx : nullptr, a.y ? &*a.y : nullptr,
                                             a.dresidual ? &*a.dresidual : nullptr}),
             ValueError, "[batch_norm] the rows backward takes dense channels-last operands of at most {} "
             "channels, got x {} with strides {}", kMostRowChannels, shape_str(a.x.sizes), shape_str(a.x.strides));
  LOOM_CUDA_CHECK(launch_batch_norm_backward_rows(
      pointer_or_null(a.dx), pointer_or_null(a.dresidual), a.dy, a.x, pointer_or_null(a.y), a.mean,
      a.invstd, pointer_or_null(a.weight), pointer_or_null(a.dweight), pointer_or_null(a.dbias), scratch,
      current_stream()));
}

}  // namespace loom::cuda
