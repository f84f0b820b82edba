// File: training/epoch_tally.cc
// The epoch's mean loss and accuracy, tallied on the device and read back once.
#include "training/epoch_tally.h"

#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/ops.h"

namespace loom::training {

EpochTally::EpochTally(int64_t batches, int64_t batch_size, Device device)
    : losses_(zeros({batches}, {.dtype = DType::Float32, .device = device})),
      predicted_(zeros({batches * batch_size}, {.dtype = DType::Int64, .device = device})),
      labels_(zeros({batches * batch_size}, {.dtype = DType::Int64, .device = device})) {}

void EpochTally::add(const Tensor& loss, const Tensor& logits, const Tensor& labels) {
  NoGradGuard no_grad;
  const int64_t n = labels.size(0);
  const int64_t batch = static_cast<int64_t>(batch_sizes_.size());
  LOOM_CHECK(batch < losses_.size(0) && images_ + n <= labels_.size(0), ValueError,
             "[EpochTally] batch {} of {} images does not fit: room for {} batches and {} images "
             "({} used)",
             batch + 1, n, losses_.size(0), labels_.size(0), images_);
  losses_.narrow(0, batch, 1).copy_(loss.detach());
  predicted_.narrow(0, images_, n).copy_(argmax(logits.detach(), 1));
  labels_.narrow(0, images_, n).copy_(labels);
  batch_sizes_.push_back(n);
  images_ += n;
}

void EpochTally::read() {
  const int64_t batches = static_cast<int64_t>(batch_sizes_.size());
  if (batches == read_batches_) return;
  std::vector<double> losses = losses_.narrow(0, read_batches_, batches - read_batches_).to_vector<double>();
  for (size_t i = 0; i < losses.size(); ++i) {
    if (!std::isfinite(losses[i])) continue;
    const int64_t n = batch_sizes_[read_batches_ + i];
    loss_sum_ += losses[i] * static_cast<double>(n);
    loss_images_ += n;
  }
  const int64_t fresh = images_ - read_images_;
  std::vector<int64_t> predicted = predicted_.narrow(0, read_images_, fresh).to_vector<int64_t>();
  std::vector<int64_t> truth = labels_.narrow(0, read_images_, fresh).to_vector<int64_t>();
  for (size_t i = 0; i < truth.size(); ++i) correct_ += predicted[i] == truth[i];
  read_batches_ = batches;
  read_images_ = images_;
}

double EpochTally::mean_loss() const {
  return loss_images_ > 0 ? loss_sum_ / static_cast<double>(loss_images_) : std::nan("");
}

double EpochTally::accuracy() const {
  return read_images_ > 0 ? static_cast<double>(correct_) / static_cast<double>(read_images_) : 0;
}

}  // namespace loom::training
