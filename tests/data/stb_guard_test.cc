// File: tests/data/stb_guard_test.cc
// The JPEG Huffman-table screen that keeps corrupt files away from stb_image
// 2.27's table overrun: it rejects tables of more than 256 codes wherever stb
// would read them (also past the end of the file, which stb reads as zeros),
// and passes valid JPEGs, including FF C4 bytes inside other segments.
#include "data/stb_guard.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "data/image_folder.h"
#include "tests/data/fixtures.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

std::vector<uint8_t> valid_jpeg() {
  Generator gen(1);
  const Tensor image = randint(0, 256, {3, 16, 16}, {.dtype = DType::UInt8}, &gen);
  return testing::encode_jpeg(image, 90);
}

// Offset of the first FF C4 (a DHT marker) in a JPEG written by stb.
size_t first_dht(const std::vector<uint8_t>& jpeg) {
  const std::vector<uint8_t> marker = {0xFF, 0xC4};
  return std::search(jpeg.begin(), jpeg.end(), marker.begin(), marker.end()) - jpeg.begin();
}

TEST_CASE("valid JPEGs and other formats pass") {
  const std::vector<uint8_t> jpeg = valid_jpeg();
  CHECK_NOTHROW(check_jpeg_huffman_tables(jpeg, "a.jpg"));
  CHECK_NOTHROW(decode_image(jpeg, "a.jpg", 3));
  CHECK_NOTHROW(check_jpeg_huffman_tables(std::vector<uint8_t>{0x89, 'P', 'N', 'G'}, "a.png"));
  CHECK_NOTHROW(check_jpeg_huffman_tables(std::vector<uint8_t>{}, "empty"));
  // A comment segment holding FF C4 and a bogus table: skipped by its length.
  std::vector<uint8_t> commented = {0xFF, 0xD8, 0xFF, 0xFE, 0x00, 0x16,
                                    0xFF, 0xC4, 0x00, 0x14, 0x00};
  commented.resize(commented.size() + 15, 0xFF);
  commented.insert(commented.end(), jpeg.begin() + 2, jpeg.end());
  CHECK_NOTHROW(check_jpeg_huffman_tables(commented, "c.jpg"));
  CHECK_NOTHROW(decode_image(commented, "c.jpg", 3));
}

TEST_CASE("a Huffman table of more than 256 codes is rejected before stb reads it") {
  std::vector<uint8_t> jpeg = valid_jpeg();
  const size_t dht = first_dht(jpeg);
  REQUIRE(dht < jpeg.size());
  std::fill(jpeg.begin() + dht + 5, jpeg.begin() + dht + 21, 20);  // 16 lengths x 20 codes
  CHECK_THROWS_WITH_FRAGMENT(check_jpeg_huffman_tables(jpeg, "bad.jpg"), IoError,
                             fmt::format("bad.jpg: corrupt JPEG: the Huffman table at offset {} "
                                         "declares 320 codes; at most 256 exist",
                                         dht + 4));
  CHECK_THROWS_WITH_FRAGMENT(decode_image(jpeg, "bad.jpg", 3), IoError, "declares 320 codes");
}

TEST_CASE("a JPEG whose SOI follows FF fill bytes is screened too, as stb reads it as a JPEG") {
  // Found by fuzz/image_fuzzer: the screen looked for FF D8 at offset 0 only,
  // stb skips fill bytes before any marker, and its table builder overran.
  std::vector<uint8_t> jpeg = valid_jpeg();
  const size_t dht = first_dht(jpeg);
  std::fill(jpeg.begin() + dht + 5, jpeg.begin() + dht + 21, 20);
  jpeg.insert(jpeg.begin(), 5, 0xFF);
  CHECK_THROWS_WITH_FRAGMENT(decode_image(jpeg, "filled.jpg", 3), IoError, "declares 320 codes");
}

TEST_CASE("a table cut off by the end of the file is read as stb reads it") {
  // SOI, then a DHT whose 16 code counts are cut short after 15 bytes of 0x60.
  std::vector<uint8_t> jpeg = {0xFF, 0xD8, 0xFF, 0xC4, 0x00, 0x16, 0x00};
  jpeg.resize(jpeg.size() + 15, 0x60);
  CHECK_THROWS_WITH_FRAGMENT(check_jpeg_huffman_tables(jpeg, "cut.jpg"), IoError,
                             "the Huffman table at offset 6 declares 1440 codes");
}

TEST_CASE("tables after entropy-coded data are found, past stuffed FF 00 bytes") {
  std::vector<uint8_t> jpeg = valid_jpeg();
  // Replace EOI with scan data holding a stuffed FF and a second, oversized DHT.
  jpeg.resize(jpeg.size() - 2);
  const std::vector<uint8_t> tail = {0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56, 0xFF,
                                     0xC4, 0x00, 0x13, 0x11, 0xFF, 0xFF, 0x00};
  jpeg.insert(jpeg.end(), tail.begin(), tail.end());
  CHECK_THROWS_WITH_FRAGMENT(check_jpeg_huffman_tables(jpeg, "late.jpg"), IoError,
                             "declares 510 codes");
  // After EOI nothing is read.
  std::vector<uint8_t> ended = valid_jpeg();
  ended.insert(ended.end(), tail.begin() + 7, tail.end());
  CHECK_NOTHROW(check_jpeg_huffman_tables(ended, "ended.jpg"));
}

// The JPEG without its DHT segments: every scan then uses undefined tables.
std::vector<uint8_t> without_huffman_tables(const std::vector<uint8_t>& jpeg) {
  std::vector<uint8_t> out(jpeg.begin(), jpeg.begin() + 2);
  size_t pos = 2;
  while (pos + 4 <= jpeg.size() && jpeg[pos] == 0xFF) {
    const size_t length = (jpeg[pos + 2] << 8) | jpeg[pos + 3];
    if (jpeg[pos + 1] == 0xDA) break;  // the scan: copy the rest as it is
    if (jpeg[pos + 1] != 0xC4)
      out.insert(out.end(), jpeg.begin() + pos, jpeg.begin() + pos + 2 + length);
    pos += 2 + length;
  }
  out.insert(out.end(), jpeg.begin() + pos, jpeg.end());
  return out;
}

TEST_CASE("a JPEG whose scan uses Huffman tables no DHT defined is rejected, not decoded to garbage") {
  const std::vector<uint8_t> jpeg = without_huffman_tables(valid_jpeg());
  REQUIRE(jpeg.size() < valid_jpeg().size());
  CHECK_THROWS_WITH_FRAGMENT(check_jpeg_huffman_tables(jpeg, "bare.jpg"), IoError,
                             "bare.jpg: corrupt JPEG: the scan at offset");
  CHECK_THROWS_WITH_FRAGMENT(decode_image(jpeg, "bare.jpg", 3), IoError,
                             "which no DHT segment before it defines");
  CHECK_NOTHROW(check_jpeg_huffman_tables(valid_jpeg(), "good.jpg"));
}

// A 24-bit BMP of `width` x `height` from the fixture encoder, height patched.
std::vector<uint8_t> bmp_with_height(int32_t height) {
  Generator gen(2);
  std::vector<uint8_t> bmp = testing::encode_bmp(randint(0, 256, {3, 4, 5}, {.dtype = DType::UInt8}, &gen));
  for (int i = 0; i < 4; ++i) bmp[22 + i] = static_cast<uint8_t>(static_cast<uint32_t>(height) >> (8 * i));
  return bmp;
}

TEST_CASE("a BMP with height INT_MIN or a pixel array shorter than its header says is rejected") {
  Generator gen(2);
  const std::vector<uint8_t> good = testing::encode_bmp(randint(0, 256, {3, 4, 5}, {.dtype = DType::UInt8}, &gen));
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

TEST_CASE("a truncated PNG and an unknown chunk type give readable messages") {
  Generator gen(3);
  std::vector<uint8_t> png = testing::encode_png(randint(0, 256, {3, 16, 16}, {.dtype = DType::UInt8}, &gen));
  std::vector<uint8_t> cut(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(png.size() - 15));
  CHECK_THROWS_WITH_FRAGMENT(decode_image(cut, "cut.png", 3), IoError, "cut.png: truncated PNG: chunk 'IDAT'");
  std::vector<uint8_t> three_bytes_of_type(png.begin(), png.begin() + 33 + 7);  // IHDR, then "IDA"
  CHECK_THROWS_WITH_FRAGMENT(decode_image(three_bytes_of_type, "ida.png", 3), IoError,
                             "truncated PNG: the file ends at offset 40 inside a chunk header");
  // A critical chunk stb does not know, named by bytes that are not text: stb's
  // reason quotes them raw; the message shows them escaped.
  std::vector<uint8_t> odd = png;
  const std::vector<uint8_t> chunk = {0, 0, 0, 0, 0xC3, 0x28, 'A', 'B', 0, 0, 0, 0};
  odd.insert(odd.begin() + 33, chunk.begin(), chunk.end());
  bool thrown = false;
  try {
    decode_image(odd, "odd.png", 3);
  } catch (const IoError& e) {
    thrown = true;
    const std::string message = e.what();
    CHECK(message.find("\\xC3(AB") != std::string::npos);
    CHECK(std::none_of(message.begin(), message.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; }));
  }
  CHECK(thrown);
}

}  // namespace
}  // namespace loom::data
