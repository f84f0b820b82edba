// File: core/ops/fusion_trace.h
// Fusion by tracing: run a forward once under a trace::Recorder, find the
// chains of ops that one fusion::Block computes — whatever modules the ops
// ran in — and run them as blocks in later runs of the same forward.
// A max pool whose channels-last output only a flatten takes also writes its
// output contiguous in those runs, so the flatten is a view, not a copy.
//
//   fusion::Traced net_fused([&](const Tensor& x) { return net(x); });
//   Tensor y = net_fused(x);   // traces on the first call (and on a new input shape)
//   Tensor z = net_fused(x);   // conv2d -> batch_norm -> relu ... run as blocks
//   std::cout << net_fused.plan().str();
//
// optim::TrainStep does this by itself on the GPU (TrainStepOptions::trace_fusion,
// on by default, see optim/train_step.h), and loom::FusionGuard(false) turns
// it off.
//
// A chain starts at conv2d, linear or batch_norm and extends through the op
// that takes its output, as long as that output feeds that op only, is not
// returned by the forward, and the op is a step a block has: a batch norm
// right after a conv (with its bias), an activation row, or an add of a
// tensor of the output's shape (a residual, either operand) or one that
// broadcasts to it. conv2d -> batch_norm -> relu -> add(shortcut) -> relu is
// one block wherever the modules put the calls.
//
// How a run substitutes. The chain's ops run in the forward's order as before,
// but only the last computes: the others hand on a tensor with no data (any
// other use of it throws a ValueError that says so) and note their operands;
// the last runs the block on the head's input and every operand, with the
// values the ops were called with now (a batch norm's momentum may change
// from step to step). Autograd goes through the block's backward. A head whose
// input or settings differ from the trace's runs unfused, with the rest of its
// chain; a forward that leaves its trace midway (a chain begun and not ended,
// its data-less tensor used elsewhere) is an error: TracedRun::finish says so.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/ops/fusion.h"
#include "core/tensor.h"
#include "core/trace.h"

namespace loom::fusion {

// One chain of a traced forward.
struct TracedChain {
  std::vector<int64_t> ops;          // the ops' ordinals (trace::Op::index), head first
  std::vector<std::string> names;    // "conv2d", "batch_norm", "relu", "add"
  std::vector<int> chain_input;      // per op: which of its inputs the chain's running value is
  std::vector<Shape> output_sizes, output_strides;  // per op: its traced output's
  std::vector<DType> output_dtypes;
  Shape input_sizes;                 // the head's input, as traced
  DType input_dtype = DType::Float32;
  std::string module;                // the head's module path ("" at top level)
  std::string block;                 // Block::str() of the traced chain
};

class TracedPlan {
 public:
  TracedPlan() = default;
  // The chains of a recorded forward; `returned`: the tensors the forward
  // returned (they are never a chain's middle).
  static TracedPlan from_trace(const std::vector<trace::Op>& ops, const std::vector<Tensor>& returned);

  const std::vector<TracedChain>& chains() const { return chains_; }
  // The max_pool2d ops (ordinals) that write their output contiguous: each one's
  // output is channels-last, (N, C, H, W) with C > 1 and H * W > 1, and only a
  // reshape to (N, C * H * W) takes it (nn::Flatten, x.flatten(1)), which
  // then views the pool's output instead of copying it.
  const std::vector<int64_t>& contiguous_pools() const { return contiguous_pools_; }
  // Whether a run has nothing to change: no chain, no pool.
  bool empty() const { return chains_.empty() && contiguous_pools_.empty(); }
  // A head that stayed alone, and why: "conv2d in layer1.0.conv1: its output feeds 2 ops".
  const std::vector<std::string>& unfused() const { return unfused_; }
  // Where each chain op sits: chain index and position, by op ordinal (none: -1, -1).
  std::pair<int, int> locate(int64_t op_index) const;
  // The chains and the lone heads as text, one line each.
  std::string str() const;

 private:
  std::vector<TracedChain> chains_;
  std::vector<std::string> unfused_;
  std::vector<std::pair<int64_t, std::pair<int, int>>> located_;  // sorted by op ordinal
  std::vector<int64_t> contiguous_pools_;                          // sorted
  std::vector<std::string> pool_modules_;                          // where each ran, for str()
};

// Runs `plan`'s chains as blocks, and its pools with a contiguous output, in
// the forward that runs on this thread while it is alive (a trace::Substituter).
class TracedRun : public trace::Substituter {
 public:
  explicit TracedRun(const TracedPlan& plan);
  ~TracedRun() override;
  TracedRun(const TracedRun&) = delete;
  TracedRun& operator=(const TracedRun&) = delete;

  std::optional<Tensor> substitute(int64_t index, const char* name, const std::vector<Tensor>& inputs,
                                   const std::vector<trace::Attribute>& attributes) override;
  // Call after the forward returned: ValueError if a chain began and did not end.
  void finish() const;
  int64_t blocks_run() const { return blocks_run_; }

 private:
  struct Running;  // one chain's state in this run
  std::optional<Tensor> advance(Running& run, const TracedChain& chain, int position,
                                const std::vector<Tensor>& inputs, const std::vector<trace::Attribute>& attributes);

  const TracedPlan& plan_;
  std::vector<Running> running_;
  trace::SubstituteScope scope_;
  int64_t blocks_run_ = 0;
};

// A forward of one tensor, traced on its first call and again on each new
// input shape, dtype or device, and run with its chains as blocks after that
// (with fusion off, FusionGuard, it runs as written).
class Traced {
 public:
  explicit Traced(std::function<Tensor(const Tensor&)> forward);
  Tensor operator()(const Tensor& x);
  const TracedPlan& plan() const { return plan_; }

 private:
  std::function<Tensor(const Tensor&)> forward_;
  TracedPlan plan_;
  std::optional<std::tuple<Shape, DType, Device>> traced_for_;
};

// The latest plan of each traced forward, by label ("TrainStep (128, 3, 32, 32)"),
// for fusion::report(); kept until clear_report().
void note_traced_plan(const std::string& label, const TracedPlan& plan);
std::string traced_plans_str();
void clear_traced_plans();

}  // namespace loom::fusion
