// File: core/cuda/graph.h
// Capture a sequence of Loom ops into a CUDA graph once, then replay it.
// Plans must already exist (run the ops once eagerly first): plan building and
// a thread's first cuBLAS handle are refused during capture. Capture uses relaxed
// mode, on the thread's current stream, holding loom::capture_gate()
// (core/capture_gate.h) exclusively. Memory allocated during capture (cuDNN's
// per-run workspaces included) comes from a private allocator pool that the
// graph owns until it is destroyed.
//
//   loom::cuda::CudaGraph graph;
//   graph.capture([&] { y.copy_(relu(x)); });   // records, does not compute
//   graph.replay();                             // computes
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/cuda/allocator.h"
#include "core/cuda/random_kernels.h"
#include "core/generator.h"

namespace loom::cuda {

// How many replays this process has launched. A replay writes memory without
// bumping any storage version, so caches keyed by versions (autocast's weight
// casts) also compare this count.
uint64_t replay_count();
// How many captures CudaGraph has begun in this process: while one runs, it
// names that capture (autocast's casts made inside it belong to its graph).
uint64_t capture_count();

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Records what `work` enqueues on the current stream of the current device,
  // which the graph then belongs to. Throws CudaError (and leaves the graph
  // empty) if anything in `work` is not capturable.
  // With a plan (an earlier capture's memory_record() of the same work), the
  // capture's memory comes from one arena laid out by it (core/capture_plan.h).
  void capture(const std::function<void()>& work, const std::optional<CapturePlan>& plan = std::nullopt);
  // Captures `work` only to learn its memory requests (memory_record()) and
  // keeps no graph: what a planned capture of the same work is laid out from,
  // without instantiating a graph that never runs. Afterwards captured() is false.
  void record(const std::function<void()>& work);
  // The requests the last capture made of its private pool, in order: what a
  // later capture of the same work is planned from.
  const std::vector<CaptureRequest>& memory_record() const { return memory_record_; }
  // Requests of the last capture that its plan did not place (0 without a plan).
  int64_t plan_misses() const { return plan_misses_; }
  // Launches the recorded work on the calling thread's stream on the graph's
  // device. First, each generator drawn from during the capture gets its
  // current (seed, offset) stored where the graph's kernels read it, and
  // advances by the blocks one replay draws.
  void replay();
  bool captured() const { return exec_ != nullptr; }

  // The blocks of a random draw recorded into the graph being captured on the
  // calling thread (core/cuda/random.h's philox_draw). CudaError when the
  // capture is not a CudaGraph's. `gen` must outlive the graph.
  static PhiloxArgs draw_in_capture(Generator& gen, uint64_t blocks);
  // Where a CudaGraph capture runs on the calling thread and the current
  // device, adds `by` to what the graph adds to *counter (an int64 in device
  // memory) at the end of its captured work, all such counters in one launch,
  // and returns true; else returns false.
  static bool add_at_end(int64_t* counter, int64_t by);

 private:
  // A generator drawn from in the capture: where its (seed, offset) live on the
  // device, and how many blocks one replay draws.
  struct RandomUse {
    Generator* generator;
    uint64_t* base;
    uint64_t blocks;
  };

  struct CounterAdd {
    int64_t* counter;
    int64_t by;
  };

  void reset();
  // Captures into graph_ (not instantiated) and keeps the capture's memory record.
  void capture_work(const std::function<void()>& work, const std::optional<CapturePlan>& plan);
  void launch_counter_adds(cudaStream_t stream) const;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  int device_ = 0;  // where it was captured (set by capture)
  std::optional<CapturePoolId> pool_;
  std::vector<RandomUse> random_;
  std::vector<CounterAdd> counter_adds_;  // of the capture under way
  std::vector<CaptureRequest> memory_record_;
  int64_t plan_misses_ = 0;
};

}  // namespace loom::cuda
