// File: core/gradcheck.cc
// Central-difference gradient checking in float64.
#include "core/gradcheck.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/shape.h"

namespace loom {

namespace {

// One gradient per checked input, flattened row-major; zeros where undefined.
using Grads = std::vector<std::vector<double>>;

std::vector<size_t> checked_inputs(const std::vector<Tensor>& inputs) {
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    LOOM_CHECK(inputs[i].dtype() == DType::Float64, TypeError,
               "[gradcheck] input {} has dtype {}; gradcheck needs float64 inputs (float32 "
               "central differences are too coarse for its tolerances)",
               i, dtype_name(inputs[i].dtype()));
    checked.push_back(i);
  }
  LOOM_CHECK(!checked.empty(), ValueError, "[gradcheck] no input requires grad; nothing to check");
  return checked;
}

std::vector<double> evaluate(const GradcheckFn& fn, const std::vector<Tensor>& inputs) {
  NoGradGuard no_grad;
  return fn(inputs).to_vector<double>();
}

// Vector-Jacobian product: the inputs' gradients for grad_output `v`.
Grads vjp(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
          const std::vector<size_t>& checked, const std::vector<double>& v) {
  for (size_t i : checked) inputs[i].impl()->grad = Tensor();
  Tensor out = fn(inputs);
  LOOM_CHECK(out.requires_grad(), AutogradError,
             "[gradcheck] the function's output does not require grad: no input reaches it "
             "through differentiable ops");
  out.backward(tensor(v, out.sizes(), out.options()));
  Grads grads;
  for (size_t i : checked) {
    const Tensor& g = inputs[i].grad();
    grads.push_back(g.defined() ? g.to_vector<double>() : std::vector<double>(inputs[i].numel(), 0.0));
    inputs[i].impl()->grad = Tensor();
  }
  return grads;
}

struct Column {
  std::vector<double> left, right, central;  // one-sided and central differences, per output
};

Column numeric_column(const GradcheckFn& fn, const std::vector<Tensor>& inputs, Tensor x,
                      int64_t k, const std::vector<double>& f0, double eps) {
  NoGradGuard no_grad;
  Shape index = unravel_index(x.sizes(), k);
  double original = x.at(index);
  x.set(index, original + eps);
  std::vector<double> plus = evaluate(fn, inputs);
  x.set(index, original - eps);
  std::vector<double> minus = evaluate(fn, inputs);
  x.set(index, original);
  Column c;
  for (size_t j = 0; j < f0.size(); ++j) {
    c.left.push_back((f0[j] - minus[j]) / eps);
    c.right.push_back((plus[j] - f0[j]) / eps);
    c.central.push_back((plus[j] - minus[j]) / (2 * eps));
  }
  return c;
}

// Compares one analytic Jacobian entry with its numeric estimate; returns false on mismatch.
bool entry_matches(double analytic, const Column& c, size_t j, const GradcheckOptions& o,
                   GradcheckResult& result) {
  double tol = o.atol + o.rtol * std::fabs(c.central[j]);
  double lo = std::min(c.left[j], c.right[j]), hi = std::max(c.left[j], c.right[j]);
  bool kink = hi - lo > tol;
  double error = kink ? std::max({0.0, lo - analytic, analytic - hi}) : std::fabs(analytic - c.central[j]);
  if (kink) ++result.kinks;
  if (std::isnan(analytic) != std::isnan(c.central[j])) error = INFINITY;
  result.max_abs_error = std::max(result.max_abs_error, error);
  return error <= tol;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          GradcheckOptions options) {
  std::vector<size_t> checked = checked_inputs(inputs);
  std::vector<double> f0 = evaluate(fn, inputs);
  const size_t m = f0.size();
  // Analytic Jacobian, one backward per output element: rows[j][input][element].
  std::vector<Grads> rows;
  for (size_t j = 0; j < m; ++j) {
    std::vector<double> one_hot(m, 0.0);
    one_hot[j] = 1.0;
    rows.push_back(vjp(fn, inputs, checked, one_hot));
  }
  GradcheckResult result;
  for (size_t c = 0; c < checked.size() && result.ok; ++c) {
    const Tensor& x = inputs[checked[c]];
    for (int64_t k = 0; k < x.numel() && result.ok; ++k) {
      Column column = numeric_column(fn, inputs, x, k, f0, options.eps);
      for (size_t j = 0; j < m; ++j) {
        if (entry_matches(rows[j][c][k], column, j, options, result)) continue;
        result.ok = false;
        result.message = fmt::format(
            "gradcheck: d output[{}] / d input{}[{}] (index {}): analytic {:.9g}, numeric {:.9g} "
            "(one-sided {:.9g} / {:.9g})",
            j, checked[c], k, shape_str(unravel_index(x.sizes(), k)), rows[j][c][k], column.central[j],
            column.left[j], column.right[j]);
        break;
      }
    }
  }
  if (!result.ok) return result;
  // Backward must be deterministic and linear in grad_output.
  std::vector<double> v(m);
  for (size_t j = 0; j < m; ++j) v[j] = std::sin(1.0 + 3.7 * j);
  if (vjp(fn, inputs, checked, v) != vjp(fn, inputs, checked, v)) {
    return {false, "gradcheck: two backward passes with the same grad_output differ", 0, 0};
  }
  for (const auto& g : vjp(fn, inputs, checked, std::vector<double>(m, 0.0))) {
    if (std::any_of(g.begin(), g.end(), [](double e) { return e != 0.0; })) {
      return {false, "gradcheck: a zero grad_output gave a non-zero gradient", 0, 0};
    }
  }
  return result;
}

}  // namespace loom
