// File: core/ops/dispatch.h
// Device dispatch for kernels that have the same signature on both backends:
//
//   LOOM_KERNEL(x, unary, out.strided(), x.strided(), UnaryOp::Exp);
//
// calls cuda::unary(...) on x's GPU (made current for the call) when x is on a
// GPU and cpu::unary(...) otherwise. In a
// build without the CUDA backend no CUDA tensor can exist, so only the CPU call
// is compiled. Ops whose GPU path differs (cuDNN graphs) branch explicitly, and
// so do CPU paths with a oneDNN tier (on_onednn_tier).
#pragma once

#include "core/cpu/copy.h"
#include "core/cpu/elementwise.h"
#include "core/cpu/gemm.h"
#include "core/cpu/loss.h"
#include "core/cpu/norm.h"
#include "core/cpu/pool.h"
#include "core/cpu/reduce.h"
#include "core/onednn/tier.h"
#include "core/tensor.h"

namespace loom {

// True for a CPU tensor whose dtype the oneDNN tier takes while it is on: the
// op may hand its kernels to core/onednn (which fall back by returning false).
inline bool on_onednn_tier(const Tensor& t) {
  return !t.device().is_cuda() && onednn::takes(t.dtype());
}

}  // namespace loom

#ifdef LOOM_WITH_CUDA
#include "core/cuda/blas.h"
#include "core/cuda/elementwise.h"
#include "core/cuda/loss.h"
#include "core/cuda/norm.h"
#include "core/cuda/pool.h"
#include "core/cuda/reduce.h"
#include "core/cuda/runtime.h"

#define LOOM_KERNEL(device_of, kernel, ...)                                              \
  ((device_of).device().is_cuda()                                                        \
       ? ::loom::cuda::on_device((device_of).device().index,                             \
                                 [&] { return ::loom::cuda::kernel(__VA_ARGS__); })      \
       : ::loom::cpu::kernel(__VA_ARGS__))
#else
#define LOOM_KERNEL(device_of, kernel, ...) ::loom::cpu::kernel(__VA_ARGS__)
#endif
