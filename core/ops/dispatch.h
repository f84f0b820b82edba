// File: core/ops/dispatch.h
// Device dispatch for kernels that have the same signature on both backends:
//
//   LOOM_KERNEL(x, unary, out.strided(), x.strided(), UnaryOp::Exp);
//
// calls cuda::unary(...) on x's GPU (made current for the call) when x is on a
// GPU and cpu::unary(...) otherwise. Both are compiled in every build: without
// the CUDA backend core/cuda/no_cuda.cc stands in for the CUDA tier (no CUDA
// tensor exists there to reach it). Ops whose GPU path differs (cuDNN graphs)
// branch explicitly, and so do CPU paths with a oneDNN tier (on_onednn_tier).
#pragma once

#include <optional>

#include "core/cpu/copy.h"
#include "core/cpu/elementwise.h"
#include "core/cpu/gemm.h"
#include "core/cpu/loss.h"
#include "core/cpu/norm.h"
#include "core/cpu/pool.h"
#include "core/cpu/reduce.h"
#include "core/cuda/copy.h"
#include "core/cuda/elementwise.h"
#include "core/cuda/loss.h"
#include "core/cuda/matmul.h"
#include "core/cuda/norm.h"
#include "core/cuda/pool.h"
#include "core/cuda/reduce.h"
#include "core/device.h"
#include "core/onednn/tier.h"
#include "core/tensor.h"

namespace loom {

// True for a CPU tensor whose dtype the oneDNN tier takes while it is on: the
// op may hand its kernels to core/onednn (which fall back by returning false).
inline bool on_onednn_tier(const Tensor& t) {
  return !t.device().is_cuda() && onednn::takes(t.dtype());
}

// A kernel's view of an optional operand (a bias, a residual, a gradient not asked for).
inline std::optional<Strided> strided_or_none(const Tensor& t) {
  if (!t.defined()) return std::nullopt;
  return t.strided();
}

// Runs f with `device` current (a no-op for the CPU), as the CUDA kernels expect.
template <class F>
decltype(auto) on_device(Device device, F&& f) {
  DeviceGuard guard(device);
  return f();
}

}  // namespace loom

#define LOOM_KERNEL(device_of, kernel, ...)                                                   \
  ((device_of).device().is_cuda()                                                             \
       ? ::loom::on_device((device_of).device(), [&] { return ::loom::cuda::kernel(__VA_ARGS__); }) \
       : ::loom::cpu::kernel(__VA_ARGS__))
