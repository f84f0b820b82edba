// File: data/image_folder.h
// A classification set stored as one subfolder of images per class, as
// torchvision's ImageFolder: root/cat/001.png, root/dog/xyz.jpg, ... Classes are
// the subfolder names in sorted order, so label k is classes[k]. PNG, JPEG and
// BMP files (by extension, any case) are decoded with stb_image; other files and
// hidden entries are skipped. Images are not resized: all must have one size.
//
//   auto folder = loom::data::load_image_folder("/data/pets", {.channels = 3});
//   folder.dataset.images;  // (N, 3, H, W) uint8
//   folder.classes;         // {"cat", "dog"}
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"

// C channels, H, W image size
namespace loom::data {

struct ImageFolderOptions {
  int channels = 3;  // every image is converted to 1 (gray) or 3 (RGB) channels
};

struct ImageFolder {
  Dataset dataset;
  std::vector<std::string> classes;
};

// Throws IoError naming the file for an unreadable or undecodable image (with
// stb_image's reason), an image whose size differs from the first one's, a
// class folder without images, or a root without class folders.
ImageFolder load_image_folder(const std::string& root, ImageFolderOptions options = {});

// One encoded PNG/JPEG/BMP image as (C, H, W) uint8 with C = `channels`;
// `path` only names the image in errors.
Tensor decode_image(std::span<const uint8_t> encoded, const std::string& path, int channels);
Tensor read_image(const std::string& path, int channels);

}  // namespace loom::data
