// File: core/cuda/shared_memory.cuh
// Kernels with more dynamic shared memory than the default 48 KiB a block, and how many of their
// blocks a GPU holds at once. Both are per kernel and device, asked once and remembered: the first
// launch of a shape runs eagerly (TrainStep's first steps), so a captured launch records only the
// kernel and no host query runs on the hot path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

namespace loom::cuda {

// Raises `kernel`'s dynamic shared-memory limit on the current device to `limit` bytes (one limit per
// kernel: every launch of it takes at most that), once per device.
template <class Kernel>
cudaError_t allow_shared_memory(Kernel* kernel, int64_t limit) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> raised;
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  std::lock_guard lock(mutex);
  if (raised.contains({reinterpret_cast<const void*>(kernel), device})) return cudaSuccess;
  status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(limit));
  if (status == cudaSuccess) raised.insert({reinterpret_cast<const void*>(kernel), device});
  return status;
}

// The current GPU's multiprocessors and the most dynamic shared memory one block may opt in to, asked
// once per device.
struct BlockLimits {
  int64_t multiprocessors = 0;
  int64_t shared_optin = 0;  // bytes
};

inline cudaError_t block_limits(BlockLimits& limits) {
  static std::mutex mutex;
  static std::map<int, BlockLimits> known;
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  std::lock_guard lock(mutex);
  if (const auto it = known.find(device); it != known.end()) {
    limits = it->second;
    return cudaSuccess;
  }
  int sms = 0, shared = 0;
  status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (status != cudaSuccess) return status;
  limits = known[device] = {sms, shared};
  return cudaSuccess;
}

// Blocks of `threads` threads and `shared` bytes of dynamic shared memory that the current GPU runs at
// once, over all its multiprocessors; `kernel` must allow `shared` (allow_shared_memory). 0 where a query
// fails, with its error in status.
template <class Kernel>
int64_t resident_blocks(Kernel* kernel, int threads, int64_t shared, cudaError_t& status) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int, int64_t>, int64_t> known;
  int device = 0;
  if (status = cudaGetDevice(&device); status != cudaSuccess) return 0;
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), device, threads, shared);
  std::lock_guard lock(mutex);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int sms = 0, per_sm = 0;
  status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (status == cudaSuccess) {
    status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, static_cast<size_t>(shared));
  }
  if (status != cudaSuccess) return 0;
  return known[key] = int64_t(sms) * per_sm;
}

}  // namespace loom::cuda
