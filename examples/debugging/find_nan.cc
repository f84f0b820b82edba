// File: examples/debugging/find_nan.cc
// The code of docs/debugging.md: checking a hand-written backward with
// loom::gradcheck, and finding where NaN/inf first appears with
// loom::AnomalyGuard. tests/examples/debugging runs it and checks its output.
//
//   bazel run //examples/debugging:find_nan
//
// N batch, F features.
#include <cstdio>
#include <exception>
#include <string>

#include "core/anomaly.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/gradcheck.h"
#include "core/ops/ops.h"
#include "layers/nn.h"

namespace {

using namespace loom;

// --- 1. a new op with its backward, checked by gradcheck -----------------------

// my_softplus(x) = log(1 + exp(x)); its derivative is sigmoid(x).
Tensor my_softplus(const Tensor& x) {
  Tensor y;
  {
    NoGradGuard no_grad;  // the forward's own ops are not recorded: this op records one node
    y = log(add(exp(x), 1.0));
  }
  if (needs_grad({x})) {
    record("my_softplus", {x}, y, [x](const Tensor& dy) {
      return std::vector<Tensor>{mul(dy, sigmoid(x))};
    }, /*saved=*/{x});
  }
  return y;
}

// The same op with a wrong derivative (exp(x) instead of sigmoid(x)).
Tensor my_softplus_wrong(const Tensor& x) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = log(add(exp(x), 1.0));
  }
  if (needs_grad({x})) {
    record("my_softplus_wrong", {x}, y, [x](const Tensor& dy) {
      return std::vector<Tensor>{mul(dy, exp(x))};
    }, /*saved=*/{x});
  }
  return y;
}

void check_gradients() {
  Tensor x = randn({3, 4}, {.dtype = DType::Float64, .requires_grad = true});
  GradcheckResult good = gradcheck([](const std::vector<Tensor>& in) { return my_softplus(in[0]); }, {x});
  std::printf("gradcheck my_softplus: %s\n", good.ok ? "ok" : good.message.c_str());
  GradcheckResult bad = gradcheck([](const std::vector<Tensor>& in) { return my_softplus_wrong(in[0]); }, {x});
  std::printf("gradcheck my_softplus_wrong: %s\n", bad.ok ? "ok" : bad.message.c_str());
}

// --- 2. where does NaN come from? AnomalyGuard names the op and the module ------

// Log-scaled features: log(x) is -inf at 0 and NaN below, and ReLU's output has zeros.
class LogFeatures : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override { return log(x); }
  std::string type_name() const override { return "LogFeatures"; }
};

// Features times a learned per-feature gain sqrt(scale), with scale starting at
// 0: the forward is finite, but d sqrt(s)/ds = 1 / (2 sqrt(s)) is infinite at 0.
class ScaledFeatures : public nn::Module {
 public:
  explicit ScaledFeatures(int64_t features) { scale_ = register_parameter("scale", zeros({features})); }
  Tensor forward(const Tensor& x) override { return mul(x, sqrt(scale_)); }
  std::string type_name() const override { return "ScaledFeatures"; }

 private:
  Tensor scale_;
};

template <class Features>
nn::Sequential model(Features features) {
  return nn::Sequential(nn::Linear(4, 8), nn::ReLU(), std::move(features), nn::Linear(8, 3));
}

// One training step's forward and backward; with anomaly mode on, the first
// op that makes NaN or inf throws NonFiniteError.
void step(nn::Sequential& net, bool detect_anomaly) {
  AnomalyGuard anomaly(detect_anomaly);
  Tensor x = randn({16, 4});
  Tensor y = randint(0, 3, {16}, {.dtype = DType::Int64});
  Tensor loss = cross_entropy(net(x), y);
  loss.backward();
  bool finite = true;
  for (const Tensor& p : net.parameters()) finite = finite && all_finite(p.grad());
  std::printf("  loss %g, gradients %s\n", loss.item(), finite ? "finite" : "with NaN/inf");
}

void find_nan(const char* title, nn::Sequential net) {
  std::printf("%s\n", title);
  step(net, /*detect_anomaly=*/false);  // without anomaly mode: a NaN loss, no clue where from
  try {
    step(net, /*detect_anomaly=*/true);
  } catch (const NonFiniteError& e) {
    std::printf("  %s\n", e.what());
  }
}

}  // namespace

int main() {
  try {
    manual_seed(0);
    check_gradients();
    find_nan("forward: log of 0", model(LogFeatures()));
    find_nan("backward: sqrt at 0", model(ScaledFeatures(8)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "find_nan: %s\n", e.what());
    return 1;
  }
  return 0;
}
