// File: fuzz/structured_input.h
// The input formats of the structure-aware image fuzzers: each turns the
// fuzzer's bytes into an encoded image whose lengths, offsets and CRCs are
// right (fuzz/image_builders), so mutations explore chunk orders, palettes,
// header variants and segment sequences instead of stopping at the first
// length check. Each format has its reader (the harness) and its writer (the
// seed corpus). Byte 0 of every input: bit 0 set for 3 output channels.
//
// PNG:  byte 0 bit 1: IDAT payloads are zlib-compressed by the harness (so a
//       mutated payload is still a valid stream of mutated rows). Then
//       chunks: a type byte (0 IHDR, 1 PLTE, 2 IDAT, 3 tRNS, 4 IEND, 5 CgBI,
//       6 tEXt, else 4 bytes of raw type follow), a 2-byte big-endian length,
//       the data. IEND is added when no chunk is one.
// BMP:  header size (index into 12, 40, 56, 108, 124), width and height
//       (int16 little-endian), bits (index into 1, 4, 8, 16, 24, 32),
//       compression (0-4, or 5 for kNegativeCompression), palette entries
//       (then 3 bytes each), mask count (then 4 bytes each), offset shift
//       (int8); the rest is the pixel array.
// JPEG: byte 0 bit 1: no EOI is added at the end. Then segments: a marker
//       code, a 2-byte big-endian payload length, the payload; written as
//       FF code, then (but for codes without a length: 01, D0-D9) the length
//       field (payload + 2) and the payload. Code 00 writes its payload bare
//       (entropy-coded data). SOI comes first.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "data/stb_guard.h"
#include "fuzz/image_builders.h"

namespace loom::fuzz {

// A BMP compression value stb_image 2.27 reads as a negative int (and then
// decodes as uncompressed).
constexpr uint32_t kNegativeCompression = 0x80000000u;

struct StructuredImage {
  int channels = 1;
  std::vector<uint8_t> encoded;
};

// The most pixels an image fuzzer has stb decode: stb decodes an image of
// millions of pixels from a few hundred bytes (a JPEG's missing scan data
// reads as zeros), which under ASan takes seconds and held the image fuzzer
// at 150 executions a second. Larger images are screened, not decoded.
constexpr int64_t kMaxFuzzPixels = 512 * 512;

// How the image fuzzers and the MemorySanitizer check decode: Loom's screen
// always, then stb_image (decode_screened) when the image has at most
// kMaxFuzzPixels pixels. Throws what decode_screened throws; empty when the
// image was only screened.
std::optional<data::DecodedPixels> decode_for_fuzzing(const StructuredImage& image);

StructuredImage png_from_input(std::span<const uint8_t> input);
StructuredImage bmp_from_input(std::span<const uint8_t> input);
StructuredImage jpeg_from_input(std::span<const uint8_t> input);

// Writers for the seed corpus: inputs that read back as the given image.
std::vector<uint8_t> png_input(const std::vector<PngChunk>& chunks, bool compress, int channels);
std::vector<uint8_t> bmp_input(const BmpSpec& spec, int channels);
struct JpegSegment {
  uint8_t code;
  std::vector<uint8_t> payload;
};
std::vector<uint8_t> jpeg_input(const std::vector<JpegSegment>& segments, bool end_marker,
                                int channels);
// A JPEG file's segments (after SOI), its entropy-coded data as code-00
// segments, up to (not including) EOI: the inverse of jpeg_from_input.
std::vector<JpegSegment> jpeg_segments(std::span<const uint8_t> jpeg);

}  // namespace loom::fuzz
