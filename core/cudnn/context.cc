#include "core/cudnn/context.h"

#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/cudnn/backend.h"
#include "core/error.h"

namespace loom::cudnn {

namespace {

struct ThreadState {
  cudnnHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Handles and workspaces live as long as the thread: destroying them at thread
  // exit could race with queued work, and PyTorch keeps its handles for good too.
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

}  // namespace

cudnnHandle_t handle() {
  ThreadState& s = state();
  if (s.handle == nullptr) LOOM_CUDNN_CHECK(cudnnCreate(&s.handle));
  LOOM_CUDNN_CHECK(cudnnSetStream(s.handle, cuda::current_stream()));
  return s.handle;
}

void* workspace(size_t bytes) {
  ThreadState& s = state();
  if (bytes <= s.workspace_bytes) return s.workspace;
  LOOM_CHECK(!cuda::is_capturing(), CudnnError,
             "[cudnn] a plan needs {} bytes of workspace while a CUDA graph is being captured "
             "(only {} reserved); run the step once outside capture so plans and workspace exist",
             bytes, s.workspace_bytes);
  if (s.workspace != nullptr) {
    cuda::synchronize();  // the old buffer may still be in use by queued work
    cuda::free_device(s.workspace, 0);
  }
  s.workspace = cuda::malloc_device(bytes, 0);
  s.workspace_bytes = bytes;
  return s.workspace;
}

size_t loaded_version() { return cudnnGetVersion(); }

}  // namespace loom::cudnn
