// File: tests/core/anomaly_test.cc
// Anomaly mode on the CPU: the first recorded op whose forward or backward
// makes NaN/inf throws NonFiniteError naming the op and the module path.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/anomaly.h"
#include "core/autograd.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "tests/core/anomaly_modules.h"
#include "tests/testing.h"

using namespace loom;

namespace {

using testing::ShiftedLog;
using testing::SqrtOfZero;

Tensor leaf(Shape sizes, double value) {
  Tensor t = full(sizes, value);
  t.requires_grad_();
  return t;
}

// Linear(3, 3), then a nested Sequential whose child 1 is `inner`: path "1.1".
template <class M>
nn::Sequential model(M inner) {
  nn::Sequential tail(nn::ReLU(), std::move(inner));
  nn::Sequential net(nn::Linear(3, 3));
  net.push_back(std::move(tail));
  return net;
}

}  // namespace

TEST_CASE("anomaly mode: a guard turns it on for its scope and restores the mode") {
  CHECK_FALSE(anomaly_mode_enabled());
  {
    AnomalyGuard on;
    CHECK(anomaly_mode_enabled());
    {
      AnomalyGuard off(false);
      CHECK_FALSE(anomaly_mode_enabled());
    }
    CHECK(anomaly_mode_enabled());
  }
  CHECK_FALSE(anomaly_mode_enabled());
}

TEST_CASE("anomaly mode off: NaN flows through silently, as without the guard") {
  Tensor y = sum(log(leaf({2}, -1.0)));
  CHECK(std::isnan(y.item()));
  y.backward();
}

TEST_CASE("anomaly mode: a forward NaN names the op and says outside any module") {
  AnomalyGuard anomaly;
  CHECK_THROWS_WITH_FRAGMENT(log(leaf({2}, -1.0)), NonFiniteError,
                             "the forward of 'log' outside any module produced NaN");
  CHECK_THROWS_WITH_FRAGMENT(log(leaf({2}, -1.0)), NonFiniteError, "its inputs were finite");
}

TEST_CASE("anomaly mode: a forward NaN inside a nested module names its path and type") {
  nn::Sequential net = model(ShiftedLog(100.0));  // ReLU output - 100 < 0
  Tensor x = full({4, 3}, 0.5);
  AnomalyGuard anomaly;
  CHECK_THROWS_WITH_FRAGMENT(net(x), NonFiniteError, "the forward of 'log' in 1.1 (ShiftedLog)");
}

TEST_CASE("anomaly mode: NaN that came in from unrecorded data is reported as such") {
  AnomalyGuard anomaly;
  Tensor x = leaf({3}, 1.0);
  Tensor data = full({3}, std::numeric_limits<double>::quiet_NaN());
  CHECK_THROWS_WITH_FRAGMENT(mul(x, data), NonFiniteError,
                             "its input 1 ((3,) float32 on cpu) already held NaN, so it came from the data");
}

TEST_CASE("anomaly mode: a parameter that holds NaN is named as one (an optimizer step put it there)") {
  AnomalyGuard anomaly;
  Tensor weight = full({3}, std::numeric_limits<double>::infinity());
  weight.requires_grad_();
  CHECK_THROWS_WITH_FRAGMENT(mul(full({3}, 0.0), weight), NonFiniteError,
                             "its input 1 ((3,) float32 on cpu) is a leaf that requires grad, a parameter");
}

TEST_CASE("anomaly mode: float32 and float64 values are checked without recording the check") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor x = full({2}, -1.0, {.dtype = dtype});
    x.requires_grad_();
    AnomalyGuard anomaly;
    Tensor y = exp(x);  // finite: the check's own copy to float64 must not be recorded or re-checked
    CHECK(y.grad_fn() != nullptr);
    CHECK_THROWS_WITH_FRAGMENT(log(x), NonFiniteError, "the forward of 'log'");
  }
}

TEST_CASE("anomaly mode: a backward inf names the op's backward and the module that recorded it") {
  nn::Sequential net = model(SqrtOfZero());
  Tensor x = full({4, 3}, 0.5);
  AnomalyGuard anomaly;
  Tensor loss = sum(net(x));  // the forward is finite
  CHECK(loss.item() == 0.0);
  CHECK_THROWS_WITH_FRAGMENT(loss.backward(), NonFiniteError,
                             "the backward of 'sqrt' (recorded in 1.1 (SqrtOfZero)) produced inf");
  CHECK_THROWS_WITH_FRAGMENT(sum(net(x)).backward(), NonFiniteError,
                             "the gradient it received was finite");
}

TEST_CASE("anomaly mode: the root module is named by its type; finite runs pass untouched") {
  ShiftedLog root(100.0);
  AnomalyGuard anomaly;
  CHECK_THROWS_WITH_FRAGMENT(root(leaf({2}, 1.0)), NonFiniteError, "in the root module (ShiftedLog)");
  nn::Sequential net = model(ShiftedLog(-1.0));  // log(relu + 1) >= 0: finite
  Tensor loss = sum(net(full({2, 3}, 0.5)));
  loss.backward();
  CHECK(std::isfinite(loss.item()));
  CHECK(anomaly_module().empty());  // every module scope closed again
}
