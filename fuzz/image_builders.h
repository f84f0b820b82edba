// File: fuzz/image_builders.h
// Encoded images assembled from their parts, with every length, offset and
// checksum filled in: PNG files from chunks, BMP files from header fields. The
// structure-aware image fuzzers build their inputs with them (so mutations
// reach chunk orders, palettes and header variants instead of breaking a
// length), and the seed corpus and the data tests build fixtures with them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace loom::fuzz {

// --- PNG -----------------------------------------------------------------------

struct PngChunk {
  std::string type;  // 4 characters
  std::vector<uint8_t> data;
};

// The signature, then each chunk as length, type, data and CRC-32.
std::vector<uint8_t> png_file(const std::vector<PngChunk>& chunks);

// IHDR's 13 bytes.
std::vector<uint8_t> png_header(uint32_t width, uint32_t height, uint8_t depth, uint8_t color,
                                uint8_t interlace);

// `bytes` as a zlib stream (what IDAT chunks carry).
std::vector<uint8_t> zlib_compressed(std::span<const uint8_t> bytes);

// The filtered rows of a one-sample-per-pixel image (gray or palette indices)
// of `depth` bits: each row of each reduced image (the 7 Adam7 passes when
// `interlaced`, else the whole image) is filter byte 0, then the samples
// packed most significant bits first. samples[y * width + x].
std::vector<uint8_t> png_rows(uint32_t width, uint32_t height, int depth,
                              std::span<const uint8_t> samples, bool interlaced);

// --- BMP -----------------------------------------------------------------------

struct BmpSpec {
  uint32_t header_size = 40;  // 12 (OS/2 core header: 16-bit sizes), 40, 56, 108 or 124
  int32_t width = 0, height = 0;  // a negative height stores the rows top-down
  uint16_t bits = 24;
  uint32_t compression = 0;  // 3: bitfields, whose masks follow a 40 or 56-byte header
  std::vector<uint32_t> masks = {};      // red, green, blue (and alpha in 108/124-byte headers)
  std::vector<uint8_t> palette_rgb = {};  // 3 bytes an entry; stored as 3 (OS/2) or 4 bytes
  std::vector<uint8_t> pixels = {};       // the pixel array as stored
  int32_t offset_shift = 0;  // added to the pixel-array offset written (0: where it lies)
};

// The file: file header (pixel offset right after the palette), info header,
// masks, palette, pixels.
std::vector<uint8_t> bmp_file(const BmpSpec& spec);

// Rows of `bits`-bit samples (1, 4 or 8), samples[y * width + x], each row
// padded to 4 bytes, in the order given. A 24 or 32-bit image passes its bytes
// as 8-bit samples of a row 3 or 4 times its width.
std::vector<uint8_t> bmp_rows(uint32_t width, uint32_t height, int bits,
                              std::span<const uint8_t> samples);

}  // namespace loom::fuzz
