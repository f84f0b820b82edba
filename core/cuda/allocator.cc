// File: core/cuda/allocator.cc
// The CUDA half of the caching allocator: a general pool per device, a private
// pool per graph capture, the table of live pointers, out-of-memory handling
// and the rules for when a cudaFree is safe. Block bookkeeping is in
// core/block_pool.cc.
#include "core/cuda/allocator.h"
#include "core/cuda/allocator_purpose.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/capture_plan.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

namespace {

thread_local Purpose thread_purpose = Purpose::Tensors;

// Live bytes per purpose on one device, and the two views of the peak.
struct PurposeTally {
  PurposeBytes live;
  MemoryBreakdown peak;

  void add(Purpose p, size_t bytes, const AllocatorStats& stats) {
    live[p] += bytes;
    peak.high_water[p] = std::max(peak.high_water[p], live[p]);
    if (stats.allocated_bytes >= stats.peak_allocated_bytes) peak.at_peak = live;
  }
  // Bytes that stay allocated but change purpose (a block held by a capture).
  void move(Purpose from, Purpose to, size_t bytes) {
    live[from] -= bytes;
    live[to] += bytes;
    peak.high_water[to] = std::max(peak.high_water[to], live[to]);
  }
  void reset() { peak = {live, live}; }
};

std::string bytes_str(size_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kUnits[unit]);
}

void synchronize_device(int device) {
  DeviceGuard guard(device);
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
}

// Segments straight from the driver, on one device.
class DriverSource : public SegmentSource {
 public:
  explicit DriverSource(int device) : device_(device) {}

  void* acquire(size_t bytes) override {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // leave no error behind for the next checked call to trip on
      return nullptr;
    }
    LOOM_CUDA_CHECK(status);
    return ptr;
  }

  void release(void* base, size_t) override {
    DeviceGuard guard(device_);
    LOOM_CUDA_CHECK(cudaFree(base));
  }

 private:
  int device_;
};

AllocatorMode mode_from_env() {
  const char* value = std::getenv("LOOM_CUDA_ALLOCATOR");
  std::string_view name = value == nullptr ? "" : value;
  if (name.empty() || name == "caching") return AllocatorMode::Caching;
  if (name == "passthrough") return AllocatorMode::Passthrough;
  throw ValueError(fmt::format(
      "[cuda allocator] LOOM_CUDA_ALLOCATOR={} is not a mode; use 'caching' (the default) or "
      "'passthrough' (one cudaMalloc per tensor, for compute-sanitizer)",
      name));
}

class Allocator {
 public:
  explicit Allocator(AllocatorMode mode);

  void* allocate(size_t bytes, int device);
  void deallocate(void* ptr);
  AllocatorStats stats(std::optional<int> device);
  MemoryBreakdown breakdown(int device);
  std::vector<NamedPoolUsage> pool_usage(int device);
  void reserve_state(int device, std::span<const size_t> sizes);
  void use_plan(CapturePoolId id, CapturePlan plan);
  std::vector<CaptureRequest> requests(CapturePoolId id);
  int64_t plan_misses(CapturePoolId id);
  void reset_peak_stats();
  void empty_cache();
  void set_mode(AllocatorMode mode);
  AllocatorMode mode();
  CapturePoolId begin_capture(cudaStream_t stream, std::optional<CapturePoolId> shared);
  void end_capture(cudaStream_t stream) noexcept;
  void release_capture_pool(CapturePoolId id);

 private:
  // A handed-out block and the pool it returns to (capture 0: the general pool).
  struct Live {
    Block* block;  // null for a block a capture plan placed in its arena
    BlockPool* pool;
    CapturePoolId capture;
    int device;
    Purpose purpose;
    size_t planned_offset = 0;  // in the arena, when block is null
  };
  // A capture's private pool, made at its first allocation.
  struct Capture {
    int device = -1;
    std::unique_ptr<BlockPool> pool;
    int open_scopes = 0;
    int unreleased = 0;     // scopes that captured into it, not yet released
    std::vector<Live> held;  // general-pool blocks freed during a capture
    CaptureRecorder recorder;         // its requests while a scope is open, for the next capture's plan
    std::optional<CapturePlan> plan;  // where its requests go, from an earlier capture's record
    Block* arena = nullptr;           // the plan's bytes, cut from the pool at the first request
  };

  void check_device(int device) const;
  BlockPool& pool_for(cudaStream_t stream, int device, CapturePoolId& capture);
  void* take_planned(CapturePoolId id, size_t bytes, int device, StreamId stream);
  Block* take(BlockPool& pool, size_t bytes, int device, StreamId stream);
  template <class Take>
  Block* take_or_retry(Take take, size_t bytes, int device);
  OutOfMemoryError out_of_memory(size_t bytes, int device) const;
  bool may_release(CapturePoolId capture) const;
  void free_block(const Live& live);
  void release_cached_locked();
  void release_capture_if_idle(CapturePoolId id);
  void release_idle_captures();  // every pool whose graphs are all released

  std::mutex mutex_;
  AllocatorMode mode_;
  int device_count_;
  std::vector<AllocatorStats> stats_;                   // per device
  std::vector<PurposeTally> tallies_;                   // per device
  std::vector<std::unique_ptr<DriverSource>> sources_;  // per device
  std::vector<std::unique_ptr<BlockPool>> general_;     // per device
  std::vector<std::unique_ptr<BlockPool>> state_;       // per device: Purpose::State blocks
  std::unordered_map<void*, Live> live_;
  std::unordered_map<CapturePoolId, Capture> captures_;
  std::unordered_map<cudaStream_t, CapturePoolId> capturing_;  // streams in a CaptureScope
  CapturePoolId next_capture_ = 1;
};

Allocator::Allocator(AllocatorMode mode)
    : mode_(mode), device_count_(device_count()), stats_(device_count_), tallies_(device_count_) {
  for (int device = 0; device < device_count_; ++device) {
    sources_.push_back(std::make_unique<DriverSource>(device));
    general_.push_back(std::make_unique<BlockPool>(*sources_.back(), stats_[device]));
    state_.push_back(std::make_unique<BlockPool>(*sources_.back(), stats_[device]));
  }
}

void Allocator::check_device(int device) const {
  LOOM_CHECK(device_count_ > 0, DeviceError,
             "[cuda] no CUDA GPU is usable on this machine; create tensors on Device::cpu()");
  LOOM_CHECK(device >= 0 && device < device_count_, DeviceError,
             "[cuda] device cuda:{} does not exist ({} GPU(s) visible)", device, device_count_);
}

void* Allocator::allocate(size_t bytes, int device) {
  if (bytes == 0) return nullptr;
  check_device(device);
  // The thread's stream on that device, whichever device is current: the block
  // is reused in that stream's order.
  cudaStream_t stream = current_stream(device);
  std::lock_guard lock(mutex_);
  CapturePoolId capture = 0;
  BlockPool& pool = pool_for(stream, device, capture);
  void* ptr = capture != 0 ? take_planned(capture, bytes, device, stream) : nullptr;
  if (ptr == nullptr) {
    Block* block = take(pool, bytes, device, stream);
    const Purpose purpose = capture != 0 ? Purpose::CapturePools : thread_purpose;
    tallies_[device].add(purpose, block->size, stats_[device]);
    live_.emplace(block->ptr, Live{block, &pool, capture, device, purpose});
    ptr = block->ptr;
  }
  if (capture != 0) captures_.at(capture).recorder.allocated(ptr, round_block_size(bytes));
  return ptr;
}

// A request of a capture with a plan, at its planned place in the arena (cut
// from the capture's pool at the first request); null when the plan does not
// place it, or in pass-through mode, whose exact blocks a memory checker needs.
void* Allocator::take_planned(CapturePoolId id, size_t bytes, int device, StreamId stream) {
  Capture& capture = captures_.at(id);
  if (!capture.plan || capture.plan->arena_bytes() == 0 || mode_ == AllocatorMode::Passthrough) return nullptr;
  if (capture.arena == nullptr) {
    capture.arena = take(*capture.pool, capture.plan->arena_bytes(), device, stream);
    tallies_[device].add(Purpose::CapturePools, capture.arena->size, stats_[device]);
    // Out of memory here only leaves them to segments of their own.
    const size_t outliving = capture.plan->large_outliving_bytes();
    if (outliving > 0) capture.pool->reserve(outliving, stream);
  }
  const std::optional<size_t> offset = capture.plan->take(round_block_size(bytes));
  if (!offset) return nullptr;
  char* ptr = capture.arena->ptr + *offset;
  live_.emplace(ptr, Live{nullptr, capture.pool.get(), id, device, Purpose::CapturePools, *offset});
  return ptr;
}

// The private pool of the capture open on `stream`, else `device`'s state pool
// for the thread's State allocations and its general pool for the others.
BlockPool& Allocator::pool_for(cudaStream_t stream, int device, CapturePoolId& capture) {
  auto scope = capturing_.find(stream);
  if (scope == capturing_.end()) {
    LOOM_CHECK(!is_capturing(), CudaError,
               "[cuda allocator] allocation on a stream that is capturing a CUDA graph outside "
               "a cuda::CaptureScope; open a CaptureScope before cudaStreamBeginCapture so the "
               "graph's memory comes from a private pool");
    return thread_purpose == Purpose::State ? *state_[device] : *general_[device];
  }
  capture = scope->second;
  Capture& owner = captures_.at(capture);
  if (owner.pool == nullptr) {
    owner.device = device;
    owner.pool = std::make_unique<BlockPool>(*sources_[device], stats_[device]);
  }
  LOOM_CHECK(owner.device == device, DeviceError,
             "[cuda allocator] a CUDA graph capturing on cuda:{} cannot allocate on cuda:{}",
             owner.device, device);
  return *owner.pool;
}

Block* Allocator::take(BlockPool& pool, size_t bytes, int device, StreamId stream) {
  if (bytes > kMaxRequest) throw out_of_memory(bytes, device);
  if (mode_ == AllocatorMode::Passthrough) {
    return take_or_retry([&] { return pool.take_exact(bytes, stream); }, bytes, device);
  }
  size_t size = round_block_size(bytes);
  if (Block* block = pool.take_cached(size, stream)) return block;
  return take_or_retry([&] { return pool.take_new(size, stream); }, bytes, device);
}

// Out of memory: give the cached segments back to the driver and try once more.
template <class Take>
Block* Allocator::take_or_retry(Take take, size_t bytes, int device) {
  if (Block* block = take()) return block;
  release_cached_locked();
  if (Block* block = take()) return block;
  throw out_of_memory(bytes, device);
}

OutOfMemoryError Allocator::out_of_memory(size_t bytes, int device) const {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  {
    DeviceGuard guard(device);
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();
  }
  std::string hint = capturing_.empty()
                         ? "free tensors you no longer need, or use a smaller batch"
                         : "cached memory is not returned to the driver while a CUDA graph is "
                           "being captured; call cuda::empty_cache() before capturing, or use a "
                           "smaller batch";
  return OutOfMemoryError(fmt::format(
      "[cuda] out of memory: tried to allocate {} bytes ({}) on cuda:{}, which has {} free of "
      "{}; Loom holds {} in live blocks and {} reserved from the driver; {}",
      bytes, bytes_str(bytes), device, bytes_str(free_bytes), bytes_str(total_bytes),
      bytes_str(stats_[device].allocated_bytes), bytes_str(stats_[device].reserved_bytes), hint));
}

void Allocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  LOOM_CHECK(it != live_.end(), ValueError,
             "[cuda allocator] deallocate({}): not a live allocation (freed twice, or not from "
             "cuda::allocate)",
             ptr);
  Live live = it->second;
  live_.erase(it);
  if (live.capture != 0) {
    Capture& capture = captures_.at(live.capture);
    if (capture.open_scopes > 0) capture.recorder.freed(ptr);
  }
  // current_stream() only when a capture is open: at thread or process exit it
  // may have to make a stream, which can fail, and deallocate must not throw then.
  auto scope =
      capturing_.empty() ? capturing_.end() : capturing_.find(current_stream(live.device));
  if (live.capture == 0 && scope != capturing_.end()) {  // the graph being captured may use it
    tallies_[live.device].move(live.purpose, Purpose::HeldByCaptures, live.block->size);
    live.purpose = Purpose::HeldByCaptures;
    captures_.at(scope->second).held.push_back(live);
    return;
  }
  try {
    free_block(live);
  } catch (const CudaError&) {
    // Only a broken context (a faulted kernel) makes the synchronize or cudaFree
    // fail; the memory is gone with it, the fault surfaces at the next checked
    // call, and deallocate runs in destructors, which must not throw.
  }
}

// A cudaFree could break a capture in progress, and a private pool's memory
// belongs to its graphs until they are released.
bool Allocator::may_release(CapturePoolId capture) const {
  if (!capturing_.empty()) return false;
  return capture == 0 || captures_.at(capture).unreleased == 0;
}

// Returns a block to its pool; a pass-through block goes on to the driver now
// unless that is unsafe, in which case it waits for the next release.
void Allocator::free_block(const Live& live) {
  if (live.block == nullptr) {  // planned: its bytes stay in the arena, free for the plan's later blocks
    captures_.at(live.capture).plan->give_back(live.planned_offset);
    release_capture_if_idle(live.capture);
    return;
  }
  bool release_now = live.block->exact && may_release(live.capture);
  if (release_now) synchronize_device(live.device);  // its last kernels must finish first
  tallies_[live.device].live[live.purpose] -= live.block->size;  // before a merge changes the size
  live.pool->give_back(live.block);
  if (release_now) live.pool->release_retired();
  if (live.capture != 0) release_capture_if_idle(live.capture);
}

void Allocator::release_cached_locked() {
  if (!capturing_.empty()) return;
  for (int device = 0; device < device_count_; ++device) {
    if (general_[device]->empty() && state_[device]->empty()) continue;
    synchronize_device(device);  // freed blocks may still be read by queued work
    general_[device]->release_cached();
    state_[device]->release_cached();
  }
  release_idle_captures();
}

void Allocator::release_idle_captures() {
  if (!capturing_.empty()) return;
  std::vector<CapturePoolId> released;
  for (const auto& [id, capture] : captures_) {
    if (capture.unreleased == 0) released.push_back(id);
  }
  for (CapturePoolId id : released) release_capture_if_idle(id);
}

// Once all of a private pool's graphs are released, its free segments go back to
// the driver, and the pool is forgotten when it holds nothing more.
void Allocator::release_capture_if_idle(CapturePoolId id) {
  Capture& capture = captures_.at(id);
  if (capture.unreleased > 0 || !capturing_.empty()) return;
  if (capture.arena != nullptr && capture.plan->live_blocks() == 0) {
    tallies_[capture.device].live[Purpose::CapturePools] -= capture.arena->size;
    capture.pool->give_back(capture.arena);
    capture.arena = nullptr;
  }
  if (capture.pool != nullptr) {
    synchronize_device(capture.device);
    capture.pool->release_cached();
    if (!capture.pool->empty()) return;  // blocks still live (a graph's outputs)
  }
  captures_.erase(id);
}

AllocatorStats Allocator::stats(std::optional<int> device) {
  std::lock_guard lock(mutex_);
  if (device) {
    check_device(*device);
    return stats_[*device];
  }
  AllocatorStats sum;
  for (const AllocatorStats& s : stats_) {
    sum.allocated_bytes += s.allocated_bytes;
    sum.reserved_bytes += s.reserved_bytes;
    sum.peak_allocated_bytes += s.peak_allocated_bytes;
    sum.peak_reserved_bytes += s.peak_reserved_bytes;
    sum.num_allocs += s.num_allocs;
    sum.num_frees += s.num_frees;
    sum.num_cuda_mallocs += s.num_cuda_mallocs;
    sum.num_cuda_frees += s.num_cuda_frees;
    sum.cache_hits += s.cache_hits;
  }
  return sum;
}

void Allocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  for (AllocatorStats& s : stats_) {
    s.peak_allocated_bytes = s.allocated_bytes;
    s.peak_reserved_bytes = s.reserved_bytes;
  }
  for (PurposeTally& t : tallies_) t.reset();
}

MemoryBreakdown Allocator::breakdown(int device) {
  std::lock_guard lock(mutex_);
  check_device(device);
  return tallies_[device].peak;
}

std::vector<NamedPoolUsage> Allocator::pool_usage(int device) {
  std::lock_guard lock(mutex_);
  check_device(device);
  std::vector<NamedPoolUsage> pools{{"general", general_[device]->usage()}, {"state", state_[device]->usage()}};
  for (const auto& [id, capture] : captures_) {
    if (capture.device == device && capture.pool != nullptr) {
      pools.push_back({fmt::format("capture {}", id), capture.pool->usage()});
    }
  }
  return pools;
}

void Allocator::reserve_state(int device, std::span<const size_t> sizes) {
  check_device(device);
  size_t bytes = 0;
  for (size_t size : sizes) {
    if (size > 0 && round_block_size(size) > kSmallLimit) bytes += round_block_size(size);
  }
  if (bytes == 0 || mode_ == AllocatorMode::Passthrough) return;
  const cudaStream_t stream = current_stream(device);
  std::lock_guard lock(mutex_);
  BlockPool& pool = *state_[device];
  if (pool.usage().largest_free_bytes >= bytes) return;
  pool.reserve(bytes, stream);  // out of memory only leaves the buffers to segments of their own
}

void Allocator::empty_cache() {
  std::lock_guard lock(mutex_);
  release_cached_locked();
}

void Allocator::set_mode(AllocatorMode mode) {
  std::lock_guard lock(mutex_);
  mode_ = mode;
}

AllocatorMode Allocator::mode() {
  std::lock_guard lock(mutex_);
  return mode_;
}

CapturePoolId Allocator::begin_capture(cudaStream_t stream, std::optional<CapturePoolId> shared) {
  std::lock_guard lock(mutex_);
  LOOM_CHECK(!capturing_.contains(stream), ValueError,
             "[cuda allocator] a CaptureScope is already open on this stream; scopes do not nest");
  if (shared) {
    auto it = captures_.find(*shared);
    LOOM_CHECK(it != captures_.end() && it->second.unreleased > 0, ValueError,
               "[cuda allocator] capture pool {} does not exist or was released; share a pool "
               "only between graphs that are all still alive",
               *shared);
  }
  CapturePoolId id = shared ? *shared : next_capture_++;
  Capture& capture = captures_[id];
  ++capture.open_scopes;
  ++capture.unreleased;
  capturing_.emplace(stream, id);
  return id;
}

void Allocator::use_plan(CapturePoolId id, CapturePlan plan) {
  std::lock_guard lock(mutex_);
  Capture& capture = captures_.at(id);
  LOOM_CHECK(!capture.plan && capture.pool == nullptr && capture.unreleased == 1, ValueError,
             "[cuda allocator] a capture plan goes to a new, unshared capture pool before its first "
             "allocation (pool {})",
             id);
  capture.plan = std::move(plan);
}

std::vector<CaptureRequest> Allocator::requests(CapturePoolId id) {
  std::lock_guard lock(mutex_);
  return captures_.at(id).recorder.requests();
}

int64_t Allocator::plan_misses(CapturePoolId id) {
  std::lock_guard lock(mutex_);
  const Capture& capture = captures_.at(id);
  return capture.plan ? capture.plan->misses() : 0;
}

void Allocator::end_capture(cudaStream_t stream) noexcept {
  std::lock_guard lock(mutex_);
  auto scope = capturing_.find(stream);
  --captures_.at(scope->second).open_scopes;
  capturing_.erase(scope);
  // Pools whose graphs were all released while a capture ran kept their memory
  // until now (nothing goes back to the driver during a capture).
  try {
    release_idle_captures();
  } catch (const Error& e) {  // a failed synchronize: the device's error stays sticky for the next call
    spdlog::warn("[cuda allocator] releasing idle capture pools after a capture failed: {}", e.what());
  }
}

void Allocator::release_capture_pool(CapturePoolId id) {
  std::lock_guard lock(mutex_);
  auto it = captures_.find(id);
  LOOM_CHECK(it != captures_.end() && it->second.unreleased > 0, ValueError,
             "[cuda allocator] release_capture_pool({}): no such pool, or all its graphs were "
             "released already",
             id);
  Capture& capture = it->second;
  LOOM_CHECK(capture.unreleased > capture.open_scopes, ValueError,
             "[cuda allocator] release_capture_pool({}) while its CaptureScope is still open; "
             "end the capture and the scope first",
             id);
  if (--capture.unreleased > 0) return;  // another graph still shares the pool
  for (const Live& live : capture.held) free_block(live);
  capture.held.clear();
  release_capture_if_idle(id);
}

Allocator& allocator() {
  // Never destroyed: tensors with static lifetime are freed after main returns.
  static Allocator* instance = new Allocator(mode_from_env());
  return *instance;
}

}  // namespace

namespace {
std::atomic<void (*)(int)> first_allocation_hook{nullptr};
}  // namespace

void set_first_allocation_hook(void (*hook)(int device)) { first_allocation_hook = hook; }

void* allocate(size_t bytes, int device) {
  void* ptr = allocator().allocate(bytes, device);  // checks the device
  // Whether each GPU has had its first allocation (so its hook has run).
  static const std::unique_ptr<std::atomic<bool>[]> started(
      new std::atomic<bool>[static_cast<size_t>(device_count())]());
  if (ptr == nullptr) return ptr;  // 0 bytes: no device was checked, nothing was made
  std::atomic<bool>& first = started[static_cast<size_t>(device)];
  if (!first.load(std::memory_order_relaxed) && !first.exchange(true)) {
    if (auto hook = first_allocation_hook.load()) hook(device);
  }
  return ptr;
}
void deallocate(void* ptr) { allocator().deallocate(ptr); }

cudaError_t launch_with_scratch(size_t bytes, const std::function<cudaError_t(void* scratch)>& launch) {
  void* scratch = allocate(bytes, current_device());
  const cudaError_t status = launch(scratch);
  deallocate(scratch);
  return status;
}
AllocatorStats stats() { return allocator().stats(std::nullopt); }
AllocatorStats stats(int device) { return allocator().stats(device); }
void reset_peak_stats() { allocator().reset_peak_stats(); }
void empty_cache() { allocator().empty_cache(); }
void set_mode(AllocatorMode mode) { allocator().set_mode(mode); }
AllocatorMode mode() { return allocator().mode(); }

CaptureScope::CaptureScope()
    : stream_(current_stream()), pool_(allocator().begin_capture(stream_, std::nullopt)) {}

CaptureScope::CaptureScope(CapturePoolId pool)
    : stream_(current_stream()), pool_(allocator().begin_capture(stream_, pool)) {}

CaptureScope::~CaptureScope() { allocator().end_capture(stream_); }

void CaptureScope::use_plan(CapturePlan plan) { allocator().use_plan(pool_, std::move(plan)); }
std::vector<CaptureRequest> CaptureScope::requests() const { return allocator().requests(pool_); }
int64_t CaptureScope::plan_misses() const { return allocator().plan_misses(pool_); }

void release_capture_pool(CapturePoolId pool) { allocator().release_capture_pool(pool); }

std::string_view purpose_name(Purpose purpose) {
  constexpr std::array<std::string_view, kPurposeCount> kNames = {
      "tensors", "workspace", "plan tests", "capture pools", "held by captures", "state"};
  return kNames[static_cast<size_t>(purpose)];
}

PurposeScope::PurposeScope(Purpose purpose) : previous_(thread_purpose) { thread_purpose = purpose; }
PurposeScope::~PurposeScope() { thread_purpose = previous_; }

MemoryBreakdown memory_breakdown(int device) { return allocator().breakdown(device); }
std::vector<NamedPoolUsage> pool_usage(int device) { return allocator().pool_usage(device); }
void reserve_state(int device, std::span<const size_t> sizes) { allocator().reserve_state(device, sizes); }

}  // namespace loom::cuda
