// File: core/ops/softmax.cc
// softmax and log_softmax: validation, the CPU kernels, and their backward,
// which reads only the forward output y.
#include "core/ops/softmax.h"

#include "core/autograd.h"
#include "core/cpu/softmax.h"
#include "core/cudnn/softmax.h"
#include "core/onednn/eltwise.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/trace.h"

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

constexpr SoftmaxKernels kGpuSoftmax{cudnn::softmax_forward, cudnn::softmax_backward};
constexpr SoftmaxKernels kGpuLogSoftmax{cudnn::log_softmax_forward, cudnn::log_softmax_backward};

// The CPU's oneDNN tier where it takes the operands, else the reference kernel.
void cpu_forward(const SoftmaxKernels& reference, const Tensor& y, const Tensor& x, int64_t dim, bool log) {
  if (on_onednn_tier(x) && onednn::softmax_forward(y.strided(), x.strided(), dim, log)) return;
  reference.forward(y.strided(), x.strided(), dim);
}

void cpu_backward(const SoftmaxKernels& reference, const Tensor& dx, const Tensor& dy, const Tensor& y,
                  int64_t dim, bool log) {
  if (on_onednn_tier(y) && onednn::softmax_backward(dx.strided(), dy.strided(), y.strided(), dim, log)) {
    return;
  }
  reference.backward(dx.strided(), dy.strided(), y.strided(), dim);
}

// cuDNN's softmax needs contiguous operands; the CPU kernels take any strides
// (oneDNN dense ones, as y keeps x's layout).
Tensor softmax_like(const Tensor& x_in, int64_t dim, const char* op, bool log,
                    SoftmaxKernels cpu_kernels, SoftmaxKernels gpu_kernels) {
  check_float_tensor(x_in, op);
  if (is_half_precision(x_in.dtype())) {
    // A 16-bit x (GPU only) normalizes in float32, as the exponentials need the
    // range; the differentiable casts bring gradients back in x's dtype.
    return softmax_like(x_in.to(DType::Float32), dim, op, log, cpu_kernels, gpu_kernels)
        .to(x_in.dtype());
  }
  const int64_t d = normalize_dim(dim, x_in.dim(), op);
  DeviceGuard guard(x_in.device());
  const bool gpu = x_in.device().is_cuda();
  const SoftmaxKernels kernels = gpu ? gpu_kernels : cpu_kernels;
  Tensor x = gpu ? x_in.contiguous() : x_in;
  Tensor y = empty_like(x);
  if (gpu) {
    kernels.forward(y.strided(), x.strided(), d);
  } else {
    cpu_forward(kernels, y, x, d, log);
  }
  if (needs_grad({x_in})) {
    Tensor saved_y = y.detach();  // the output itself would hold its own node alive
    record(op, {x_in}, y, [saved_y, d, kernels, gpu, log](const Tensor& dy_in) {
      Tensor dy = gpu ? dy_in.contiguous() : dy_in;
      Tensor dx = empty_like(saved_y);
      if (gpu) {
        kernels.backward(dx.strided(), dy.strided(), saved_y.strided(), d);
      } else {
        cpu_backward(kernels, dx, dy, saved_y, d, log);
      }
      return std::vector<Tensor>{dx};
    }, {saved_y});
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  trace::OpScope trace("softmax");
  Tensor y = softmax_like(x, dim, "softmax", /*log=*/false, {cpu::softmax_forward, cpu::softmax_backward},
                          kGpuSoftmax);
  if (trace.recording()) trace.record({x}, y, {{"dim", normalize_dim(dim, x.dim(), "softmax")}});
  return y;
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  trace::OpScope trace("log_softmax");
  Tensor y = softmax_like(x, dim, "log_softmax", /*log=*/true, {cpu::log_softmax_forward, cpu::log_softmax_backward},
                          kGpuLogSoftmax);
  if (trace.recording()) trace.record({x}, y, {{"dim", normalize_dim(dim, x.dim(), "log_softmax")}});
  return y;
}

}  // namespace loom
