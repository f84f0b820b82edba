// File: core/cudnn/context.h
// Per-thread, per-GPU cuDNN state (for the current device): a handle bound to
// the thread's current stream, and a workspace buffer that only grows (so pointers stay fixed once a step has run,
// which CUDA-graph capture needs).
#pragma once

#include <cudnn.h>

#include <cstddef>

namespace loom::cudnn {

// This thread's handle, with cudnnSetStream(current stream) applied.
cudnnHandle_t handle();

// At least `bytes` of device memory for plan workspaces. Growing is refused
// while the stream is capturing: run the step once eagerly first.
void* workspace(size_t bytes);

// cudnnGetVersion() of the library actually loaded (e.g. 91900).
size_t loaded_version();

// Pays cuDNN's start-up on the calling thread: loads its libraries, creates
// the thread's handle and runs the heuristics (and a test run) for a tiny conv
// and a tiny batch norm, then creates (and drops) a cuBLAS handle, which
// pays cuBLAS's own start-up. The first cuDNN use on the main thread cost 0.13 to
// 0.7 s of a cold start (H100); in the lazy plan-build mode the plan cache
// runs this on a builder thread right after the first device allocation
// (LOOM_CUDNN_WARM_UP=0 turns it off), so the model's construction overlaps it. Nothing waits for it, and a
// failure is only logged (debug level): the first op then pays the start-up.
void warm_up(int device) noexcept;

}  // namespace loom::cudnn
