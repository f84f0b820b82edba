// File: core/kernel/compare.h
// The comparison ops and one comparison, written once for core/cpu/compare.cc
// and core/cuda/compare.cu.
// NaN compares false under every op but Ne, as IEEE and PyTorch have it.
#pragma once

#include <cmath>
#include <type_traits>

#include "core/kernel/host_device.h"

namespace loom::kernel {

enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge };

}  // namespace loom::kernel

namespace loom::kernel::math {

template <class T>
LOOM_HOST_DEVICE bool apply_compare(T a, T b, CompareOp op) {
  switch (op) {
    case CompareOp::Eq: return a == b;
    case CompareOp::Ne: return a != b;
    case CompareOp::Lt: return a < b;
    case CompareOp::Le: return a <= b;
    case CompareOp::Gt: return a > b;
    case CompareOp::Ge: return a >= b;
  }
  return false;
}

// What isclose computes in for values of type T (16-bit floats arrive as
// float): floating values in their own precision, as PyTorch's isclose,
// integers and Bool in double.
template <class T>
using close_t = std::conditional_t<std::is_floating_point_v<T>, T, double>;

// torch.isclose for one pair: equal (infinities of one sign included), both
// NaN when equal_nan, or a finite difference within atol + |rtol * b|.
template <class T>
LOOM_HOST_DEVICE bool is_close(T a, T b, T rtol, T atol, bool equal_nan) {
  if (a == b) return true;
  if (std::isnan(a) && std::isnan(b)) return equal_nan;
  const T diff = std::fabs(a - b);
  return std::isfinite(diff) && diff <= atol + std::fabs(rtol * b);
}

}  // namespace loom::kernel::math
