// File: core/kernel/activation.h
// Activations as data: one row (a struct in namespace act) per activation,
// holding its name, formula and derivative (templates usable from the CPU loops
// in core/cpu/activation.cc and the CUDA kernels in core/cuda/elementwise.cu,
// which nvcc compiles as __host__ __device__), what its backward saves, its
// scalar parameter, and the cuDNN pointwise modes that compute it. The list
// LOOM_ACTIVATIONS drives everything else: the ActivationKind enum, the
// kernels, the functional op and its autograd (core/ops/activation.h), the
// cuDNN pointwise graphs (core/cudnn/pointwise.h), nn::Activation and the
// table-driven tests. Adding an activation is adding a row and listing it.
//
// forward(x, a, b) is y; backward(dy, s, a, b) is dx, where s is the saved
// tensor (the forward's output for rows with saved = Saved::Output, else its
// input) and a, b the row's two scalars (rows with fewer ignore the rest).
#pragma once

#include <array>
#include <cmath>
#include <numbers>

#include "core/kernel/host_device.h"


namespace loom::kernel {

enum class Saved { Input, Output };

// The cuDNN pointwise activations (core/cudnn/pointwise.cc maps each to its
// *_FWD and *_BWD mode and the row's scalars to the mode's attributes); None:
// no cuDNN mode, the Loom kernels run it. Relu takes the row's parameter, if
// it has one, as its lower clip slope (LeakyReLU); ClippedRelu is the same
// mode with the row's two scalars as its lower and upper clip (Hardtanh, ReLU6).
enum class CudnnActivation { None, Relu, ClippedRelu, Tanh, Sigmoid, Elu, Gelu, GeluTanh, Softplus, Swish };

// A row's scalars in the order of its parameter names: what the user gave,
// the row's defaults for the rest.
using ActivationParameters = std::array<double, 2>;

struct ActivationInfo {
  const char* name;         // the functional op's name, "leaky_relu"
  const char* module_name;  // PyTorch's module class, "LeakyReLU"
  // The scalars a user may set, in order; "" past the last ({"", ""}: none).
  std::array<const char*, 2> parameter_names;
  // Their defaults; for a row without names, the fixed scalars its formula reads (ReLU6's 0 and 6).
  ActivationParameters default_parameters;
  const char* extra_repr;   // the module repr's fixed part ("" when none)
  Saved saved;
  CudnnActivation cudnn_forward, cudnn_backward;  // cuDNN's backward takes the saved tensor as X
  // For a row that saves its input: whether backward(dy, y) equals backward(dy, x) for
  // every x, so that the output may be kept instead (Loom's kernels; cuDNN's comparisons
  // at a clip are its own).
  bool derivative_from_output = false;
};

// How many scalars a user may set for the row: 0, 1 or 2.
constexpr int parameter_count(const ActivationInfo& row) {
  return *row.parameter_names[0] == '\0' ? 0 : *row.parameter_names[1] == '\0' ? 1 : 2;
}

namespace act {

template <class T>
LOOM_HOST_DEVICE T logistic(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <class T>
LOOM_HOST_DEVICE T normal_cdf(T x) {
  return T(0.5) * (T(1) + std::erf(x * T(std::numbers::sqrt2 / 2)));
}

struct Relu {
  static constexpr ActivationInfo info{"relu", "ReLU", {"", ""}, {0, 0}, "", Saved::Output,
                                       CudnnActivation::Relu, CudnnActivation::Relu};
  template <class T>
  LOOM_HOST_DEVICE static T forward(T x, T, T) { return x > T(0) || std::isnan(x) ? x : T(0); }
  template <class T>  // y > 0 exactly where x > 0, so cuDNN's RELU_BWD may take y
  LOOM_HOST_DEVICE static T backward(T dy, T y, T, T) { return y > T(0) ? dy : T(0); }
};

struct Sigmoid {
  static constexpr ActivationInfo info{"sigmoid", "Sigmoid", {"", ""}, {0, 0}, "", Saved::Output,
                                       CudnnActivation::Sigmoid, CudnnActivation::None};
  template <class T>
  LOOM_HOST_DEVICE static T forward(T x, T, T) { return logistic(x); }
  template <class T>
  LOOM_HOST_DEVICE static T backward(T dy, T y, T, T) { return dy * y * (T(1) - y); }
};

struct Tanh {
  static constexpr ActivationInfo info{"tanh", "Tanh", {"", ""}, {0, 0}, "", Saved::Output,
                                       CudnnActivation::Tanh, CudnnActivation::None};
  template <class T>
  LOOM_HOST_DEVICE static T forward(T x, T, T) { return std::tanh(x); }
  template <class T>
  LOOM_HOST_DEVICE static T backward(T dy, T y, T, T) { return dy * (T(1) - y * y); }
};

// x * Phi(x), Phi the standard normal CDF (PyTorch's default, approximate='none').
struct Gelu {
  static constexpr ActivationInfo info{"gelu", "GELU", {"", ""}, {0, 0}, "approximate='none'",
                                       Saved::Input, CudnnActivation::Gelu, CudnnActivation::Gelu};
  template <class T>
  LOOM_HOST_DEVICE static T forward(T x, T, T) { return x * normal_cdf(x); }
  template <class T>
  LOOM_HOST_DEVICE static T backward(T dy, T x, T, T) {
    constexpr T kInvSqrt2Pi = T(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    return dy * (normal_cdf(x) + x * kInvSqrt2Pi * std::exp(T(-0.5) * x * x));
  }
};

// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) (approximate='tanh').
struct GeluTanh {
  static constexpr ActivationInfo info{"gelu_tanh", "GELU", {"", ""}, {0, 0}, "approximate='tanh'",
                                       Saved::Input, CudnnActivation::GeluTanh,
                                       CudnnActivation::GeluTanh};
  static constexpr double kScale = std::numbers::sqrt2 * std::numbers::inv_sqrtpi, kCubic = 0.044715;
  template <class T>
  LOOM_HOST_DEVICE static T forward(T x, T, T) {
    return T(0.5) * x * (T(1) + std::tanh(T(kScale) * (x + T(kCubic) * x * x * x)));
  }
  template <class T>
  LOOM_HOST_DEVICE static T backward(T dy, T x, T, T) {
    const T t = std::tanh(T(kScale) * (x + T(kCubic) * x * x * x));
    const T du = T(kScale) * (T(1) + T(3 * kCubic) * x * x);
    return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
  }
};

// x * sigmoid(x), cuDNN's swish with beta 1.
struct Silu {
  static constexpr ActivationInfo info{"silu", "SiLU", {"", ""}, {0, 0}, "", Saved::Input,
                                       CudnnActivation::Swish, CudnnActivation::Swish};
  template <class T>
  LOOM_HOST_DEVICE static T forward(T x, T, T) { return x * logistic(x); }
  template <class T>
  LOOM_HOST_DEVICE static T backward(T dy, T x, T, T) {
    const T s = logistic(x);
    return dy * s * (T(1) + x * (T(1) - s));
  }
};

struct Elu {
  static constexpr ActivationInfo info{"elu", "ELU", {"alpha", ""}, {1.0, 0}, "", Saved::Input,
                                       CudnnActivation::Elu, CudnnActivation::Elu};
  template <class T>
  LOOM_HOST_DEVICE static T forward(T x, T alpha, T) { return x > T(0) ? x : alpha * std::expm1(x); }
  template <class T>
  LOOM_HOST_DEVICE static T backward(T dy, T x, T alpha, T) {
    return x > T(0) ? dy : dy * alpha * std::exp(x);
  }
};

// cuDNN's RELU with a lower clip slope.
struct LeakyRelu {
  static constexpr ActivationInfo info{"leaky_relu", "LeakyReLU", {"negative_slope", ""}, {0.01, 0}, "",
                                       Saved::Input, CudnnActivation::Relu, CudnnActivation::Relu};
  template <class T>
  LOOM_HOST_DEVICE static T forward(T x, T slope, T) { return x > T(0) ? x : slope * x; }
  template <class T>
  LOOM_HOST_DEVICE static T backward(T dy, T x, T slope, T) { return x > T(0) ? dy : dy * slope; }
};

// log(1 + exp(beta x)) / beta, linear where beta x > 20 (PyTorch's threshold).
struct Softplus {
  static constexpr ActivationInfo info{"softplus", "Softplus", {"beta", ""}, {1.0, 0}, "threshold=20.0",
                                       Saved::Input, CudnnActivation::Softplus, CudnnActivation::Softplus};
  static constexpr double kThreshold = 20;
  template <class T>
  LOOM_HOST_DEVICE static T forward(T x, T beta, T) {
    return beta * x > T(kThreshold) ? x : std::log1p(std::exp(beta * x)) / beta;
  }
  template <class T>
  LOOM_HOST_DEVICE static T backward(T dy, T x, T beta, T) {
    return beta * x > T(kThreshold) ? dy : dy * logistic(beta * x);
  }
};

// x * tanh(softplus(x)); no cuDNN mode, so Loom's kernels run it on the GPU.
struct Mish {
  static constexpr ActivationInfo info{"mish", "Mish", {"", ""}, {0, 0}, "", Saved::Input,
                                       CudnnActivation::None, CudnnActivation::None};
  template <class T>
  LOOM_HOST_DEVICE static T forward(T x, T, T) { return x * std::tanh(Softplus::forward(x, T(1), T(0))); }
  template <class T>
  LOOM_HOST_DEVICE static T backward(T dy, T x, T, T) {
    const T t = std::tanh(Softplus::forward(x, T(1), T(0)));
    return dy * (t + x * (T(1) - t * t) * logistic(x));
  }
};

// x * relu6(x + 3) / 6 (MobileNetV3); no cuDNN mode, so Loom's kernels run it on the GPU.
struct Hardswish {
  static constexpr ActivationInfo info{"hardswish", "Hardswish", {"", ""}, {0, 0}, "", Saved::Input,
                                       CudnnActivation::None, CudnnActivation::None};
  template <class T>
  LOOM_HOST_DEVICE static T forward(T x, T, T) {
    return x <= T(-3) ? T(0) : x >= T(3) ? x : x * (x + T(3)) / T(6);
  }
  template <class T>
  LOOM_HOST_DEVICE static T backward(T dy, T x, T, T) {  // PyTorch's one-sided choices at -3 and 3
    return x < T(-3) ? T(0) : x <= T(3) ? dy * (x / T(3) + T(0.5)) : dy;
  }
};

// clamp(x, min_val, max_val), NaN kept. The gradient is zero at and beyond the
// bounds, as PyTorch's hardtanh_backward, so the output gives the same gradient
// (y sits on a bound exactly where x is on or past it). It saves the input for
// cuDNN's RELU_BWD, which compares X with the clips in its own way.
struct Hardtanh {
  static constexpr ActivationInfo info{"hardtanh", "Hardtanh", {"min_val", "max_val"}, {-1.0, 1.0}, "",
                                       Saved::Input, CudnnActivation::ClippedRelu,
                                       CudnnActivation::ClippedRelu, /*derivative_from_output=*/true};
  template <class T>
  LOOM_HOST_DEVICE static T forward(T x, T lo, T hi) { return x < lo ? lo : x > hi ? hi : x; }
  template <class T>
  LOOM_HOST_DEVICE static T backward(T dy, T x, T lo, T hi) { return x <= lo || x >= hi ? T(0) : dy; }
};

// min(max(x, 0), 6) (MobileNetV2): Hardtanh with its bounds fixed at 0 and 6.
struct Relu6 {
  static constexpr ActivationInfo info{"relu6", "ReLU6", {"", ""}, {0.0, 6.0}, "", Saved::Input,
                                       CudnnActivation::ClippedRelu, CudnnActivation::ClippedRelu,
                                       /*derivative_from_output=*/true};
  template <class T>
  LOOM_HOST_DEVICE static T forward(T x, T lo, T hi) { return Hardtanh::forward(x, lo, hi); }
  template <class T>
  LOOM_HOST_DEVICE static T backward(T dy, T x, T lo, T hi) { return Hardtanh::backward(dy, x, lo, hi); }
};

}  // namespace act

// Every row, in ActivationKind order.
#define LOOM_ACTIVATIONS(X) \
  X(Relu)                   \
  X(Sigmoid)                \
  X(Tanh)                   \
  X(Gelu)                   \
  X(GeluTanh)               \
  X(Silu)                   \
  X(Elu)                    \
  X(LeakyRelu)              \
  X(Softplus)               \
  X(Mish)                   \
  X(Hardswish)              \
  X(Hardtanh)               \
  X(Relu6)

#define LOOM_ACTIVATION_KIND(Row) Row,
enum class ActivationKind { LOOM_ACTIVATIONS(LOOM_ACTIVATION_KIND) };
#undef LOOM_ACTIVATION_KIND

#define LOOM_ACTIVATION_KIND(Row) ActivationKind::Row,
inline constexpr ActivationKind kActivationKinds[] = {LOOM_ACTIVATIONS(LOOM_ACTIVATION_KIND)};
#undef LOOM_ACTIVATION_KIND

// Calls fn.template operator()<act::Row>() for kind's row.
template <class Fn>
decltype(auto) visit_activation(ActivationKind kind, Fn&& fn) {
  switch (kind) {
#define LOOM_ACTIVATION_CASE(Row) \
  case ActivationKind::Row: return fn.template operator()<act::Row>();
    LOOM_ACTIVATIONS(LOOM_ACTIVATION_CASE)
#undef LOOM_ACTIVATION_CASE
  }
  return fn.template operator()<act::Relu>();
}

inline const ActivationInfo& activation_info(ActivationKind kind) {
  return visit_activation(kind, []<class Row>() -> const ActivationInfo& { return Row::info; });
}

}  // namespace loom::kernel
