// File: core/anomaly.h
// Anomaly mode, as PyTorch's torch.autograd.detect_anomaly: while a guard is
// alive, every op that autograd records checks its forward output, and the
// backward engine checks every gradient a node returns. The first NaN or inf
// throws NonFiniteError naming the op and the module whose forward recorded it:
//
//   {
//     loom::AnomalyGuard anomaly;
//     Tensor loss = cross_entropy(net(x), y);  // "[anomaly] the forward of 'log' in
//     loss.backward();                          //  features.3 (Conv2d) produced NaN ..."
//   }
//
// The checks copy each value to the host (a device sync per op on the GPU), so
// anomaly mode is for finding a bug, not for training; off, it costs one
// thread-local flag test per recorded op. It cannot run inside CUDA-graph
// capture (run the step eagerly). Ops on tensors that need no grad are not
// recorded, so they are not checked: a NaN they make is reported at the first
// recorded op that reads it, as coming in through its inputs.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom {

// True while an AnomalyGuard is alive on this thread.
bool anomaly_mode_enabled();

// Turns anomaly mode on (or off) for its lifetime, then restores the previous mode.
class AnomalyGuard {
 public:
  explicit AnomalyGuard(bool enabled = true);
  ~AnomalyGuard();
  AnomalyGuard(const AnomalyGuard&) = delete;
  AnomalyGuard& operator=(const AnomalyGuard&) = delete;

 private:
  bool previous_;
};

// Where the running forward is, as anomaly messages name it: nn::Module opens
// one scope per call in anomaly mode ("features.3 (Conv2d)"); "" outside any.
class AnomalyModuleScope {
 public:
  explicit AnomalyModuleScope(std::string where);
  ~AnomalyModuleScope();
  AnomalyModuleScope(const AnomalyModuleScope&) = delete;
  AnomalyModuleScope& operator=(const AnomalyModuleScope&) = delete;

 private:
  std::string outer_;
};
const std::string& anomaly_module();

// True when every element of a floating tensor is finite (integer tensors always are).
bool all_finite(const Tensor& t);

// Throws NonFiniteError when `output` of the forward of `op`, recorded in
// `module`, holds NaN or inf; the message says whether `inputs` already did.
void check_forward_finite(const std::string& op, const std::string& module,
                          const std::vector<Tensor>& inputs, const Tensor& output);

// Throws NonFiniteError when a gradient that the backward of `op` returned for
// one of its inputs holds NaN or inf; says whether `grad_output` already did.
void check_backward_finite(const std::string& op, const std::string& module,
                           const Tensor& grad_output, const std::vector<Tensor>& grads);

}  // namespace loom
