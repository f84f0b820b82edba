// File: core/cuda/elementwise.cc
// Checked launches of the elementwise kernels on the current stream.
#include "core/cuda/elementwise.h"

#include "core/cuda/elementwise_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"

namespace loom::cuda {

void unary(const Strided& out, const Strided& in, UnaryOp op) {
  check_kernel_rank(out, "unary");
  LOOM_CUDA_CHECK(launch_unary(out, in, op, current_stream()));
}

void activation_forward(const Strided& y, const Strided& x, kernel::ActivationKind kind,
                        const kernel::ActivationParameters& parameters) {
  check_kernel_rank(y, "activation_forward");
  LOOM_CUDA_CHECK(launch_activation_forward(y, x, kind, parameters, current_stream()));
}

void add_activation(const Strided& y, const Strided& a, const Strided& b, kernel::ActivationKind kind,
                    const kernel::ActivationParameters& parameters) {
  check_kernel_rank(y, "add_activation");
  LOOM_CUDA_CHECK(launch_add_activation(y, a, b, kind, parameters, current_stream()));
}

void activation_backward(const Strided& dx, const Strided& dy, const Strided& saved,
                         kernel::ActivationKind kind, const kernel::ActivationParameters& parameters) {
  check_kernel_rank(dx, "activation_backward");
  LOOM_CUDA_CHECK(launch_activation_backward(dx, dy, saved, kind, parameters, current_stream()));
}

void binary(const Strided& out, const Strided& a, const Strided& b, BinaryOp op) {
  check_kernel_rank(out, "binary");
  LOOM_CUDA_CHECK(launch_binary(out, a, b, op, current_stream()));
}

void binary_scalar(const Strided& out, const Strided& a, double scalar, BinaryOp op,
                   bool scalar_first) {
  check_kernel_rank(out, "binary_scalar");
  LOOM_CUDA_CHECK(launch_binary_scalar(out, a, scalar, op, scalar_first, current_stream()));
}

void add_scaled(const Strided& out, const Strided& a, const Strided& b, double alpha) {
  check_kernel_rank(out, "add_scaled");
  LOOM_CUDA_CHECK(launch_add_scaled(out, a, b, alpha, current_stream()));
}

void clamp(const Strided& out, const Strided& in, double lo, double hi) {
  check_kernel_rank(out, "clamp");
  LOOM_CUDA_CHECK(launch_clamp(out, in, lo, hi, current_stream()));
}

void clamp_backward(const Strided& dx, const Strided& dy, const Strided& x, double lo, double hi) {
  check_kernel_rank(dx, "clamp_backward");
  LOOM_CUDA_CHECK(launch_clamp_backward(dx, dy, x, lo, hi, current_stream()));
}

}  // namespace loom::cuda
