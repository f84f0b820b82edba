// File: optim/update.cc
// The fused GPU path: a staged run keeps its parameters and states; at launch
// they become a cuda::TensorSlot table (pointers and sizes), uploaded only on
// change, and one kernel launch per run reads the scalars staged for it.
#include "optim/update.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <utility>

#include "core/error.h"

#ifdef LOOM_WITH_CUDA
#include "core/cuda/optim.h"
#endif

namespace loom::optim {

void check_squares_nonnegative(const Tensor& value, const std::string& where, std::string_view what) {
  const std::vector<double> values = value.to_vector<double>();
  const auto negative = std::find_if(values.begin(), values.end(), [](double v) { return v < 0; });
  LOOM_CHECK(negative == values.end(), ValueError,
             "{} holds {} at element {}; {} of squared gradients is >= 0 (the state is corrupt)", where, *negative,
             negative - values.begin(), what);
}

#ifdef LOOM_WITH_CUDA

namespace {

void* find_buffer(const UpdateSlot& slot, std::string_view name) {
  for (const auto& [key, tensor] : slot.state->buffers) {
    if (key == name) return tensor.raw_data();
  }
  return nullptr;
}

// The parameter's gradient now, laid out as the parameter (a copy otherwise:
// the allocator keeps it alive for the queued kernel).
Tensor current_grad(const UpdateSlot& slot, const std::string& optimizer) {
  Tensor grad = slot.param.grad();
  LOOM_CHECK(grad.defined() && grad.sizes() == slot.param.sizes(), ValueError,
             "[{}] a parameter of shape {} lost its gradient between prepare_step() and "
             "apply_step(); keep gradients until the step is applied",
             optimizer, shape_str(slot.param.sizes()));
  return grad_in_param_layout(slot.param, grad);
}

std::vector<cuda::TensorSlot> tensor_slots(const std::vector<UpdateSlot>& slots,
                                           const std::vector<std::string_view>& buffers,
                                           std::vector<Tensor>& grads, const std::string& optimizer) {
  std::vector<cuda::TensorSlot> out;
  out.reserve(slots.size());
  for (const UpdateSlot& slot : slots) {
    grads.push_back(current_grad(slot, optimizer));
    cuda::TensorSlot s;
    s.param = slot.param.raw_data();
    s.grad = grads.back().raw_data();
    int k = 0;
    for (std::string_view name : buffers) s.state[k++] = find_buffer(slot, name);
    s.numel = slot.param.numel();
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

}  // namespace

// A run waiting for launch_staged(): the slots keep the parameter and its state
// (the gradient is read at launch).
struct StagedRun {
  cuda::SlotTable* table = nullptr;
  std::vector<UpdateSlot> slots;
  std::vector<std::string_view> buffers;
};

struct FusedTables::Tables {
  std::map<std::pair<size_t, size_t>, cuda::SlotTable> by_site;  // (group, run)
  std::vector<StagedRun> staged;
};

FusedTables::FusedTables() : tables_(std::make_unique<Tables>()) {}
FusedTables::~FusedTables() = default;

namespace {

std::vector<UpdateSlot> copy_slots(const std::vector<UpdateSlot*>& slots) {
  std::vector<UpdateSlot> out;
  out.reserve(slots.size());
  for (const UpdateSlot* slot : slots) out.push_back({slot->param, Tensor(), slot->state});
  return out;
}

}  // namespace

void FusedTables::stage(size_t group, size_t run, const std::vector<UpdateSlot*>& slots,
                        const UpdateScalars& scalars, std::vector<std::string_view> buffers) {
  cuda::SlotTable& table = tables_->by_site[{group, run}];
  table.stage(scalars, slots.front()->param.device().index);
  tables_->staged.push_back({&table, copy_slots(slots), std::move(buffers)});
}

void FusedTables::launch_staged(const std::string& optimizer, const Tensor& skip_unless_finite) {
  const float* guard = skip_unless_finite.defined() ? skip_unless_finite.data_ptr<float>() : nullptr;
  for (StagedRun& run : tables_->staged) {
    const Tensor& first = run.slots.front().param;
    std::vector<Tensor> grads;  // alive until the launch is queued
    std::vector<cuda::TensorSlot> slots = tensor_slots(run.slots, run.buffers, grads, optimizer);
    cuda::launch_staged(*run.table, slots, first.dtype(), first.device().index, guard);
  }
}

void FusedTables::clear_staged() { tables_->staged.clear(); }

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

void FusedTables::stage(size_t, size_t, const std::vector<UpdateSlot*>&, const UpdateScalars&,
                        std::vector<std::string_view>) {
  no_cuda("optimizer step");
}

void FusedTables::launch_staged(const std::string&, const Tensor&) {}

void FusedTables::clear_staged() {}

double fused_sum_of_squares(const std::vector<Tensor>&) { no_cuda("clip_grad_norm_"); }

void fused_scale(const std::vector<Tensor>&, double) { no_cuda("clip_grad_norm_"); }

#endif

}  // namespace loom::optim
