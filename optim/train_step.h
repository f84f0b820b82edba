// File: optim/train_step.h
// One training step (zero_grad, forward, loss, backward, optimizer step) that
// is captured into a CUDA graph once per static input shape and replayed after
// that. The replay does no host synchronisation and no allocation: the inputs
// are copied into static buffers, the optimizer's per-step scalars are written
// to device memory, and one graph launch runs everything else.
//
//   auto net = nn::mnist_net();  net.to(Device::cuda());
//   optim::Adam opt(net.parameters(), {.lr = 1e-3});
//   optim::TrainStep step([&](const Tensor& x, const Tensor& y) {
//     Tensor logits = net(x);
//     return std::vector<Tensor>{cross_entropy(logits, y), logits};
//   }, opt);
//   for (auto& [x, y] : loader) {
//     const std::vector<Tensor>& out = step(x, y);  // out[0] loss, out[1] logits
//   }
//
// Each new shape first runs `warmup_steps` eager steps (they build the cuDNN
// plans and the optimizer state), then one captured step. Where capture is
// impossible (CPU tensors, an op that reads a value back to the host or copies
// host data in, such as a tensor(...) made inside the step function, too many
// shapes) the step runs eagerly, and fallback_reason() says why (logged once
// per reason, except for CPU tensors, whose steps are always eager).
// Eager and replayed steps run the same kernels with the same plans, so under a
// deterministic numerics policy they give the same bits.
//
// Random ops (dropout, rand, randn, randint, uniform_ and the _like forms, in
// every dtype, with the default generator or one of your own) are captured too:
// their kernels read the generator's state from device memory that each replay
// updates, and the generator advances on the host as an eager step would
// advance it, so every replay draws fresh numbers, the same ones an eager step
// from that state draws. A generator used inside the step must outlive the
// TrainStep. The step runs on the GPU of its inputs x.
//
// Each GPU step starts at a step boundary: it first swaps in the cuDNN plans
// that background builds finished (lazy plan building, core/step_boundary.h).
// When that changed any plan, every captured graph is dropped, and every shape
// runs one eager step (which times the kernel races again) before its next
// capture, which then has the new plans.
//
// A capture records what the step allocates and when it frees it (a record
// only: that graph is never instantiated), and is made again at once (the step
// function runs once more) into one arena laid out from that record
// (core/capture_plan.h): about the most bytes the step keeps alive at once,
// where a caching pool keeps more (resnet9, batch 512, tf32: 1,743 MiB planned
// for 1,739 alive, against the pool's 2,618).
//
// Fusion by tracing (core/ops/fusion_trace.h), on by default (trace_fusion):
// on the GPU, the first step of each input shape also traces the step
// function's forward, and every later step of that shape, eager or captured,
// runs the chains found there (conv2d -> batch_norm -> relu -> add -> relu,
// linear -> gelu, ...) as fused blocks, whatever modules the calls sit in. A
// capture needs the blocks' cuDNN plans built, so when the warm-up steps end
// before a step ran them, one more eager step runs first (with warmup_steps >=
// 2 none is added): by default a shape's third step is its capture. Never
// under loom::FusionGuard(false) or with trace_fusion = false; traced_plan()
// lists what fused and what did not. Should a capture with the chains fail,
// that shape runs untraced from then on (fallback_reason() says why once).
// Shapes past max_graphs run untraced and eagerly, in either mode. Eager
// (cuda_graph = false) and captured steps trace alike, so they agree bit for
// bit under a deterministic policy; a loop of one's own runs the ops as
// written, which rounds differently where a chain fused (cuDNN's fused matmul
// against cuBLAS's, say). Its speed on an H200 on 2026-11-30: as fast as the
// step as written or faster on every CIFAR-sized zoo model, up to 11%
// (resnet18_cifar).
//
// A step whose loss is NaN or +-inf (a bad label inside a replayed graph, a
// learning rate that blew up) is skipped: parameters and optimizer state stay
// as they were. On the GPU the fused update reads the loss on the device and
// decides there, so a replay still needs no host read; the skipped steps are
// counted on the device and nonfinite_steps() reads the count back. The host
// half of the optimizer step (step counts, the learning rate schedule's view of
// them) has already run for a skipped GPU step; on the CPU nothing runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/ops/fusion_trace.h"
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace loom::cuda {
class CudaGraph;
}  // namespace loom::cuda

namespace loom::optim {

struct TrainStepOptions {
  bool cuda_graph = true;  // false: always eager (the reference the graphs must match)
  int warmup_steps = 1;    // eager steps per shape before its capture
  int max_graphs = 4;      // shapes kept captured; later shapes run eagerly
  bool skip_nonfinite = true;  // leave the weights alone in a step whose loss is NaN or +-inf
  bool trace_fusion = true;    // run the forward's fusible chains as blocks (see above)
};

// The steps skipped for a loss that was NaN or +-inf.
struct NonFiniteSteps {
  int64_t skipped = 0;
  int64_t first = 0;  // 1-based number of the first, among this TrainStep's steps on its device (0: none)
};

struct TrainStepStats {
  int64_t eager_steps = 0;
  int64_t captures = 0;
  int64_t replays = 0;
  int64_t plan_swaps = 0;  // step boundaries where new cuDNN plans dropped the captured graphs
  // Of the captures, those into an arena laid out from an earlier capture's
  // requests, and those of them whose requests the plan did not all place
  // (core/capture_plan.h). Each step that captures makes two: recorded, then planned.
  int64_t planned_captures = 0;
  int64_t missed_plans = 0;
};

// fn(x, y) returns the scalar loss first, then any tensors the caller wants
// back (logits). backward() is called on the loss.
using StepFunction = std::function<std::vector<Tensor>(const Tensor& x, const Tensor& y)>;

class TrainStep {
 public:
  TrainStep(StepFunction fn, Optimizer& optimizer, TrainStepOptions options = {});
  ~TrainStep();
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // Runs one step on (x, y). The returned tensors are valid until the next call;
  // after a replay they are the graph's static outputs (read them, or clone()).
  const std::vector<Tensor>& operator()(const Tensor& x, const Tensor& y);

  bool last_step_replayed() const { return last_replayed_; }
  // Why the last step ran eagerly after its warm-up ("" when it replayed a graph).
  const std::string& fallback_reason() const { return fallback_reason_; }
  const TrainStepStats& stats() const { return stats_; }
  // The chains the last traced shape's steps run as blocks (empty before any
  // trace, off the GPU, and with trace_fusion = false).
  const fusion::TracedPlan& traced_plan() const { return traced_plan_; }
  // Reads the GPU's count back (a small copy that waits for the queued steps).
  NonFiniteSteps nonfinite_steps() const;
  // Drops every captured graph and its memory (after the queued work finished).
  void reset();

 private:
  struct Entry;  // one input shape: its warm-up count, graph and static tensors
  struct Graphs;
  // `prepared`: prepare_step() already ran for this step (a failed capture).
  // `entry`: the shape's traced chains run as blocks, or, not traced yet, this
  // step traces the forward (when tracing is on); null: the step as written.
  const std::vector<Tensor>& eager(const Tensor& x, const Tensor& y, bool prepared = false,
                                   Entry* entry = nullptr);
  // The step function, with `entry`'s traced chains as blocks when it has any.
  std::vector<Tensor> forward(Entry* entry, const Tensor& x, const Tensor& y);
  bool tracing(const Entry* entry) const;  // whether `entry`'s steps trace / use traced chains
  Entry* entry_for(const Tensor& x, const Tensor& y);  // null past max_graphs
  const std::vector<Tensor>& capture(Entry& entry, const Tensor& x, const Tensor& y);
  const std::vector<Tensor>& replay(Entry& entry, const Tensor& x, const Tensor& y);
  const std::vector<Tensor>& launch(Entry& entry);
  // Swaps in finished background plans; drops the captured graphs when that changed any.
  void apply_pending_plans();
  // The step captured into a graph whose memory its plan lays out; `outputs` its static outputs.
  std::unique_ptr<cuda::CudaGraph> capture_planned(Entry& entry, std::vector<Tensor>& outputs);
  // The optimizer's update for a step whose loss is `loss` (skipped when it is
  // not finite, with skip_nonfinite); `prepared` as for eager().
  void optimizer_step(const Tensor& loss, bool prepared);

  StepFunction fn_;
  Optimizer& optimizer_;
  TrainStepOptions options_;
  std::unique_ptr<Graphs> graphs_;
  std::vector<Tensor> outputs_;
  bool last_replayed_ = false;
  std::string fallback_reason_;
  TrainStepStats stats_;
  fusion::TracedPlan traced_plan_;
  NonFiniteSteps host_nonfinite_;  // steps whose loss was on the CPU
  int64_t host_steps_ = 0;
  Tensor device_counts_;  // GPU: steps, skipped steps, first skipped (cuda::count_nonfinite)
};

}  // namespace loom::optim
