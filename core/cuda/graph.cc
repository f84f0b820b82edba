// File: core/cuda/graph.cc
// Capture and replay of CUDA graphs on the device they were captured on.
#include "core/cuda/graph.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "core/capture_gate.h"
#include "core/cuda/counter_kernels.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

namespace {
std::atomic<uint64_t> replays{0};
std::atomic<uint64_t> captures{0};
thread_local CudaGraph* capturing = nullptr;  // the graph whose capture() runs on this thread
}  // namespace

uint64_t replay_count() { return replays.load(); }
uint64_t capture_count() { return captures.load(); }

CudaGraph::~CudaGraph() { reset(); }

void CudaGraph::reset() {
  if (exec_ != nullptr) {
    DeviceGuard guard(device_);
    cudaStreamSynchronize(current_stream());  // a replay may still be using the pool
    cudaGraphExecDestroy(exec_);
  }
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
  for (const RandomUse& use : random_) {
    DeviceGuard guard(device_);
    cudaFree(use.base);  // after the synchronize above: no replay reads it any more
  }
  random_.clear();
  counter_adds_.clear();
  if (pool_) release_capture_pool(*pool_);
  pool_.reset();
}

PhiloxArgs CudaGraph::draw_in_capture(Generator& gen, uint64_t blocks) {
  LOOM_CHECK(capturing != nullptr, CudaError,
             "[random] random numbers drawn during a CUDA-graph capture that is not a "
             "cuda::CudaGraph's: capture with CudaGraph (optim::TrainStep does), so that each "
             "replay draws fresh numbers");
  std::vector<RandomUse>& uses = capturing->random_;
  auto use = std::find_if(uses.begin(), uses.end(),
                          [&](const RandomUse& u) { return u.generator == &gen; });
  if (use == uses.end()) {
    // Straight from the driver (relaxed capture allows it), not from the
    // capture's pool: a pool block may be a temporary that a kernel earlier in
    // the graph writes, after the replay stored the state there.
    void* base = nullptr;
    LOOM_CUDA_CHECK(cudaMalloc(&base, 2 * sizeof(uint64_t)));
    use = uses.insert(uses.end(), RandomUse{&gen, static_cast<uint64_t*>(base), 0});
  }
  const PhiloxArgs args{.seed = 0, .first_block = use->blocks, .base = use->base};
  use->blocks += blocks;
  return args;
}

bool CudaGraph::add_at_end(int64_t* counter, int64_t by) {
  if (capturing == nullptr || capturing->device_ != current_device()) return false;
  std::vector<CounterAdd>& adds = capturing->counter_adds_;
  auto add = std::find_if(adds.begin(), adds.end(), [&](const CounterAdd& a) { return a.counter == counter; });
  if (add == adds.end()) {
    adds.push_back({counter, by});
  } else {
    add->by += by;
  }
  return true;
}

void CudaGraph::launch_counter_adds(cudaStream_t stream) const {
  for (size_t first = 0; first < counter_adds_.size(); first += kCounterBatch) {
    CounterBatch batch{};
    batch.count = static_cast<int>(std::min<size_t>(kCounterBatch, counter_adds_.size() - first));
    for (int i = 0; i < batch.count; ++i) {
      batch.counters[i] = counter_adds_[first + i].counter;
      batch.by[i] = counter_adds_[first + i].by;
    }
    LOOM_CUDA_CHECK(launch_increments(batch, stream));
  }
}

void CudaGraph::capture(const std::function<void()>& work, const std::optional<CapturePlan>& plan) {
  capture_work(work, plan);
  LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void CudaGraph::record(const std::function<void()>& work) {
  capture_work(work, std::nullopt);
  reset();  // the pool goes back now; blocks `work` left alive return to it when freed
}

void CudaGraph::capture_work(const std::function<void()>& work, const std::optional<CapturePlan>& plan) {
  reset();
  std::unique_lock exclusive(capture_gate());
  device_ = current_device();
  cudaStream_t stream = current_stream();
  CaptureScope scope;
  pool_ = scope.pool();
  if (plan) scope.use_plan(*plan);
  LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  ++captures;
  capturing = this;
  try {
    work();
    launch_counter_adds(stream);
    capturing = nullptr;
  } catch (...) {
    capturing = nullptr;
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);  // leave the stream usable
    if (broken != nullptr) cudaGraphDestroy(broken);
    cudaGetLastError();
    throw;
  }
  LOOM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
  memory_record_ = scope.requests();
  plan_misses_ = scope.plan_misses();
}

void CudaGraph::replay() {
  LOOM_CHECK(exec_ != nullptr, CudaError, "[cuda_graph] replay() before capture()");
  DeviceGuard guard(device_);
  for (const RandomUse& use : random_) {
    const uint64_t offset = use.generator->reserve(use.blocks);
    LOOM_CUDA_CHECK(launch_store_philox_base(use.base, use.generator->seed(), offset,
                                             current_stream()));
  }
  LOOM_CUDA_CHECK(cudaGraphLaunch(exec_, current_stream()));
  ++replays;
}

}  // namespace loom::cuda
