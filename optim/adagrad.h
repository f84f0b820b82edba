// File: optim/adagrad.h
// Adagrad with torch.optim.Adagrad's exact update rule. At step t of a parameter:
//
//   g = grad (negated if maximize) + weight_decay * p
//   clr = lr / (1 + (t - 1) * lr_decay)
//   sum = sum + g * g                    (sum starts at initial_accumulator_value)
//   p = p - clr * g / (sqrt(sum) + eps)
//
//   loom::optim::Adagrad opt(net.parameters(), {.lr = 0.05});
#pragma once

#include <string_view>
#include <vector>

#include "optim/optimizer.h"

namespace loom::optim {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
  bool maximize = false;
};

// State per parameter: sum (of squared gradients).
class Adagrad : public Optimizer {
 public:
  explicit Adagrad(std::vector<Tensor> params, AdagradOptions options = {});
  // Each group's unset fields take `defaults`.
  explicit Adagrad(std::vector<ParamGroup> groups, AdagradOptions defaults = {});

 protected:
  void update(size_t group, std::vector<UpdateSlot>& slots) override;
  void check_group(const ParamGroup& group, size_t index) const override;
  // Also: sum is >= 0 (its square root divides).
  void check_buffer(std::string_view name, const Tensor& value,
                    const std::string& where) const override;
};

}  // namespace loom::optim
