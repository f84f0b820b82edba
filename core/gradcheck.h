// File: core/gradcheck.h
// Central-difference gradient checking in float64, as torch.autograd.gradcheck:
//
//   auto x = loom::randn({3, 4}, {.dtype = loom::DType::Float64, .requires_grad = true});
//   auto result = loom::gradcheck([](const std::vector<loom::Tensor>& in) {
//     return loom::relu(in[0]);
//   }, {x});
//   CHECK_MESSAGE(result.ok, result.message);
//
// For each input element the numeric derivative is (f(x+eps) - f(x-eps)) / 2eps.
// Kinks (ReLU at 0, max-pool ties, clamp bounds) are detected where the two
// one-sided differences disagree; there the analytic value must lie between
// them (any subgradient passes). Also checked: backward is deterministic (two
// runs agree exactly) and a zero grad_output gives zero gradients.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatch: input, element, output, both values
  double max_abs_error = 0.0;
  int64_t kinks = 0;  // elements checked by the one-sided rule
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks d fn / d inputs[i] for every input that requires grad. Inputs that
// require grad must be float64; fn must return a floating tensor.
GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          GradcheckOptions options = {});

}  // namespace loom
