// File: training/datasets.h
// The trainer's data: both splits read on threads of their own while the model
// is built (MNIST-format IDX, CIFAR-10 binary batches or generated images of
// either shape), and the loaders (resident on the GPU, two workers on the CPU).
// Private to the trainer (training/loop.cc).
#pragma once

#include <future>

#include "data/dataloader.h"
#include "data/dataset.h"
#include "training/config.h"
#include "training/metrics.h"

namespace loom::training {

struct Splits {
  data::Dataset train, test;
  double train_read = 0, test_read = 0;  // when each was in memory, on the trainer's clock
};

// Both splits (the first --limit / --test-limit images of each); an error
// reading either is thrown by the future's get().
std::future<Splits> load_splits(const TrainConfig& c, const StartupPhases& startup);

// Training batches are shuffled and augmented (--crop-padding, --flip); test batches are 1000 each, in order.
data::DataLoader make_loader(const TrainConfig& c, const data::Dataset& set, bool training);

}  // namespace loom::training
