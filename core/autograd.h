// File: core/autograd.h
// Reverse-mode autograd on a dynamic tape. An op that needs grad records one
// Node whose backward is a lambda written next to its forward:
//
//   Tensor y = ...forward...;
//   if (needs_grad({x, w})) {
//     record("conv2d", {x, w}, y, [=](const Tensor& dy) -> std::vector<Tensor> {
//       return {conv2d_dgrad(dy, w), conv2d_wgrad(dy, x)};  // one per input, in order
//     }, /*saved=*/{x, w});
//   }
//
// The engine sorts nodes topologically, walks them in reverse, and accumulates
// into leaves' .grad. Backward lambdas run with grad mode off (no double backward).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/profiler.h"
#include "core/tensor.h"

namespace loom {

// grad_output -> one gradient per recorded input, in order; an undefined Tensor
// means "no gradient for this input" (treated as zero).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
// (grad_a, grad_b) -> what BackwardFn gives for grad_a + grad_b. When two paths'
// gradients meet at an output (a residual block's input feeds the block's first
// convolution and its shortcut), the engine passes both to a node that has one,
// which adds them in a pass over its gradient it makes anyway, instead of a
// separate sum reading both and writing a third tensor. The two share sizes,
// dtype and device, not necessarily layout.
using BackwardSumFn = std::function<std::vector<Tensor>(const Tensor& grad_a, const Tensor& grad_b)>;

class Node {
 public:
  virtual ~Node() = default;
  virtual const std::string& name() const = 0;
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  // Whether apply_sum(a, b) does better than apply(a + b) (the node has a BackwardSumFn).
  virtual bool folds_gradient_sum() const { return false; }
  // apply(grad_a + grad_b); this default sums first.
  virtual std::vector<Tensor> apply_sum(const Tensor& grad_a, const Tensor& grad_b);
  // Frees what backward saved; a later apply() throws AutogradError.
  virtual void release() {}

  // Where each input's gradient goes: its grad_fn, a leaf's accumulator, or null.
  std::vector<std::shared_ptr<Node>> next;
  // The profiler row (a layer) that was open when the node was recorded; set
  // only while profiling, so the backward's time is charged to that layer.
  std::optional<ProfileRowId> profile_row;
  // The module whose forward recorded the node ("features.3 (Conv2d)"); set
  // only in anomaly mode (core/anomaly.h), for its backward's message.
  std::string module;
};

// True while gradients are being recorded (the default).
bool grad_mode_enabled();

// Turns recording off for its lifetime, as torch.no_grad():
//   { loom::NoGradGuard guard; param.copy_(...); }
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True when grad mode is on and any defined input requires grad.
bool needs_grad(std::initializer_list<Tensor> inputs);

// Makes `output` the result of a new node `name` over `inputs` (undefined
// inputs allowed, e.g. a missing bias). `saved` lists the tensors backward
// reads: if one is modified in place before backward, backward throws.
void record(std::string name, const std::vector<Tensor>& inputs, Tensor& output,
            BackwardFn backward, const std::vector<Tensor>& saved = {});
// The same, with the form of the backward that adds two gradients itself.
void record(std::string name, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn backward,
            BackwardSumFn backward_sum, const std::vector<Tensor>& saved);

// Makes `output` (input converted to another floating dtype) the result of a
// conversion node: its backward converts the gradient back. The engine
// converts the gradients such nodes pass to leaves without hooks all at once,
// after the rest of the backward (one kernel launch instead of one per leaf).
void record_cast(const Tensor& input, Tensor& output);

// Throws AutogradError when `tensor` may not be written in place by `op`: it
// requires grad and grad mode is on. Bumps the storage version otherwise.
void check_inplace(const Tensor& tensor, std::string_view op);

// Calls `hook(leaf)` each time a backward has finished writing leaf.grad (once
// per backward, after every path's gradient is summed in), as PyTorch's
// register_post_accumulate_grad_hook. DistributedDataParallel uses it to start
// a bucket's all-reduce while the rest of the backward still runs. Hooks run in
// registration order, with grad mode off. Returns a handle for removal.
using GradHook = std::function<void(const Tensor& leaf)>;
int64_t register_post_accumulate_grad_hook(const Tensor& leaf, GradHook hook);
void remove_post_accumulate_grad_hook(const Tensor& leaf, int64_t handle);

// The engine behind Tensor::backward.
void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph);

}  // namespace loom
