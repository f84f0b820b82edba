// File: distributed/ddp.h
// nn::DistributedDataParallel: data-parallel training, one replica of the model
// per process (per GPU), as PyTorch's DistributedDataParallel.
//
//   auto group = distributed::ProcessGroup::from_mpi();               // under mpirun
//   auto net = std::make_shared<nn::Sequential>(nn::resnet9());
//   net->to(group->device());
//   nn::DistributedDataParallel ddp(net, group);               // rank 0's weights everywhere
//   optim::SGD opt(net->parameters(), {.lr = 0.1});
//   Tensor loss = cross_entropy(ddp(x), y);  // x: this rank's share of the global batch
//   loss.backward();                         // gradients averaged over the ranks on return
//   opt.step();
//
// Gradients are packed into buckets (about bucket_cap_mb each, parameters in
// reverse registration order, which is roughly the order backward produces
// them). A post-accumulate-grad hook on every parameter copies its gradient
// into its bucket; when a bucket is full its all-reduce (average) starts at
// once, on a separate CUDA stream on the GPU, so communication overlaps the
// rest of the backward. Buckets are launched in index order on every rank, as
// NCCL needs. When the last one has been launched the compute stream waits for
// them and the averages are copied back into each parameter's .grad, still
// inside backward(): an optimizer step after backward sees averaged gradients,
// and optim::TrainStep can capture the whole step (NCCL calls are capturable).
//
// Every parameter that requires grad must receive a gradient in every backward
// (unused parameters are not supported: the next forward throws naming them).
// Other collectives on the same group must not run during backward: the
// buckets' all-reduces are queued on their own stream, and NCCL needs every
// rank to issue a communicator's collectives in one order.
// A dead peer is detected by the group's deadline in eager steps (the next
// forward polls the previous step's all-reduces); a replayed CUDA graph is not
// watched, so a hang there shows as the host's next read of a result.
// Gradients are averaged in their own dtype (fp32 master weights under bf16
// autocast). Each rank's loss must be the mean over its local batch, so the
// average of the ranks' gradients is the gradient of the global batch's mean.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "layers/module.h"

namespace loom::nn {

struct DistributedDataParallelOptions {
  // Gradient bytes per all-reduce: larger buckets amortise each collective's
  // latency, smaller ones start communicating earlier in the backward.
  double bucket_cap_mb = 25;
  // Copy rank 0's buffers (batch-norm running statistics) to every rank before
  // each training-mode forward (PyTorch's default). Off here: running
  // statistics are read only by evaluation, which data-parallel trainers run
  // on rank 0, and each copy is a collective on the step's critical path.
  bool broadcast_buffers = false;
  // Time each eager GPU step's communication (timing events on both streams;
  // nothing is recorded inside a CUDA-graph capture): read with last_timeline().
  bool timeline = false;
};

// One bucket's all-reduce in a step, in ms after the forward returned.
struct BucketTiming {
  double ready_ms = 0;  // its last gradient was copied in (the compute stream)
  double start_ms = 0;  // its all-reduce started (the communication stream)
  double end_ms = 0;    // and ended
  int64_t bytes = 0;
};

// Where a step's communication went: what overlapped the backward and what
// the step waited for after the last gradient was ready.
struct StepTimeline {
  std::vector<BucketTiming> buckets;  // in launch order
  double backward_ms = 0;  // the last bucket's ready_ms: gradients are all computed
  double done_ms = 0;      // the compute stream has the averaged gradients;
                           // done_ms - backward_ms: what the backward could not hide
};

class DistributedDataParallel final : public Module {
 public:
  // Broadcasts rank 0's parameters and buffers to every rank (ShapeError or
  // TypeError when the replicas' models differ) and registers the gradient
  // hooks. The module's tensors must be on the group's device (CPU for an
  // MPI-only group).
  DistributedDataParallel(std::shared_ptr<Module> module,
                          std::shared_ptr<distributed::ProcessGroup> group,
                          DistributedDataParallelOptions options = {});
  ~DistributedDataParallel() override;
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "DistributedDataParallel"; }

  Module& module() { return *module_; }
  distributed::ProcessGroup& group() { return *group_; }

  // Skips the all-reduce for its lifetime: gradients accumulate locally, and
  // the first backward after it averages the accumulated sum.
  //   { auto guard = ddp.no_sync(); loss(micro_batch_1).backward(); }
  //   loss(micro_batch_2).backward();   // all-reduces both micro-batches' gradients
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // The buckets: each one's parameter names, in launch order.
  std::vector<std::vector<std::string>> bucket_layout() const;
  // The last timed step (options.timeline, a GPU group, an eager step):
  // waits for it to finish. Empty when no step was timed.
  StepTimeline last_timeline() const;

 private:
  struct Slot;
  struct Bucket;
  struct Streams;  // the CUDA side stream and events (GPU groups only)
  struct Timeline;  // timing events of options.timeline

  void broadcast_state();
  void build_buckets();
  void on_gradient(size_t slot);
  void launch_ready_buckets();
  void launch(Bucket& bucket);
  void finish();
  // The state of the previous backward: throws if it stopped half-way.
  void start_step();

  std::shared_ptr<Module> module_;
  std::shared_ptr<distributed::ProcessGroup> group_;
  DistributedDataParallelOptions options_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::unique_ptr<Streams> streams_;
  std::unique_ptr<Timeline> timeline_;
  size_t next_launch_ = 0;
  int no_sync_depth_ = 0;
};

}  // namespace loom::nn
