// File: core/ops/activation.cc
// Pointwise activations. Backward uses explicit derivative kernels: relu,
// sigmoid and tanh read the saved output y; gelu and silu the saved input x.
#include "core/ops/activation.h"

#include "core/autograd.h"
#include "core/cpu/elementwise.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#ifdef LOOM_WITH_CUDA
#include "core/cudnn/pointwise.h"
#endif

namespace loom {

namespace {

using cpu::BinaryOp;
using cpu::UnaryOp;

// ReLU on the GPU runs as a cuDNN pointwise graph where one exists for the
// operands (see core/cudnn/pointwise.h); these return false otherwise.
bool relu_by_cudnn(const Tensor& y, const Tensor& x) {
#ifdef LOOM_WITH_CUDA
  return x.device().is_cuda() && cudnn::relu_forward(y.strided(), x.strided());
#else
  return false;
#endif
}

bool relu_backward_by_cudnn(const Tensor& dx, const Tensor& dy, const Tensor& y) {
#ifdef LOOM_WITH_CUDA
  return y.device().is_cuda() && cudnn::relu_backward(dx.strided(), dy.strided(), y.strided());
#else
  return false;
#endif
}

Tensor activation(const Tensor& x, UnaryOp op, BinaryOp derivative, bool saves_output,
                  const char* name) {
  check_float_tensor(x, name);
  Tensor y = empty_like(x);
  if (op != UnaryOp::Relu || !relu_by_cudnn(y, x)) {
    LOOM_KERNEL(y, unary, y.strided(), x.strided(), op);
  }
  if (needs_grad({x})) {
    Tensor saved = saves_output ? y.detach() : x.detach();
    record(name, {x}, y, [saved, derivative](const Tensor& dy_in) {
      Tensor dx = empty_like(saved);
      Tensor dy = dy_in.contiguous(saved.suggest_memory_format());
      if (derivative != BinaryOp::ReluBackward || !relu_backward_by_cudnn(dx, dy, saved)) {
        LOOM_KERNEL(dx, binary, dx.strided(), dy.strided(), saved.strided(), derivative);
      }
      return std::vector<Tensor>{dx};
    }, {saved});
  }
  return y;
}

}  // namespace

Tensor relu(const Tensor& x) {
  return activation(x, UnaryOp::Relu, BinaryOp::ReluBackward, /*saves_output=*/true, "relu");
}

Tensor sigmoid(const Tensor& x) {
  return activation(x, UnaryOp::Sigmoid, BinaryOp::SigmoidBackward, true, "sigmoid");
}

Tensor tanh(const Tensor& x) {
  return activation(x, UnaryOp::Tanh, BinaryOp::TanhBackward, true, "tanh");
}

Tensor gelu(const Tensor& x) {
  return activation(x, UnaryOp::Gelu, BinaryOp::GeluBackward, /*saves_output=*/false, "gelu");
}

Tensor silu(const Tensor& x) {
  return activation(x, UnaryOp::Silu, BinaryOp::SiluBackward, false, "silu");
}

}  // namespace loom
