// File: tests/core/ops/activation_test.cc
// Every activation row (core/kernel/activation.h), table-driven: hand values, a naive reference on
// contiguous, strided and channels-last inputs, derivatives by hand and by
// gradcheck, saturation, and argument errors.
// N batch, C channels, H, W.
#include "core/ops/activation.h"

#include <doctest/doctest.h>

#include <cmath>
#include <algorithm>
#include <functional>
#include <array>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

double naive_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double naive_phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }  // normal CDF

// The row's two scalars as the formulas below take them.
using Scalars = std::array<double, 2>;

// The float64 reference for one activation row, written independently of
// core/kernel/activation.h: value and derivative at x with the row's scalars.
struct Reference {
  ActivationKind kind;
  std::vector<double> parameters;  // non-default ones, to check they are used
  std::function<double(double, Scalars)> f, df;
};

double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

const std::vector<Reference>& references() {
  static const std::vector<Reference> all = {
      {ActivationKind::Relu, {}, [](double x, Scalars) { return x > 0 ? x : 0.0; },
       [](double x, Scalars) { return x > 0 ? 1.0 : 0.0; }},
      {ActivationKind::Sigmoid, {}, [](double x, Scalars) { return naive_sigmoid(x); },
       [](double x, Scalars) { return naive_sigmoid(x) * (1 - naive_sigmoid(x)); }},
      {ActivationKind::Tanh, {}, [](double x, Scalars) { return std::tanh(x); },
       [](double x, Scalars) { return 1 - std::tanh(x) * std::tanh(x); }},
      {ActivationKind::Gelu, {}, [](double x, Scalars) { return x * naive_phi(x); },
       [](double x, Scalars) { return naive_phi(x) + x * std::exp(-x * x / 2) / std::sqrt(2 * M_PI); }},
      {ActivationKind::GeluTanh, {}, [](double x, Scalars) { return gelu_tanh(x); },
       [](double x, Scalars) {
         const double k = std::sqrt(2 / M_PI), u = k * (x + 0.044715 * x * x * x);
         return 0.5 * (1 + std::tanh(u)) + 0.5 * x * k * (1 + 3 * 0.044715 * x * x) / std::pow(std::cosh(u), 2);
       }},
      {ActivationKind::Silu, {}, [](double x, Scalars) { return x * naive_sigmoid(x); },
       [](double x, Scalars) { return naive_sigmoid(x) * (1 + x * (1 - naive_sigmoid(x))); }},
      {ActivationKind::Elu, {0.7}, [](double x, Scalars p) { return x > 0 ? x : p[0] * (std::exp(x) - 1); },
       [](double x, Scalars p) { return x > 0 ? 1 : p[0] * std::exp(x); }},
      {ActivationKind::LeakyRelu, {0.2}, [](double x, Scalars p) { return x > 0 ? x : p[0] * x; },
       [](double x, Scalars p) { return x > 0 ? 1 : p[0]; }},
      {ActivationKind::Softplus, {2.0}, [](double x, Scalars p) { return std::log(1 + std::exp(p[0] * x)) / p[0]; },
       [](double x, Scalars p) { return naive_sigmoid(p[0] * x); }},
      {ActivationKind::Mish, {}, [](double x, Scalars) { return x * std::tanh(std::log1p(std::exp(x))); },
       [](double x, Scalars) {
         const double t = std::tanh(std::log1p(std::exp(x)));
         return t + x * (1 - t * t) * naive_sigmoid(x);
       }},
      {ActivationKind::Hardswish, {}, [](double x, Scalars) { return x * std::clamp(x + 3, 0.0, 6.0) / 6; },
       [](double x, Scalars) { return x < -3 ? 0 : x <= 3 ? x / 3 + 0.5 : 1; }},
      {ActivationKind::Hardtanh, {-0.5, 2.0}, [](double x, Scalars p) { return std::clamp(x, p[0], p[1]); },
       [](double x, Scalars p) { return x > p[0] && x < p[1] ? 1 : 0; }},
      {ActivationKind::Relu6, {}, [](double x, Scalars) { return std::min(std::max(x, 0.0), 6.0); },
       [](double x, Scalars) { return x > 0 && x < 6 ? 1 : 0; }},
  };
  return all;
}

std::string name_of(const Reference& r) { return kernel::activation_info(r.kind).name; }
// The scalars the row computes with: the given ones, its defaults for the rest.
Scalars scalars_of(const Reference& r) {
  Scalars p = kernel::activation_info(r.kind).default_parameters;
  std::copy(r.parameters.begin(), r.parameters.end(), p.begin());
  return p;
}
Tensor apply(const Reference& r, const Tensor& x) { return activation(x, r.kind, r.parameters); }

Tensor naive_apply(const Tensor& x, const std::function<double(double, Scalars)>& f, Scalars p) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = f(e, p);
  return tensor(v, x.sizes(), kF64);
}

TEST_CASE("the reference table covers every activation row") {
  for (ActivationKind kind : kernel::kActivationKinds) {
    CAPTURE(kernel::activation_info(kind).name);
    CHECK(std::any_of(references().begin(), references().end(),
                      [kind](const Reference& r) { return r.kind == kind; }));
  }
}

TEST_CASE("activations by hand") {
  const Tensor x = tensor({-2, -0.5, 0, 0.5, 3}, {5}, kF64);
  CHECK(relu(x).to_vector<double>() == std::vector<double>{0, 0, 0, 0.5, 3});
  const double l3 = std::log(3.0);
  // sigmoid(log 3) = 3 / 4, tanh(log 2) = (2 - 1/2) / (2 + 1/2) = 3 / 5.
  CHECK_CLOSE(sigmoid(tensor({0, l3, -l3}, {3}, kF64)), tensor({0.5, 0.75, 0.25}, {3}, kF64), 1e-15, 0);
  CHECK_CLOSE(tanh(tensor({0, std::log(2.0), -std::log(2.0)}, {3}, kF64)), tensor({0, 0.6, -0.6}, {3}, kF64), 1e-15, 1e-16);
  // gelu(x) = x * Phi(x); Phi(1) = 0.8413447460685429.
  CHECK_CLOSE(gelu(tensor({0, 1, -1}, {3}, kF64)), tensor({0, 0.8413447460685429, -0.15865525393145707}, {3}, kF64), 1e-15, 1e-16);
  CHECK_CLOSE(silu(tensor({0, l3}, {2}, kF64)), tensor({0, 0.75 * l3}, {2}, kF64), 1e-15, 0);
  CHECK_CLOSE(elu(tensor({2, -l3}, {2}, kF64), 0.5), tensor({2, 0.5 * (1.0 / 3 - 1)}, {2}, kF64), 1e-15, 1e-16);
  CHECK(leaky_relu(tensor({-2, 3}, {2}, kF64), 0.25).to_vector<double>() == std::vector<double>{-0.5, 3});
  // softplus(log 3) = log 4; linear past beta * x = 20.
  CHECK_CLOSE(softplus(tensor({l3, 30}, {2}, kF64)), tensor({std::log(4.0), 30}, {2}, kF64), 1e-15, 0);
  // gelu_tanh(1) = 0.5 (1 + tanh(sqrt(2 / pi) 1.044715)) = 0.8411919906082768.
  CHECK_CLOSE(gelu(tensor({1}, {1}, kF64), "tanh"), tensor({0.8411919906082768}, {1}, kF64), 1e-15, 0);
  // mish(1) = tanh(log(1 + e)) = 0.8650983882673103.
  CHECK_CLOSE(activation(tensor({1}, {1}, kF64), ActivationKind::Mish), tensor({0.8650983882673103}, {1}, kF64), 1e-15, 0);
  // hardswish: 1 * 4 / 6 at 1, 0 at -3 and below, x from 3 up.
  CHECK_CLOSE(activation(tensor({1, -4, 5}, {3}, kF64), ActivationKind::Hardswish), tensor({2.0 / 3, 0, 5}, {3}, kF64),
              1e-15, 0);
  CHECK(mish(tensor({1}, {1}, kF64)).item() == activation(tensor({1}, {1}, kF64), ActivationKind::Mish).item());
  CHECK(hardswish(tensor({1}, {1}, kF64)).item() == 2.0 / 3);
  // relu6 clips at 0 and 6; hardtanh at -1 and 1 by default, at its bounds otherwise.
  CHECK(relu6(tensor({-2, 0.5, 6, 7.5}, {4}, kF64)).to_vector<double>() == std::vector<double>{0, 0.5, 6, 6});
  CHECK(hardtanh(tensor({-2, 0.5, 3}, {3}, kF64)).to_vector<double>() == std::vector<double>{-1, 0.5, 1});
  CHECK(hardtanh(tensor({-2, 0.5, 3}, {3}, kF64), 0, 2).to_vector<double>() == std::vector<double>{0, 0.5, 2});
}

TEST_CASE("relu6 and hardtanh: no gradient at or beyond the bounds (PyTorch's hardtanh_backward), NaN kept") {
  const Tensor x = tensor({-1, 0, 3, 6, 7}, {5}, {.dtype = DType::Float64, .requires_grad = true});
  sum(relu6(x)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 1, 0, 0});
  const Tensor h = tensor({-1, -0.5, 1, 2}, {4}, {.dtype = DType::Float64, .requires_grad = true});
  sum(hardtanh(h)).backward();
  CHECK(h.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 0});
  CHECK(std::isnan(relu6(tensor({std::nan("")}, {1})).item()));
  CHECK(std::isnan(hardtanh(tensor({std::nan("")}, {1})).item()));
}

TEST_CASE("activations saturate without NaN; relu keeps NaN") {
  const Tensor big = tensor({-1000, 1000}, {2});
  CHECK(sigmoid(big).to_vector<double>() == std::vector<double>{0, 1});
  CHECK(tanh(big).to_vector<double>() == std::vector<double>{-1, 1});
  CHECK(gelu(big).to_vector<double>() == std::vector<double>{0, 1000});
  CHECK(silu(big).to_vector<double>() == std::vector<double>{0, 1000});
  CHECK(relu(big).to_vector<double>() == std::vector<double>{0, 1000});
  CHECK(std::isnan(relu(tensor({std::nan("")}, {1})).item()));
}

TEST_CASE("activations match the naive reference: contiguous, strided, channels-last") {
  Generator gen(1);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor x = mul(randn({2, 3, 4, 5}, {.dtype = dtype}, &gen), 3.0);  // N 2, C 3, H 4, W 5
    const Tensor cl = x.contiguous(MemoryFormat::ChannelsLast);
    const double tol = dtype == DType::Float64 ? 1e-13 : 2e-6;
    for (const Reference& r : references()) {
      CAPTURE(name_of(r));
      CAPTURE(dtype_name(dtype));
      for (const Tensor& input : {x, x.transpose(1, 3), x.slice(2, 0, 4, 3), cl}) {
        const Tensor y = apply(r, input);
        CHECK(y.dtype() == dtype);
        CHECK_CLOSE(y, naive_apply(input, r.f, scalars_of(r)), tol, tol);
      }
      CHECK(apply(r, cl).is_contiguous(MemoryFormat::ChannelsLast));
    }
  }
}

TEST_CASE("activation derivatives match the naive formulas") {
  Generator gen(2);
  for (const Reference& r : references()) {
    CAPTURE(name_of(r));
    const Tensor x = mul(randn({4, 5}, kF64, &gen), 2.0).requires_grad_();
    const Tensor dy = randn({4, 5}, kF64, &gen);
    apply(r, x).backward(dy);
    std::vector<double> expected = naive_apply(x.detach(), r.df, scalars_of(r)).to_vector<double>();
    const std::vector<double> g = dy.to_vector<double>();
    for (size_t i = 0; i < expected.size(); ++i) expected[i] *= g[i];
    CHECK_CLOSE(x.grad(), tensor(expected, {4, 5}, kF64), 1e-12, 1e-14);
  }
}

TEST_CASE("relu gradient at exactly 0 is 0; saturated sigmoid / tanh gradients are 0") {
  const Tensor x = tensor({-1, 0, 2}, {3}, {.dtype = DType::Float64, .requires_grad = true});
  sum(relu(x)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 1});
  const Tensor s = tensor({-1000, 1000}, {2}, {.dtype = DType::Float64, .requires_grad = true});
  sum(add(sigmoid(s), tanh(s))).backward();
  CHECK(s.grad().to_vector<double>() == std::vector<double>{0, 0});
}

TEST_CASE("gradcheck: every activation, two shapes, contiguous and strided inputs") {
  Generator gen(3);
  for (const Reference& ref : references()) {
    for (const Shape& sizes : {Shape{3, 4}, Shape{2, 3, 2, 2}}) {
      CAPTURE(name_of(ref));
      CAPTURE(shape_str(sizes));
      const Tensor x = randn(sizes, {.dtype = DType::Float64, .requires_grad = true}, &gen);
      GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) { return apply(ref, in[0]); }, {x});
      CHECK_MESSAGE(r.ok, r.message);
      r = gradcheck([&](const std::vector<Tensor>& in) { return apply(ref, in[0].transpose(0, -1)); }, {x});
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
}

// x > 0 ? x : slope of x's channel (dim 1) * x, element by element.
Tensor naive_prelu(const Tensor& x, const Tensor& weight) {
  const std::vector<double> v = x.to_vector<double>(), w = weight.to_vector<double>();
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  const int64_t inner = x.dim() >= 2 ? x.numel() / (x.size(0) * channels) : 1;
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double slope = w.size() == 1 ? w[0] : w[(static_cast<int64_t>(i) / inner) % channels];
    out[i] = v[i] > 0 ? v[i] : slope * v[i];
  }
  return tensor(out, x.sizes(), kF64);
}

TEST_CASE("prelu: one slope or one per channel, any layout, gradcheck of x and weight") {
  Generator gen(93);
  for (const Shape& sizes : {Shape{2, 3, 4, 5}, Shape{5, 3}, Shape{7}, Shape{}, Shape{2, 3, 4}}) {
    for (bool per_channel : {false, true}) {
      if (per_channel && sizes.size() < 2) continue;
      CAPTURE(shape_str(sizes));
      CAPTURE(per_channel);
      Tensor x = randn(sizes, kF64, &gen);
      if (sizes.size() == 4) x = x.contiguous(MemoryFormat::ChannelsLast);
      const Tensor weight = rand({per_channel ? sizes[1] : 1}, kF64, &gen) - 0.3;
      CHECK_CLOSE(prelu(x, weight), naive_prelu(x, weight), 0, 0);
      const GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return prelu(in[0], in[1]); },
                                          {x.detach().requires_grad_(true), weight.detach().requires_grad_(true)});
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
  // At x = 0 the gradient is the slope, as PyTorch's prelu_backward; the slope's is x there, 0.
  Tensor x = tensor({0.0, 2.0, -3.0}, {1, 3}, {.dtype = DType::Float64, .requires_grad = true});
  Tensor w = tensor({0.25, 0.5, 0.75}, {3}, {.dtype = DType::Float64, .requires_grad = true});
  sum(prelu(x, w)).backward();
  CHECK_CLOSE(x.grad(), tensor({0.25, 1.0, 0.75}, {1, 3}, kF64), 0, 0);
  CHECK_CLOSE(w.grad(), tensor({0.0, 0.0, -3.0}, {3}, kF64), 0, 0);
  // A float32 slope with a float64 x is cast to x's dtype; its gradient comes back in float32.
  Tensor w32 = full({1}, 0.5).requires_grad_(true);
  sum(prelu(tensor({-2.0}, {1}, kF64), w32)).backward();
  CHECK(w32.grad().dtype() == DType::Float32);
  CHECK(w32.grad().item() == -2.0);
  CHECK_THROWS_WITH_FRAGMENT(prelu(zeros({2, 3, 4}), zeros({4})), ShapeError,
                             "[prelu] weight of shape (4,) must hold 1 slope or one per channel (3: dim 1 of x's "
                             "shape (2, 3, 4))");
  CHECK_THROWS_WITH_FRAGMENT(prelu(zeros({2}, {.dtype = DType::Int64}), zeros({1})), TypeError,
                             "[prelu] x has dtype int64");
}

TEST_CASE("activations reject non-float and undefined inputs") {
  CHECK_THROWS_WITH_FRAGMENT(relu(zeros({2}, {.dtype = DType::Int32})), TypeError,
                             "[relu] input has dtype int32 but the op computes in float32 or float64");
  CHECK_THROWS_WITH_FRAGMENT(sigmoid(zeros({2}, {.dtype = DType::BFloat16})), TypeError, "[sigmoid] input has dtype bfloat16");
  CHECK_THROWS_WITH_FRAGMENT(tanh(zeros({2}, {.dtype = DType::Bool})), TypeError, "[tanh] input has dtype bool");
  CHECK_THROWS_WITH_FRAGMENT(gelu(Tensor()), ValueError, "[gelu] input is an undefined tensor");
  CHECK_THROWS_WITH_FRAGMENT(silu(zeros({2}, {.dtype = DType::UInt8})), TypeError, "[silu] input has dtype uint8");
  CHECK_THROWS_WITH_FRAGMENT(activation(zeros({2}), ActivationKind::Relu, {0.5}), ValueError,
                             "[relu] takes no parameter, got 0.5");
  CHECK_THROWS_WITH_FRAGMENT(activation(zeros({2}), ActivationKind::LeakyRelu, {0.1, 0.2}), ValueError,
                             "[leaky_relu] takes at most 1 parameter (negative_slope), got 2: 0.1, 0.2");
  CHECK_THROWS_WITH_FRAGMENT(hardtanh(zeros({2}), 1, -1), ValueError,
                             "[hardtanh] min_val (1) must be below max_val (-1); swap them");
  CHECK_THROWS_WITH_FRAGMENT(relu6(zeros({2}, {.dtype = DType::Int64})), TypeError, "[relu6] input has dtype int64");
  CHECK_THROWS_WITH_FRAGMENT(gelu(zeros({2}), "fast"), ValueError, "approximate must be 'none' or 'tanh'");
}

}  // namespace
}  // namespace loom
