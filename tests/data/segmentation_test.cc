// File: tests/data/segmentation_test.cc
// Segmentation data: the in-memory set and its checks, a folder of PNG images
// with a parallel folder of PNG masks (pairing by name, exact pixels, colour
// masks and missing masks rejected), joint crop and flip that keep every
// image pixel on its mask pixel, a resize that keeps masks integer, and the
// loader's batches (shapes, dtypes, normalization, epochs replayed exactly).
//
// N samples, B batch, C channels, H, W image size, h, w crop size
#include "data/segmentation.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "tests/data/fixtures.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

using testing::encode_png;
using testing::path_in;
using testing::temp_dir;
using testing::write_bytes;

// Pixels that say where they came from: image channel c at (h, w) of sample n
// holds (n * 50 + h * W + w + c) % 256 and the mask holds n * 1000 + h * W + w,
// so an output pixel's mask value names the image values it must carry.
SegmentationDataset positional_set(int64_t n, int64_t c, int64_t h, int64_t w) {
  Tensor images = empty({n, c, h, w}, {.dtype = DType::UInt8});
  Tensor masks = empty({n, h, w}, {.dtype = DType::Int64});
  uint8_t* x = images.data_ptr<uint8_t>();
  int64_t* m = masks.data_ptr<int64_t>();
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t p = 0; p < h * w; ++p) {
      m[s * h * w + p] = s * 1000 + p;
      for (int64_t k = 0; k < c; ++k) x[(s * c + k) * h * w + p] = static_cast<uint8_t>((s * 50 + p + k) % 256);
    }
  }
  return {images, masks};
}

// Every output pixel carries the image values its mask value names (or 0 where
// the mask holds the fill value).
void check_aligned(const Tensor& images, const Tensor& masks, int64_t fill) {
  const int64_t B = images.size(0), C = images.size(1), h = images.size(2), w = images.size(3);
  const std::vector<uint8_t> x = images.contiguous().to_vector<uint8_t>();
  const std::vector<int64_t> m = masks.contiguous().to_vector<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t p = 0; p < h * w; ++p) {
      const int64_t label = m[b * h * w + p];
      for (int64_t k = 0; k < C; ++k) {
        const int64_t expected = label == fill ? 0 : (label / 1000 * 50 + label % 1000 + k) % 256;
        REQUIRE(x[(b * C + k) * h * w + p] == expected);
      }
    }
  }
}

}  // namespace

TEST_CASE("make_segmentation_dataset converts integer masks and checks the shapes") {
  const SegmentationDataset set = make_segmentation_dataset(
      zeros({2, 3, 4, 5}, {.dtype = DType::UInt8}), zeros({2, 4, 5}, {.dtype = DType::UInt8}));
  CHECK(set.masks.dtype() == DType::Int64);
  CHECK(set.size() == 2);
  CHECK(set.slice(1, 2).images.sizes() == Shape{1, 3, 4, 5});
  CHECK_THROWS_WITH_FRAGMENT(
      make_segmentation_dataset(zeros({2, 3, 4, 5}, {.dtype = DType::UInt8}),
                                zeros({2, 4, 6}, {.dtype = DType::Int64})),
      ShapeError, "images must be (N, C, H, W) and masks (N, H, W), got (2, 3, 4, 5) and (2, 4, 6)");
  CHECK_THROWS_WITH_FRAGMENT(make_segmentation_dataset(zeros({2, 3, 4, 5}, {.dtype = DType::UInt8}),
                                                       zeros({2, 4, 5})),
                             TypeError, "masks hold class indices, an integer dtype; got float32");
}

TEST_CASE("a folder of images with a parallel folder of masks, paired by name") {
  const std::string root = temp_dir("segmentation");
  const std::string images = path_in(root, "images"), masks = path_in(root, "masks");
  std::filesystem::create_directories(images);
  std::filesystem::create_directories(masks);
  Generator gen(1);
  std::vector<Tensor> pixels, labels;
  for (const char* name : {"b", "a"}) {
    pixels.push_back(randint(0, 256, {3, 4, 6}, {.dtype = DType::UInt8}, &gen));
    labels.push_back(randint(0, 5, {1, 4, 6}, {.dtype = DType::UInt8}, &gen));
    write_bytes(path_in(images, std::string(name) + ".png"), encode_png(pixels.back()));
    write_bytes(path_in(masks, std::string(name) + ".png"), encode_png(labels.back()));
  }
  write_bytes(path_in(images, "notes.txt"), {'h', 'i'});
  const SegmentationFolder folder = load_segmentation_folder(images, masks);
  CHECK(folder.names == std::vector<std::string>{"a", "b"});
  CHECK(folder.dataset.images.sizes() == Shape{2, 3, 4, 6});
  CHECK(folder.dataset.masks.sizes() == Shape{2, 4, 6});
  CHECK(folder.dataset.masks.dtype() == DType::Int64);
  CHECK_CLOSE(folder.dataset.images.select(0, 0), pixels[1], 0, 0);  // "a" sorts first
  CHECK_CLOSE(folder.dataset.masks.select(0, 0), labels[1].select(0, 0).to(DType::Int64), 0, 0);
  CHECK_CLOSE(folder.dataset.masks.select(0, 1), labels[0].select(0, 0).to(DType::Int64), 0, 0);

  write_bytes(path_in(images, "c.png"), encode_png(pixels[0]));
  CHECK_THROWS_WITH_FRAGMENT(load_segmentation_folder(images, masks), IoError, "c.png: no mask in");
  write_bytes(path_in(masks, "c.png"), encode_png(pixels[0]));  // an RGB mask
  CHECK_THROWS_WITH_FRAGMENT(load_segmentation_folder(images, masks), IoError,
                             "the mask has colours");
  write_bytes(path_in(masks, "c.png"), encode_png(labels[0].slice(1, 0, 3)));
  CHECK_THROWS_WITH_FRAGMENT(load_segmentation_folder(images, masks), IoError,
                             "the mask is 3x6 (H x W) but its image");
}

TEST_CASE("joint crop and flip move image and mask pixels together") {
  const SegmentationDataset set = positional_set(6, 3, 7, 9);
  Generator gen(2);
  const JointAugment augment{.crop = Size2{5, 4}, .padding = 2, .flip = true, .mask_fill = -1};
  std::set<std::pair<int64_t, int64_t>> corners;
  int64_t flips = 0;
  for (int trial = 0; trial < 20; ++trial) {
    auto [images, masks] = joint_augment(set.images, set.masks, augment, gen);
    CHECK(images.sizes() == Shape{6, 3, 5, 4});
    CHECK(masks.sizes() == Shape{6, 5, 4});
    CHECK(masks.dtype() == DType::Int64);
    check_aligned(images, masks, -1);
    const std::vector<int64_t> m = masks.to_vector<int64_t>();
    for (int64_t b = 0; b < 6; ++b) {
      const int64_t first = m[b * 20], next = m[b * 20 + 1];
      if (first >= 0) corners.insert({b, first % 1000});
      if (first >= 0 && next >= 0 && next < first) ++flips;  // a row read right to left
    }
  }
  CHECK(corners.size() > 20);  // windows land in many places
  CHECK(flips > 10);
  // Whole images, unpadded, unflipped: the identity.
  auto [same, same_masks] = joint_augment(set.images, set.masks, {}, gen);
  CHECK_CLOSE(same, set.images, 0, 0);
  CHECK_CLOSE(same_masks, set.masks, 0, 0);
  CHECK_THROWS_WITH_FRAGMENT(joint_augment(set.images, set.masks, {.crop = Size2{12, 4}}, gen),
                             ValueError, "[joint_augment] a 12x4 crop does not fit a 7x9 image");
}

TEST_CASE("resize_segmentation: images bilinear, masks nearest and still integer") {
  const SegmentationDataset set = positional_set(2, 1, 4, 4);
  const Tensor images = set.images.to(DType::Float32);
  auto [resized, masks] = resize_segmentation(images, set.masks, Size2{8, 6});
  CHECK(resized.sizes() == Shape{2, 1, 8, 6});
  CHECK(masks.sizes() == Shape{2, 8, 6});
  CHECK(masks.dtype() == DType::Int64);
  CHECK_CLOSE(resized, interpolate(images, {.size = Size2{8, 6}, .mode = InterpolateMode::Bilinear}),
              0, 0);
  const std::vector<int64_t> m = masks.to_vector<int64_t>();
  const std::set<int64_t> values(m.begin(), m.end());
  const std::vector<int64_t> source = set.masks.to_vector<int64_t>();
  for (int64_t v : values) CHECK(std::count(source.begin(), source.end(), v) == 1);  // no blends
  CHECK(m[0] == 0);
  CHECK(m[8 * 6 - 1] == 15);  // the last pixel is the last source pixel
}

TEST_CASE("the loader: normalized float batches, int64 masks, epochs replayed exactly") {
  const SegmentationDataset set = positional_set(10, 3, 6, 6);
  const SegmentationLoaderOptions options{.batch_size = 4,
                                          .shuffle = true,
                                          .seed = 9,
                                          .mean = {0.5},
                                          .stddev = {0.25},
                                          .augment = {.crop = Size2{4, 5}, .flip = true}};
  SegmentationLoader loader(set, options);
  CHECK(loader.size() == 3);
  std::vector<SegmentationBatch> first;
  for (auto& [x, y] : loader) {
    CHECK(x.dtype() == DType::Float32);
    CHECK(y.dtype() == DType::Int64);
    CHECK(x.sizes()[1] == 3);
    CHECK(x.sizes()[2] == 4);
    CHECK(y.sizes()[2] == 5);
    // x undone: (x * stddev + mean) * 255 are the uint8 pixels, aligned with y.
    const Tensor pixels = ((x * 0.25 + 0.5) * 255.0 + 0.5).to(DType::UInt8);
    check_aligned(pixels, y, 255);
    first.push_back({x, y});
  }
  REQUIRE(first.size() == 3);
  CHECK(first[2].x.size(0) == 2);  // 10 = 4 + 4 + 2
  CHECK(loader.epoch() == 1);
  loader.set_epoch(0);
  int64_t index = 0;
  for (auto& [x, y] : loader) {
    CHECK_CLOSE(x, first[index].x, 0, 0);
    CHECK_CLOSE(y, first[index].y, 0, 0);
    ++index;
  }
  SegmentationLoader other(set, options);
  other.set_epoch(1);
  const SegmentationBatch next = *other.begin();
  CHECK_FALSE(equal(next.y, first[0].y));  // another epoch, another order and crops
  CHECK_THROWS_WITH_FRAGMENT(SegmentationLoader(set, {.augment = {.crop = Size2{7, 7}}}),
                             ValueError, "a 7x7 crop does not fit a 6x6 image padded by 0");
}

}  // namespace loom::data
