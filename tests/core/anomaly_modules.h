// File: tests/core/anomaly_modules.h
// The modules the anomaly-mode tests (anomaly_test.cc on the CPU,
// anomaly_gpu_test.cc on the GPU) plant NaN and inf with, so that both name
// the same op in the same module.
#pragma once

#include <string>

#include "core/ops/ops.h"
#include "layers/nn.h"

namespace loom::testing {

// log(x - shift): NaN where x < shift.
class ShiftedLog : public nn::Module {
 public:
  explicit ShiftedLog(double shift) : shift_(shift) {}
  Tensor forward(const Tensor& x) override { return log(sub(x, shift_)); }
  std::string type_name() const override { return "ShiftedLog"; }

 private:
  double shift_;
};

// sqrt(0 * x): finite forward, an infinite derivative (1 / (2 sqrt(0))) in backward.
class SqrtOfZero : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override { return sqrt(mul(x, 0.0)); }
  std::string type_name() const override { return "SqrtOfZero"; }
};

}  // namespace loom::testing
