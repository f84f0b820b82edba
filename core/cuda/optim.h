// File: core/cuda/optim.h
// The host side of the multi-tensor kernels (optim.cu): fused optimizer steps
// and gradient-clipping reductions over many tensors in one launch each.
//
// A step never launches per tensor: the tensors' pointers and sizes go into a
// SlotTable, a device-resident array that is uploaded only when its contents
// change, and one kernel walks all chunks of all tensors. Parameters and states
// keep their addresses, so only gradients that moved (zero_grad() drops them and
// the next backward allocates anew) cost an upload: a store kernel (56 bytes a
// tensor in its arguments) ordered before the update. The per-step scalars (lr,
// bias corrections) are staged in the table's device memory the same way, so the
// update kernel itself can be captured into a CUDA graph and replayed with the
// scalars staged before each replay (optim/train_step.h).
//
//   cuda::SlotTable table;  // kept across steps, one per launch site
//   cuda::update_step(table, slots, DType::Float32, device, AdamScalars{...});
//   // or, split: stage now, launch later (or inside a capture)
//   table.stage(AdamScalars{...}, device);
//   cuda::launch_staged(table, slots, DType::Float32, device);
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/cuda/optim_kernels.h"
#include "core/dtype.h"

namespace loom::cuda {

class SlotTable {
 public:
  SlotTable() = default;
  ~SlotTable();
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;

  // Makes the device copy hold `slots` (empty tensors dropped, first_chunk set),
  // on GPU `device`; copies only when that differs from what it holds. The copy
  // is queued on the current stream, before the kernels that read it.
  void upload(const std::vector<TensorSlot>& slots, int device);

  // Writes what the next update of this table reads, on the current stream;
  // the kind of the scalars is the update launch_staged() runs.
  void stage(const UpdateScalars& scalars, int device);
  // The scalars last staged; nullopt before the first stage().
  const std::optional<UpdateScalars>& staged() const { return staged_; }

  const TensorSlot* device_slots() const { return device_slots_; }
  const void* device_scalars() const { return device_scalars_; }
  int size() const { return static_cast<int>(host_.size()); }
  int64_t num_chunks() const { return num_chunks_; }
  // How many times upload() has copied to the device (for tests of the cache).
  int64_t uploads() const { return uploads_; }

 private:
  std::vector<TensorSlot> host_;  // what the device copy holds
  void ensure_scalars(int device);

  TensorSlot* device_slots_ = nullptr;
  void* device_scalars_ = nullptr;  // room for any kind of scalars
  std::optional<UpdateScalars> staged_;
  int scalars_device_ = -1;
  size_t capacity_ = 0;  // slots the device buffer can hold
  int device_ = -1;
  int64_t num_chunks_ = 0;
  int64_t uploads_ = 0;
};

// Uploads `slots` (all of `dtype`, on GPU `device`) into `table` and makes one
// launch over all of them on the current stream: the update of the scalars
// last staged in the table, reading them from there. A non-null
// `skip_unless_finite` (device float: the step's loss) makes the launch change
// nothing when it is NaN or +-inf.
void launch_staged(SlotTable& table, const std::vector<TensorSlot>& slots, DType dtype, int device,
                   const float* skip_unless_finite = nullptr);
// counts (3 device int64s: steps, skipped steps, first skipped step) updated
// for one step whose loss is *loss; see launch_count_nonfinite. Capturable.
void count_nonfinite(const float* loss, int64_t* counts);
// Stage, then launch.
void update_step(SlotTable& table, const std::vector<TensorSlot>& slots, DType dtype, int device,
                 const UpdateScalars& scalars);
// Sum over the slots of param[i]^2, accumulated in double in a fixed order (the
// same bits every call). Two launches; waits for the result.
double sum_of_squares(SlotTable& table, const std::vector<TensorSlot>& slots, DType dtype,
                      int device);
// param *= factor for every slot.
void scale(SlotTable& table, const std::vector<TensorSlot>& slots, DType dtype, int device,
           double factor);

// Multi-tensor kernels launched by this process so far: a test reads it before
// and after a step to check the step's launch count.
int64_t multi_tensor_launches();

}  // namespace loom::cuda
