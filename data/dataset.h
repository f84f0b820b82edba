// File: data/dataset.h
// An in-memory image classification set: every reader (IDX, CIFAR-10, image
// folders) returns one, and the DataLoader batches it.
//
//   loom::data::Dataset train = loom::data::load_mnist("/data/fashion-mnist", Split::Train);
//   train.size();                  // 60000
//   auto small = train.slice(0, 2000);  // a view of the first 2000 samples
//
// A data set of your own implements MapDataset (PyTorch's map-style
// torch.utils.data.Dataset): size() and get(i), one Example each. The
// DataLoader takes it directly; it reads every example once, at construction,
// into a Dataset, then shuffles, augments, normalises and batches it as any
// other (so epochs are reproducible and workers never call your code):
//
//   class Stripes : public loom::data::MapDataset {
//    public:
//     int64_t size() const override { return 1000; }
//     loom::data::Example get(int64_t i) const override {
//       loom::Tensor image = loom::zeros({1, 8, 8}, {.dtype = loom::DType::UInt8});
//       image.select(1, i % 8).fill_(255);              // a bright row i % 8
//       return {image, i % 8};                          // label: which row
//     }
//   };
//   loom::data::DataLoader loader(Stripes(), {.batch_size = 32, .shuffle = true});
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

// One sample of a MapDataset: an image and its class.
struct Example {
  Tensor image;        // (C, H, W) uint8 on the CPU, any strides; the same C, H, W for every i
  int64_t label = 0;   // class index, >= 0
};

// The interface of a user-defined data set (see the top of this file).
class MapDataset {
 public:
  virtual ~MapDataset() = default;
  virtual int64_t size() const = 0;               // number of examples, >= 1
  virtual Example get(int64_t index) const = 0;   // 0 <= index < size()
};

// Every example of `source`, in order, copied into an in-memory Dataset.
// Throws ValueError / ShapeError / TypeError naming the first example that
// breaks the rules above.
Dataset to_dataset(const MapDataset& source);

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
