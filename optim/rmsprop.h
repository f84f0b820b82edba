// File: optim/rmsprop.h
// RMSprop with torch.optim.RMSprop's exact update rule. At each step of a parameter:
//
//   g = grad (negated if maximize) + weight_decay * p
//   v = alpha * v + (1 - alpha) * g * g
//   centered: m = lerp(m, g, 1 - alpha), variance = v - m * m; else variance = v
//   step = g / (sqrt(variance) + eps)
//   momentum > 0: b = momentum * b + step, p = p - lr * b;   else p = p - lr * step
//
//   loom::optim::RMSprop opt(net.parameters(), {.lr = 1e-3, .momentum = 0.9, .centered = true});
#pragma once

#include <string_view>
#include <vector>

#include "optim/optimizer.h"

namespace loom::optim {

struct RmspropOptions {
  double lr = 1e-2;
  double alpha = 0.99;  // smoothing of the squared gradients' average
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;  // divide by the gradients' variance, not their mean square
  bool maximize = false;
};

// State per parameter: square_avg; momentum_buffer where momentum > 0; grad_avg when centered.
class RMSprop : public Optimizer {
 public:
  explicit RMSprop(std::vector<Tensor> params, RmspropOptions options = {});
  // Each group's unset fields take `defaults`.
  explicit RMSprop(std::vector<ParamGroup> groups, RmspropOptions defaults = {});

 protected:
  void update(size_t group, std::vector<UpdateSlot>& slots) override;
  void check_group(const ParamGroup& group, size_t index) const override;
  // Also: square_avg is >= 0 (its square root divides).
  void check_buffer(std::string_view name, const Tensor& value,
                    const std::string& where) const override;
};

}  // namespace loom::optim
