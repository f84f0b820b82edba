// File: core/kernel/optim_scalars.h
// The scalars of one optimizer update, declared once for the optimizers
// (optim/update.h) and the fused CUDA kernels (core/cuda/optim_kernels.h), as
// torch.optim computes them in Python doubles. Every field is cast to the
// tensors' dtype once, as PyTorch casts its scalars.
#pragma once

#include <variant>

namespace loom::optim {

// torch.optim.SGD's update for one run of parameters.
struct SgdScalars {
  double lr = 0.0;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
  bool first_step = false;  // the momentum buffer starts as the gradient
};

// torch.optim.Adam / AdamW's update for one run of parameters at one step count.
struct AdamScalars {
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double step_size = 0.0;               // lr / (1 - beta1^step)
  double bias_correction2_sqrt = 1.0;   // sqrt(1 - beta2^step)
  bool amsgrad = false;
  bool maximize = false;
  bool decoupled_weight_decay = false;  // AdamW: p *= 1 - lr * weight_decay
};

// torch.optim.RMSprop's update for one run of parameters.
struct RmspropScalars {
  double lr = 0.0;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
  bool maximize = false;
};

// torch.optim.Adagrad's update for one run of parameters at one step count.
struct AdagradScalars {
  double lr = 0.0;  // decayed: lr / (1 + (step - 1) * lr_decay)
  double weight_decay = 0.0;
  double eps = 1e-10;
  bool maximize = false;
};

// The scalars of any update; which alternative it holds says which update runs.
using UpdateScalars = std::variant<SgdScalars, AdamScalars, RmspropScalars, AdagradScalars>;

}  // namespace loom::optim
