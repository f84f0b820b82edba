// File: optim/adam.cc
// Adam and AdamW: defaults, checks, and the CPU reference loop. The GPU runs
// the same arithmetic, operation by operation, in core/cuda/optim.cu.
#include "optim/adam.h"

#include <cmath>

#include "core/error.h"
#include "core/parallel.h"
#include "optim/update.h"

namespace loom::optim {

namespace {

// Elements per parallel chunk of an update loop.
constexpr int64_t kUpdateGrain = 1 << 15;

constexpr const char* kBuffers[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};

std::vector<ParamGroup> with_defaults(std::vector<ParamGroup> groups, const AdamOptions& o) {
  for (ParamGroup& g : groups) {
    g.lr = g.lr.value_or(o.lr);
    g.betas = g.betas.value_or(o.betas);
    g.eps = g.eps.value_or(o.eps);
    g.weight_decay = g.weight_decay.value_or(o.weight_decay);
    g.amsgrad = g.amsgrad.value_or(o.amsgrad);
    g.maximize = g.maximize.value_or(o.maximize);
  }
  return groups;
}

AdamOptions as_adam(const AdamWOptions& o) {
  return {.lr = o.lr,
          .betas = o.betas,
          .eps = o.eps,
          .weight_decay = o.weight_decay,
          .amsgrad = o.amsgrad,
          .maximize = o.maximize};
}

// torch.maximum: NaN wins.
template <class T>
T max_nan(T a, T b) {
  return (std::isnan(a) || a > b) ? a : b;
}

struct AdamArrays {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  void* max_exp_avg_sq;  // null without amsgrad
  int64_t n;
};

// Rounded in T as PyTorch's foreach kernels round it (scalars cast to T once);
// the build turns off FMA contraction, so the GPU kernel's explicitly rounded
// operations give the same bits.
template <class T>
void adam_loop(const AdamScalars& s, const AdamArrays& a) {
  T* param = static_cast<T*>(a.param);
  const T* grad = static_cast<const T*>(a.grad);
  T* exp_avg = static_cast<T*>(a.exp_avg);
  T* exp_avg_sq = static_cast<T*>(a.exp_avg_sq);
  T* max_exp_avg_sq = static_cast<T*>(a.max_exp_avg_sq);
  const T decay = T(1.0 - s.lr * s.weight_decay), weight_decay = T(s.weight_decay);
  const T one_minus_beta1 = T(1.0 - s.beta1), beta2 = T(s.beta2);
  const T one_minus_beta2 = T(1.0 - s.beta2), eps = T(s.eps), step_size = T(s.step_size);
  const T bias_correction2_sqrt = T(s.bias_correction2_sqrt);
  // Elements are independent: chunks over the pool give the same bits.
  parallel_for(0, a.n, kUpdateGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      T g = s.maximize ? -grad[i] : grad[i];
      T p = param[i];
      if (s.weight_decay != 0.0) {
        if (s.decoupled_weight_decay) {
          p = p * decay;
        } else {
          g = g + weight_decay * p;
        }
      }
      const T m = lerp(exp_avg[i], g, one_minus_beta1);
      const T v = exp_avg_sq[i] * beta2 + one_minus_beta2 * (g * g);
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      T v_hat = v;
      if (s.amsgrad) v_hat = max_exp_avg_sq[i] = max_nan(max_exp_avg_sq[i], v);
      const T denom = std::sqrt(v_hat) / bias_correction2_sqrt + eps;
      param[i] = p + -step_size * (m / denom);
    }
  });
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{{.params = std::move(params)}}, options) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions defaults)
    : Adam("Adam", std::move(groups), defaults, false) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, const AdamOptions& defaults,
           bool decoupled_weight_decay)
    : Optimizer(std::move(name), with_defaults(std::move(groups), defaults),
                {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"},
                {kBuffers[0], kBuffers[1], kBuffers[2]}),
      decoupled_weight_decay_(decoupled_weight_decay) {
  check_groups();
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : AdamW(std::vector<ParamGroup>{{.params = std::move(params)}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults)
    : Adam("AdamW", std::move(groups), as_adam(defaults), true) {}

void Adam::check_group(const ParamGroup& group, size_t index) const {
  const auto [beta1, beta2] = *group.betas;
  LOOM_CHECK(*group.lr >= 0.0, ValueError, "[{}] group {}: lr must be >= 0, got {}", name(),
             index, *group.lr);
  LOOM_CHECK(*group.eps >= 0.0, ValueError, "[{}] group {}: eps must be >= 0, got {}", name(),
             index, *group.eps);
  LOOM_CHECK(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0, ValueError,
             "[{}] group {}: betas must be in [0, 1), got ({}, {})", name(), index, beta1, beta2);
  LOOM_CHECK(*group.weight_decay >= 0.0, ValueError,
             "[{}] group {}: weight_decay must be >= 0, got {}", name(), index,
             *group.weight_decay);
}

void Adam::check_buffer(std::string_view name, const Tensor& value,
                        const std::string& where) const {
  Optimizer::check_buffer(name, value, where);
  if (name == kBuffers[1] || name == kBuffers[2]) check_squares_nonnegative(value, where, "a mean");
}

void Adam::update(size_t group, std::vector<UpdateSlot>& slots) {
  const ParamGroup& g = param_groups()[group];
  const auto [beta1, beta2] = *g.betas;
  // Bias corrections depend on each parameter's step count: one run per count.
  std::vector<int64_t> steps(slots.size());
  for (size_t k = 0; k < slots.size(); ++k) steps[k] = slots[k].state->step;
  if (*g.amsgrad) {
    create_buffers(slots, {kBuffers[0], kBuffers[1], kBuffers[2]});
  } else {
    create_buffers(slots, {kBuffers[0], kBuffers[1]});
  }
  std::vector<std::vector<UpdateSlot*>> runs = batches(slots, steps);
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto step = static_cast<double>(runs[r].front()->state->step);
    const AdamScalars s{.lr = *g.lr,
                        .beta1 = beta1,
                        .beta2 = beta2,
                        .eps = *g.eps,
                        .weight_decay = *g.weight_decay,
                        .step_size = *g.lr / (1.0 - std::pow(beta1, step)),
                        .bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, step)),
                        .amsgrad = *g.amsgrad,
                        .maximize = *g.maximize,
                        .decoupled_weight_decay = decoupled_weight_decay_};
    if (runs[r].front()->param.device().is_cuda()) {
      fused().stage(group, r, runs[r], s, {kBuffers[0], kBuffers[1], kBuffers[2]});
      continue;
    }
    for (UpdateSlot* slot : runs[r]) {
      const AdamArrays arrays{slot->param.raw_data(), slot->grad.raw_data(),
                              buffer(*slot, kBuffers[0]).raw_data(),
                              buffer(*slot, kBuffers[1]).raw_data(),
                              s.amsgrad ? buffer(*slot, kBuffers[2]).raw_data() : nullptr,
                              slot->param.numel()};
      visit_float(slot->param.dtype(), [&]<class T>() { adam_loop<T>(s, arrays); });
    }
  }
}

}  // namespace loom::optim
