// File: data/segmentation.cc
// Segmentation sets (in memory, and an image folder with a parallel mask
// folder), joint crop and flip of images and masks, a resize that keeps masks
// integer, and the batch loader.
//
// N samples, B batch, C channels, H, W image size, h, w crop size, P padding
#include "data/segmentation.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/ops/interpolate.h"
#include "data/image_folder.h"
#include "data/sampler.h"
#include "data/transforms.h"

namespace loom::data {

namespace {

namespace fs = std::filesystem;

bool is_image_name(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp";
}

// The visible image files of `dir`, sorted by name.
std::vector<fs::path> image_files(const std::string& dir, std::string_view role) {
  LOOM_CHECK(fs::is_directory(dir), IoError, "[segmentation_folder] {}: the {} folder is not a "
             "directory", dir, role);
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const bool hidden = entry.path().filename().string().starts_with(".");
    if (entry.is_regular_file() && !hidden && is_image_name(entry.path())) {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// A mask file's class indices (H, W) int64: decoded as RGB so that a colour
// mask, whose channels differ, is caught rather than averaged to gray.
Tensor read_mask(const fs::path& path) {
  const Tensor rgb = read_image(path.string(), 3);
  const Tensor r = rgb.select(0, 0), g = rgb.select(0, 1), b = rgb.select(0, 2);
  const std::vector<uint8_t> rv = r.to_vector<uint8_t>(), gv = g.to_vector<uint8_t>(),
                             bv = b.to_vector<uint8_t>();
  LOOM_CHECK(rv == gv && rv == bv, IoError,
             "[segmentation_folder] {}: the mask has colours; a mask holds one class index per "
             "pixel (a single-channel PNG): map its colours to indices first",
             path.string());
  return r.to(DType::Int64).contiguous();
}

void check_mask_size(const Tensor& image, const Tensor& mask, const fs::path& image_path,
                     const fs::path& mask_path) {
  LOOM_CHECK(image.size(1) == mask.size(0) && image.size(2) == mask.size(1), IoError,
             "[segmentation_folder] {}: the mask is {}x{} (H x W) but its image, {}, is {}x{}",
             mask_path.string(), mask.size(0), mask.size(1), image_path.string(), image.size(1),
             image.size(2));
}

}  // namespace

SegmentationDataset SegmentationDataset::slice(int64_t begin, int64_t end) const {
  LOOM_CHECK(0 <= begin && begin <= end && end <= size(), IndexError,
             "[SegmentationDataset::slice] range [{}, {}) is outside a set of {} samples", begin,
             end, size());
  return {images.slice(0, begin, end), masks.slice(0, begin, end)};
}

void check_segmentation_dataset(const SegmentationDataset& dataset, std::string_view op) {
  const Tensor &images = dataset.images, &masks = dataset.masks;
  LOOM_CHECK(images.defined() && masks.defined(), ValueError,
             "[{}] the dataset has no images or no masks", op);
  LOOM_CHECK(images.dim() == 4 && masks.dim() == 3 && masks.size(0) == images.size(0) &&
                 masks.size(1) == images.size(2) && masks.size(2) == images.size(3),
             ShapeError, "[{}] images must be (N, C, H, W) and masks (N, H, W), got {} and {}",
             op, shape_str(images.sizes()), shape_str(masks.sizes()));
  LOOM_CHECK(images.size(0) > 0, ValueError, "[{}] the dataset is empty", op);
  LOOM_CHECK(images.dtype() == DType::UInt8 && masks.dtype() == DType::Int64, TypeError,
             "[{}] images must be uint8 and masks int64, got {} and {}", op,
             dtype_name(images.dtype()), dtype_name(masks.dtype()));
  LOOM_CHECK(images.device().is_cpu() && masks.device().is_cpu() && images.is_contiguous() &&
                 masks.is_contiguous(),
             ValueError, "[{}] images and masks must be contiguous CPU tensors (got {})", op,
             images.device().str());
}

SegmentationDataset make_segmentation_dataset(const Tensor& images, const Tensor& masks) {
  LOOM_CHECK(images.defined() && masks.defined(), ValueError,
             "[make_segmentation_dataset] images or masks is undefined");
  LOOM_CHECK(!is_floating(masks.dtype()), TypeError,
             "[make_segmentation_dataset] masks hold class indices, an integer dtype; got {}",
             dtype_name(masks.dtype()));
  SegmentationDataset dataset{images.cpu().contiguous(),
                              masks.cpu().to(DType::Int64).contiguous()};
  check_segmentation_dataset(dataset, "make_segmentation_dataset");
  return dataset;
}

SegmentationFolder load_segmentation_folder(const std::string& image_dir,
                                            const std::string& mask_dir,
                                            SegmentationFolderOptions options) {
  const std::vector<fs::path> images = image_files(image_dir, "image");
  LOOM_CHECK(!images.empty(), IoError,
             "[segmentation_folder] {}: no .png, .jpg, .jpeg or .bmp images", image_dir);
  std::map<std::string, std::vector<fs::path>> masks_by_stem;
  for (const fs::path& mask : image_files(mask_dir, "mask")) {
    masks_by_stem[mask.stem().string()].push_back(mask);
  }
  SegmentationFolder folder;
  std::vector<Tensor> pixels, labels;
  for (const fs::path& image_path : images) {
    const std::string stem = image_path.stem().string();
    auto it = masks_by_stem.find(stem);
    LOOM_CHECK(it != masks_by_stem.end() && it->second.size() == 1, IoError,
               "[segmentation_folder] {}: {} in {} (a mask shares its image's name: {}.png)",
               image_path.string(),
               it == masks_by_stem.end() ? "no mask" : "several masks of that name", mask_dir,
               stem);
    pixels.push_back(read_image(image_path.string(), options.channels));
    labels.push_back(read_mask(it->second.front()));
    check_mask_size(pixels.back(), labels.back(), image_path, it->second.front());
    LOOM_CHECK(pixels.back().sizes() == pixels.front().sizes(), IoError,
               "[segmentation_folder] {}: image is {} but the first, {}, is {}; every image must "
               "have one size (resize them beforehand)",
               image_path.string(), shape_str(pixels.back().sizes()), images.front().string(),
               shape_str(pixels.front().sizes()));
    folder.names.push_back(stem);
  }
  Shape image_sizes = pixels.front().sizes(), mask_sizes = labels.front().sizes();
  image_sizes.insert(image_sizes.begin(), static_cast<int64_t>(pixels.size()));
  mask_sizes.insert(mask_sizes.begin(), static_cast<int64_t>(labels.size()));
  folder.dataset = {empty(image_sizes, {.dtype = DType::UInt8}),
                    empty(mask_sizes, {.dtype = DType::Int64})};
  for (size_t i = 0; i < pixels.size(); ++i) {
    folder.dataset.images.select(0, static_cast<int64_t>(i)).copy_(pixels[i]);
    folder.dataset.masks.select(0, static_cast<int64_t>(i)).copy_(labels[i]);
  }
  return folder;
}

// ---- joint transforms ------------------------------------------------------------

namespace {

Size2 window_of(const JointAugment& augment, int64_t height, int64_t width) {
  return augment.crop.value_or(Size2{height + 2 * augment.padding, width + 2 * augment.padding});
}

}  // namespace

std::vector<JointPlacement> draw_joint_placements(int64_t count, const JointAugment& augment,
                                                  int64_t height, int64_t width, uint64_t seed,
                                                  uint64_t first_block) {
  const Size2 window = window_of(augment, height, width);
  const int64_t rows = height + 2 * augment.padding - window.h + 1;
  const int64_t cols = width + 2 * augment.padding - window.w + 1;
  LOOM_CHECK(augment.padding >= 0 && window.h > 0 && window.w > 0 && rows > 0 && cols > 0,
             ValueError,
             "[joint_augment] a {}x{} crop does not fit a {}x{} image padded by {} (padding >= 0, "
             "crop at most (H + 2P) x (W + 2P))",
             window.h, window.w, height, width, augment.padding);
  std::vector<JointPlacement> placements(count);
  for (int64_t i = 0; i < count; ++i) {
    const PhiloxBlock bits = philox_block(seed, first_block + i);
    placements[i].top = static_cast<int64_t>(bits.lane[0] % static_cast<uint64_t>(rows));
    placements[i].left = static_cast<int64_t>(bits.lane[1] % static_cast<uint64_t>(cols));
    placements[i].flip = augment.flip && uniform_float(bits.lane[2]) < 0.5f;
  }
  return placements;
}

std::pair<Tensor, Tensor> apply_joint_placements(const Tensor& images, const Tensor& masks,
                                                 std::span<const JointPlacement> placements,
                                                 const JointAugment& augment) {
  check_segmentation_dataset({images.contiguous(), masks.contiguous()}, "joint_augment");
  const Tensor in = images.contiguous(), in_masks = masks.contiguous();
  const int64_t B = in.size(0), C = in.size(1), H = in.size(2), W = in.size(3),
                P = augment.padding;
  LOOM_CHECK(static_cast<int64_t>(placements.size()) == B, ValueError,
             "[joint_augment] {} placements for {} samples", placements.size(), B);
  const Size2 window = window_of(augment, H, W);
  Tensor out = empty({B, C, window.h, window.w}, {.dtype = DType::UInt8});
  Tensor out_masks = empty({B, window.h, window.w}, {.dtype = DType::Int64});
  const uint8_t* x = in.data_ptr<uint8_t>();
  const int64_t* m = in_masks.data_ptr<int64_t>();
  uint8_t* y = out.data_ptr<uint8_t>();
  int64_t* ym = out_masks.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const JointPlacement& p = placements[b];
    for (int64_t r = 0; r < window.h; ++r) {
      for (int64_t q = 0; q < window.w; ++q) {
        // The padded image's pixel this output pixel reads, then the image's own.
        const int64_t sh = p.top + r - P;
        const int64_t sw = p.left + (p.flip ? window.w - 1 - q : q) - P;
        const bool inside = sh >= 0 && sh < H && sw >= 0 && sw < W;
        const int64_t at = (b * window.h + r) * window.w + q;
        ym[at] = inside ? m[(b * H + sh) * W + sw] : augment.mask_fill;
        for (int64_t c = 0; c < C; ++c) {
          y[((b * C + c) * window.h + r) * window.w + q] =
              inside ? x[((b * C + c) * H + sh) * W + sw] : uint8_t{0};
        }
      }
    }
  }
  return {out, out_masks};
}

std::pair<Tensor, Tensor> joint_augment(const Tensor& images, const Tensor& masks,
                                        const JointAugment& augment, Generator& gen) {
  LOOM_CHECK(images.defined() && images.dim() == 4, ShapeError,
             "[joint_augment] images must be (B, C, H, W)");
  const int64_t count = images.size(0);
  const uint64_t first = gen.reserve(static_cast<uint64_t>(count));
  const std::vector<JointPlacement> placements =
      draw_joint_placements(count, augment, images.size(2), images.size(3), gen.seed(), first);
  return apply_joint_placements(images, masks, placements, augment);
}

std::pair<Tensor, Tensor> resize_segmentation(const Tensor& images, const Tensor& masks,
                                              Size2 size) {
  LOOM_CHECK(images.defined() && masks.defined() && images.dim() == 4 && masks.dim() == 3,
             ShapeError, "[resize_segmentation] images must be (B, C, H, W) and masks (B, H, W)");
  LOOM_CHECK(!is_floating(masks.dtype()), TypeError,
             "[resize_segmentation] masks hold class indices, an integer dtype; got {}",
             dtype_name(masks.dtype()));
  Tensor resized = interpolate(images, {.size = size, .mode = InterpolateMode::Bilinear});
  // Nearest selects one source pixel per output pixel: float64 holds every
  // index exactly, so the round trip gives the mask's own values back.
  Tensor picked = interpolate(masks.unsqueeze(1).to(DType::Float64), {.size = size});
  return {resized, picked.squeeze(1).to(masks.dtype())};
}

// ---- batches ---------------------------------------------------------------------

SegmentationLoader::SegmentationLoader(SegmentationDataset dataset,
                                       SegmentationLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  check_segmentation_dataset(dataset_, "SegmentationLoader");
  LOOM_CHECK(options_.batch_size > 0, ValueError,
             "[SegmentationLoader] batch_size must be positive, got {}", options_.batch_size);
  // Fails here, not at the first batch, for a crop that does not fit.
  draw_joint_placements(0, options_.augment, dataset_.images.size(2), dataset_.images.size(3),
                        options_.seed, 0);
  make_normalization(dataset_.images.size(1), options_.mean, options_.stddev);
}

int64_t SegmentationLoader::size() const {
  const int64_t n = dataset_.size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void SegmentationLoader::set_epoch(int64_t epoch) {
  LOOM_CHECK(epoch >= 0, ValueError, "[SegmentationLoader] epoch must be >= 0, got {}", epoch);
  epoch_ = epoch;
}

SegmentationLoader::Iterator SegmentationLoader::begin() { return Iterator(this, epoch_++); }

SegmentationBatch SegmentationLoader::batch(int64_t epoch, const std::vector<int64_t>& order,
                                            int64_t index) const {
  const int64_t first = index * options_.batch_size;
  const int64_t count = std::min(options_.batch_size, dataset_.size() - first);
  Tensor images = empty({count, dataset_.images.size(1), dataset_.images.size(2),
                         dataset_.images.size(3)}, {.dtype = DType::UInt8});
  Tensor masks = empty({count, dataset_.masks.size(1), dataset_.masks.size(2)},
                       {.dtype = DType::Int64});
  for (int64_t i = 0; i < count; ++i) {
    images.select(0, i).copy_(dataset_.images.select(0, order[first + i]));
    masks.select(0, i).copy_(dataset_.masks.select(0, order[first + i]));
  }
  // Position p of epoch e draws Philox block e * kEpochBlocks + kEpochBlocks / 2 + p, as the
  // classification loader's placements do (data/sampler.h).
  const uint64_t block = static_cast<uint64_t>(epoch) * kEpochBlocks + kEpochBlocks / 2 +
                         static_cast<uint64_t>(first);
  const std::vector<JointPlacement> placements = draw_joint_placements(
      count, options_.augment, images.size(2), images.size(3), options_.seed, block);
  auto [placed, placed_masks] = apply_joint_placements(images, masks, placements, options_.augment);
  return {normalize(placed, options_.mean, options_.stddev).to(options_.device),
          placed_masks.to(options_.device)};
}

SegmentationLoader::Iterator::Iterator(const SegmentationLoader* loader, int64_t epoch)
    : loader_(loader), epoch_(epoch) {
  order_ = std::make_shared<const std::vector<int64_t>>(
      plan_epoch(loader->dataset_.size(), loader->options_.shuffle, Augment{},
                 loader->options_.seed, epoch)
          .order);
  load();
}

void SegmentationLoader::Iterator::load() {
  if (index_ < loader_->size()) batch_ = loader_->batch(epoch_, *order_, index_);
}

SegmentationLoader::Iterator& SegmentationLoader::Iterator::operator++() {
  ++index_;
  load();
  return *this;
}

bool SegmentationLoader::Iterator::operator==(std::default_sentinel_t) const {
  return index_ >= loader_->size();
}

}  // namespace loom::data
