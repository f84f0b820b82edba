// File: tests/core/autograd_test.cc
// The autograd engine: accumulation, shared subgraphs, retain_graph, grad mode,
// detach, requires_grad rules, in-place checks and custom nodes via record().
#include "core/autograd.h"

#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/anomaly.h"
#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

Tensor leaf(const std::vector<double>& values, const Shape& sizes) {
  return tensor(values, sizes, {.dtype = DType::Float64, .requires_grad = true});
}

// y = scale * x with a hand-written backward that returns `grads` verbatim
// (for probing how the engine treats what a node returns).
Tensor custom(const Tensor& x, std::function<std::vector<Tensor>(const Tensor&)> backward,
              const std::vector<Tensor>& saved = {}) {
  Tensor y = mul(x.detach(), 1.0);
  if (needs_grad({x})) record("custom", {x}, y, std::move(backward), saved);
  return y;
}

// --- accumulation and graph shapes --------------------------------------------------------

TEST_CASE("gradients accumulate across two backward calls") {
  Tensor x = leaf({1, 2, 3}, {3});
  sum(mul(x, x)).backward();  // 2x
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  const Tensor first = x.grad();
  sum(mul(x, 3.0)).backward();  // + 3
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5, 7, 9});
  CHECK(first.to_vector<double>() == std::vector<double>{5, 7, 9});  // accumulated in place
  x.set_grad(Tensor());
  sum(x).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 1, 1});
}

TEST_CASE("a tensor used twice gets the sum of both gradients") {
  const Tensor x = leaf({1, -2}, {2});
  sum(add(x, x)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 2});
  const Tensor y = leaf({3}, {1});
  sum(mul(y, y)).backward();
  CHECK(y.grad().item() == 6);
}

TEST_CASE("diamond: two branches from x meet again") {
  // y = sum(exp(x) * x^2): dy/dx = exp(x) x^2 + 2 x exp(x).
  const Tensor x = leaf({0.5, -1, 2}, {3});
  const Tensor a = exp(x);
  const Tensor b = mul(x, x);
  sum(mul(a, b)).backward();
  std::vector<double> expected;
  for (double v : {0.5, -1.0, 2.0}) expected.push_back(std::exp(v) * v * v + 2 * v * std::exp(v));
  CHECK_CLOSE(x.grad(), tensor(expected, {3}, kF64), 1e-14, 0);
}

TEST_CASE("a node waits for every consumer before passing its gradient on") {
  // a = 2x, b = 3a, c = b + a: dc/dx = 2 * 3 + 2 = 8. The path through b is longer.
  const Tensor x = leaf({1, 2}, {2});
  const Tensor a = mul(x, 2.0);
  const Tensor b = mul(a, 3.0);
  sum(add(b, a)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{8, 8});
  CHECK_FALSE(a.grad().defined());  // only leaves keep .grad
}

TEST_CASE("several leaves, and leaves that do not require grad") {
  const Tensor w = leaf({2, 3}, {2});
  const Tensor b = leaf({1}, {1});
  const Tensor data = tensor({5, 7}, {2}, kF64);
  sum(add(mul(w, data), b)).backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{5, 7});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{2});  // broadcast over 2
  CHECK_FALSE(data.grad().defined());
}

TEST_CASE("backward of a leaf itself, and with an explicit gradient") {
  const Tensor s = leaf({4}, {});
  s.backward();
  CHECK(s.grad().item() == 1);
  const Tensor x = leaf({1, 2, 3}, {3});
  mul(x, x).backward(tensor({1, 10, 100}, {3}, kF64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 40, 600});
}

TEST_CASE("backward argument errors") {
  const Tensor x = leaf({1, 2, 3}, {3});
  const Tensor y = mul(x, 2.0);
  CHECK_THROWS_WITH_FRAGMENT(y.backward(), AutogradError,
                             "[backward] a gradient can be created implicitly only for one-element outputs, got shape (3,)");
  CHECK_THROWS_WITH_FRAGMENT(y.backward(ones({2}, kF64)), ValueError,
                             "[backward] gradient (2,) float64 on cpu does not match the output (3,) float64 on cpu");
  CHECK_THROWS_WITH_FRAGMENT(y.backward(ones({3})), ValueError, "float32");
  CHECK_THROWS_WITH_FRAGMENT(ones({1}).backward(), AutogradError, "[backward] this tensor does not require grad");
  CHECK_THROWS_WITH_FRAGMENT(Tensor().backward(), AutogradError, "does not require grad");
}

// --- retain_graph -----------------------------------------------------------------------

TEST_CASE("retain_graph: without it a second backward throws; with it grads add up") {
  const Tensor x = leaf({1, 2}, {2});
  const Tensor y = sum(mul(x, x));
  y.backward(Tensor(), /*retain_graph=*/true);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4});
  y.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 8});
  CHECK_THROWS_WITH_FRAGMENT(y.backward(), AutogradError, "retain_graph");
  const Tensor z = sum(exp(x));
  z.backward();
  CHECK_THROWS_WITH_FRAGMENT(z.backward(), AutogradError, "backward through the graph a second time");
}

// --- grad mode ------------------------------------------------------------------------------

TEST_CASE("NoGradGuard records nothing, and nested guards restore the state") {
  const Tensor x = leaf({1, 2}, {2});
  CHECK(grad_mode_enabled());
  {
    NoGradGuard outer;
    CHECK_FALSE(grad_mode_enabled());
    const Tensor y = mul(x, x);
    CHECK(y.grad_fn() == nullptr);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    {
      NoGradGuard inner;
      CHECK_FALSE(grad_mode_enabled());
    }
    CHECK_FALSE(grad_mode_enabled());  // the inner guard restored "off", not "on"
  }
  CHECK(grad_mode_enabled());
  CHECK(mul(x, x).grad_fn() != nullptr);
}

TEST_CASE("backward functions run with grad mode off") {
  const Tensor x = leaf({1}, {1});
  bool mode_inside = true;
  Tensor y = custom(x, [&](const Tensor& dy) {
    mode_inside = grad_mode_enabled();
    return std::vector<Tensor>{dy};
  });
  y.backward();
  CHECK_FALSE(mode_inside);
  CHECK(grad_mode_enabled());
}

TEST_CASE("detach: no history, shared storage") {
  const Tensor x = leaf({1, 2, 3}, {3});
  const Tensor y = mul(x, 2.0);
  Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.grad_fn() == nullptr);
  CHECK(d.is_leaf());
  CHECK(d.storage().get() == y.storage().get());
  d.set({0}, 50);  // allowed: d does not require grad
  CHECK(y.at({0}) == 50);
  // Gradients stop at the detached tensor.
  const Tensor z = add(mul(y.detach(), x), x);
  sum(z).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{51, 5, 7});
}

TEST_CASE("requires_grad propagates from any input; is_leaf and grad_fn follow") {
  const Tensor a = leaf({1, 2}, {2});
  const Tensor b = tensor({3, 4}, {2}, kF64);
  CHECK(a.requires_grad());
  CHECK(a.is_leaf());
  CHECK(a.grad_fn() == nullptr);
  const Tensor ab = mul(a, b);
  CHECK(ab.requires_grad());
  CHECK_FALSE(ab.is_leaf());
  CHECK(ab.grad_fn()->name() == "mul");
  CHECK(mul(b, a).requires_grad());
  CHECK_FALSE(mul(b, b).requires_grad());
  CHECK(mul(b, b).grad_fn() == nullptr);
  CHECK(sum(a).requires_grad());
  CHECK_FALSE(a.to(DType::Int64).requires_grad());  // integers carry no gradient
  CHECK(a.to(DType::Float32).requires_grad());
  CHECK(a.clone().grad_fn()->name() == "clone");
}

TEST_CASE("requires_grad_: floats only, leaves only") {
  Tensor i = zeros({2}, {.dtype = DType::Int32});
  CHECK_THROWS_WITH_FRAGMENT(i.requires_grad_(), TypeError,
                             "[requires_grad_] only floating-point tensors can require grad, got int32");
  CHECK_NOTHROW(i.requires_grad_(false));
  Tensor h = zeros({2}, {.dtype = DType::Float16});
  CHECK(h.requires_grad_().requires_grad());
  const Tensor x = leaf({1}, {1});
  Tensor y = mul(x, 2.0);
  CHECK_THROWS_WITH_FRAGMENT(y.requires_grad_(false), AutogradError,
                             "only leaf tensors can change requires_grad; this one is the output of 'mul_scalar'");
  Tensor fresh = y.detach().requires_grad_();
  CHECK(fresh.is_leaf());
  CHECK(fresh.requires_grad());
}

// --- in-place rules -------------------------------------------------------------------------

TEST_CASE("in-place writes to a leaf that requires grad throw, unless under NoGradGuard") {
  Tensor x = leaf({1, 2}, {2});
  CHECK_THROWS_WITH_FRAGMENT(x.fill_(0), AutogradError,
                             "[fill_] a leaf tensor that requires grad (shape (2,)) cannot be modified in place");
  CHECK_THROWS_WITH_FRAGMENT(x.set({0}, 5), AutogradError, "loom::NoGradGuard");
  CHECK_THROWS_WITH_FRAGMENT(x.copy_(zeros({2}, kF64)), AutogradError, "[copy_]");
  CHECK_THROWS_WITH_FRAGMENT(add_(x, 1.0), AutogradError, "[add_]");
  CHECK(x.to_vector<double>() == std::vector<double>{1, 2});
  {
    NoGradGuard guard;
    add_(x, 1.0);
    x.set({1}, 10);
  }
  CHECK(x.to_vector<double>() == std::vector<double>{2, 10});
  CHECK(x.requires_grad());
}

TEST_CASE("in-place writes to a non-leaf that requires grad throw") {
  const Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, 2.0);
  CHECK_THROWS_WITH_FRAGMENT(y.zero_(), AutogradError,
                             "[fill_] in-place ops are not recorded by autograd, and this tensor (the output of 'mul_scalar')");
  Tensor v = x.slice(0, 0, 1);
  CHECK_THROWS_WITH_FRAGMENT(mul_(v, 3.0), AutogradError, "'slice'");
}

TEST_CASE("a saved tensor modified in place before backward makes backward throw") {
  const Tensor x = leaf({1, 2}, {2});
  Tensor w = tensor({3, 4}, {2}, kF64);
  const Tensor y = sum(mul(x, w));  // mul saves x and w
  w.fill_(0);
  CHECK_THROWS_WITH_FRAGMENT(y.backward(), AutogradError,
                             "[backward] a tensor saved by 'mul' was modified in place after the forward pass");
}

TEST_CASE("writing through a view of a saved tensor is caught too") {
  const Tensor x = leaf({1, 2}, {2});
  Tensor w = tensor({3, 4, 5, 6}, {2, 2}, kF64);
  const Tensor y = sum(mul(x, w));
  w.t().select(0, 1).fill_(9);  // one column of w, through two views
  CHECK_THROWS_WITH_FRAGMENT(y.backward(), AutogradError, "modified in place");
}

TEST_CASE("a saved output modified under NoGradGuard still makes backward throw") {
  const Tensor x = leaf({1, 2}, {2});
  Tensor e = exp(x);  // exp saves its output
  const Tensor y = sum(e);
  {
    NoGradGuard guard;
    e.fill_(0);
  }
  CHECK_THROWS_WITH_FRAGMENT(y.backward(), AutogradError, "a tensor saved by 'exp'");
}

TEST_CASE("a set() that fails on its index is not an in-place modification") {
  const Tensor x = leaf({1, 2}, {2});
  Tensor w = tensor({3, 4}, {2}, kF64);
  const Tensor y = sum(mul(x, w));
  CHECK_THROWS_AS(w.set({5}, 1.0), IndexError);
  CHECK_NOTHROW(y.backward());
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 4});
}

TEST_CASE("an in-place write to an input that was not saved does not block backward") {
  const Tensor x = leaf({1, 2}, {2});
  Tensor w = tensor({3, 4}, {2}, kF64);
  const Tensor y = sum(add(x, w));  // add needs no values
  w.fill_(0);
  CHECK_NOTHROW(y.backward());
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 1});
}

// --- custom nodes via record() ---------------------------------------------------------------

TEST_CASE("record: a custom node's gradient reaches the leaf; undefined means zero") {
  const Tensor x = leaf({1, 2}, {2});
  custom(x, [](const Tensor& dy) { return std::vector<Tensor>{mul(dy, 7.0)}; }).backward(ones({2}, kF64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{7, 7});
  const Tensor z = leaf({1, 2}, {2});
  custom(z, [](const Tensor&) { return std::vector<Tensor>{Tensor()}; }).backward(ones({2}, kF64));
  CHECK_FALSE(z.grad().defined());
}

// y = scale * x whose node also has the two-gradient form; `calls` counts
// (one-gradient, two-gradient) backward calls.
Tensor custom_with_sum(const Tensor& x, double scale, std::pair<int, int>& calls) {
  Tensor y = mul(x.detach(), scale);
  record("custom_sum", {x}, y,
         [scale, &calls](const Tensor& dy) {
           ++calls.first;
           return std::vector<Tensor>{mul(dy, scale)};
         },
         [scale, &calls](const Tensor& a, const Tensor& b) {
           ++calls.second;
           CHECK(a.sizes() == b.sizes());
           return std::vector<Tensor>{mul(add(a, b), scale)};
         },
         {});
  return y;
}

TEST_CASE("record with a two-gradient backward: two consumers' gradients reach it unsummed") {
  // z = 3y + y^2 with y = 2x: dz/dy = 3 + 2y, dz/dx = 2 (3 + 4x).
  const Tensor x = leaf({1, -2, 0.5}, {3});
  std::pair<int, int> calls;
  const Tensor y = custom_with_sum(x, 2.0, calls);
  sum(add(mul(y, 3.0), mul(y, y))).backward();
  CHECK(calls == std::pair{0, 1});
  CHECK_CLOSE(x.grad(), tensor({14, -10, 10}, {3}, kF64), 1e-14, 0);

  // Three consumers: two are summed, the third is handed over.
  const Tensor x3 = leaf({1, 2}, {2});
  calls = {};
  const Tensor y3 = custom_with_sum(x3, 1.0, calls);
  sum(add(add(mul(y3, 2.0), mul(y3, 5.0)), y3)).backward();
  CHECK(calls == std::pair{0, 1});
  CHECK(x3.grad().to_vector<double>() == std::vector<double>{8, 8});

  // One consumer: the ordinary backward.
  const Tensor x1 = leaf({1, 2}, {2});
  calls = {};
  sum(custom_with_sum(x1, 4.0, calls)).backward();
  CHECK(calls == std::pair{1, 0});
  CHECK(x1.grad().to_vector<double>() == std::vector<double>{4, 4});
}

TEST_CASE("anomaly mode sums first, so its finite check sees the whole gradient") {
  const Tensor x = leaf({1, 2}, {2});
  std::pair<int, int> calls;
  AnomalyGuard anomaly;
  const Tensor y = custom_with_sum(x, 2.0, calls);
  sum(add(y, mul(y, 3.0))).backward();
  CHECK(calls == std::pair{1, 0});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{8, 8});
}

TEST_CASE("record: an undefined input (a missing bias) is allowed") {
  const Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x.detach(), 2.0);
  record("with_missing_bias", {x, Tensor()}, y, [](const Tensor& dy) {
    return std::vector<Tensor>{mul(dy, 2.0), Tensor()};
  });
  sum(y).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 2});
}

TEST_CASE("record: wrong gradient count or shape is an AutogradError naming the node") {
  const Tensor x = leaf({1, 2}, {2});
  Tensor two = custom(x, [](const Tensor& dy) { return std::vector<Tensor>{dy, dy}; });
  CHECK_THROWS_WITH_FRAGMENT(sum(two).backward(), AutogradError, "[backward] 'custom' returned 2 gradients for 1 inputs");
  Tensor shape = custom(x, [](const Tensor&) { return std::vector<Tensor>{zeros({3}, kF64)}; });
  CHECK_THROWS_WITH_FRAGMENT(sum(shape).backward(), AutogradError,
                             "[backward] 'custom' returned a gradient (3,) float64 on cpu for input 0 which is (2,) float64 on cpu");
  Tensor dtype = custom(x, [](const Tensor& dy) { return std::vector<Tensor>{dy.to(DType::Float32)}; });
  CHECK_THROWS_WITH_FRAGMENT(sum(dtype).backward(), AutogradError, "float32");
}

TEST_CASE("set_grad checks shape and dtype") {
  Tensor x = leaf({1, 2}, {2});
  CHECK_THROWS_WITH_FRAGMENT(x.set_grad(zeros({3}, kF64)), ValueError,
                             "[set_grad] gradient (3,) float64 on cpu does not match the tensor (2,) float64 on cpu");
  x.set_grad(ones({2}, kF64));
  sum(x).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 2});
}

TEST_CASE("the leaf's .grad does not alias the gradient flowing through the graph") {
  const Tensor x = leaf({1, 2}, {2});
  const Tensor g = tensor({5, 6}, {2}, kF64);
  x.backward(g);
  g.detach().fill_(0);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5, 6});
}

TEST_CASE("the graph is freed with its output, with or without a backward") {
  std::weak_ptr<Node> node, inner;
  const Tensor x = leaf({1, 2}, {2});
  {
    const Tensor e = exp(x);
    inner = e.grad_fn();
    const Tensor y = sum(mul(e, x));
    node = y.grad_fn();
    y.backward(Tensor(), /*retain_graph=*/true);
  }
  CHECK(node.expired());
  CHECK(inner.expired());
  {
    const Tensor y = sum(sqrt(mul(exp(x), x.t())));
    node = y.grad_fn();
  }
  CHECK(node.expired());
}

TEST_CASE("post-accumulate-grad hooks run once per backward, after every path's gradient is summed") {
  Tensor w = tensor({1.0, 2.0}, {2}, {.requires_grad = true});
  std::vector<std::vector<double>> seen;
  int64_t handle = register_post_accumulate_grad_hook(
      w, [&](const Tensor& leaf) { seen.push_back(leaf.grad().to_vector<double>()); });
  // Two paths into w: the hook sees their sum once, not each half.
  sum(add(mul(w, 3.0), w)).backward();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::vector<double>{4.0, 4.0});
  // A second backward accumulates into .grad, then the hook sees the total.
  sum(w).backward();
  REQUIRE(seen.size() == 2);
  CHECK(seen[1] == std::vector<double>{5.0, 5.0});
  remove_post_accumulate_grad_hook(w, handle);
  sum(w).backward();
  CHECK(seen.size() == 2);
  Tensor y = mul(w, 2.0);
  CHECK_THROWS_WITH_FRAGMENT(register_post_accumulate_grad_hook(y, [](const Tensor&) {}),
                             AutogradError, "the output of 'mul_scalar'");
}

TEST_CASE("gradients through dtype casts into leaves: converted back, summed with other paths") {
  // Casts into leaves wait until the end of backward and convert together; the
  // leaves must end up as if each had converted on its own.
  Tensor w = leaf({0.1, -0.7, 2.5}, {3});
  Tensor b = leaf({1.0 / 3.0}, {1});
  Tensor w32 = w.to(DType::Float32), b32 = b.to(DType::Float32);
  REQUIRE(w32.grad_fn() != nullptr);
  CHECK(w32.grad_fn()->name() == "to_dtype");
  // Two paths into w: one through its cast, one direct (in float64).
  Tensor loss = add(sum(mul(w32, w32)).to(DType::Float64), sum(mul(w, 3.0)));
  loss = add(loss, sum(mul(b32, 2.0)).to(DType::Float64));
  loss.backward();
  REQUIRE(w.grad().dtype() == DType::Float64);
  REQUIRE(b.grad().dtype() == DType::Float64);
  // d/dw: 2 * float32(w) rounded to float32, back in float64, plus 3.
  std::vector<double> expected;
  for (double v : {0.1, -0.7, 2.5}) {
    expected.push_back(static_cast<double>(2.0f * static_cast<float>(v)) + 3.0);
  }
  CHECK(w.grad().to_vector<double>() == expected);
  CHECK(b.grad().to_vector<double>() == std::vector<double>{2.0});
  // A second backward adds into the existing grads.
  sum(mul(w.to(DType::Float32), 4.0)).backward();
  for (double& e : expected) e += 4.0;
  CHECK(w.grad().to_vector<double>() == expected);
}

TEST_CASE("a cast into a leaf with a hook: the hook sees the converted gradient during backward") {
  Tensor w = leaf({1.5, -2.0}, {2});
  std::vector<double> seen;
  const int64_t handle = register_post_accumulate_grad_hook(
      w, [&](const Tensor& l) { seen = l.grad().to_vector<double>(); });
  sum(mul(w.to(DType::Float32), 5.0)).backward();
  CHECK(seen == std::vector<double>{5.0, 5.0});
  CHECK(w.grad().to_vector<double>() == std::vector<double>{5.0, 5.0});
  remove_post_accumulate_grad_hook(w, handle);
}

TEST_CASE("retain_graph through a cast: a second backward adds the same gradient again") {
  Tensor w = leaf({0.5, 0.25}, {2});
  Tensor loss = sum(mul(w.to(DType::Float32), 2.0));
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{4.0, 4.0});
}

}  // namespace
}  // namespace loom
