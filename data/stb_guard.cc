// File: data/stb_guard.cc
// Which format stb_image will take a file for, the screen that runs the
// format's checks (data/stb_guard_{jpeg,bmp,png}.cc), and the one decode path:
// screen, stb_image, and stb's reason in the error when it fails.
#include "data/stb_guard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string_view>

#include "core/error.h"
#include "data/file_bytes.h"
#include "data/stb_config.h"
#include "data/stb_guard_internal.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace loom::data {

namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

bool known_bmp_header(uint32_t size) {
  return size == 12 || size == 40 || size == 56 || size == 108 || size == 124;
}

// A JPEG starts with an SOI marker, which stb, like any marker, finds after
// any number of FF fill bytes.
bool starts_with_jpeg_marker(std::span<const uint8_t> encoded) {
  if (encoded.empty() || encoded[0] != 0xFF) return false;
  size_t pos = 1;
  while (pos < encoded.size() && encoded[pos] == 0xFF) ++pos;
  return pos < encoded.size() && encoded[pos] == 0xD8;
}

std::string_view format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::Png:
      return "PNG";
    case ImageFormat::Bmp:
      return "BMP";
    case ImageFormat::Jpeg:
      return "JPEG";
    case ImageFormat::Unknown:
      break;
  }
  return "image";
}

}  // namespace

ImageFormat image_format(std::span<const uint8_t> encoded) {
  if (encoded.size() >= sizeof(kPngSignature) &&
      std::equal(std::begin(kPngSignature), std::end(kPngSignature), encoded.begin())) {
    return ImageFormat::Png;
  }
  if (encoded.size() >= 2 && encoded[0] == 'B' && encoded[1] == 'M' &&
      known_bmp_header(stb_guard_internal::padded_le32(encoded, 14))) {
    return ImageFormat::Bmp;
  }
  return starts_with_jpeg_marker(encoded) ? ImageFormat::Jpeg : ImageFormat::Unknown;
}

void screen_image(std::span<const uint8_t> encoded, const std::string& path) {
  switch (image_format(encoded)) {
    case ImageFormat::Png:
      return screen_png(encoded, path);
    case ImageFormat::Bmp:
      return screen_bmp(encoded, path);
    case ImageFormat::Jpeg:
      return screen_jpeg(encoded, path);
    case ImageFormat::Unknown:
      return;
  }
}

std::string stb_failure_message(ImageFormat format, const char* reason) {
  const bool stale = format != ImageFormat::Png && reason != nullptr &&
                     std::string_view(reason) == "bad png sig";
  if (reason == nullptr || stale) {
    return fmt::format("stb_image stopped without a reason (a corrupt {} file)",
                       format_name(format));
  }
  if (std::string_view(reason) == "outofmem") {
    return fmt::format("decoding needs more memory than an image of at most {}x{} pixels does (a "
                       "corrupt or hostile file), or the machine is out of memory",
                       STBI_MAX_DIMENSIONS, STBI_MAX_DIMENSIONS);
  }
  return reason;
}

void StbPixelsFree::operator()(uint8_t* pixels) const { stbi_image_free(pixels); }

DecodedPixels decode_screened(std::span<const uint8_t> encoded, const std::string& path,
                              int channels) {
  LOOM_CHECK(channels == 1 || channels == 3, ValueError,
             "[decode_image] channels must be 1 (gray) or 3 (RGB), got {}", channels);
  LOOM_CHECK(!encoded.empty(), IoError,
             "[image_folder] {}: file is empty; expected a PNG, JPEG or BMP image", path);
  LOOM_CHECK(encoded.size() <= static_cast<size_t>(INT32_MAX), IoError,
             "[image_folder] {}: {} bytes are more than stb_image reads", path, encoded.size());
  screen_image(encoded, path);
  DecodedPixels decoded;
  decoded.channels = channels;
  int stored_channels = 0;
  decoded.pixels.reset(stbi_load_from_memory(encoded.data(), static_cast<int>(encoded.size()),
                                             &decoded.width, &decoded.height, &stored_channels,
                                             channels));
  LOOM_CHECK(decoded.pixels != nullptr, IoError,
             "[image_folder] {}: cannot decode the image: {} (stb_image reads PNG, JPEG and BMP "
             "up to {}x{} pixels; starts {})",
             path, stb_failure_message(image_format(encoded), stbi_failure_reason()), STBI_MAX_DIMENSIONS, STBI_MAX_DIMENSIONS,
             hex_prefix(encoded, 8));
  return decoded;
}

}  // namespace loom::data
