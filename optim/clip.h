// File: optim/clip.h
// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_.
//
//   loss.backward();
//   double norm = loom::optim::clip_grad_norm_(net.parameters(), 1.0);
//   opt.step();
#pragma once

#include <vector>

#include "core/tensor.h"

namespace loom::optim {

// The L2 norm of all of `params`' gradients together (parameters without one
// are skipped), returned as computed before clipping. Where it exceeds
// max_norm, every gradient is scaled in place by max_norm / (norm + 1e-6); as
// in PyTorch a NaN or infinite norm scales them too (to NaN or zero). Squares
// are summed in double. On the GPU the norm is two launches per device and
// dtype (whatever the number of tensors), the scaling one.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace loom::optim
