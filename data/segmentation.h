// File: data/segmentation.h
// Semantic segmentation data: images with a class index per pixel, cropped and
// flipped together, batched for a model that predicts (N, K, H, W) logits.
//
//   auto folder = loom::data::load_segmentation_folder("/data/cells/images",
//                                                      "/data/cells/masks");
//   loom::data::SegmentationLoader loader(folder.dataset, {
//       .batch_size = 8, .shuffle = true, .mean = {0.5}, .stddev = {0.25},
//       .augment = {.crop = loom::Size2{128, 128}, .flip = true}});
//   for (auto& [x, y] : loader) {  // x (B, C, 128, 128) float32, y (B, 128, 128) int64
//     loss = cross_entropy(net(x), y, {.ignore_index = 255});
//   }
//
// The in-memory SegmentationDataset is the common form: build one from your
// own tensors, or read an image folder with a parallel mask folder. Joint
// transforms move an image's pixels and its mask's by one placement, so they
// stay aligned; a mask is never interpolated (crop and flip select pixels,
// resize_segmentation picks the nearest one), so it stays integer.
//
// As the classification DataLoader's, epoch e's order and crops are a function
// of (seed, e) alone (data/sampler.h), so a resumed run replays them exactly.
//
// N samples, B batch, C channels, H, W image size, h, w crop size, P padding
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/generator.h"
#include "core/size2.h"
#include "core/tensor.h"

namespace loom::data {

struct SegmentationDataset {
  Tensor images;  // (N, C, H, W) uint8, contiguous, on the CPU
  Tensor masks;   // (N, H, W) int64 class indices (or an ignore value), contiguous, on the CPU

  int64_t size() const { return masks.defined() ? masks.size(0) : 0; }
  // Samples [begin, end) as views that share memory with this set.
  SegmentationDataset slice(int64_t begin, int64_t end) const;
};

// Throws ShapeError / TypeError / ValueError unless `dataset` has the form
// above (any integer mask dtype is accepted by make_segmentation_dataset,
// which converts it). `op` names the caller.
void check_segmentation_dataset(const SegmentationDataset& dataset, std::string_view op);

// An in-memory set from tensors of your own: images (N, C, H, W) uint8 and
// masks (N, H, W) of any integer dtype; copied into the canonical form.
SegmentationDataset make_segmentation_dataset(const Tensor& images, const Tensor& masks);

struct SegmentationFolderOptions {
  int channels = 3;  // images are converted to 1 (gray) or 3 (RGB) channels
};

struct SegmentationFolder {
  SegmentationDataset dataset;
  std::vector<std::string> names;  // each sample's file name without extension
};

// Images in `image_dir` (PNG, JPEG or BMP, sorted by name) and, for each, the
// mask in `mask_dir` with the same name stem (x.jpg -> x.png): a single-channel
// image whose values are class indices (a colour-coded mask is an IoError:
// convert it to indices first). Every image and mask has one size. Throws
// IoError naming the file for a missing or unreadable mask, a size mismatch,
// or an image folder without images.
SegmentationFolder load_segmentation_folder(const std::string& image_dir,
                                            const std::string& mask_dir,
                                            SegmentationFolderOptions options = {});

// ---- joint transforms ------------------------------------------------------------

struct JointAugment {
  std::optional<Size2> crop = std::nullopt;  // (h, w) window; none: the whole image
  int64_t padding = 0;     // P pixels added per side before cropping
  bool flip = false;       // mirror left-right with probability 1/2
  int64_t mask_fill = 255; // the mask's value in the padding (cross_entropy's ignore_index)
};

// Where one sample's window sits in its padded image: output pixel (y, x)
// reads padded pixel (top + y, left + x'), x' = w - 1 - x when flip, else x.
struct JointPlacement {
  int64_t top = 0, left = 0;
  bool flip = false;
};

// Sample i's placement from Philox block first_block + i of `seed`: top and
// left uniform over the window positions in the padded (H + 2P, W + 2P) image.
std::vector<JointPlacement> draw_joint_placements(int64_t count, const JointAugment& augment,
                                                  int64_t height, int64_t width, uint64_t seed,
                                                  uint64_t first_block);

// images (B, C, H, W) uint8 and masks (B, H, W) int64 -> the same placed by
// `placements` (one per sample): (B, C, h, w) with 0 in the padding and (B, h,
// w) with mask_fill there.
std::pair<Tensor, Tensor> apply_joint_placements(const Tensor& images, const Tensor& masks,
                                                 std::span<const JointPlacement> placements,
                                                 const JointAugment& augment);

// The same with fresh draws from `gen` (one Philox block per sample).
std::pair<Tensor, Tensor> joint_augment(const Tensor& images, const Tensor& masks,
                                        const JointAugment& augment, Generator& gen);

// images (B, C, H, W) floating, bilinear, and masks (B, H, W) integer, nearest
// (still integer), to `size`, on any device: a resize that keeps class indices.
std::pair<Tensor, Tensor> resize_segmentation(const Tensor& images, const Tensor& masks,
                                              Size2 size);

// ---- batches ---------------------------------------------------------------------

struct SegmentationLoaderOptions {
  int64_t batch_size = 8;
  bool shuffle = false;
  bool drop_last = false;  // skip a last batch smaller than batch_size
  uint64_t seed = Generator::kDefaultSeed;
  Device device = Device::cpu();  // where batches are delivered
  std::vector<double> mean = {};  // per channel (or one for all); empty: 0
  std::vector<double> stddev = {};
  JointAugment augment = {};
};

struct SegmentationBatch {
  Tensor x;  // (B, C, h, w) float32, (pixel / 255 - mean) / stddev
  Tensor y;  // (B, h, w) int64
};

// Batches of a SegmentationDataset, built on the CPU by the iterating thread
// and moved to options.device.
class SegmentationLoader {
 public:
  SegmentationLoader(SegmentationDataset dataset, SegmentationLoaderOptions options);

  class Iterator {
   public:
    using value_type = SegmentationBatch;
    using difference_type = std::ptrdiff_t;

    Iterator(const SegmentationLoader* loader, int64_t epoch);
    SegmentationBatch& operator*() { return batch_; }
    SegmentationBatch* operator->() { return &batch_; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const;

   private:
    void load();
    const SegmentationLoader* loader_;
    int64_t epoch_;
    std::shared_ptr<const std::vector<int64_t>> order_;
    int64_t index_ = 0;  // the batch held
    SegmentationBatch batch_;
  };

  // Starts epoch epoch() and advances epoch() for the next call.
  Iterator begin();
  std::default_sentinel_t end() const { return {}; }

  int64_t size() const;  // batches per epoch
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  const SegmentationDataset& dataset() const { return dataset_; }

  // Batch `index` of epoch `epoch` visiting the samples in `order` (every
  // batch of an epoch is a function of these alone).
  SegmentationBatch batch(int64_t epoch, const std::vector<int64_t>& order, int64_t index) const;

 private:
  SegmentationDataset dataset_;
  SegmentationLoaderOptions options_;
  int64_t epoch_ = 0;
};

}  // namespace loom::data
