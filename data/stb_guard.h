// File: data/stb_guard.h
// Debian's stb_image is v2.27; v2.28 fixed memory-safety bugs that corrupt
// files can reach, and stb accepts some corrupt files silently. Loom cannot
// patch stb, so it screens encoded images before stb sees them, and decodes
// through decode_screened only. Per format, what the screen refuses:
// - JPEG: a DHT segment declaring more than 256 Huffman codes (stb's table
//   builder writes past its tables); a scan decoding with Huffman or
//   quantization tables that nothing defined before it (garbage pixels); a scan
//   naming a component the frame does not have and a file cut off before its
//   end-of-image marker (stb fails without a reason of its own and its message
//   was "bad png sig");
// - BMP: a height of INT_MIN (abs(INT_MIN) in stb); 0 columns or rows (stb
//   returns an empty image); a header or pixel array cut short, OS/2 headers
//   included (stb reads the missing bytes as 0); a palette format whose
//   palette has no entries or whose pixels use entries past its end (stb
//   reads its uninitialised palette array);
// - PNG: a chunk cut off before IEND (stb's message was the chunk type's raw
//   bytes); a second PLTE; an indexed image whose pixels use entries past its
//   palette (stb reads its uninitialised palette array); an empty first IDAT
//   chunk (stb copies it to a null pointer).
// data/stb_image.cc caps each of stb's allocations, which bounds what a
// decompression bomb can take.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace loom::data {

enum class ImageFormat { Png, Bmp, Jpeg, Unknown };

// The format stb_image will decode `encoded` as (it tries PNG, BMP, JPEG in
// that order, by their signatures).
ImageFormat image_format(std::span<const uint8_t> encoded);

// Throws IoError naming `path`, the offset and what is wrong for the cases
// above; does nothing for other files (other formats and other corruption are
// left to stb, which reports them).
void screen_image(std::span<const uint8_t> encoded, const std::string& path);

// The format parts of screen_image alone (each does nothing for other formats).
void screen_jpeg(std::span<const uint8_t> encoded, const std::string& path);
void screen_bmp(std::span<const uint8_t> encoded, const std::string& path);
void screen_png(std::span<const uint8_t> encoded, const std::string& path);

// The reason in decode_screened's error for stb's failure reason `reason`
// (null when stb set none) while decoding a file of `format`. stb's PNG test
// runs before the other formats' loaders and sets "bad png sig" for every file
// that is not a PNG; a loader that then fails without a reason of its own
// leaves that one behind, so for other formats it means "no reason".
std::string stb_failure_message(ImageFormat format, const char* reason);

struct StbPixelsFree {
  void operator()(uint8_t* pixels) const;
};

// Interleaved (H, W, C) pixels as stb_image decodes them.
struct DecodedPixels {
  std::unique_ptr<uint8_t, StbPixelsFree> pixels;
  int width = 0, height = 0, channels = 0;
};

// Screens `encoded` and decodes it with stb_image to `channels` (1 or 3)
// channels. Throws IoError naming `path` for an empty or refused file, and
// with stb's reason (the format's own, never another format's) when stb fails.
DecodedPixels decode_screened(std::span<const uint8_t> encoded, const std::string& path,
                              int channels);

}  // namespace loom::data
