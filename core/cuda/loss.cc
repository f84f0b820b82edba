// File: core/cuda/loss.cc
// The host side of the GPU losses: checked launches on the current stream; the
// device totals are read back only when asked (read_totals).
#include "core/cuda/loss.h"

#include <fmt/format.h>

#include "core/cuda/loss_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

namespace {

// One scratch per thread, made on first use and kept for the thread's life (as
// the cuDNN workspace is): the forward's block totals land there, at an address
// a captured graph may keep.
LossScratch* scratch() {
  struct Buffer {
    LossScratch* ptr = static_cast<LossScratch*>(malloc_device(sizeof(LossScratch),
                                                               current_device()));
  };
  thread_local PerDevice<Buffer> buffers;  // one per GPU, on that GPU
  return buffers.current().ptr;
}

// The target at row-major position `flat` has no class: read it back and say so.
[[noreturn]] void throw_bad_target(const Strided& target, int64_t flat, int64_t classes,
                                   int64_t ignore_index, std::string_view op) {
  const Shape index = unravel_index(target.sizes, flat);
  int64_t offset = 0;
  for (size_t d = 0; d < index.size(); ++d) offset += index[d] * target.strides[d];
  int64_t value = 0;
  copy_to_host(&value, target.ptr<int64_t>() + offset, sizeof value);
  throw IndexError(fmt::format(
      "[{}] target {} at position {} is out of range for {} classes (expected 0 to {}, or "
      "ignore_index {})",
      op, value, position_str(target.sizes, flat), classes, classes - 1, ignore_index));
}

}  // namespace

kernel::LossTotal read_totals(const LossTotals* device_totals, const Strided& target, int64_t classes,
                              int64_t ignore_index, std::string_view op) {
  LossTotals totals{};
  copy_to_host(&totals, device_totals, sizeof totals);
  if (totals.first_bad_position != kNoBadPosition) {
    throw_bad_target(target, static_cast<int64_t>(totals.first_bad_position), classes, ignore_index,
                     op);
  }
  return {totals.sum, totals.count};
}

void cross_entropy_forward(const Strided& losses, const Strided& logits, const Strided& target,
                           const kernel::CrossEntropyParams& params, const LossOutputs& out) {
  check_kernel_rank(logits, "cross_entropy");
  LOOM_CUDA_CHECK(launch_cross_entropy_forward(losses, logits, target, params, out, scratch(),
                                               current_stream()));
}

void cross_entropy_backward(const Strided& dlogits, const Strided& logits, const Strided& target,
                            const Strided& dloss, const LossScale& scale,
                            const kernel::CrossEntropyParams& params) {
  check_kernel_rank(logits, "cross_entropy");
  LOOM_CUDA_CHECK(launch_cross_entropy_backward(dlogits, logits, target, dloss, scale, params,
                                                current_stream()));
}

void nll_loss_forward(const Strided& losses, const Strided& log_probs, const Strided& target,
                      int64_t ignore_index, const LossOutputs& out) {
  check_kernel_rank(log_probs, "nll_loss");
  LOOM_CUDA_CHECK(launch_nll_loss_forward(losses, log_probs, target, ignore_index, out, scratch(),
                                          current_stream()));
}

void nll_loss_backward(const Strided& dlog_probs, const Strided& target, const Strided& dloss,
                       const LossScale& scale, int64_t ignore_index) {
  check_kernel_rank(dlog_probs, "nll_loss");
  LOOM_CUDA_CHECK(
      launch_nll_loss_backward(dlog_probs, target, dloss, scale, ignore_index, current_stream()));
}

}  // namespace loom::cuda
