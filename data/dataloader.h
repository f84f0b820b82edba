// File: data/dataloader.h
// Batches of a Dataset as normalized float32 images and int64 labels, on the
// CPU or a GPU:
//
//   loom::data::DataLoader loader(train, {.batch_size = 128, .shuffle = true,
//                                         .num_workers = 2, .device = loom::Device::cuda(),
//                                         .mean = {0.2860}, .stddev = {0.3530}});
//   for (int epoch = 0; epoch < 5; ++epoch) {
//     loader.set_epoch(epoch);  // optional: begin() advances the epoch by itself
//     for (auto& [x, y] : loader) { ... }  // x (B, C, H, W) float32, y (B,) int64
//   }
//
// Epoch e's order and augmentation are a function of (seed, e) alone (see
// data/sampler.h), so every worker count gives the same batches and a resumed
// run that calls set_epoch(e) replays epoch e exactly.
//
// Host mode (the constructor): batches are built on the CPU, by the iterating
// thread (num_workers = 0) or by worker threads that run ahead by at most
// num_workers * prefetch_per_worker batches and are delivered in order. For a
// CUDA device, workers write into pinned (page-locked) host buffers and each
// batch is copied to the GPU asynchronously on the iterating thread's stream.
//
// GPU-resident mode (DataLoader::resident): the whole uint8 set is copied to the
// device once; each batch is gathered, cropped, flipped and normalized there by
// one kernel (core/cuda/gather.h), from the same plan, so its batches equal the
// host mode's bit for bit. Meant for sets that fit in GPU memory (MNIST: 47 MB,
// CIFAR-10: 150 MB). For Device::cpu(), resident() is the host mode (the set
// already lives in host memory).
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "data/transforms.h"

// N samples, B batch, C channels, H, W image size
namespace loom::data {

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = false;
  bool drop_last = false;  // skip the last batch when it has fewer than batch_size samples
  int num_workers = 0;     // threads that build batches; 0 builds them while iterating
  int prefetch_per_worker = 2;
  uint64_t seed = Generator::kDefaultSeed;  // drives the shuffle and the augmentation
  Device device = Device::cpu();            // where batches are delivered
  std::vector<double> mean = {};            // per channel (or one for all); empty: 0
  std::vector<double> stddev = {};          // per channel (or one for all); empty: 1
  Augment augment = {};                     // random crop padding and flip
};

struct Batch {
  Tensor x;  // (B, C, H, W) float32, contiguous, on options.device
  Tensor y;  // (B,) int64
};

// Produces one epoch's batches in order; what the loader's iterator pulls from.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual Batch next() = 0;
};

class DataLoader {
 public:
  DataLoader(Dataset dataset, DataLoaderOptions options);
  // A data set of your own (data/dataset.h): read once into a Dataset here.
  DataLoader(const MapDataset& dataset, DataLoaderOptions options);
  static DataLoader resident(Dataset dataset, DataLoaderOptions options);

  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;

    Iterator(std::shared_ptr<BatchSource> source, int64_t batches);
    Batch& operator*() { return batch_; }
    Batch* operator->() { return &batch_; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return index_ == batches_; }

   private:
    std::shared_ptr<BatchSource> source_;  // shared: workers stop when the last copy goes
    int64_t index_ = 0;
    int64_t batches_ = 0;
    Batch batch_;
  };

  // Starts epoch epoch() and advances epoch() for the next call.
  Iterator begin();
  std::default_sentinel_t end() const { return {}; }

  int64_t size() const;  // batches per epoch
  // The epoch the next begin() runs (0 for a new loader).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  bool is_resident() const { return resident_; }
  const Dataset& dataset() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  Dataset dataset_;
  DataLoaderOptions options_;
  Normalization normalization_;
  int64_t epoch_ = 0;
  bool resident_ = false;
  Dataset device_dataset_;  // resident mode on a GPU: the set on options_.device
};

}  // namespace loom::data
