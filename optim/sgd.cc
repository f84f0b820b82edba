// File: optim/sgd.cc
// SGD: defaults, checks, and the CPU reference loop. The GPU runs the same
// arithmetic, operation by operation, in core/cuda/optim.cu.
#include "optim/sgd.h"

#include "core/error.h"
#include "core/parallel.h"
#include "optim/update.h"

namespace loom::optim {

namespace {

constexpr const char* kMomentumBuffer = "momentum_buffer";

std::vector<ParamGroup> with_defaults(std::vector<ParamGroup> groups, const SgdOptions& o) {
  for (ParamGroup& g : groups) {
    g.lr = g.lr.value_or(o.lr);
    g.momentum = g.momentum.value_or(o.momentum);
    g.dampening = g.dampening.value_or(o.dampening);
    g.nesterov = g.nesterov.value_or(o.nesterov);
    g.weight_decay = g.weight_decay.value_or(o.weight_decay);
    g.maximize = g.maximize.value_or(o.maximize);
  }
  return groups;
}

// Elements per parallel chunk of an update loop.
constexpr int64_t kUpdateGrain = 1 << 15;

// Each step is rounded in T as PyTorch's foreach kernels round it (the scalars
// cast to T once); the build turns off FMA contraction, so the GPU kernel's
// explicitly rounded operations give the same bits.
template <class T>
void sgd_loop(const SgdScalars& s, T* param, const T* grad, T* buffer, int64_t n) {
  const T lr = T(s.lr);
  const T momentum = T(s.momentum);
  const T one_minus_dampening = T(1.0 - s.dampening);
  const T weight_decay = T(s.weight_decay);
  // Elements are independent: chunks over the pool give the same bits.
  parallel_for(0, n, kUpdateGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      T g = grad[i];
      if (s.maximize) g = -g;
      if (s.weight_decay != 0.0) g = g + weight_decay * param[i];
      if (s.momentum != 0.0) {
        const T b = s.first_step ? g : buffer[i] * momentum + one_minus_dampening * g;
        buffer[i] = b;
        g = s.nesterov ? g + momentum * b : b;
      }
      param[i] = param[i] + -lr * g;
    }
  });
}

void sgd_cpu(const SgdScalars& s, UpdateSlot& slot, Tensor* buffer) {
  visit_float(slot.param.dtype(), [&]<class T>() {
    sgd_loop<T>(s, slot.param.data_ptr<T>(), slot.grad.data_ptr<T>(),
                buffer ? buffer->data_ptr<T>() : nullptr, slot.param.numel());
  });
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SgdOptions options)
    : SGD(std::vector<ParamGroup>{{.params = std::move(params)}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SgdOptions defaults)
    : Optimizer("SGD", with_defaults(std::move(groups), defaults),
                {"lr", "momentum", "dampening", "nesterov", "weight_decay", "maximize"},
                {kMomentumBuffer}) {
  check_groups();
}

void SGD::check_group(const ParamGroup& group, size_t index) const {
  LOOM_CHECK(*group.lr >= 0.0, ValueError, "[SGD] group {}: lr must be >= 0, got {}", index,
             *group.lr);
  LOOM_CHECK(*group.momentum >= 0.0, ValueError, "[SGD] group {}: momentum must be >= 0, got {}",
             index, *group.momentum);
  LOOM_CHECK(*group.weight_decay >= 0.0, ValueError,
             "[SGD] group {}: weight_decay must be >= 0, got {}", index, *group.weight_decay);
  LOOM_CHECK(!*group.nesterov || (*group.momentum > 0.0 && *group.dampening == 0.0), ValueError,
             "[SGD] group {}: nesterov needs momentum > 0 and dampening 0, got momentum {} and "
             "dampening {}",
             index, *group.momentum, *group.dampening);
}

void SGD::update(size_t group, std::vector<UpdateSlot>& slots) {
  const ParamGroup& g = param_groups()[group];
  const bool use_momentum = *g.momentum != 0.0;
  // A first step copies the gradient into the buffer, so it runs apart.
  std::vector<int64_t> first_step(slots.size());
  for (size_t k = 0; k < slots.size(); ++k) first_step[k] = use_momentum && !has_buffer(slots[k], kMomentumBuffer);
  if (use_momentum) create_buffers(slots, {kMomentumBuffer});
  std::vector<std::vector<UpdateSlot*>> runs = batches(slots, first_step);
  for (size_t r = 0; r < runs.size(); ++r) {
    const SgdScalars s{.lr = *g.lr,
                       .momentum = *g.momentum,
                       .dampening = *g.dampening,
                       .weight_decay = *g.weight_decay,
                       .nesterov = *g.nesterov,
                       .maximize = *g.maximize,
                       .first_step = first_step[runs[r].front() - slots.data()] != 0};
    if (runs[r].front()->param.device().is_cuda()) {
      fused().stage(group, r, runs[r], s, {kMomentumBuffer});
      continue;
    }
    for (UpdateSlot* slot : runs[r]) {
      sgd_cpu(s, *slot, use_momentum ? &buffer(*slot, kMomentumBuffer) : nullptr);
    }
  }
}

}  // namespace loom::optim
