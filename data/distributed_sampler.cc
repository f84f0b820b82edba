// File: data/distributed_sampler.cc
// The rank's shard of an epoch's shuffle, as PyTorch's DistributedSampler.
#include "data/distributed_sampler.h"

#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/generator.h"
#include "data/sampler.h"

namespace loom::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  const int64_t r = options_.num_replicas;
  LOOM_CHECK(r >= 1 && options_.rank >= 0 && options_.rank < r, ValueError,
             "[DistributedSampler] rank {} is not in [0, num_replicas {})", options_.rank, r);
  LOOM_CHECK(dataset_size >= 0, ValueError,
             "[DistributedSampler] the data set size must be >= 0, got {}", dataset_size);
  LOOM_CHECK(!options_.drop_last || dataset_size >= r, ValueError,
             "[DistributedSampler] {} samples cannot feed {} ranks with drop_last (each would "
             "get none); use fewer ranks or drop_last = false",
             dataset_size, r);
  num_samples_ = options_.drop_last ? dataset_size / r : (dataset_size + r - 1) / r;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    // The DataLoader's shuffle of the same (seed, epoch) (data/sampler.h), so a
    // one-rank job visits the samples in the same order as a plain loader.
    Generator gen;
    gen.set_state(options_.seed, static_cast<uint64_t>(epoch_) * kEpochBlocks);
    order = random_permutation(dataset_size_, gen);
  } else {
    order.resize(dataset_size_);
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t total = num_samples_ * options_.num_replicas;
  // Padding repeats the order from its start (several times for a set smaller
  // than the number of ranks), as PyTorch does.
  for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) order.push_back(order[i]);
  order.resize(total);
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (int64_t i = options_.rank; i < total; i += options_.num_replicas) mine.push_back(order[i]);
  return mine;
}

Dataset gather(const Dataset& dataset, const std::vector<int64_t>& indices) {
  check_dataset(dataset, "gather");
  const int64_t n = dataset.size();
  const Shape& sizes = dataset.images.sizes();
  const int64_t sample_bytes = sizes[1] * sizes[2] * sizes[3];
  Shape out_sizes = {static_cast<int64_t>(indices.size()), sizes[1], sizes[2], sizes[3]};
  Dataset out{empty(out_sizes, {.dtype = DType::UInt8}),
              empty({out_sizes[0]}, {.dtype = DType::Int64})};
  const uint8_t* images = dataset.images.data_ptr<uint8_t>();
  const int64_t* labels = dataset.labels.data_ptr<int64_t>();
  uint8_t* out_images = out.images.data_ptr<uint8_t>();
  int64_t* out_labels = out.labels.data_ptr<int64_t>();
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t k = indices[i];
    LOOM_CHECK(k >= 0 && k < n, IndexError, "[gather] index {} at position {} is not in [0, {})",
               k, i, n);
    std::memcpy(out_images + i * sample_bytes, images + k * sample_bytes, sample_bytes);
    out_labels[i] = labels[k];
  }
  return out;
}

}  // namespace loom::data
