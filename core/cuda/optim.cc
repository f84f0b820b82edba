// File: core/cuda/optim.cc
// Slot-table uploads and checked launches of the multi-tensor kernels.
#include "core/cuda/optim.h"

#include <atomic>
#include <memory>

#include "core/cuda/allocator.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"

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

SlotTable::~SlotTable() { deallocate(device_slots_); }

void SlotTable::upload(const std::vector<TensorSlot>& slots, int device) {
  int64_t num_chunks = 0;
  std::vector<TensorSlot> host = numbered(slots, num_chunks);
  if (device == device_ && host == host_ && device_slots_ != nullptr) return;
  if (device != device_ || host.size() > capacity_) {
    deallocate(device_slots_);  // stream-ordered: kernels already queued still read it
    device_slots_ = nullptr;
    capacity_ = 0;
    if (!host.empty()) {
      device_slots_ = static_cast<TensorSlot*>(allocate(host.size() * sizeof(TensorSlot), device));
      capacity_ = host.size();
    }
  }
  if (!host.empty()) copy_to_device(device_slots_, host.data(), host.size() * sizeof(TensorSlot));
  host_ = std::move(host);
  device_ = device;
  num_chunks_ = num_chunks;
  ++uploads_;
}

void sgd_step(SlotTable& table, const std::vector<TensorSlot>& slots, DType dtype, int device,
              const SgdScalars& scalars) {
  table.upload(slots, device);
  if (table.num_chunks() == 0) return;
  LOOM_CUDA_CHECK(launch_sgd(table.device_slots(), table.size(), table.num_chunks(), dtype,
                             scalars, current_stream()));
  count_launches(1);
}

void adam_step(SlotTable& table, const std::vector<TensorSlot>& slots, DType dtype, int device,
               const AdamScalars& scalars) {
  table.upload(slots, device);
  if (table.num_chunks() == 0) return;
  LOOM_CUDA_CHECK(launch_adam(table.device_slots(), table.size(), table.num_chunks(), dtype,
                              scalars, current_stream()));
  count_launches(1);
}

double sum_of_squares(SlotTable& table, const std::vector<TensorSlot>& slots, DType dtype,
                      int device) {
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
  table.upload(slots, device);
  if (table.num_chunks() == 0) return;
  LOOM_CUDA_CHECK(launch_scale(table.device_slots(), table.size(), table.num_chunks(), dtype,
                               factor, current_stream()));
  count_launches(1);
}

int64_t multi_tensor_launches() { return launch_count.load(); }

}  // namespace loom::cuda
