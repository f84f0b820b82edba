// File: tests/data/stb_guard_jpeg_test.cc
// The JPEG screen: tables of more than 256 codes wherever stb would read them
// (also past their segment's end), scans decoding with tables nothing defined
// or naming components the frame lacks, segments whose tables do not fill
// them, and files cut off anywhere: all rejected before stb sees them, with a
// message of their own ("bad png sig" was stb's for many). Valid JPEGs pass,
// FF C4 bytes inside other segments included.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "data/image_folder.h"
#include "data/stb_guard.h"
#include "tests/data/fixtures.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

std::vector<uint8_t> valid_jpeg(int64_t channels = 3) {
  Generator gen(1);
  const Tensor image = randint(0, 256, {channels, 16, 16}, {.dtype = DType::UInt8}, &gen);
  return testing::encode_jpeg(image, 90);
}

// Offset of the first FF `code` marker in a JPEG written by stb.
size_t first_marker(const std::vector<uint8_t>& jpeg, uint8_t code) {
  const std::vector<uint8_t> marker = {0xFF, code};
  return std::search(jpeg.begin(), jpeg.end(), marker.begin(), marker.end()) - jpeg.begin();
}

// The JPEG without its segments of marker `code` (before the scan).
std::vector<uint8_t> without_segments(const std::vector<uint8_t>& jpeg, uint8_t code) {
  std::vector<uint8_t> out(jpeg.begin(), jpeg.begin() + 2);
  size_t pos = 2;
  while (pos + 4 <= jpeg.size() && jpeg[pos] == 0xFF) {
    const size_t length = (jpeg[pos + 2] << 8) | jpeg[pos + 3];
    if (jpeg[pos + 1] == 0xDA) break;  // the scan: copy the rest as it is
    if (jpeg[pos + 1] != code)
      out.insert(out.end(), jpeg.begin() + pos, jpeg.begin() + pos + 2 + length);
    pos += 2 + length;
  }
  out.insert(out.end(), jpeg.begin() + pos, jpeg.end());
  return out;
}

TEST_CASE("valid JPEGs and other formats pass") {
  const std::vector<uint8_t> jpeg = valid_jpeg();
  CHECK_NOTHROW(screen_jpeg(jpeg, "a.jpg"));
  CHECK_NOTHROW(decode_image(jpeg, "a.jpg", 3));
  CHECK_NOTHROW(decode_image(valid_jpeg(1), "gray.jpg", 1));
  CHECK_NOTHROW(screen_jpeg(std::vector<uint8_t>{0x89, 'P', 'N', 'G'}, "a.png"));
  CHECK_NOTHROW(screen_jpeg(std::vector<uint8_t>{}, "empty"));
  // A comment segment holding FF C4 and a bogus table: skipped by its length.
  std::vector<uint8_t> commented = {0xFF, 0xD8, 0xFF, 0xFE, 0x00, 0x16,
                                    0xFF, 0xC4, 0x00, 0x14, 0x00};
  commented.resize(commented.size() + 15, 0xFF);
  commented.insert(commented.end(), jpeg.begin() + 2, jpeg.end());
  CHECK_NOTHROW(screen_jpeg(commented, "c.jpg"));
  CHECK_NOTHROW(decode_image(commented, "c.jpg", 3));
}

TEST_CASE("a Huffman table of more than 256 codes is rejected before stb reads it") {
  std::vector<uint8_t> jpeg = valid_jpeg();
  const size_t dht = first_marker(jpeg, 0xC4);
  REQUIRE(dht < jpeg.size());
  std::fill(jpeg.begin() + dht + 5, jpeg.begin() + dht + 21, 20);  // 16 lengths x 20 codes
  CHECK_THROWS_WITH_FRAGMENT(screen_jpeg(jpeg, "bad.jpg"), IoError,
                             fmt::format("bad.jpg: corrupt JPEG: the Huffman table at offset {} "
                                         "declares 320 codes; at most 256 exist",
                                         dht + 4));
  CHECK_THROWS_WITH_FRAGMENT(decode_image(jpeg, "bad.jpg", 3), IoError, "declares 320 codes");
}

TEST_CASE("a JPEG whose SOI follows FF fill bytes is screened too, as stb reads it as a JPEG") {
  // Found by fuzz/image_fuzzer: the screen looked for FF D8 at offset 0 only,
  // stb skips fill bytes before any marker, and its table builder overran.
  std::vector<uint8_t> jpeg = valid_jpeg();
  const size_t dht = first_marker(jpeg, 0xC4);
  std::fill(jpeg.begin() + dht + 5, jpeg.begin() + dht + 21, 20);
  jpeg.insert(jpeg.begin(), 5, 0xFF);
  CHECK_THROWS_WITH_FRAGMENT(decode_image(jpeg, "filled.jpg", 3), IoError, "declares 320 codes");
}

TEST_CASE("a table is read as stb reads it: past its segment's end, into the next segment") {
  // A DHT of length 3 holds one byte; stb reads the 16 code counts from the
  // comment segment after it (FF FE 00 14, then 0x60s) and builds the table.
  std::vector<uint8_t> jpeg = {0xFF, 0xD8, 0xFF, 0xC4, 0x00, 0x03, 0x00, 0xFF, 0xFE, 0x00, 0x14};
  jpeg.resize(jpeg.size() + 18, 0x60);
  jpeg.insert(jpeg.end(), {0xFF, 0xD9});
  CHECK_THROWS_WITH_FRAGMENT(screen_jpeg(jpeg, "spill.jpg"), IoError,
                             "the Huffman table at offset 6 declares 1681 codes");
}

TEST_CASE("tables after entropy-coded data are found, past stuffed FF 00 bytes") {
  std::vector<uint8_t> jpeg = valid_jpeg();
  // Replace EOI with scan data holding a stuffed FF, a restart marker, and a
  // second DHT of 16 x 32 codes, then EOI.
  jpeg.resize(jpeg.size() - 2);
  std::vector<uint8_t> tail = {0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56,
                               0xFF, 0xC4, 0x00, 0x13, 0x11};
  tail.resize(tail.size() + 16, 0x20);
  tail.insert(tail.end(), {0xFF, 0xD9});
  jpeg.insert(jpeg.end(), tail.begin(), tail.end());
  CHECK_THROWS_WITH_FRAGMENT(screen_jpeg(jpeg, "late.jpg"), IoError, "declares 512 codes");
  // After EOI nothing is read.
  std::vector<uint8_t> ended = valid_jpeg();
  ended.insert(ended.end(), tail.begin() + 7, tail.end());
  CHECK_NOTHROW(screen_jpeg(ended, "ended.jpg"));
}

TEST_CASE("a scan decoding with Huffman or quantization tables nothing defined is rejected") {
  const std::vector<uint8_t> no_huffman = without_segments(valid_jpeg(), 0xC4);
  REQUIRE(no_huffman.size() < valid_jpeg().size());
  CHECK_THROWS_WITH_FRAGMENT(screen_jpeg(no_huffman, "bare.jpg"), IoError,
                             "bare.jpg: corrupt JPEG: the scan at offset");
  CHECK_THROWS_WITH_FRAGMENT(decode_image(no_huffman, "bare.jpg", 3), IoError,
                             "Huffman table 0, which no DHT segment before it defines");
  const std::vector<uint8_t> no_quantization = without_segments(valid_jpeg(), 0xDB);
  REQUIRE(no_quantization.size() < valid_jpeg().size());
  CHECK_THROWS_WITH_FRAGMENT(decode_image(no_quantization, "noq.jpg", 3), IoError,
                             "dequantizes component 1 with table 0, which no DQT segment before "
                             "it defines");
}

TEST_CASE("a scan naming a component the frame does not have is rejected with its own message") {
  // stb fails on it without a reason, which read "bad png sig".
  std::vector<uint8_t> jpeg = valid_jpeg();
  const size_t scan = first_marker(jpeg, 0xDA);
  REQUIRE(scan < jpeg.size());
  jpeg[scan + 5] = 9;  // the first scan component's id
  CHECK_THROWS_WITH_FRAGMENT(decode_image(jpeg, "id.jpg", 3), IoError,
                             fmt::format("id.jpg: corrupt JPEG: the scan at offset {} decodes "
                                         "component 9, which the frame at offset {} does not have "
                                         "(its components: 1, 2, 3)",
                                         scan, first_marker(jpeg, 0xC0)));
}

TEST_CASE("a table segment whose tables do not fill its length is rejected") {
  std::vector<uint8_t> jpeg = valid_jpeg();
  const size_t dqt = first_marker(jpeg, 0xDB);
  // One more byte in the segment: stb takes it for the start of another table.
  const size_t end = dqt + 2 + ((jpeg[dqt + 2] << 8) | jpeg[dqt + 3]);
  jpeg.insert(jpeg.begin() + static_cast<std::ptrdiff_t>(end), 0x00);
  jpeg[dqt + 3] += 1;
  CHECK_THROWS_WITH_FRAGMENT(decode_image(jpeg, "dqt.jpg", 3), IoError,
                             "the tables of the segment FF DB at offset");
}

TEST_CASE("a JPEG cut off anywhere is rejected, never with another format's reason") {
  const std::vector<uint8_t> jpeg = valid_jpeg();
  int screened = 0;
  for (size_t length = 1; length < jpeg.size(); ++length) {
    const std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(length));
    try {
      decode_image(cut, "cut.jpg", 3);
      FAIL("a JPEG cut to ", length, " of ", jpeg.size(), " bytes decoded");
    } catch (const IoError& e) {
      const std::string message = e.what();
      CHECK_MESSAGE(message.find("png") == std::string::npos, message);
      screened += message.find("truncated JPEG") != std::string::npos;
    }
  }
  CHECK(screened == static_cast<int>(jpeg.size()) - 2);  // all but the cut before SOI ends
  CHECK_THROWS_WITH_FRAGMENT(
      decode_image(std::vector<uint8_t>(jpeg.begin(), jpeg.end() - 2), "noeoi.jpg", 3), IoError,
      fmt::format("noeoi.jpg: truncated JPEG: the file ends at offset {} without the "
                  "end-of-image marker FF D9",
                  jpeg.size() - 2));
}

}  // namespace
}  // namespace loom::data
