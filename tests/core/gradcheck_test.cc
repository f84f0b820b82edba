// File: tests/core/gradcheck_test.cc
// gradcheck itself: it must pass correct ops, catch wrong backwards (values,
// one input of several, non-determinism, non-linearity in grad_output), treat
// kinks by the one-sided rule, and refuse float32 inputs.
#include "core/gradcheck.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/ops/activation.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

Tensor leaf(const std::vector<double>& values, const Shape& sizes) {
  return tensor(values, sizes, {.dtype = DType::Float64, .requires_grad = true});
}

Tensor random_leaf(const Shape& sizes, uint64_t seed) {
  Generator gen(seed);
  return randn(sizes, {.dtype = DType::Float64, .requires_grad = true}, &gen);
}

bool contains(const std::string& text, const std::string& fragment) {
  return text.find(fragment) != std::string::npos;
}

// y = x * x with a hand-written backward dy -> backward(dy, x) (2 * dy * x is right).
Tensor square_with(const Tensor& x, std::function<Tensor(const Tensor&, const Tensor&)> backward) {
  Tensor y = mul(x.detach(), x.detach());
  if (needs_grad({x})) {
    record("square", {x}, y, [x, backward](const Tensor& dy) {
      return std::vector<Tensor>{backward(dy, x.detach())};
    }, {x});
  }
  return y;
}

TEST_CASE("gradcheck passes a correct custom op and the library's own ops") {
  const Tensor x = random_leaf({3, 4}, 1);
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) {
    return square_with(in[0], [](const Tensor& dy, const Tensor& x) { return mul(mul(dy, x), 2.0); });
  }, {x});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.kinks == 0);
  CHECK(r.max_abs_error < 1e-6);
  CHECK(r.message.empty());
  const Tensor a = random_leaf({2, 3}, 2), b = random_leaf({3}, 3);
  r = gradcheck([](const std::vector<Tensor>& in) { return sum(mul(tanh(in[0]), in[1]), {1}); }, {a, b});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("gradcheck fails a deliberately wrong backward and says where") {
  const Tensor x = leaf({0.5, -1.5, 2.0}, {3});
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) {
    return square_with(in[0], [](const Tensor& dy, const Tensor& x) { return mul(dy, x); });  // forgot the 2
  }, {x});
  CHECK_FALSE(r.ok);
  CHECK_MESSAGE(contains(r.message, "gradcheck: d output[0] / d input0[0] (index (0,)): analytic 0.5, numeric 1"), r.message);
  CHECK(r.max_abs_error > 0.4);
}

TEST_CASE("gradcheck blames the right input when only one gradient is wrong") {
  const Tensor a = random_leaf({2, 2}, 4), b = random_leaf({2, 2}, 5);
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) {
    Tensor y = mul(in[0].detach(), in[1].detach());
    if (needs_grad({in[0], in[1]})) {
      record("bad_mul", {in[0], in[1]}, y, [b = in[1].detach()](const Tensor& dy) {
        return std::vector<Tensor>{mul(dy, b), mul(dy, b)};  // d/db should be dy * a
      });
    }
    return y;
  }, {a, b});
  CHECK_FALSE(r.ok);
  CHECK_MESSAGE(contains(r.message, "/ d input1["), r.message);
}

TEST_CASE("gradcheck skips inputs that do not require grad") {
  const Tensor x = random_leaf({3}, 6);
  const Tensor w = tensor({1, 2, 3}, {3}, {.dtype = DType::Float32});  // float32 is fine: not checked
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) {
    return mul(in[0], in[1].to(DType::Float64));
  }, {x, w});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("gradcheck catches a backward that is not deterministic") {
  const Tensor x = random_leaf({3}, 7);
  int calls = 0;
  // Off by 1e-12 * call count: within tolerance, but two runs never agree exactly.
  GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) {
    return square_with(in[0], [&](const Tensor& dy, const Tensor& x) {
      return add(mul(mul(dy, x), 2.0), 1e-12 * ++calls);
    });
  }, {x});
  CHECK_FALSE(r.ok);
  CHECK(r.message == "gradcheck: two backward passes with the same grad_output differ");
}

TEST_CASE("gradcheck catches a gradient that is not zero for a zero grad_output") {
  const Tensor x = random_leaf({3}, 8);
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) {
    return square_with(in[0], [](const Tensor& dy, const Tensor& x) { return add(mul(mul(dy, x), 2.0), 1e-9); });
  }, {x});
  CHECK_FALSE(r.ok);
  CHECK(r.message == "gradcheck: a zero grad_output gave a non-zero gradient");
}

TEST_CASE("gradcheck treats relu at exactly 0 as a kink") {
  const Tensor x = leaf({-1.0, 0.0, 2.0, 0.0}, {4});
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return relu(in[0]); }, {x});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.kinks == 2);
}

TEST_CASE("gradcheck treats max ties as kinks (any split of the gradient passes)") {
  const Tensor x = leaf({1.0, 3.0, 3.0, 2.0}, {4});
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return max(in[0]); }, {x});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.kinks == 2);
  const Tensor m = leaf({5, 5, 1, 0, 4, 4}, {2, 3});
  r = gradcheck([](const std::vector<Tensor>& in) { return max(in[0], 1).values; }, {m});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.kinks > 0);
}

TEST_CASE("a kink does not excuse a gradient outside the one-sided differences") {
  const Tensor x = leaf({0.0, 1.0}, {2});
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) {
    Tensor y = relu(in[0].detach());
    if (needs_grad({in[0]})) {
      record("bad_relu", {in[0]}, y, [](const Tensor& dy) { return std::vector<Tensor>{mul(dy, 2.0)}; });
    }
    return y;
  }, {x});
  CHECK_FALSE(r.ok);
  CHECK_MESSAGE(contains(r.message, "analytic 2, numeric 0.5"), r.message);
}

TEST_CASE("gradcheck rejects float32 inputs, no checked inputs, and outputs without grad") {
  const Tensor f32 = tensor({1, 2}, {2}, {.dtype = DType::Float32, .requires_grad = true});
  auto identity = [](const std::vector<Tensor>& in) { return mul(in[0], 1.0); };
  CHECK_THROWS_WITH_FRAGMENT(gradcheck(identity, {f32}), TypeError,
                             "[gradcheck] input 0 has dtype float32; gradcheck needs float64 inputs");
  const Tensor no_grad = tensor({1, 2}, {2}, {.dtype = DType::Float64});
  CHECK_THROWS_WITH_FRAGMENT(gradcheck(identity, {no_grad}), ValueError,
                             "[gradcheck] no input requires grad; nothing to check");
  const Tensor x = random_leaf({2}, 9);
  CHECK_THROWS_WITH_FRAGMENT(gradcheck([](const std::vector<Tensor>& in) { return mul(in[0].detach(), 2.0); }, {x}),
                             AutogradError, "[gradcheck] the function's output does not require grad");
}

TEST_CASE("gradcheck leaves the inputs' values and .grad as it found them") {
  const Tensor x = random_leaf({2, 3}, 10);
  const std::vector<double> before = x.to_vector<double>();
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return exp(in[0]); }, {x});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(x.to_vector<double>() == before);
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("gradcheck tolerances come from the options") {
  // A backward 1e-4 off where the true gradient is ~0.004: fails with the default
  // atol 1e-5 + rtol 1e-3 * 0.004, passes with atol 1e-3.
  const Tensor x = leaf({0.003, 0.001}, {2});
  auto fn = [](const std::vector<Tensor>& in) {
    return square_with(in[0], [](const Tensor& dy, const Tensor& x) {
      return mul(add(mul(x, 2.0), 1e-4), dy);
    });
  };
  CHECK_FALSE(gradcheck(fn, {x}).ok);
  GradcheckResult loose = gradcheck(fn, {x}, {.atol = 1e-3});
  CHECK_MESSAGE(loose.ok, loose.message);
}

}  // namespace
}  // namespace loom
