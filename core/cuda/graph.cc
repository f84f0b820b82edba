#include "core/cuda/graph.h"

#include <atomic>
#include <mutex>

#include "core/capture_gate.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

namespace {
std::atomic<uint64_t> replays{0};
std::atomic<uint64_t> captures{0};
}  // namespace

uint64_t replay_count() { return replays.load(); }
uint64_t capture_count() { return captures.load(); }

CudaGraph::~CudaGraph() { reset(); }

void CudaGraph::reset() {
  if (exec_ != nullptr) {
    cudaStreamSynchronize(current_stream());  // a replay may still be using the pool
    cudaGraphExecDestroy(exec_);
  }
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
  if (pool_) release_capture_pool(*pool_);
  pool_.reset();
}

void CudaGraph::capture(const std::function<void()>& work) {
  reset();
  std::unique_lock exclusive(capture_gate());
  cudaStream_t stream = current_stream();
  CaptureScope scope;
  pool_ = scope.pool();
  LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  ++captures;
  try {
    work();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);  // leave the stream usable
    if (broken != nullptr) cudaGraphDestroy(broken);
    cudaGetLastError();
    throw;
  }
  LOOM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
  LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void CudaGraph::replay() const {
  LOOM_CHECK(exec_ != nullptr, CudaError, "[cuda_graph] replay() before capture()");
  LOOM_CUDA_CHECK(cudaGraphLaunch(exec_, current_stream()));
  ++replays;
}

}  // namespace loom::cuda
