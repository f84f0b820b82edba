// File: core/cudnn/context.h
// Per-thread cuDNN state: a handle bound to the thread's current stream, and a
// workspace buffer that only grows (so pointers stay fixed once a step has run,
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

}  // namespace loom::cudnn
