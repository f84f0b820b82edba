// File: tests/optim/rule_steps.h
// The values the optimizer tests step through: each optimizer's rule written
// out by hand (sgd_test, adam_test, rmsprop_test, adagrad_test) and the resume
// checks (optimizer_test) meet the optimizer on the same starting parameters
// and the same gradients.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "core/tensor.h"

namespace loom::testing {

// Six parameter values of both signs, a zero among them.
inline const std::vector<double> kRuleStart = {0.5, -1.25, 2.0, -0.75, 1.5, 0.0};

// The gradient at step t of element i, given its current value: a pull
// towards zero plus a step-dependent push, so every term of a rule matters.
inline double rule_grad(double p, size_t i, int t) { return 0.5 * p + std::sin(1.7 * i + 0.9 * t); }

// Sets p's gradient at step t from p's current values, in p's dtype.
inline void set_rule_grad(Tensor& p, int t) {
  std::vector<double> values = p.to_vector<double>();
  for (size_t i = 0; i < values.size(); ++i) values[i] = rule_grad(values[i], i, t);
  p.set_grad(tensor(values, p.sizes(), {.dtype = p.dtype()}));
}

}  // namespace loom::testing
