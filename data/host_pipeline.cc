// File: data/host_pipeline.cc
// Batches built on the CPU, by the iterating thread or by worker threads that
// fill a bounded ring of slots; batch k always lands in slot k % capacity and
// is handed out in order. For a GPU, slots hold pinned buffers that are copied
// to the device asynchronously.
#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/pipeline.h"
#include "data/staging.h"

// N samples, B batch, C channels, H, W image size
namespace loom::data {

void build_batch(const EpochRecipe& recipe, int64_t k, float* x, int64_t* y) {
  const int64_t first = recipe.first(k), rows = recipe.rows(k);
  const std::span<const int64_t> indices(recipe.plan.order.data() + first, rows);
  const std::span<const Placement> placements(recipe.plan.placements.data() + first, rows);
  gather_images(recipe.dataset.images, indices, placements, recipe.padding, recipe.normalization,
                x);
  const int64_t* labels = recipe.dataset.labels.data_ptr<int64_t>();
  for (int64_t b = 0; b < rows; ++b) y[b] = labels[indices[b]];
}

namespace {

struct Slot {
  int64_t batch = -1;  // the batch the slot holds, once built
  std::exception_ptr error;
  Batch built;                          // CPU device: the batch itself
  std::unique_ptr<PinnedBatch> pinned;  // CUDA device: its staging buffers
};

class HostPipeline : public BatchSource {
 public:
  HostPipeline(std::shared_ptr<const EpochRecipe> recipe, int num_workers, int capacity)
      : recipe_(std::move(recipe)), slots_(capacity) {
    if (recipe_->device.is_cuda()) {
      // Batch 0 is a full batch (or the whole set): the largest there is.
      for (Slot& slot : slots_) {
        slot.pinned =
            std::make_unique<PinnedBatch>(numel_of(recipe_->x_sizes(0)), recipe_->rows(0),
                                          recipe_->device);
      }
    }
    for (int w = 0; w < num_workers; ++w) workers_.emplace_back([this] { work(); });
  }

  ~HostPipeline() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    slot_freed_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  Batch next() override {
    const int64_t k = next_out_;
    Slot& slot = slots_[k % slots_.size()];
    if (workers_.empty()) {
      fill(slot, k);
    } else {
      std::unique_lock<std::mutex> lock(mutex_);
      batch_built_.wait(lock, [&] { return slot.batch == k; });
    }
    if (slot.error) std::rethrow_exception(slot.error);  // the pipeline stays failed
    Batch batch = deliver(slot, k);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      slot.batch = -1;
      ++next_out_;
    }
    slot_freed_.notify_all();
    return batch;
  }

 private:
  // Each worker claims the next batch whose slot has been handed out, builds it
  // without the lock, then publishes it.
  void work() {
    while (true) {
      int64_t k = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        slot_freed_.wait(lock, [&] { return stopping_ || claimable(); });
        if (stopping_ || next_claim_ >= recipe_->batches) return;
        k = next_claim_++;
      }
      Slot& slot = slots_[k % slots_.size()];
      fill(slot, k);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        slot.batch = k;
      }
      batch_built_.notify_all();
    }
  }

  // Slot k % capacity is free once batch k - capacity has been handed out.
  bool claimable() const {
    return next_claim_ >= recipe_->batches ||
           next_claim_ < next_out_ + static_cast<int64_t>(slots_.size());
  }

  void fill(Slot& slot, int64_t k) noexcept {
    try {
      if (slot.pinned) {
        slot.pinned->wait_for_copies();
        build_batch(*recipe_, k, slot.pinned->x(), slot.pinned->y());
        return;
      }
      slot.built = {empty(recipe_->x_sizes(k)), empty({recipe_->rows(k)}, {.dtype = DType::Int64})};
      build_batch(*recipe_, k, slot.built.x.data_ptr<float>(), slot.built.y.data_ptr<int64_t>());
    } catch (...) {
      slot.error = std::current_exception();
    }
  }

  Batch deliver(Slot& slot, int64_t k) {
    if (slot.pinned) return slot.pinned->copy_to_device(recipe_->x_sizes(k));
    return std::move(slot.built);
  }

  std::shared_ptr<const EpochRecipe> recipe_;
  std::vector<Slot> slots_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable batch_built_;  // a worker published a slot
  std::condition_variable slot_freed_;   // the consumer handed a slot out (or stopping)
  int64_t next_claim_ = 0;               // the next batch a worker will build
  int64_t next_out_ = 0;                 // the next batch next() returns
  bool stopping_ = false;
};

}  // namespace

std::shared_ptr<BatchSource> make_host_pipeline(std::shared_ptr<const EpochRecipe> recipe,
                                                int num_workers, int prefetch_per_worker) {
  // Pinned slots are refilled only after their copy finishes: two let the next
  // batch be built while the last one is still in flight.
  const int capacity = std::max(2, std::max(1, num_workers) * prefetch_per_worker);
  return std::make_shared<HostPipeline>(std::move(recipe), num_workers, capacity);
}

}  // namespace loom::data
