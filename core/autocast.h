// File: core/autocast.h
// Mixed precision in the style of torch.autocast("cuda"): while a guard is
// alive, the ops that gain from tensor cores (conv2d, linear, matmul) cast
// their CUDA operands to the autocast dtype and compute in it; batch_norm
// keeps its fp32 parameters and takes the low-precision activation as it is;
// pooling, relu and views keep their input's dtype; elementwise ops on mixed
// operands promote to the wider one. The casts are differentiable, so fp32
// parameters receive fp32 gradients and optimizers stay unchanged. CPU tensors
// are never cast: the CPU reference computes in float32 or float64 only.
//
//   {
//     loom::AutocastGuard autocast(loom::DType::BFloat16);
//     loom::Tensor logits = model.forward(x);  // bf16 activations, fp32 weights
//   }
#pragma once

#include <optional>

#include "core/dtype.h"
#include "core/tensor.h"

namespace loom {

// The calling thread's autocast dtype, or none when autocast is off (the default).
std::optional<DType> autocast_dtype();

// Sets the thread's autocast dtype (BFloat16 or Float16; nullopt turns autocast
// off inside an enclosing guard) for its lifetime, restoring the previous one.
class AutocastGuard {
 public:
  explicit AutocastGuard(std::optional<DType> dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};

// The operand an autocast op computes with: `t` cast (differentiably) to the
// autocast dtype when autocast is on and t is a floating CUDA tensor of
// another dtype; otherwise t itself (undefined stays undefined).
Tensor autocast_operand(const Tensor& t);

// Frees the calling thread's cached parameter casts now rather than when the
// next forward recasts them (as torch.clear_autocast_cache); which parameters
// were cast is remembered, so the next forward recasts them together in one
// launch. A CUDA-graph capture calls it first: a cast replaced inside a capture
// stays allocated for as long as the graph lives (core/cuda/allocator.h).
void clear_autocast_cache();

}  // namespace loom
