// File: optim/adam.h
// Adam and AdamW with torch.optim's exact update rules. At step t of a parameter:
//
//   g = grad (negated if maximize)
//   Adam:  g = g + weight_decay * p           AdamW: p = p * (1 - lr * weight_decay)
//   m = lerp(m, g, 1 - beta1)                 v = beta2 * v + (1 - beta2) * g * g
//   v_hat = amsgrad ? (v_max = max(v_max, v)) : v
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)
//
//   loom::optim::Adam opt(net.parameters(), {.lr = 1e-3});
//   loom::optim::AdamW opt(net.parameters(), {.lr = 1e-3, .weight_decay = 0.05});
#pragma once

#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace loom::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
};

// AdamW's defaults differ from Adam's only in weight_decay (PyTorch's 1e-2).
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

// State per parameter: exp_avg, exp_avg_sq, and max_exp_avg_sq with amsgrad.
class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});
  // Each group's unset fields take `defaults`.
  explicit Adam(std::vector<ParamGroup> groups, AdamOptions defaults = {});

 protected:
  Adam(std::string name, std::vector<ParamGroup> groups, const AdamOptions& defaults,
       bool decoupled_weight_decay);
  void update(size_t group, std::vector<UpdateSlot>& slots) override;
  void check_group(const ParamGroup& group, size_t index) const override;
  // Also: the averages of squared gradients are >= 0 (their square roots divide).
  void check_buffer(std::string_view name, const Tensor& value,
                    const std::string& where) const override;

 private:
  bool decoupled_weight_decay_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW.
class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  explicit AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults = {});
};

}  // namespace loom::optim
