// File: core/cuda/layer_norm.cc
// Checked launches of the layer-norm kernels on the current stream: the shapes,
// density and dtypes of layer_norm.h are checked first (core/kernel/norm.h), so
// that a kernel never reads past an operand.
#include "core/cuda/layer_norm.h"

#include "core/cuda/allocator.h"
#include "core/cuda/layer_norm_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/kernel/norm.h"

namespace loom::cuda {

namespace {

constexpr const char* kOp = "cuda::layer_norm";

const Strided* pointer_or_null(const std::optional<Strided>& v) { return v ? &*v : nullptr; }

}  // namespace

void layer_norm_forward(const Strided& y, const Strided& mean, const Strided& invstd, const Strided& x,
                        const std::optional<Strided>& weight, const std::optional<Strided>& bias, double eps) {
  kernel::check_layer_norm_forward(kOp, y, mean, invstd, x, weight, bias);
  LOOM_CUDA_CHECK(launch_layer_norm_forward(y, mean, invstd, x, pointer_or_null(weight), pointer_or_null(bias), eps,
                                            current_stream()));
}

void layer_norm_backward(const Strided& dx, const std::optional<Strided>& dweight,
                         const std::optional<Strided>& dbias, const Strided& dy, const Strided& x,
                         const Strided& mean, const Strided& invstd, const std::optional<Strided>& weight) {
  kernel::check_layer_norm_backward(kOp, dx, dweight, dbias, dy, x, mean, invstd, weight);
  const size_t scratch_bytes = dweight || dbias ? layer_norm_backward_scratch_bytes(x) : 0;
  LOOM_CUDA_CHECK(launch_with_scratch(scratch_bytes, [&](void* scratch) {
    return launch_layer_norm_backward(dx, pointer_or_null(dweight), pointer_or_null(dbias), dy, x, mean, invstd,
                                      pointer_or_null(weight), scratch, current_stream());
  }));
}

}  // namespace loom::cuda
