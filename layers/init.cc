// File: layers/init.cc
// Initialisers: uniform and normal draws, scaled and written in place under
// NoGradGuard. The truncated normal inverts the normal CDF on the host (erf
// has no inverse in <cmath>: Newton's method on std::erf) and copies the
// values to the tensor's device and dtype.
#include "layers/init.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/elementwise.h"

namespace loom::nn::init {

namespace {

// The receptive field of a weight (the product of its dims after the first two).
int64_t receptive_field(const Tensor& weight, const char* op) {
  LOOM_CHECK(weight.dim() >= 2, ShapeError,
             "[init.{}] needs a weight with at least 2 dims (out, in, ...), got shape {}", op,
             shape_str(weight.sizes()));
  int64_t field = 1;
  for (int64_t d = 2; d < weight.dim(); ++d) field *= weight.size(d);
  return field;
}

void check_floating(const Tensor& t, const char* op) {
  LOOM_CHECK(t.defined(), ValueError, "[init.{}] got an undefined tensor", op);
  LOOM_CHECK(is_floating(t.dtype()), TypeError,
             "[init.{}] fills floating tensors, not {}: initialise a float32 tensor and convert it", op,
             dtype_name(t.dtype()));
}

// The fan Kaiming scales by (positive: the callers leave tensors without elements first).
double kaiming_fan(const Tensor& t, FanMode mode) {
  return static_cast<double>(mode == FanMode::FanIn ? fan_in(t) : fan_out(t));
}

// erf^-1(y) for y in [-1, 1] (+-infinity at the ends): a first guess from
// erf(x) ~ sign(x) sqrt(1 - exp(-x^2 (4/pi + k x^2) / (1 + k x^2))) with k = 0.147,
// refined by Newton steps on std::erf to double precision.
double erfinv(double y) {
  if (y <= -1.0) return -INFINITY;
  if (y >= 1.0) return INFINITY;
  constexpr double k = 0.147;
  const double ln = std::log1p(-y * y);
  const double first = 2.0 / (std::numbers::pi * k) + ln / 2.0;
  double x = std::copysign(std::sqrt(std::sqrt(first * first - ln / k) - first), y);
  for (int step = 0; step < 3; ++step) {
    x -= (std::erf(x) - y) / (2.0 / std::sqrt(std::numbers::pi) * std::exp(-x * x));
  }
  return x;
}

double normal_cdf(double x) { return (1.0 + std::erf(x / std::numbers::sqrt2)) / 2.0; }

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param) {
  switch (nonlinearity) {
    case Nonlinearity::Linear:
    case Nonlinearity::Conv:
    case Nonlinearity::Sigmoid: return 1.0;
    case Nonlinearity::Tanh: return 5.0 / 3.0;
    case Nonlinearity::ReLU: return std::numbers::sqrt2;
    case Nonlinearity::SELU: return 0.75;
    case Nonlinearity::LeakyReLU: {
      const double slope = param.value_or(0.01);
      return std::sqrt(2.0 / (1.0 + slope * slope));
    }
  }
  __builtin_unreachable();
}

int64_t fan_in(const Tensor& weight) {
  const int64_t field = receptive_field(weight, "fan_in");  // checks the dims before size(1) reads them
  return weight.size(1) * field;
}

int64_t fan_out(const Tensor& weight) {
  const int64_t field = receptive_field(weight, "fan_out");
  return weight.size(0) * field;
}

Tensor uniform_(Tensor t, double low, double high, Generator* generator) {
  LOOM_CHECK(low <= high, ValueError, "[init.uniform_] needs low <= high, got low {} high {}", low,
             high);
  NoGradGuard no_grad;
  return t.uniform_(low, high, generator);
}

Tensor normal_(Tensor t, double mean, double std, Generator* generator) {
  check_floating(t, "normal_");
  LOOM_CHECK(std >= 0, ValueError, "[init.normal_] needs std >= 0, got {}", std);
  if (t.numel() == 0) return t;
  NoGradGuard no_grad;
  const DType draw = t.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  return t.copy_(randn(t.sizes(), {.dtype = draw, .device = t.device()}, generator) * std + mean);
}

Tensor trunc_normal_(Tensor t, double mean, double std, double a, double b, Generator* generator) {
  check_floating(t, "trunc_normal_");
  LOOM_CHECK(std > 0 && a < b, ValueError, "[init.trunc_normal_] needs std > 0 and a < b, got std {}, a {}, b {}",
             std, a, b);
  if (t.numel() == 0) return t;
  NoGradGuard no_grad;
  const double low = 2 * normal_cdf((a - mean) / std) - 1, high = 2 * normal_cdf((b - mean) / std) - 1;
  Tensor u = empty(t.sizes(), {.dtype = DType::Float64});
  u.uniform_(low, high, generator);
  std::vector<double> values = u.to_vector<double>();
  for (double& v : values) v = std::clamp(mean + std * std::numbers::sqrt2 * erfinv(v), a, b);
  return t.copy_(tensor(values, t.sizes(), {.dtype = DType::Float64}));
}

Tensor constant_(Tensor t, double value) {
  NoGradGuard no_grad;
  return t.fill_(value);
}

Tensor zeros_(Tensor t) { return constant_(t, 0.0); }

Tensor ones_(Tensor t) { return constant_(t, 1.0); }

Tensor kaiming_uniform_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity, Generator* generator) {
  if (t.numel() == 0) return t;
  const double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / kaiming_fan(t, mode));
  return uniform_(t, -bound, bound, generator);
}

Tensor kaiming_normal_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity, Generator* generator) {
  if (t.numel() == 0) return t;
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(kaiming_fan(t, mode));
  return normal_(t, 0.0, std, generator);
}

Tensor xavier_uniform_(Tensor t, double gain, Generator* generator) {
  const double fans = static_cast<double>(fan_in(t) + fan_out(t));
  if (t.numel() == 0) return t;
  const double bound = gain * std::sqrt(6.0 / fans);  // U(-bound, bound) has variance gain^2 * 2 / fans
  return uniform_(t, -bound, bound, generator);
}

Tensor xavier_normal_(Tensor t, double gain, Generator* generator) {
  const double fans = static_cast<double>(fan_in(t) + fan_out(t));
  if (t.numel() == 0) return t;
  return normal_(t, 0.0, gain * std::sqrt(2.0 / fans), generator);
}

void default_weight_and_bias_(Tensor weight, Tensor bias, Generator* generator) {
  kaiming_uniform_(weight, std::sqrt(5.0), FanMode::FanIn, Nonlinearity::LeakyReLU, generator);
  if (!bias.defined()) return;
  // A weight without inputs (fan_in 0) leaves the bias U(0, 0), as PyTorch's layers do.
  const int64_t fan = fan_in(weight);
  const double bound = fan > 0 ? 1.0 / std::sqrt(static_cast<double>(fan)) : 0.0;
  uniform_(bias, -bound, bound, generator);
}

}  // namespace loom::nn::init
