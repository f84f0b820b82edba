// File: data/dataset.h
// An in-memory image classification set: every reader (IDX, CIFAR-10, image
// folders) returns one, and the DataLoader batches it.
//
//   loom::data::Dataset train = loom::data::load_mnist("/data/fashion-mnist", Split::Train);
//   train.size();                  // 60000
//   auto small = train.slice(0, 2000);  // a view of the first 2000 samples
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

// N samples, C channels, H, W image size
namespace loom::data {

enum class Split : uint8_t { Train, Test };
std::string split_name(Split split);  // "train", "test"

struct Dataset {
  Tensor images;  // (N, C, H, W) uint8, contiguous, on the CPU
  Tensor labels;  // (N,) int64, class indices in [0, num_classes)

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
  int64_t channels() const { return images.size(1); }
  int64_t height() const { return images.size(2); }
  int64_t width() const { return images.size(3); }
  // Samples [begin, end) as views that share memory with this set.
  Dataset slice(int64_t begin, int64_t end) const;
};

// Throws ValueError / ShapeError / TypeError unless `dataset` is what the
// DataLoader and transforms expect: images (N, C, H, W) uint8 contiguous on the
// CPU, labels (N,) int64 on the CPU, N >= 1. `op` names the caller.
void check_dataset(const Dataset& dataset, std::string_view op);

// The samples of `parts` one after another (all with the same C, H, W), copied
// into new tensors.
Dataset concat(const std::vector<Dataset>& parts);

// How many samples each class has: counts[k] = #{i : labels[i] == k}, for
// k < num_classes (labels outside [0, num_classes) are not counted).
std::vector<int64_t> class_counts(const Dataset& dataset, int64_t num_classes);

}  // namespace loom::data
