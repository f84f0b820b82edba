// File: core/ops/activation.cc
// Pointwise activations. Backward uses explicit derivative kernels: relu,
// sigmoid and tanh read the saved output y; gelu and silu the saved input x.
#include "core/ops/activation.h"

#include "core/autograd.h"
#include "core/cpu/elementwise.h"
#include "core/ops/elementwise.h"

namespace loom {

namespace {

using cpu::BinaryOp;
using cpu::UnaryOp;

Tensor activation(const Tensor& x, UnaryOp op, BinaryOp derivative, bool saves_output,
                  const char* name) {
  check_float_tensor(x, name);
  check_cpu(x, name);
  Tensor y = empty_like(x);
  cpu::unary(y.strided(), x.strided(), op);
  if (needs_grad({x})) {
    Tensor saved = saves_output ? y.detach() : x.detach();
    record(name, {x}, y, [saved, derivative](const Tensor& dy) {
      Tensor dx = empty_like(saved);
      cpu::binary(dx.strided(), dy.strided(), saved.strided(), derivative);
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
