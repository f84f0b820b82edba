// File: optim/update.cc
// The fused GPU path: UpdateSlots become a cuda::TensorSlot table (pointers and
// sizes), uploaded only on change, and one kernel launch per run.
#include "optim/update.h"

#include <map>
#include <string_view>
#include <utility>

#include "core/error.h"

#ifdef LOOM_WITH_CUDA
#include "core/cuda/optim.h"
#endif

namespace loom::optim {

#ifdef LOOM_WITH_CUDA

namespace {

void* find_buffer(const UpdateSlot& slot, std::string_view name) {
  for (const auto& [key, tensor] : slot.state->buffers) {
    if (key == name) return tensor.raw_data();
  }
  return nullptr;
}

std::vector<cuda::TensorSlot> tensor_slots(const std::vector<UpdateSlot*>& slots,
                                           std::initializer_list<std::string_view> buffers) {
  std::vector<cuda::TensorSlot> out;
  out.reserve(slots.size());
  for (const UpdateSlot* slot : slots) {
    cuda::TensorSlot s;
    s.param = slot->param.raw_data();
    s.grad = slot->grad.raw_data();
    int k = 0;
    for (std::string_view name : buffers) s.state[k++] = find_buffer(*slot, name);
    s.numel = slot->param.numel();
    out.push_back(s);
  }
  return out;
}

// Gradient clipping's slots: the tensor itself is what the kernels read and scale.
std::vector<cuda::TensorSlot> tensor_slots(const std::vector<Tensor>& tensors) {
  std::vector<cuda::TensorSlot> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    cuda::TensorSlot s;
    s.param = t.raw_data();
    s.numel = t.numel();
    out.push_back(s);
  }
  return out;
}

cuda::SgdScalars to_cuda(const SgdScalars& s) {
  return {.lr = s.lr,
          .momentum = s.momentum,
          .dampening = s.dampening,
          .weight_decay = s.weight_decay,
          .nesterov = s.nesterov,
          .maximize = s.maximize,
          .first_step = s.first_step};
}

cuda::AdamScalars to_cuda(const AdamScalars& s) {
  return {.lr = s.lr,
          .beta1 = s.beta1,
          .beta2 = s.beta2,
          .eps = s.eps,
          .weight_decay = s.weight_decay,
          .step_size = s.step_size,
          .bias_correction2_sqrt = s.bias_correction2_sqrt,
          .amsgrad = s.amsgrad,
          .maximize = s.maximize,
          .decoupled_weight_decay = s.decoupled_weight_decay};
}

}  // namespace

struct FusedTables::Tables {
  std::map<std::pair<size_t, size_t>, cuda::SlotTable> by_site;  // (group, run)
};

FusedTables::FusedTables() : tables_(std::make_unique<Tables>()) {}
FusedTables::~FusedTables() = default;

void FusedTables::sgd(size_t group, size_t run, const std::vector<UpdateSlot*>& slots,
                      const SgdScalars& scalars) {
  const Tensor& first = slots.front()->param;
  cuda::sgd_step(tables_->by_site[{group, run}], tensor_slots(slots, {"momentum_buffer"}),
                 first.dtype(), first.device().index, to_cuda(scalars));
}

void FusedTables::adam(size_t group, size_t run, const std::vector<UpdateSlot*>& slots,
                       const AdamScalars& scalars) {
  const Tensor& first = slots.front()->param;
  cuda::adam_step(tables_->by_site[{group, run}],
                  tensor_slots(slots, {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}),
                  first.dtype(), first.device().index, to_cuda(scalars));
}

double fused_sum_of_squares(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return 0.0;
  cuda::SlotTable table;
  return cuda::sum_of_squares(table, tensor_slots(tensors), tensors.front().dtype(),
                              tensors.front().device().index);
}

void fused_scale(const std::vector<Tensor>& tensors, double factor) {
  if (tensors.empty()) return;
  cuda::SlotTable table;
  cuda::scale(table, tensor_slots(tensors), tensors.front().dtype(),
              tensors.front().device().index, factor);
}

#else  // no CUDA backend: no CUDA tensor can reach these

namespace {

[[noreturn]] void no_cuda(const char* what) {
  throw DeviceError(fmt::format("[{}] this build of Loom has no CUDA backend", what));
}

}  // namespace

struct FusedTables::Tables {};

FusedTables::FusedTables() = default;
FusedTables::~FusedTables() = default;

void FusedTables::sgd(size_t, size_t, const std::vector<UpdateSlot*>&, const SgdScalars&) {
  no_cuda("SGD");
}

void FusedTables::adam(size_t, size_t, const std::vector<UpdateSlot*>&, const AdamScalars&) {
  no_cuda("Adam");
}

double fused_sum_of_squares(const std::vector<Tensor>&) { no_cuda("clip_grad_norm_"); }

void fused_scale(const std::vector<Tensor>&, double) { no_cuda("clip_grad_norm_"); }

#endif

}  // namespace loom::optim
