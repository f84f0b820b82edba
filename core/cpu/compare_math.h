// File: core/cpu/compare_math.h
// One comparison, written once for core/cpu/compare.cc and core/cuda/compare.cu.
// NaN compares false under every op but Ne, as IEEE and PyTorch have it.
#pragma once

#include "core/cpu/compare.h"

// The same definition as elementwise_math.h's (an identical redefinition is allowed).
#ifdef __CUDACC__
#define LOOM_HOST_DEVICE __host__ __device__
#else
#define LOOM_HOST_DEVICE
#endif

namespace loom::cpu::math {

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

}  // namespace loom::cpu::math
