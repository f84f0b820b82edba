// File: tests/core/cpu/activation_test.cc
// add_activation (a residual add and the activation after it in one pass) against the add and the
// activation run one after the other: every activation row, float32 and float64, dense operands
// (the flat loop) and transposed ones (the offset walk), in place too.
#include "core/cpu/activation.h"

#include <doctest/doctest.h>

#include "core/cpu/elementwise.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "tests/testing.h"

namespace loom {
namespace {

TEST_CASE("add_activation is the add, then the activation, for every row, dtype and layout") {
  Generator gen(7);
  for (kernel::ActivationKind kind : kernel::kActivationKinds) {
    const kernel::ActivationParameters parameters = kernel::activation_info(kind).default_parameters;
    for (DType dtype : {DType::Float32, DType::Float64}) {
      for (bool transposed : {false, true}) {
        CAPTURE(kernel::activation_info(kind).name);
        CAPTURE(dtype_name(dtype));
        CAPTURE(transposed);
        auto operand = [&] {
          const Tensor t = randn({4, 3, 5}, {.dtype = dtype}, &gen);
          cpu::binary_scalar(t.strided(), t.strided(), 3.0, kernel::BinaryOp::Mul);  // past ReLU6's 6 too
          return transposed ? t.transpose(0, 2) : t;
        };
        const Tensor a = operand(), b = operand();
        const Tensor sum = empty(a.sizes(), {.dtype = dtype}), expected = empty(a.sizes(), {.dtype = dtype});
        cpu::add_scaled(sum.strided(), a.strided(), b.strided(), 1.0);
        cpu::activation_forward(expected.strided(), sum.strided(), kind, parameters);

        const Tensor y = full(a.sizes(), -7.0, {.dtype = dtype});
        cpu::add_activation(y.strided(), a.strided(), b.strided(), kind, parameters);
        CHECK_CLOSE(y, expected, 0.0, 0.0);

        const Tensor in_place = a.clone();
        cpu::add_activation(in_place.strided(), in_place.strided(), b.strided(), kind, parameters);
        CHECK_CLOSE(in_place, expected, 0.0, 0.0);
      }
    }
  }
}

}  // namespace
}  // namespace loom
