// File: core/ops/elementwise.h
// Elementwise arithmetic with NumPy broadcasting, unary math, and in-place
// updates. Operands share a device and are promoted to one dtype as PyTorch
// promotes them: bf16 + fp32 -> fp32 (16-bit dtypes on the GPU only), an integer
// or Bool operand takes a floating one's dtype, two integer ones the wider
// (uint8 + int64 -> int64). add, sub, mul, neg, abs and pow by a whole number
// compute integers in their own dtype (int32, int64, uint8), wrapping around on
// overflow; a number meets an integer tensor in its dtype when whole (labels + 1,
// a mask times 2 is int64) and in float32 otherwise; div is a true division
// (float32 for integers), and exp, log, sqrt, sin, cos and the other floating
// functions take integers in float32. Masks:
// mask * mask is their logical and, mask + mask their logical or, mask * x has
// x's dtype (the mask as 0 / 1, no gradient to it).
#pragma once

#include <optional>
#include <utility>

#include "core/tensor.h"

namespace loom {

Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor rsub(const Tensor& a, double b);  // b - a
Tensor rdiv(const Tensor& a, double b);  // b / a

// Python's // and % (torch.floor_divide, torch.remainder): the quotient rounded
// toward -inf, and a - floor_divide(a, b) * b, which has b's sign (-3 % 2 is 1, 3 % -2
// is -1). Floats take PyTorch's formula (1 // 0.1 is 9, from the exact fmod); integers
// compute in their own dtype, the signed minimum // -1 wrapping to itself. An integer
// division by zero is a ValueError on the CPU (PyTorch's ZeroDivisionError) and by a
// number anywhere; a zero in a GPU divisor tensor gives 0 for both (as NumPy; PyTorch's
// CUDA result is unspecified), since checking it would wait for the GPU. remainder's
// gradients are dy and -floor_divide(a, b) * dy; floor_divide has none (its output
// does not require grad, as PyTorch marks it not differentiable). The number may come
// first (Python's 7 // t and 7 % t): it meets an integer tensor in the tensor's dtype
// when whole, as the other arithmetic does, and the tensor is the divisor.
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, double b);
Tensor floor_divide(double a, const Tensor& b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, double b);
Tensor remainder(double a, const Tensor& b);  // gradient -floor_divide(a, b) * dy to b

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
// |x|; its gradient is dy * sign(x), 0 at x = 0, as PyTorch's.
Tensor abs(const Tensor& x);
// Gradients cos(x) dy and -sin(x) dy.
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
// As torch's: log(1 + x) and exp(x) - 1 accurate near 0 (a loss's log1p(exp(-z))
// keeps the small terms that log(1 + exp(-z)) rounds away), base-2 and base-10
// logarithms, tan, atan, the error function and 1 / sqrt(x), each with its
// gradient; integers are taken in float32.
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor log2(const Tensor& x);
Tensor log10(const Tensor& x);
Tensor tan(const Tensor& x);
Tensor atan(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor rsqrt(const Tensor& x);
// Rounding to a whole number: floor, ceil, round half to even (torch.round: 0.5 -> 0,
// 1.5 -> 2, -2.5 -> -2) and trunc (toward zero). Their gradient is zero, as PyTorch's;
// an integer tensor comes back as a copy in its dtype, a Bool mask is a TypeError.
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);
Tensor trunc(const Tensor& x);
// torch.round(x, decimals=d): round(x * 10^d) / 10^d, or round(x / 10^-d) * 10^-d for
// d < 0, half to even, computed as PyTorch's CPU kernel computes it: in x's dtype with
// 10^|d| rounded to it (so float32 2.675 to 2 decimals is 2.68: its product with 100
// rounds to 267.5 first; a 10^|d| beyond float32 gives NaN), and a 16-bit x in float32,
// rounded once at the end. d = 0 is round(x). Floating x only, as PyTorch, which has no
// integer kernel for it (an integer tensor is already whole: round(x) copies it); the
// gradient is zero.
Tensor round(const Tensor& x, int64_t decimals);
// -1, 0 or 1 by x's sign, in x's dtype (integers too), 0 for NaN and -0, as
// torch.sign; a zero gradient. A Bool mask is a TypeError.
Tensor sign(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor pow(const Tensor& x, const Tensor& exponent);  // broadcasting; x > 0 where exponent needs grad
// min(max(x, min), max), with at least one bound, as torch.clamp: min > max makes
// every element max, and a NaN bound every element NaN. Its gradient is dy where
// min <= x <= max, else 0. An integer or Bool x meets its bounds as a number
// meets it in arithmetic (PyTorch's result type of the tensor and its bounds): in its
// own dtype (a mask's in int64) when both are whole, with no gradient, and in float32
// when one has a fraction (clamp(labels, 1.5, nullopt) is float32). For an integer
// dtype a bound beyond its range on its own side changes nothing and is dropped (a
// uint8 x with min -1), one beyond the other side is a ValueError (a uint8 x with min
// 300), as PyTorch's.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator%(const Tensor& a, const Tensor& b);  // remainder
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator%(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator%(double a, const Tensor& b);
Tensor operator-(const Tensor& x);

// The compound assignments update self in place, as PyTorch's do: a += b is
// add_(a, b) below, so inside a NoGradGuard `p -= lr * p.grad()` updates the
// parameter itself, and a tensor autograd needs is refused (write a = a + b).
Tensor& operator+=(Tensor& self, const Tensor& other);
Tensor& operator-=(Tensor& self, const Tensor& other);
Tensor& operator*=(Tensor& self, const Tensor& other);
Tensor& operator/=(Tensor& self, const Tensor& other);
Tensor& operator%=(Tensor& self, const Tensor& other);
Tensor& operator+=(Tensor& self, double value);
Tensor& operator-=(Tensor& self, double value);
Tensor& operator*=(Tensor& self, double value);
Tensor& operator/=(Tensor& self, double value);
Tensor& operator%=(Tensor& self, double value);

// In place (not differentiable: allowed on tensors that require grad only under
// NoGradGuard, as optimizers run). `other` broadcasts to self's shape.
Tensor& add_(Tensor& self, const Tensor& other, double alpha = 1.0);
Tensor& sub_(Tensor& self, const Tensor& other, double alpha = 1.0);
Tensor& mul_(Tensor& self, const Tensor& other);
Tensor& div_(Tensor& self, const Tensor& other);
// self % other (Python's sign) and self // other (rounded toward -inf), as remainder
// and floor_divide; an integer divisor holding a zero is refused as they refuse it.
Tensor& remainder_(Tensor& self, const Tensor& other);
Tensor& remainder_(Tensor& self, double value);
Tensor& floor_divide_(Tensor& self, const Tensor& other);
Tensor& floor_divide_(Tensor& self, double value);
Tensor& add_(Tensor& self, double value);
// When an increment_ lands on a GPU counter while the calling thread captures a
// CUDA graph (optim::TrainStep's step). Now: a kernel where the call is.
// AtCaptureEnd: with the capture's other such increments, in one launch at the
// end of the captured work, so a step that counts in many places (one
// BatchNorm counter per layer) pays one launch, not one per counter; nothing
// captured may then read the counter on the device. Outside a capture, and on
// the CPU, both are Now.
enum class CounterOrder { Now, AtCaptureEnd };

// counter += by, for a 0-d int64 counter on any device. On the GPU it is a
// kernel, so a training step captured into a CUDA graph counts every replay.
Tensor& increment_(Tensor& counter, int64_t by = 1, CounterOrder order = CounterOrder::Now);
Tensor& mul_(Tensor& self, double value);

// Validation shared by every floating-point op: defined, floating dtype the
// backend computes in (float32/float64 anywhere; bfloat16/float16 on the GPU
// only: a CPU tensor of those throws TypeError saying how to convert it) and,
// for several operands, one dtype and one device. Messages name `op` and
// print what was given.
void check_float_tensor(const Tensor& x, std::string_view op, std::string_view arg = "input");
void check_same_dtype_device(const Tensor& a, const Tensor& b, std::string_view op);
bool is_half_precision(DType dtype);  // bfloat16 or float16
// Floating binary operands in one dtype: the narrower is cast (differentiably) to the
// wider dtype (bf16 + fp32 -> fp32, fp32 + fp64 -> fp64), two different 16-bit ones
// to float32, as PyTorch promotes; a pair with a non-floating operand comes back unchanged.
std::pair<Tensor, Tensor> promote_operands(const Tensor& a, const Tensor& b);
// Throws DeviceError unless x is on the CPU (ops without a CUDA kernel yet).
void check_cpu(const Tensor& x, std::string_view op);

}  // namespace loom
