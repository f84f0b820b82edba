// File: distributed/ddp.cc
// Buckets, gradient hooks and the overlap of all-reduce with backward. One
// step: forward (start_step) -> backward: each hook copies a gradient into its
// bucket; a full bucket, and every full one after it in index order, starts
// its all-reduce; the last launch finishes the step (waits, copies back).
#include "distributed/ddp.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "core/autograd.h"
#include "core/error.h"

#ifdef LOOM_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#endif

namespace loom::nn {

struct DistributedDataParallel::Slot {
  std::string name;
  Tensor param;
  size_t bucket = 0;
  int64_t offset = 0;  // first element of this parameter's gradient in the bucket
  int64_t hook = -1;
  bool ready = false;  // its gradient is in the bucket for this step
};

struct DistributedDataParallel::Bucket {
  std::vector<size_t> slots;
  Tensor flat;  // (elements) contiguous, the parameters' dtype and device
  size_t pending = 0;  // gradients not yet copied in this step
  std::unique_ptr<distributed::Work> work;
};

#ifdef LOOM_WITH_CUDA

// A side stream for the all-reduces, forked from and joined back into the
// compute stream with events: the standard pattern, legal under capture.
struct DistributedDataParallel::Streams {
  int device = 0;
  cudaStream_t comm = nullptr;
  std::vector<cudaEvent_t> ready;  // per bucket: its gradients are copied in
  cudaEvent_t done = nullptr;      // every all-reduce has run

  Streams(int device_index, size_t buckets) : device(device_index) {
    cuda::DeviceGuard guard(device);  // the stream and events belong to the group's GPU
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
    ready.resize(buckets);
    for (cudaEvent_t& e : ready) LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  ~Streams() {
    cudaStreamSynchronize(comm);
    for (cudaEvent_t e : ready) cudaEventDestroy(e);
    cudaEventDestroy(done);
    cudaStreamDestroy(comm);
  }
};

// Timing events of one step: the forward's end and done on the compute
// stream; per bucket, ready on the compute stream, start and end on the
// communication stream.
struct DistributedDataParallel::Timeline {
  int device = 0;
  cudaEvent_t forward = nullptr, done = nullptr;
  std::vector<cudaEvent_t> ready, start, end;
  bool recording = false;  // this step is being timed
  bool recorded = false;   // a whole step was timed

  Timeline(int device_index, size_t buckets) : device(device_index) {
    cuda::DeviceGuard guard(device);
    for (cudaEvent_t* e : {&forward, &done}) LOOM_CUDA_CHECK(cudaEventCreate(e));
    for (auto* events : {&ready, &start, &end}) {
      events->resize(buckets);
      for (cudaEvent_t& e : *events) LOOM_CUDA_CHECK(cudaEventCreate(&e));
    }
  }
  ~Timeline() {
    for (cudaEvent_t e : {forward, done}) cudaEventDestroy(e);
    for (auto* events : {&ready, &start, &end}) {
      for (cudaEvent_t e : *events) cudaEventDestroy(e);
    }
  }
  // Records `event` on `stream` while this step is being timed.
  void mark(cudaEvent_t event, cudaStream_t stream) const {
    if (recording) LOOM_CUDA_CHECK(cudaEventRecord(event, stream));
  }
  double ms_after_forward(cudaEvent_t event) const {
    float ms = 0;
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, forward, event));
    return ms;
  }
};

#else

struct DistributedDataParallel::Streams {};
struct DistributedDataParallel::Timeline {};

#endif

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module,
                                                 std::shared_ptr<distributed::ProcessGroup> group,
                                                 DistributedDataParallelOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  LOOM_CHECK(module_ != nullptr && group_ != nullptr, ValueError,
             "[DistributedDataParallel] the module and the process group must be non-null");
  LOOM_CHECK(options_.bucket_cap_mb > 0, ValueError,
             "[DistributedDataParallel] bucket_cap_mb must be positive, got {}",
             options_.bucket_cap_mb);
  register_module("module", module_);
  broadcast_state();
  build_buckets();
#ifdef LOOM_WITH_CUDA
  if (group_->device().is_cuda()) {
    streams_ = std::make_unique<Streams>(group_->device().index, buckets_.size());
    if (options_.timeline) {
      timeline_ = std::make_unique<Timeline>(group_->device().index, buckets_.size());
    }
  }
#endif
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].hook = register_post_accumulate_grad_hook(
        slots_[i].param, [this, i](const Tensor&) { on_gradient(i); });
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (Slot& slot : slots_) remove_post_accumulate_grad_hook(slot.param, slot.hook);
}

void DistributedDataParallel::broadcast_state() {
  const Device device = group_->device();
  auto check_device = [&](const std::string& name, const Tensor& t) {
    LOOM_CHECK(t.device() == device, DeviceError,
               "[DistributedDataParallel] '{}' is on {} but the process group works on {}; "
               "move the module there first (module->to(group->device()))",
               name, t.device().str(), device.str());
  };
  for (auto& [name, p] : module_->named_parameters()) {
    check_device(name, p);
    group_->broadcast(p, 0);
  }
  for (auto& [name, b] : module_->named_buffers()) {
    check_device(name, b);
    group_->broadcast(b, 0);
  }
}

void DistributedDataParallel::build_buckets() {
  const double cap_bytes = options_.bucket_cap_mb * 1024 * 1024;
  NamedTensors params = module_->named_parameters();
  // One open bucket per (dtype, device): a bucket is one flat buffer.
  std::map<std::tuple<DType, int, int>, size_t> open;
  std::vector<double> bytes;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const Tensor& p = it->second;
    if (!p.requires_grad()) continue;
    auto key = std::make_tuple(p.dtype(), static_cast<int>(p.device().type), p.device().index);
    auto found = open.find(key);
    double size = static_cast<double>(p.numel() * element_size(p.dtype()));
    if (found == open.end() || bytes[found->second] + size > cap_bytes) {
      buckets_.emplace_back();
      bytes.push_back(0);
      found = open.insert_or_assign(key, buckets_.size() - 1).first;
    }
    const size_t b = found->second;
    slots_.push_back({.name = it->first, .param = p, .bucket = b,
                      .offset = static_cast<int64_t>(bytes[b] / element_size(p.dtype()))});
    buckets_[b].slots.push_back(slots_.size() - 1);
    bytes[b] += size;
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Tensor& first = slots_[buckets_[b].slots.front()].param;
    int64_t elements = static_cast<int64_t>(bytes[b] / element_size(first.dtype()));
    buckets_[b].flat = zeros({elements}, {.dtype = first.dtype(), .device = first.device()});
    buckets_[b].pending = buckets_[b].slots.size();
  }
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<std::string>> layout;
  for (const Bucket& bucket : buckets_) {
    layout.emplace_back();
    for (size_t s : bucket.slots) layout.back().push_back(slots_[s].name);
  }
  return layout;
}

void DistributedDataParallel::start_step() {
  bool started = next_launch_ > 0;
  for (const Slot& slot : slots_) started = started || slot.ready;
  if (started) {
    std::string missing;
    for (const Slot& slot : slots_) {
      if (!slot.ready) missing += (missing.empty() ? "" : ", ") + slot.name;
    }
    // Reset first, so that a caller who handles the error can run a new step.
    for (Slot& slot : slots_) slot.ready = false;
    for (Bucket& bucket : buckets_) {
      bucket.pending = bucket.slots.size();
      bucket.work.reset();
    }
    next_launch_ = 0;
    throw AutogradError(fmt::format(
        "[DistributedDataParallel] the previous backward produced no gradient for {}, so its "
        "gradients were not averaged. Every parameter that requires grad must take part in the "
        "loss (freeze unused ones with requires_grad_(false) before wrapping the module); or "
        "that backward stopped on an error",
        missing.empty() ? std::string("some parameters") : missing));
  }
  // The previous step's collectives: normally long done; a dead peer shows up
  // here as a DistError after the group's timeout instead of a hang later.
  for (Bucket& bucket : buckets_) {
    if (bucket.work) {
#ifdef LOOM_WITH_CUDA
      if (!cuda::is_capturing()) bucket.work->wait();
#else
      bucket.work->wait();
#endif
      bucket.work.reset();
    }
  }
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (grad_mode_enabled() && is_training()) {
    start_step();
    if (options_.broadcast_buffers) {
      for (auto& [name, b] : module_->named_buffers()) group_->broadcast(b, 0);
    }
  }
  Tensor y = (*module_)(x);
#ifdef LOOM_WITH_CUDA
  if (timeline_ && grad_mode_enabled() && is_training()) {
    cuda::DeviceGuard guard(timeline_->device);
    timeline_->recording = !cuda::is_capturing();
    timeline_->mark(timeline_->forward, cuda::current_stream());
  }
#endif
  return y;
}

StepTimeline DistributedDataParallel::last_timeline() const {
  StepTimeline out;
#ifdef LOOM_WITH_CUDA
  if (!timeline_ || !timeline_->recorded) return out;
  cuda::DeviceGuard guard(timeline_->device);
  LOOM_CUDA_CHECK(cudaEventSynchronize(timeline_->done));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    out.buckets.push_back({.ready_ms = timeline_->ms_after_forward(timeline_->ready[b]),
                           .start_ms = timeline_->ms_after_forward(timeline_->start[b]),
                           .end_ms = timeline_->ms_after_forward(timeline_->end[b]),
                           .bytes = buckets_[b].flat.numel() *
                                    static_cast<int64_t>(element_size(buckets_[b].flat.dtype()))});
    out.backward_ms = std::max(out.backward_ms, out.buckets.back().ready_ms);
  }
  out.done_ms = timeline_->ms_after_forward(timeline_->done);
#endif
  return out;
}

void DistributedDataParallel::on_gradient(size_t index) {
  if (no_sync_depth_ > 0) return;
  Slot& slot = slots_[index];
  LOOM_CHECK(!slot.ready, AutogradError,
             "[DistributedDataParallel] '{}' received a second gradient before the all-reduce of "
             "the first finished (backward twice without a forward in between?); run forward "
             "again, or accumulate under no_sync()",
             slot.name);
  Bucket& bucket = buckets_[slot.bucket];
  const Tensor& grad = slot.param.grad();
  // Only the hooked parameter's gradient is read here; it was just written on
  // the compute stream, so the copy is ordered after it.
  bucket.flat.narrow(0, slot.offset, grad.numel()).view(grad.sizes()).copy_(grad);
  slot.ready = true;
  if (--bucket.pending == 0) launch_ready_buckets();
}

void DistributedDataParallel::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    launch(buckets_[next_launch_++]);
  }
  if (next_launch_ == buckets_.size()) finish();
}

void DistributedDataParallel::launch(Bucket& bucket) {
#ifdef LOOM_WITH_CUDA
  if (streams_) {
    const size_t b = &bucket - buckets_.data();
    cudaStream_t compute = cuda::current_stream(streams_->device);
    LOOM_CUDA_CHECK(cudaEventRecord(streams_->ready[b], compute));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(streams_->comm, streams_->ready[b], 0));
    if (timeline_) timeline_->mark(timeline_->ready[b], compute);
    if (timeline_) timeline_->mark(timeline_->start[b], streams_->comm);
    cuda::StreamGuard on_comm(streams_->comm, streams_->device);
    bucket.work = group_->all_reduce_async(bucket.flat, distributed::ReduceOp::Avg);
    if (timeline_) timeline_->mark(timeline_->end[b], streams_->comm);
    return;
  }
#endif
  bucket.work = group_->all_reduce_async(bucket.flat, distributed::ReduceOp::Avg);
}

void DistributedDataParallel::finish() {
#ifdef LOOM_WITH_CUDA
  if (streams_) {
    // The compute stream waits on the device; the host does not block (the
    // next forward polls the works against the deadline).
    cudaStream_t compute = cuda::current_stream(streams_->device);
    LOOM_CUDA_CHECK(cudaEventRecord(streams_->done, streams_->comm));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(compute, streams_->done, 0));
  }
#endif
  for (Bucket& bucket : buckets_) {
    if (!streams_) {
      bucket.work->wait();
      bucket.work.reset();
    }
    for (size_t s : bucket.slots) {
      Slot& slot = slots_[s];
      const Tensor& grad = slot.param.grad();
      grad.detach().copy_(bucket.flat.narrow(0, slot.offset, grad.numel()).view(grad.sizes()));
      slot.ready = false;
    }
    bucket.pending = bucket.slots.size();
  }
  next_launch_ = 0;
#ifdef LOOM_WITH_CUDA
  if (timeline_ && timeline_->recording) {
    timeline_->mark(timeline_->done, cuda::current_stream(timeline_->device));
    timeline_->recording = false;
    timeline_->recorded = true;
  }
#endif
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp) {
  ++ddp_.no_sync_depth_;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { --ddp_.no_sync_depth_; }

}  // namespace loom::nn
