// File: optim/rmsprop.cc
// RMSprop: defaults, checks, and the CPU reference loop. The GPU runs the same
// arithmetic, operation by operation, in core/cuda/optim.cu.
#include "optim/rmsprop.h"

#include <cmath>

#include "core/error.h"
#include "core/parallel.h"
#include "optim/update.h"

namespace loom::optim {

namespace {

// Elements per parallel chunk of an update loop.
constexpr int64_t kUpdateGrain = 1 << 15;

// In the fused kernel's order.
constexpr const char* kBuffers[] = {"square_avg", "momentum_buffer", "grad_avg"};

std::vector<ParamGroup> with_defaults(std::vector<ParamGroup> groups, const RmspropOptions& o) {
  for (ParamGroup& g : groups) {
    g.lr = g.lr.value_or(o.lr);
    g.alpha = g.alpha.value_or(o.alpha);
    g.eps = g.eps.value_or(o.eps);
    g.weight_decay = g.weight_decay.value_or(o.weight_decay);
    g.momentum = g.momentum.value_or(o.momentum);
    g.centered = g.centered.value_or(o.centered);
    g.maximize = g.maximize.value_or(o.maximize);
  }
  return groups;
}

struct RmspropArrays {
  void* param;
  const void* grad;
  void* square_avg;
  void* momentum_buffer;  // null without momentum
  void* grad_avg;         // null unless centered
  int64_t n;
};

// Rounded in T as PyTorch's foreach kernels round it (scalars cast to T once);
// the build turns off FMA contraction, so the GPU kernel's explicitly rounded
// operations give the same bits.
template <class T>
void rmsprop_loop(const RmspropScalars& s, const RmspropArrays& a) {
  T* param = static_cast<T*>(a.param);
  const T* grad = static_cast<const T*>(a.grad);
  T* square_avg = static_cast<T*>(a.square_avg);
  T* momentum_buffer = static_cast<T*>(a.momentum_buffer);
  T* grad_avg = static_cast<T*>(a.grad_avg);
  const T lr = T(s.lr), alpha = T(s.alpha), one_minus_alpha = T(1.0 - s.alpha), eps = T(s.eps);
  const T weight_decay = T(s.weight_decay), momentum = T(s.momentum);
  // Elements are independent: chunks over the pool give the same bits.
  parallel_for(0, a.n, kUpdateGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      T g = s.maximize ? -grad[i] : grad[i];
      if (s.weight_decay != 0.0) g = g + weight_decay * param[i];
      const T v = square_avg[i] * alpha + one_minus_alpha * (g * g);
      square_avg[i] = v;
      T variance = v;
      if (s.centered) {
        const T m = lerp(grad_avg[i], g, one_minus_alpha);
        grad_avg[i] = m;
        variance = v + -(m * m);
      }
      const T step = g / (std::sqrt(variance) + eps);
      if (s.momentum > 0.0) {
        const T b = momentum_buffer[i] * momentum + step;
        momentum_buffer[i] = b;
        param[i] = param[i] + -lr * b;
      } else {
        param[i] = param[i] + -lr * step;
      }
    }
  });
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RmspropOptions options)
    : RMSprop(std::vector<ParamGroup>{{.params = std::move(params)}}, options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RmspropOptions defaults)
    : Optimizer("RMSprop", with_defaults(std::move(groups), defaults),
                {"lr", "alpha", "eps", "weight_decay", "momentum", "centered", "maximize"},
                {kBuffers[0], kBuffers[1], kBuffers[2]}) {
  check_groups();
}

void RMSprop::check_group(const ParamGroup& group, size_t index) const {
  auto at_least_zero = [&](const char* what, double value) {
    LOOM_CHECK(value >= 0.0, ValueError, "[RMSprop] group {}: {} must be >= 0, got {}", index, what,
               value);
  };
  at_least_zero("lr", *group.lr);
  at_least_zero("eps", *group.eps);
  at_least_zero("weight_decay", *group.weight_decay);
  at_least_zero("momentum", *group.momentum);
  LOOM_CHECK(*group.alpha >= 0.0 && *group.alpha <= 1.0, ValueError,
             "[RMSprop] group {}: alpha must be in [0, 1], got {}", index, *group.alpha);
}

void RMSprop::check_buffer(std::string_view name, const Tensor& value,
                           const std::string& where) const {
  Optimizer::check_buffer(name, value, where);
  if (name == kBuffers[0]) check_squares_nonnegative(value, where, "a mean");
}

void RMSprop::update(size_t group, std::vector<UpdateSlot>& slots) {
  const ParamGroup& g = param_groups()[group];
  const RmspropScalars s{.lr = *g.lr,
                         .alpha = *g.alpha,
                         .eps = *g.eps,
                         .weight_decay = *g.weight_decay,
                         .momentum = *g.momentum,
                         .centered = *g.centered,
                         .maximize = *g.maximize};
  const bool use_momentum = s.momentum > 0.0;
  std::vector<std::string_view> needed = {kBuffers[0]};
  if (use_momentum) needed.push_back(kBuffers[1]);
  if (s.centered) needed.push_back(kBuffers[2]);
  create_buffers(slots, needed);
  // Every slot takes the same scalars: one run per device and dtype.
  std::vector<std::vector<UpdateSlot*>> runs = batches(slots, std::vector<int64_t>(slots.size(), 0));
  for (size_t r = 0; r < runs.size(); ++r) {
    if (runs[r].front()->param.device().is_cuda()) {
      fused().stage(group, r, runs[r], s, {kBuffers[0], kBuffers[1], kBuffers[2]});
      continue;
    }
    for (UpdateSlot* slot : runs[r]) {
      const RmspropArrays arrays{slot->param.raw_data(), slot->grad.raw_data(),
                                 buffer(*slot, kBuffers[0]).raw_data(),
                                 use_momentum ? buffer(*slot, kBuffers[1]).raw_data() : nullptr,
                                 s.centered ? buffer(*slot, kBuffers[2]).raw_data() : nullptr,
                                 slot->param.numel()};
      visit_float(slot->param.dtype(), [&]<class T>() { rmsprop_loop<T>(s, arrays); });
    }
  }
}

}  // namespace loom::optim
