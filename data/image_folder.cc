// File: data/image_folder.cc
// Image decoding through stb_image and the one-subfolder-per-class layout.
#include "data/image_folder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "core/input_file.h"
#include "data/file_bytes.h"
#include "data/stb_guard.h"


// N images, C channels, H, W image size
namespace loom::data {

namespace {

namespace fs = std::filesystem;

// An encoded file larger than the largest image stb may decode is not an image.
constexpr uint64_t kMaxEncodedBytes = uint64_t{64} << 20;

bool has_image_extension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp";
}

// The class folders (directories == true) or the image files of `folder`, in
// name order, hidden entries skipped. Entries are what symbolic links point to;
// a dangling link is no image.
std::vector<fs::path> sorted_entries(const fs::path& folder, bool directories) {
  std::vector<fs::path> paths;
  for (const FolderEntry& entry : folder_entries(folder.string(), "image_folder")) {
    if (entry.path.filename().string().starts_with(".")) continue;
    const bool wanted = directories ? entry.type == fs::file_type::directory
                                    : entry.type == fs::file_type::regular &&
                                          has_image_extension(entry.path);
    if (wanted) paths.push_back(entry.path);
  }
  return paths;
}

// stb decodes interleaved (H, W, C); Loom keeps images planar (C, H, W).
Tensor planar(const uint8_t* pixels, int64_t channels, int64_t height, int64_t width) {
  Tensor image = empty({channels, height, width}, {.dtype = DType::UInt8});
  uint8_t* out = image.data_ptr<uint8_t>();
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t i = 0; i < height * width; ++i)
      out[c * height * width + i] = pixels[i * channels + c];
  }
  return image;
}

void check_same_size(const Tensor& image, const Tensor& first, const fs::path& path,
                     const fs::path& first_path) {
  LOOM_CHECK(image.sizes() == first.sizes(), IoError,
             "[image_folder] {}: image is {}x{} (H x W) but the first image, {}, is {}x{}; every "
             "image must have the same size (resize them beforehand)",
             path.string(), image.size(1), image.size(2), first_path.string(), first.size(1),
             first.size(2));
}

// images: N tensors (C, H, W) -> (N, C, H, W).
Dataset stack(const std::vector<Tensor>& images, const std::vector<int64_t>& labels) {
  Shape sizes = images.front().sizes();
  sizes.insert(sizes.begin(), static_cast<int64_t>(images.size()));
  Dataset dataset{empty(sizes, {.dtype = DType::UInt8}),
                  from_host(labels.data(), DType::Int64, {sizes[0]}, {.dtype = DType::Int64})};
  for (size_t i = 0; i < images.size(); ++i) dataset.images.select(0, i).copy_(images[i]);
  return dataset;
}

}  // namespace

Tensor decode_image(std::span<const uint8_t> encoded, const std::string& path, int channels) {
  const DecodedPixels decoded = decode_screened(encoded, path, channels);
  return planar(decoded.pixels.get(), channels, decoded.height, decoded.width);
}

Tensor read_image(const std::string& path, int channels) {
  return decode_image(read_file_bytes(path, "image_folder", kMaxEncodedBytes), path, channels);
}

ImageFolder load_image_folder(const std::string& root, ImageFolderOptions options) {
  const fs::file_type type = path_type(root, "image_folder");
  LOOM_CHECK(type == fs::file_type::directory, IoError,
             "[image_folder] {}: {}; expected a directory with one subfolder of images per class",
             root,
             type == fs::file_type::not_found
                 ? "does not exist"
                 : fmt::format("is {}, not a directory", file_type_name(type)));
  ImageFolder folder;
  std::vector<Tensor> images;
  std::vector<int64_t> labels;
  fs::path first_path;
  for (const fs::path& class_dir : sorted_entries(root, /*directories=*/true)) {
    const std::vector<fs::path> files = sorted_entries(class_dir, /*directories=*/false);
    LOOM_CHECK(!files.empty(), IoError,
               "[image_folder] {}: class folder has no .png, .jpg, .jpeg or .bmp files",
               class_dir.string());
    for (const fs::path& file : files) {
      images.push_back(read_image(file.string(), options.channels));
      if (first_path.empty()) first_path = file;
      check_same_size(images.back(), images.front(), file, first_path);
      labels.push_back(static_cast<int64_t>(folder.classes.size()));
    }
    folder.classes.push_back(class_dir.filename().string());
  }
  LOOM_CHECK(!folder.classes.empty(), IoError,
             "[image_folder] {}: no class subfolders; expected root/<class>/<image>.png", root);
  folder.dataset = stack(images, labels);
  return folder;
}

}  // namespace loom::data
