// File: core/cudnn/context.h
// Per-thread, per-GPU cuDNN state (for the current device): a handle bound to
// the thread's current stream; and the workspace of one plan run, taken from
// the caching allocator for that run only.
#pragma once

#include <cudnn.h>

#include <cstddef>

namespace loom::cudnn {

// This thread's handle, with cudnnSetStream(current stream) applied.
cudnnHandle_t handle();

// `bytes` of device memory for the workspace of one cuDNN run on the current
// stream and device, counted as workspace (allocator_purpose.h) and given back
// when it goes out of scope. As PyTorch does: a workspace that lived on for
// good, grown to the largest plan ever run, was alive at every later peak
// (430 MiB of resnet18's). Given back in stream order, it is reused by the next
// op on the stream without a synchronisation. Inside a CUDA-graph capture it
// comes from the capture's pool, which keeps it for the graph's replays.
//
//   const Workspace workspace(plan->workspace_bytes());
//   plan->execute(handle(), pointers, workspace.get());
class Workspace {
 public:
  explicit Workspace(size_t bytes);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;  // null for 0 bytes
  int device_;
};

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
