// File: tests/data/stb_guard_bmp_test.cc
// The BMP screen against what stb_image 2.27 leaves unchecked: a height of
// INT_MIN, zero sizes, headers and pixel arrays cut short (OS/2 core headers
// too), and palette indices past the palette stb filled (Windows and OS/2
// palettes, 1, 4 and 8 bits). Valid palette BMPs decode to their exact pixels.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "data/image_folder.h"
#include "data/stb_guard.h"
#include "fuzz/image_builders.h"
#include "tests/data/fixtures.h"
#include "tests/testing.h"

// H, W image size
namespace loom::data {
namespace {

Tensor random_image(int64_t h, int64_t w, uint64_t seed) {
  Generator gen(seed);
  return randint(0, 256, {3, h, w}, {.dtype = DType::UInt8}, &gen);
}

// A 24-bit BMP of 5x4 pixels, height patched.
std::vector<uint8_t> bmp_with_height(int32_t height) {
  std::vector<uint8_t> bmp = testing::encode_bmp(random_image(4, 5, 2));
  for (int i = 0; i < 4; ++i) bmp[22 + i] = static_cast<uint8_t>(static_cast<uint32_t>(height) >> (8 * i));
  return bmp;
}

// A palette BMP of `bits` bits: `entries` gray levels (entry i is 10 * i),
// pixels[y * width + x] the indices, rows stored bottom-up.
std::vector<uint8_t> palette_bmp(uint32_t header_size, int bits, int entries, int width,
                                 int height, const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> palette;
  for (int e = 0; e < entries; ++e) palette.insert(palette.end(), 3, static_cast<uint8_t>(10 * e));
  return fuzz::bmp_file({.header_size = header_size,
                         .width = width,
                         .height = height,
                         .bits = static_cast<uint16_t>(bits),
                         .palette_rgb = palette,
                         .pixels = fuzz::bmp_rows(width, height, bits, pixels)});
}

TEST_CASE("a BMP with height INT_MIN or a pixel array shorter than its header says is rejected") {
  const std::vector<uint8_t> good = testing::encode_bmp(random_image(4, 5, 2));
  CHECK_NOTHROW(screen_image(good, "good.bmp"));
  CHECK_NOTHROW(screen_image(bmp_with_height(-4), "top_down.bmp"));  // negative: rows top-down
  CHECK_THROWS_WITH_FRAGMENT(decode_image(bmp_with_height(INT32_MIN), "min.bmp", 3), IoError,
                             "min.bmp: corrupt BMP: height -2147483648 at offset 22");
  std::vector<uint8_t> short_pixels = good;
  short_pixels.resize(short_pixels.size() - 7);
  // 5 pixels of 24 bits: 15 bytes padded to 16 per row, 4 rows.
  CHECK_THROWS_WITH_FRAGMENT(decode_image(short_pixels, "short.bmp", 3), IoError,
                             "short.bmp: corrupt BMP: 5x4 pixels at 24 bits need a 64-byte pixel "
                             "array from offset 54, but the file has 57 bytes there");
}

TEST_CASE("a BMP of 0 columns or 0 rows is rejected, not loaded as an empty image") {
  for (const auto& [width, height] : {std::pair{0, 16}, std::pair{16, 0}, std::pair{0, 0}}) {
    for (uint32_t header_size : {12u, 40u, 124u}) {
      INFO(width, "x", height, ", header ", header_size);
      const std::vector<uint8_t> bmp = fuzz::bmp_file(
          {.header_size = header_size, .width = width, .height = height, .bits = 24});
      CHECK_THROWS_WITH_FRAGMENT(decode_image(bmp, "empty.bmp", 3), IoError,
                                 fmt::format("empty.bmp: corrupt BMP: {}x{} pixels (width x "
                                             "height): an image without pixels",
                                             width, height));
    }
  }
}

TEST_CASE("an OS/2 BMP (12-byte header) is screened like the others: pixel array and header") {
  const Tensor image = random_image(3, 5, 4);
  const std::vector<uint8_t> os2 = testing::encode_bmp(image, 12);
  CHECK(decode_image(os2, "os2.bmp", 3).to_vector<int64_t>() == image.to_vector<int64_t>());
  std::vector<uint8_t> cut = os2;
  cut.resize(cut.size() - 5);  // 3 rows of 15 bytes padded to 16, from offset 26
  CHECK_THROWS_WITH_FRAGMENT(decode_image(cut, "os2.bmp", 3), IoError,
                             "os2.bmp: corrupt BMP: 5x3 pixels at 24 bits need a 48-byte pixel "
                             "array from offset 26, but the file has 43 bytes there");
  const std::vector<uint8_t> header_cut(os2.begin(), os2.begin() + 22);
  CHECK_THROWS_WITH_FRAGMENT(decode_image(header_cut, "os2.bmp", 3), IoError,
                             "truncated BMP: its headers need 26 bytes, but the file has 22");
  const std::vector<uint8_t> windows = testing::encode_bmp(image, 40);
  const std::vector<uint8_t> windows_cut(windows.begin(), windows.begin() + 40);
  CHECK_THROWS_WITH_FRAGMENT(decode_image(windows_cut, "w.bmp", 3), IoError,
                             "truncated BMP: its headers need 54 bytes, but the file has 40");
}

TEST_CASE("palette BMPs of 1, 4 and 8 bits decode to their exact pixels") {
  Generator gen(7);
  for (int bits : {1, 4, 8}) {
    for (int width : {1, 3, 8, 13}) {
      INFO(bits, " bits, width ", width);
      const int entries = std::min(1 << bits, 20);  // gray levels 10 * i fit a byte
      const std::vector<uint8_t> indices =
          randint(0, entries, {2 * width}, {.dtype = DType::UInt8}, &gen).to_vector<uint8_t>();
      const Tensor decoded = decode_image(palette_bmp(40, bits, entries, width, 2, indices), "p.bmp", 1);
      std::vector<int64_t> expected;  // rows are stored bottom-up
      for (int y = 1; y >= 0; --y) {
        for (int x = 0; x < width; ++x) expected.push_back(10 * indices[y * width + x]);
      }
      CHECK(decoded.to_vector<int64_t>() == expected);
    }
  }
}

TEST_CASE("palette indices past the palette are rejected, not read from uninitialised memory") {
  // An 8-bit BMP with a two-entry palette whose pixels use index 200.
  const std::vector<uint8_t> eight = palette_bmp(40, 8, 2, 4, 2, {0, 1, 200, 1, 0, 0, 0, 0});
  CHECK_THROWS_WITH_FRAGMENT(decode_image(eight, "pal.bmp", 3), IoError,
                             "pal.bmp: corrupt BMP: pixel 2 of row 0 (in file order) uses palette "
                             "entry 200, but the palette has 2 entries (stb_image would read "
                             "uninitialised memory)");
  CHECK_THROWS_WITH_FRAGMENT(decode_image(palette_bmp(40, 4, 3, 3, 1, {0, 2, 15}), "p4.bmp", 1),
                             IoError, "pixel 2 of row 0 (in file order) uses palette entry 15");
  CHECK_THROWS_WITH_FRAGMENT(decode_image(palette_bmp(40, 1, 1, 9, 1, {0, 0, 0, 0, 0, 0, 0, 0, 1}),
                                          "p1.bmp", 1),
                             IoError, "pixel 8 of row 0 (in file order) uses palette entry 1");
  // No palette at all: the pixel array starts right after the header.
  CHECK_THROWS_WITH_FRAGMENT(decode_image(palette_bmp(40, 8, 0, 2, 2, {0, 0, 0, 0}), "none.bmp", 1),
                             IoError, "an image of 8 bits per pixel needs a palette, but the palette has 0 entries");
  // An offset before the header's end makes stb's palette size negative.
  std::vector<uint8_t> inside = palette_bmp(40, 8, 2, 2, 2, {0, 1, 1, 0});
  inside[10] = 50;
  CHECK_THROWS_WITH_FRAGMENT(decode_image(inside, "inside.bmp", 1), IoError,
                             "needs a palette, but the palette has 0 entries (its pixel array "
                             "starts at offset 50");
  // A compression of 2^31 or more is a negative int to stb, which decodes the
  // file as uncompressed; the screen checks it as one (tools/msan_images.sh
  // found a mutation of fuzz/corpus/image/finding2_index_past_palette.bmp with
  // compression 0xFF000000 and offset 0 decoding from the uninitialised palette).
  constexpr size_t kCompressionHigh = 33;  // the last byte of the little-endian field at 30
  std::vector<uint8_t> valid = palette_bmp(40, 8, 2, 4, 2, {0, 1, 1, 0, 1, 0, 0, 1});
  std::vector<uint8_t> negative = valid;
  negative[kCompressionHigh] = 0x80;
  CHECK(decode_image(negative, "negative.bmp", 1).to_vector<int64_t>() ==
        decode_image(valid, "valid.bmp", 1).to_vector<int64_t>());
  negative[10] = 0;  // the pixel array "starts" at offset 0: stb's palette size is -14
  CHECK_THROWS_WITH_FRAGMENT(decode_image(negative, "negative.bmp", 1), IoError,
                             "needs a palette, but the palette has 0 entries (its pixel array "
                             "starts at offset 0");
  negative = palette_bmp(40, 8, 2, 4, 2, {0, 1, 200, 1, 0, 0, 0, 0});
  negative[kCompressionHigh] = 0xFF;
  CHECK_THROWS_WITH_FRAGMENT(decode_image(negative, "negative.bmp", 3), IoError,
                             "uses palette entry 200, but the palette has 2 entries");
}

TEST_CASE("OS/2 palettes: stb 2.27 reads them 4 entries short, so the last 4 are refused") {
  // 8 entries stored: stb fills 4; pixels using entries 4-7 would be uninitialised.
  const std::vector<uint8_t> low = palette_bmp(12, 8, 8, 4, 1, {0, 1, 2, 3});
  CHECK(decode_image(low, "os2.bmp", 1).to_vector<int64_t>() == std::vector<int64_t>{0, 10, 20, 30});
  CHECK_THROWS_WITH_FRAGMENT(
      decode_image(palette_bmp(12, 8, 8, 4, 1, {0, 1, 2, 5}), "os2.bmp", 1), IoError,
      "os2.bmp: a BMP stb_image cannot decode: pixel 3 of row 0 (in file order) uses palette "
      "entry 5, but stb_image 2.27 reads 4 of the 8 entries of this OS/2 palette");
  CHECK_THROWS_WITH_FRAGMENT(decode_image(palette_bmp(12, 1, 2, 2, 1, {0, 1}), "os2.bmp", 1),
                             IoError, "stb_image 2.27 reads 0 of the 2 entries of this OS/2 palette");
}

}  // namespace
}  // namespace loom::data
