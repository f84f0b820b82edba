// File: core/cudnn/context.cc
// Per-thread, per-GPU cuDNN handles, per-run workspaces, and the background warm-up.
#include "core/cudnn/context.h"

#include <spdlog/spdlog.h>

#include <exception>

#include "core/capture_gate.h"
#include "core/cuda/allocator_purpose.h"
#include "core/cuda/blas.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/cudnn/backend.h"
#include "core/cudnn/conv.h"
#include "core/cudnn/norm.h"
#include "core/cudnn/plan.h"
#include "core/error.h"
#include "core/numerics.h"

namespace loom::cudnn {

namespace {

struct ThreadState {
  cudnnHandle_t handle = nullptr;
  // Handles live as long as the thread: destroying them at thread exit could
  // race with queued work, and PyTorch keeps its handles for good too.
};

// The current device's: a handle belongs to one GPU.
ThreadState& state() {
  thread_local cuda::PerDevice<ThreadState> states;
  return states.current();
}

// A channels-last tensor description with no data: the warm-up's graphs only
// need shapes (their test runs bind scratch buffers).
Strided nhwc(Shape sizes) {
  const int64_t c = sizes[1], h = sizes[2], w = sizes[3];
  return Strided{.data = nullptr, .dtype = DType::Float32, .sizes = sizes,
                 .strides = {h * w * c, 1, w * c, c}};
}

Strided channels(int64_t c) {
  return Strided{.data = nullptr, .dtype = DType::Float32, .sizes = {c}, .strides = {1}};
}

}  // namespace

cudnnHandle_t handle() {
  ThreadState& s = state();
  if (s.handle == nullptr) LOOM_CUDNN_CHECK(cudnnCreate(&s.handle));
  LOOM_CUDNN_CHECK(cudnnSetStream(s.handle, cuda::current_stream()));
  return s.handle;
}

Workspace::Workspace(size_t bytes) : device_(cuda::current_device()) {
  cuda::PurposeScope purpose(cuda::Purpose::Workspace);
  ptr_ = cuda::malloc_device(bytes, device_);
}

Workspace::~Workspace() { cuda::free_device(ptr_, device_); }

size_t loaded_version() { return cudnnGetVersion(); }

void warm_up(int device) noexcept {
  try {
    LOOM_CUDA_CHECK(cudaSetDevice(device));
    // Precompiled engines only: a quick look, as lazy mode's first one; the
    // gate keeps the test runs out of a capture on the main thread.
    const SelectOptions quick{.policy = numerics_policy(), .precompiled_only = true,
                              .gate = &capture_gate(), .first_working = true};
    // x (1, 8, 8, 8) * w (8, 8, 3, 3) -> y (1, 8, 6, 6)
    (void)select_plan(conv2d_graph(ConvDirection::Forward, nhwc({1, 8, 8, 8}), nhwc({8, 8, 3, 3}),
                                   nhwc({1, 8, 6, 6}), kernel::ConvParams{}),
                      handle(), quick);
    const Strided c = channels(8);
    (void)select_plan(batch_norm_forward_graph({.y = nhwc({2, 8, 4, 4}), .save_mean = c,
                                                .save_invstd = c, .x = nhwc({2, 8, 4, 4}),
                                                .weight = c, .bias = c, .running_mean = c,
                                                .running_var = c}),
                      handle(), quick);
    // cuBLAS's start-up (cuBLASLt's context, its tables) is paid by the first
    // handle in the process; the training thread's first matrix product (a
    // Linear layer, in the first step) then only makes its own handle. A handle
    // is library state, no plan selection: off the main thread it costs nothing later.
    cublasHandle_t blas = nullptr;
    LOOM_CUBLAS_CHECK(cublasCreate(&blas));
    LOOM_CUBLAS_CHECK(cublasDestroy(blas));
  } catch (const std::exception& e) {
    spdlog::debug("[cudnn] warm-up on cuda:{} failed ({}); the first cuDNN op pays the start-up "
                  "instead", device, e.what());
  } catch (...) {
    spdlog::debug("[cudnn] warm-up on cuda:{} failed; the first cuDNN op pays the start-up instead",
                  device);
  }
}

}  // namespace loom::cudnn
