// File: core/ops/softmax.cc
// softmax and log_softmax: validation, the CPU kernels, and their backward,
// which reads only the forward output y.
#include "core/ops/softmax.h"

#include "core/autograd.h"
#include "core/cpu/softmax.h"
#include "core/ops/elementwise.h"
#include "core/trace.h"
#ifdef LOOM_WITH_CUDA
#include "core/cudnn/softmax.h"
#endif

namespace loom {

namespace {

using SoftmaxKernel = void (*)(const Strided& y, const Strided& x, int64_t dim);
using SoftmaxBackwardKernel = void (*)(const Strided& dx, const Strided& dy, const Strided& y,
                                       int64_t dim);

// The two ops differ only in their kernels. Any strides go straight to the
// kernels; y keeps x's layout.
struct SoftmaxKernels {
  SoftmaxKernel forward;
  SoftmaxBackwardKernel backward;
};

#ifdef LOOM_WITH_CUDA
constexpr SoftmaxKernels kGpuSoftmax{cudnn::softmax_forward, cudnn::softmax_backward};
constexpr SoftmaxKernels kGpuLogSoftmax{cudnn::log_softmax_forward, cudnn::log_softmax_backward};
#else
constexpr SoftmaxKernels kGpuSoftmax{}, kGpuLogSoftmax{};  // no CUDA tensor exists in this build
#endif

// cuDNN's softmax needs contiguous operands; the CPU kernels take any strides.
Tensor softmax_like(const Tensor& x_in, int64_t dim, const char* op, SoftmaxKernels cpu_kernels,
                    SoftmaxKernels gpu_kernels) {
  check_float_tensor(x_in, op);
  if (is_half_precision(x_in.dtype())) {
    // A 16-bit x (GPU only) normalizes in float32, as the exponentials need the
    // range; the differentiable casts bring gradients back in x's dtype.
    return softmax_like(x_in.to(DType::Float32), dim, op, cpu_kernels, gpu_kernels)
        .to(x_in.dtype());
  }
  const int64_t d = normalize_dim(dim, x_in.dim(), op);
  DeviceGuard guard(x_in.device());
  const bool gpu = x_in.device().is_cuda();
  const SoftmaxKernels kernels = gpu ? gpu_kernels : cpu_kernels;
  Tensor x = gpu ? x_in.contiguous() : x_in;
  Tensor y = empty_like(x);
  kernels.forward(y.strided(), x.strided(), d);
  if (needs_grad({x_in})) {
    Tensor saved_y = y.detach();  // the output itself would hold its own node alive
    record(op, {x_in}, y, [saved_y, d, kernels, gpu](const Tensor& dy_in) {
      Tensor dy = gpu ? dy_in.contiguous() : dy_in;
      Tensor dx = empty_like(saved_y);
      kernels.backward(dx.strided(), dy.strided(), saved_y.strided(), d);
      return std::vector<Tensor>{dx};
    }, {saved_y});
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  trace::OpScope trace("softmax");
  Tensor y = softmax_like(x, dim, "softmax", {cpu::softmax_forward, cpu::softmax_backward}, kGpuSoftmax);
  if (trace.recording()) trace.record({x}, y, {{"dim", normalize_dim(dim, x.dim(), "softmax")}});
  return y;
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  trace::OpScope trace("log_softmax");
  Tensor y = softmax_like(x, dim, "log_softmax", {cpu::log_softmax_forward, cpu::log_softmax_backward},
                          kGpuLogSoftmax);
  if (trace.recording()) trace.record({x}, y, {{"dim", normalize_dim(dim, x.dim(), "log_softmax")}});
  return y;
}

}  // namespace loom
