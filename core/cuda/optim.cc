// File: core/cuda/optim.cc
// Slot-table uploads and checked launches of the multi-tensor kernels.
#include "core/cuda/optim.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <variant>

#include "core/cuda/allocator.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

namespace {

std::atomic<int64_t> launch_count{0};

int64_t chunks_of(int64_t numel) { return (numel + kChunkSize - 1) / kChunkSize; }

// The slots as the kernels see them: no empty tensors, first_chunk running.
std::vector<TensorSlot> numbered(const std::vector<TensorSlot>& slots, int64_t& num_chunks) {
  std::vector<TensorSlot> out;
  out.reserve(slots.size());
  num_chunks = 0;
  for (TensorSlot slot : slots) {
    if (slot.numel == 0) continue;
    slot.first_chunk = num_chunks;
    num_chunks += chunks_of(slot.numel);
    out.push_back(slot);
  }
  return out;
}

void count_launches(int64_t launches) { launch_count += launches; }

struct DeviceFree {
  void operator()(void* ptr) const { deallocate(ptr); }
};

}  // namespace

SlotTable::~SlotTable() {
  deallocate(device_slots_);
  deallocate(device_scalars_);
}

void SlotTable::ensure_scalars(int device) {
  if (device_scalars_ != nullptr && scalars_device_ == device) return;
  deallocate(device_scalars_);  // stream-ordered, as in upload()
  device_scalars_ = allocate(sizeof(UpdateScalars), device);
  scalars_device_ = device;
}

void SlotTable::stage(const UpdateScalars& scalars, int device) {
  DeviceGuard guard(device);
  ensure_scalars(device);
  std::visit(
      [&]<class Scalars>(const Scalars& s) {
        LOOM_CUDA_CHECK(launch_store_scalars(static_cast<Scalars*>(device_scalars_), s, current_stream()));
      },
      scalars);
  staged_ = scalars;
}

void SlotTable::upload(const std::vector<TensorSlot>& slots, int device) {
  DeviceGuard guard(device);
  int64_t num_chunks = 0;
  std::vector<TensorSlot> host = numbered(slots, num_chunks);
  // A graph being captured must write its own table, at an address of its own
  // capture pool: every replay then stores its slots before reading them, and
  // eager uploads after the capture never move memory the graph uses.
  const bool capturing = is_capturing();
  if (!capturing && device == device_ && host == host_ && device_slots_ != nullptr) return;
  if (capturing || device != device_ || host.size() > capacity_) {
    deallocate(device_slots_);  // stream-ordered: kernels already queued still read it
    device_slots_ = nullptr;
    capacity_ = 0;
    if (!host.empty()) {
      device_slots_ = static_cast<TensorSlot*>(allocate(host.size() * sizeof(TensorSlot), device));
      capacity_ = host.size();
    }
  }
  if (!host.empty()) {
    LOOM_CUDA_CHECK(launch_store_slots(device_slots_, host.data(), static_cast<int>(host.size()),
                                       current_stream()));
  }
  host_ = std::move(host);
  device_ = device;
  num_chunks_ = num_chunks;
  ++uploads_;
}

void launch_staged(SlotTable& table, const std::vector<TensorSlot>& slots, DType dtype, int device,
                   const float* skip_unless_finite) {
  LOOM_CHECK(table.staged().has_value(), ValueError,
             "[optimizer update] no scalars were staged in the slot table before its launch");
  DeviceGuard guard(device);
  table.upload(slots, device);
  if (table.num_chunks() == 0) return;
  std::visit(
      [&]<class Scalars>(const Scalars&) {
        LOOM_CUDA_CHECK(launch_update(table.device_slots(), table.size(), table.num_chunks(), dtype,
                                      static_cast<const Scalars*>(table.device_scalars()),
                                      skip_unless_finite, current_stream()));
      },
      *table.staged());
  count_launches(1);
}

void count_nonfinite(const float* loss, int64_t* counts) {
  LOOM_CUDA_CHECK(launch_count_nonfinite(loss, counts, current_stream()));
}

void update_step(SlotTable& table, const std::vector<TensorSlot>& slots, DType dtype, int device,
                 const UpdateScalars& scalars) {
  table.stage(scalars, device);
  launch_staged(table, slots, dtype, device);
}

double sum_of_squares(SlotTable& table, const std::vector<TensorSlot>& slots, DType dtype,
                      int device) {
  DeviceGuard guard(device);
  table.upload(slots, device);
  if (table.num_chunks() == 0) return 0.0;
  // partials[0 .. num_chunks) then the total
  const int64_t n = table.num_chunks();
  std::unique_ptr<double, DeviceFree> partials(
      static_cast<double*>(allocate((n + 1) * sizeof(double), device)));
  LOOM_CUDA_CHECK(launch_sum_of_squares(table.device_slots(), table.size(), n, dtype,
                                        partials.get(), partials.get() + n, current_stream()));
  count_launches(2);
  double total = 0.0;
  copy_to_host(&total, partials.get() + n, sizeof(double));
  return total;
}

void scale(SlotTable& table, const std::vector<TensorSlot>& slots, DType dtype, int device,
           double factor) {
  DeviceGuard guard(device);
  table.upload(slots, device);
  if (table.num_chunks() == 0) return;
  LOOM_CUDA_CHECK(launch_scale(table.device_slots(), table.size(), table.num_chunks(), dtype,
                               factor, current_stream()));
  count_launches(1);
}

int64_t multi_tensor_launches() { return launch_count.load(); }

}  // namespace loom::cuda
