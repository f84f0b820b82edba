// File: optim/adagrad.cc
// Adagrad: defaults, checks, and the CPU reference loop. The GPU runs the same
// arithmetic, operation by operation, in core/cuda/optim.cu.
#include "optim/adagrad.h"

#include <cmath>

#include "core/error.h"
#include "core/parallel.h"
#include "optim/update.h"

namespace loom::optim {

namespace {

// Elements per parallel chunk of an update loop.
constexpr int64_t kUpdateGrain = 1 << 15;

constexpr const char* kSum = "sum";

std::vector<ParamGroup> with_defaults(std::vector<ParamGroup> groups, const AdagradOptions& o) {
  for (ParamGroup& g : groups) {
    g.lr = g.lr.value_or(o.lr);
    g.lr_decay = g.lr_decay.value_or(o.lr_decay);
    g.weight_decay = g.weight_decay.value_or(o.weight_decay);
    g.initial_accumulator_value = g.initial_accumulator_value.value_or(o.initial_accumulator_value);
    g.eps = g.eps.value_or(o.eps);
    g.maximize = g.maximize.value_or(o.maximize);
  }
  return groups;
}

// Rounded in T as PyTorch's foreach kernels round it (scalars cast to T once):
// p + (g * -clr) / (sqrt(sum) + eps). The build turns off FMA contraction, so
// the GPU kernel's explicitly rounded operations give the same bits.
template <class T>
void adagrad_loop(const AdagradScalars& s, T* param, const T* grad, T* sum, int64_t n) {
  const T minus_lr = T(-s.lr), weight_decay = T(s.weight_decay), eps = T(s.eps);
  // Elements are independent: chunks over the pool give the same bits.
  parallel_for(0, n, kUpdateGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      T g = s.maximize ? -grad[i] : grad[i];
      if (s.weight_decay != 0.0) g = g + weight_decay * param[i];
      const T v = sum[i] + g * g;
      sum[i] = v;
      param[i] = param[i] + (g * minus_lr) / (std::sqrt(v) + eps);
    }
  });
}

}  // namespace

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(std::vector<ParamGroup>{{.params = std::move(params)}}, options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions defaults)
    : Optimizer("Adagrad", with_defaults(std::move(groups), defaults),
                {"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps", "maximize"}, {kSum}) {
  check_groups();
}

void Adagrad::check_group(const ParamGroup& group, size_t index) const {
  auto at_least_zero = [&](const char* what, double value) {
    LOOM_CHECK(value >= 0.0, ValueError, "[Adagrad] group {}: {} must be >= 0, got {}", index, what, value);
  };
  at_least_zero("lr", *group.lr);
  at_least_zero("lr_decay", *group.lr_decay);
  at_least_zero("weight_decay", *group.weight_decay);
  at_least_zero("initial_accumulator_value", *group.initial_accumulator_value);
  at_least_zero("eps", *group.eps);
}

void Adagrad::check_buffer(std::string_view name, const Tensor& value, const std::string& where) const {
  Optimizer::check_buffer(name, value, where);
  if (name == kSum) check_squares_nonnegative(value, where, "a sum");
}

void Adagrad::update(size_t group, std::vector<UpdateSlot>& slots) {
  const ParamGroup& g = param_groups()[group];
  // A new sum starts at initial_accumulator_value, as torch's does.
  std::vector<UpdateSlot*> fresh;
  for (UpdateSlot& slot : slots) {
    if (!has_buffer(slot, kSum)) fresh.push_back(&slot);
  }
  create_buffers(slots, {kSum});
  if (*g.initial_accumulator_value != 0.0) {
    for (UpdateSlot* slot : fresh) buffer(*slot, kSum).fill_(*g.initial_accumulator_value);
  }
  // The learning rate decays with each parameter's step count: one run per count.
  std::vector<int64_t> steps(slots.size());
  for (size_t k = 0; k < slots.size(); ++k) steps[k] = slots[k].state->step;
  std::vector<std::vector<UpdateSlot*>> runs = batches(slots, steps);
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto step = static_cast<double>(runs[r].front()->state->step);
    const AdagradScalars s{.lr = *g.lr / (1.0 + (step - 1.0) * *g.lr_decay),
                           .weight_decay = *g.weight_decay,
                           .eps = *g.eps,
                           .maximize = *g.maximize};
    if (runs[r].front()->param.device().is_cuda()) {
      fused().stage(group, r, runs[r], s, {kSum});
      continue;
    }
    for (UpdateSlot* slot : runs[r]) {
      visit_float(slot->param.dtype(), [&]<class T>() {
        adagrad_loop<T>(s, slot->param.data_ptr<T>(), slot->grad.data_ptr<T>(),
                        buffer(*slot, kSum).data_ptr<T>(), slot->param.numel());
      });
    }
  }
}

}  // namespace loom::optim
