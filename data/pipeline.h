// File: data/pipeline.h
// The DataLoader's internals: what one epoch's batches are built from, and the
// two sources that build them (host threads, or a gather on the GPU).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/transforms.h"

// N samples, B batch, C channels, H, W image size
namespace loom::data {

// Everything one epoch's batches are built from; read-only once made, so
// worker threads share it without locks.
struct EpochRecipe {
  Dataset dataset;  // on the CPU
  EpochPlan plan;
  Normalization normalization;
  int64_t padding = 0;
  int64_t batch_size = 1;
  int64_t batches = 0;  // per epoch, after drop_last
  Device device;

  int64_t first(int64_t k) const { return k * batch_size; }
  int64_t rows(int64_t k) const { return std::min(batch_size, dataset.size() - first(k)); }
  Shape x_sizes(int64_t k) const {
    return {rows(k), dataset.channels(), dataset.height(), dataset.width()};
  }
};

// Batch k into host memory: x (rows(k), C, H, W) floats, y (rows(k),) labels.
void build_batch(const EpochRecipe& recipe, int64_t k, float* x, int64_t* y);

// Builds batches on the calling thread (num_workers = 0) or on worker threads
// that run ahead by at most num_workers * prefetch_per_worker batches; stages
// through pinned memory when recipe.device is a GPU.
std::shared_ptr<BatchSource> make_host_pipeline(std::shared_ptr<const EpochRecipe> recipe,
                                                int num_workers, int prefetch_per_worker);

// The most channels the GPU gather takes (gray, RGB, RGBA).
constexpr int64_t kMaxResidentChannels = 4;

// Gathers each batch on the GPU from `device_dataset` (the recipe's set, already
// on recipe.device). Throws DeviceError in a build without CUDA.
std::shared_ptr<BatchSource> make_resident_source(std::shared_ptr<const EpochRecipe> recipe,
                                                  const Dataset& device_dataset);

}  // namespace loom::data
