// File: data/distributed_sampler.h
// Which samples each rank of a data-parallel job visits in an epoch, as
// PyTorch's DistributedSampler: every rank draws the same shuffle (seeded by
// seed and epoch, the same on every rank), then rank r takes positions
// r, r + R, r + 2R, ... of it (R ranks), so the shards are disjoint and
// together cover the set. When R does not divide N the remainder is either
// dropped (drop_last) or padded by repeating the first samples of the order,
// so every rank gets the same number of samples and runs the same steps.
//
//   data::DistributedSampler sampler(train.size(), {.num_replicas = 4, .rank = r, .seed = 0});
//   sampler.set_epoch(epoch);
//   data::Dataset mine = data::gather(train, sampler.indices());  // this rank's share
//
// Resuming with another number of ranks works: the shuffle depends only on
// (seed, epoch), never on R.
#pragma once

#include <cstdint>
#include <vector>

#include "data/dataset.h"

namespace loom::data {

struct DistributedSamplerOptions {
  int64_t num_replicas = 1;
  int64_t rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // true: drop the tail R does not divide; false: pad it
};

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options);

  // Selects the shuffle of `epoch` (call it before each epoch, as in PyTorch).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  // Samples per rank: ceil(N / R), or floor(N / R) with drop_last.
  int64_t num_samples() const { return num_samples_; }
  // This rank's sample indices for the current epoch, in visiting order.
  std::vector<int64_t> indices() const;

 private:
  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

// The samples at `indices` (repeats allowed), copied into a new set.
Dataset gather(const Dataset& dataset, const std::vector<int64_t>& indices);

}  // namespace loom::data
