// File: tests/data/stb_guard_test.cc
// Which format stb_image takes a file for, the screen's dispatch to the
// format's checks (tested in stb_guard_{jpeg,bmp,png}_test.cc), and the
// reason decode_screened gives when stb fails: the file's format's own,
// never the "bad png sig" stb's PNG test leaves behind for other formats.
#include "data/stb_guard.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "tests/data/fixtures.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

Tensor random_image(int64_t c, uint64_t seed) {
  Generator gen(seed);
  return randint(0, 256, {c, 6, 5}, {.dtype = DType::UInt8}, &gen);
}

TEST_CASE("image_format follows stb's order of tests: PNG signature, BMP header, JPEG SOI") {
  CHECK(image_format(testing::encode_png(random_image(3, 1))) == ImageFormat::Png);
  CHECK(image_format(testing::encode_bmp(random_image(3, 2))) == ImageFormat::Bmp);
  CHECK(image_format(testing::encode_bmp(random_image(3, 2), 12)) == ImageFormat::Bmp);
  CHECK(image_format(testing::encode_jpeg(random_image(3, 3), 80)) == ImageFormat::Jpeg);
  CHECK(image_format(std::vector<uint8_t>{0xFF, 0xFF, 0xFF, 0xD8}) == ImageFormat::Jpeg);
  // "BM" with a header size stb does not know is no BMP to stb.
  std::vector<uint8_t> odd_bmp = testing::encode_bmp(random_image(3, 2));
  odd_bmp[14] = 41;
  CHECK(image_format(odd_bmp) == ImageFormat::Unknown);
  // stb reads past the end as zeros: "BM", 12 bytes, then 0x0C is an OS/2 header to it.
  std::vector<uint8_t> stub = {'B', 'M'};
  stub.resize(14, 0);
  stub.push_back(12);
  CHECK(image_format(stub) == ImageFormat::Bmp);
  CHECK(image_format(std::vector<uint8_t>{'G', 'I', 'F', '8'}) == ImageFormat::Unknown);
  CHECK(image_format(std::vector<uint8_t>{}) == ImageFormat::Unknown);
}

TEST_CASE("screen_image runs the checks of the file's format") {
  std::vector<uint8_t> stub = {'B', 'M'};
  stub.resize(14, 0);
  stub.push_back(12);
  CHECK_THROWS_WITH_FRAGMENT(screen_image(stub, "stub.bmp"), IoError,
                             "stub.bmp: truncated BMP: its headers need 26 bytes, but the file "
                             "has 15");
  CHECK_NOTHROW(screen_image(testing::encode_png(random_image(1, 4)), "ok.png"));
  CHECK_NOTHROW(screen_image(std::vector<uint8_t>{1, 2, 3}, "unknown.bin"));
}

TEST_CASE("stb's reason is given for the file's own format only") {
  CHECK(stb_failure_message(ImageFormat::Jpeg, "bad png sig") ==
        "stb_image stopped without a reason (a corrupt JPEG file)");
  CHECK(stb_failure_message(ImageFormat::Png, "bad png sig") == "bad png sig");
  CHECK(stb_failure_message(ImageFormat::Bmp, nullptr) ==
        "stb_image stopped without a reason (a corrupt BMP file)");
  CHECK(stb_failure_message(ImageFormat::Jpeg, "bad huffman code") == "bad huffman code");
  CHECK(stb_failure_message(ImageFormat::Png, "outofmem").starts_with(
      "decoding needs more memory than an image of at most 4096x4096 pixels does"));
}

TEST_CASE("decode_screened: interleaved pixels, and errors that name the file") {
  const Tensor image = random_image(3, 5);
  const DecodedPixels decoded = decode_screened(testing::encode_png(image), "a.png", 3);
  CHECK(decoded.width == 5);
  CHECK(decoded.height == 6);
  CHECK(decoded.channels == 3);
  CHECK(decoded.pixels.get()[1] == image.at({1, 0, 0}));  // (H, W, C): green of pixel 0
  CHECK_THROWS_WITH_FRAGMENT(decode_screened({}, "e.png", 3), IoError, "e.png: file is empty");
  CHECK_THROWS_WITH_FRAGMENT(decode_screened(std::vector<uint8_t>{'x'}, "x.png", 2), ValueError,
                             "channels must be 1 (gray) or 3 (RGB), got 2");
  CHECK_THROWS_WITH_FRAGMENT(decode_screened(std::vector<uint8_t>{'n', 'o', 'p', 'e'}, "n.png", 3),
                             IoError, "n.png: cannot decode the image: unknown image type");
}

}  // namespace
}  // namespace loom::data
