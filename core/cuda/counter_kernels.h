// File: core/cuda/counter_kernels.h
// The launcher of counter.cu; core/cuda/counter.cc checks its status.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace loom::cuda {

// *counter += by (one int64 in device memory), ordered on `stream`.
cudaError_t launch_increment(int64_t* counter, int64_t by, cudaStream_t stream);

// Up to kCounterBatch distinct counters and what each gets, passed by value.
constexpr int kCounterBatch = 64;
struct CounterBatch {
  int64_t* counters[kCounterBatch];
  int64_t by[kCounterBatch];
  int count;
};

// *batch.counters[i] += batch.by[i] for i < batch.count, in one launch on `stream`.
cudaError_t launch_increments(const CounterBatch& batch, cudaStream_t stream);

}  // namespace loom::cuda
