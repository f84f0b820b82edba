// File: training/epoch_tally.h
// The epoch's mean loss and accuracy over every batch, as a PyTorch loop sums
// loss.item() * B and the correct predictions, without a host sync per batch:
// each batch's loss and predicted and true labels are copied into buffers on
// the training device, and come to the host in slices when read() is called
// (at progress points and at the end of the epoch).
//
//   EpochTally tally(loader.size(), batch_size, device);
//   for (auto& [x, y] : loader) { ...; tally.add(loss, logits, y); }
//   tally.read();
//   double loss = tally.mean_loss(), accuracy = tally.accuracy();
//
// B batch, K classes.
#pragma once

#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace loom::training {

class EpochTally {
 public:
  // Room for `batches` batches of up to `batch_size` images each.
  EpochTally(int64_t batches, int64_t batch_size, Device device);

  // One batch: its mean loss (one element), logits (B, K) and labels (B).
  // Copies on the device; ValueError past the room given at construction.
  void add(const Tensor& loss, const Tensor& logits, const Tensor& labels);

  // Brings the batches added since the last read to the host.
  void read();

  // Over the batches read: the loss weighted by batch size, leaving out
  // non-finite losses (skipped steps say nothing about the weights); NaN when
  // every one was non-finite or none was read.
  double mean_loss() const;
  double accuracy() const;  // correct / images read; 0 before any

 private:
  Tensor losses_, predicted_, labels_;  // (batches), (batches * batch_size) x 2
  std::vector<int64_t> batch_sizes_;
  int64_t images_ = 0, read_batches_ = 0, read_images_ = 0;
  double loss_sum_ = 0;
  int64_t loss_images_ = 0, correct_ = 0;
};

}  // namespace loom::training
