// File: data/dataset.cc
// Dataset slicing, validation and per-class counts.
#include "data/dataset.h"

#include <algorithm>

#include "core/error.h"

// N samples, C channels, H, W image size
namespace loom::data {

std::string split_name(Split split) { return split == Split::Train ? "train" : "test"; }

Dataset Dataset::slice(int64_t begin, int64_t end) const {
  LOOM_CHECK(0 <= begin && begin <= end && end <= size(), IndexError,
             "[Dataset::slice] range [{}, {}) is outside a set of {} samples", begin, end, size());
  return {images.slice(0, begin, end), labels.slice(0, begin, end)};
}

void check_dataset(const Dataset& dataset, std::string_view op) {
  const Tensor& images = dataset.images;
  const Tensor& labels = dataset.labels;
  LOOM_CHECK(images.defined() && labels.defined(), ValueError,
             "[{}] the dataset has no images or no labels", op);
  LOOM_CHECK(images.dim() == 4, ShapeError, "[{}] images must be (N, C, H, W), got shape {}", op,
             shape_str(images.sizes()));
  LOOM_CHECK(labels.dim() == 1 && labels.size(0) == images.size(0), ShapeError,
             "[{}] labels must be (N,) with N = {} images, got shape {}", op, images.size(0),
             shape_str(labels.sizes()));
  LOOM_CHECK(images.size(0) > 0, ValueError, "[{}] the dataset is empty", op);
  LOOM_CHECK(images.dtype() == DType::UInt8 && labels.dtype() == DType::Int64, TypeError,
             "[{}] images must be uint8 and labels int64, got {} and {}", op,
             dtype_name(images.dtype()), dtype_name(labels.dtype()));
  LOOM_CHECK(images.device().is_cpu() && labels.device().is_cpu(), DeviceError,
             "[{}] the dataset must be on the CPU (got images on {}); the DataLoader moves "
             "batches to options.device",
             op, images.device().str());
  LOOM_CHECK(images.is_contiguous() && labels.is_contiguous(), ValueError,
             "[{}] images and labels must be contiguous (call .contiguous() first)", op);
}

Dataset concat(const std::vector<Dataset>& parts) {
  LOOM_CHECK(!parts.empty(), ValueError, "[concat] needs at least one dataset");
  Shape sizes = parts[0].images.sizes();
  sizes[0] = 0;
  for (const Dataset& part : parts) {
    check_dataset(part, "concat");
    LOOM_CHECK(std::equal(sizes.begin() + 1, sizes.end(), part.images.sizes().begin() + 1),
               ShapeError, "[concat] images {} do not match the first part's (C, H, W) of {}",
               shape_str(part.images.sizes()), shape_str(parts[0].images.sizes()));
    sizes[0] += part.size();
  }
  Dataset out{empty(sizes, {.dtype = DType::UInt8}), empty({sizes[0]}, {.dtype = DType::Int64})};
  int64_t begin = 0;
  for (const Dataset& part : parts) {
    out.images.slice(0, begin, begin + part.size()).copy_(part.images);
    out.labels.slice(0, begin, begin + part.size()).copy_(part.labels);
    begin += part.size();
  }
  return out;
}

namespace {

void check_example(const Example& example, int64_t index, const Shape& first) {
  const Tensor& image = example.image;
  LOOM_CHECK(image.defined(), ValueError, "[to_dataset] example {} has no image", index);
  LOOM_CHECK(image.dim() == 3, ShapeError,
             "[to_dataset] example {} has an image of shape {}; images are (C, H, W) (a gray "
             "image is (1, H, W): unsqueeze(0))",
             index, shape_str(image.sizes()));
  LOOM_CHECK(first.empty() || image.sizes() == first, ShapeError,
             "[to_dataset] example {} has an image of shape {} but example 0 has {}; every image "
             "must have the same shape",
             index, shape_str(image.sizes()), shape_str(first));
  LOOM_CHECK(image.dtype() == DType::UInt8, TypeError,
             "[to_dataset] example {} has a {} image; images are uint8 pixels (0..255), which the "
             "DataLoader normalises with options.mean and options.stddev",
             index, dtype_name(image.dtype()));
  LOOM_CHECK(example.label >= 0, ValueError,
             "[to_dataset] example {} has label {}; labels are class indices >= 0", index,
             example.label);
}

}  // namespace

Dataset to_dataset(const MapDataset& source) {
  const int64_t n = source.size();
  LOOM_CHECK(n >= 1, ValueError, "[to_dataset] the data set's size() is {}; it needs examples", n);
  Example first = source.get(0);
  check_example(first, 0, {});
  Shape sizes = first.image.sizes();
  sizes.insert(sizes.begin(), n);
  Dataset out{empty(sizes, {.dtype = DType::UInt8}), empty({n}, {.dtype = DType::Int64})};
  int64_t* labels = out.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const Example example = i == 0 ? first : source.get(i);
    check_example(example, i, first.image.sizes());
    out.images.select(0, i).copy_(example.image);
    labels[i] = example.label;
  }
  return out;
}

std::vector<int64_t> class_counts(const Dataset& dataset, int64_t num_classes) {
  std::vector<int64_t> counts(static_cast<size_t>(num_classes), 0);
  const Tensor labels = dataset.labels.contiguous();
  const int64_t* values = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i) {
    if (values[i] >= 0 && values[i] < num_classes) ++counts[static_cast<size_t>(values[i])];
  }
  return counts;
}

}  // namespace loom::data
