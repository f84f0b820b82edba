// File: optim/sgd.h
// Stochastic gradient descent with torch.optim.SGD's exact update rule:
//
//   g = grad (negated if maximize) + weight_decay * p
//   b = g on a parameter's first step with momentum, else momentum * b + (1 - dampening) * g
//   g = nesterov ? g + momentum * b : b          (only where momentum != 0)
//   p = p - lr * g
//
//   loom::optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9, .nesterov = true,
//                                          .weight_decay = 5e-4});
#pragma once

#include <vector>

#include "optim/optimizer.h"

namespace loom::optim {

struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  double weight_decay = 0.0;
  bool maximize = false;
};

// State per parameter: momentum_buffer (where momentum != 0).
class SGD : public Optimizer {
 public:
  explicit SGD(std::vector<Tensor> params, SgdOptions options = {});
  // Each group's unset fields take `defaults`.
  explicit SGD(std::vector<ParamGroup> groups, SgdOptions defaults = {});

 protected:
  void update(size_t group, std::vector<UpdateSlot>& slots) override;
  void check_group(const ParamGroup& group, size_t index) const override;
};

}  // namespace loom::optim
