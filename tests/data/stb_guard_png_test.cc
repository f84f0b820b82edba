// File: tests/data/stb_guard_png_test.cc
// The PNG screen: chunks cut off before IEND, a second palette, an empty first
// IDAT chunk, and indexed images whose pixels use entries past their palette
// (every bit depth, interlaced or not, every row filter, chunk orders that
// split the data) are rejected; valid indexed PNGs decode to their exact pixels.
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

// W, H image size
namespace loom::data {
namespace {

using fuzz::PngChunk;

// `entries` gray levels: entry i is (10 * i, 10 * i, 10 * i).
std::vector<uint8_t> gray_palette(int entries) {
  std::vector<uint8_t> palette;
  for (int e = 0; e < entries; ++e) palette.insert(palette.end(), 3, static_cast<uint8_t>(10 * e));
  return palette;
}

// An indexed PNG: IHDR, PLTE of `entries`, the indices in one IDAT, IEND.
std::vector<uint8_t> indexed_png(uint32_t w, uint32_t h, uint8_t depth, int entries,
                                 const std::vector<uint8_t>& indices, bool interlaced) {
  return fuzz::png_file(
      {{"IHDR", fuzz::png_header(w, h, depth, 3, interlaced ? 1 : 0)},
       {"PLTE", gray_palette(entries)},
       {"IDAT", fuzz::zlib_compressed(fuzz::png_rows(w, h, depth, indices, interlaced))},
       {"IEND", {}}});
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

TEST_CASE("indexed PNGs of 1, 2, 4 and 8 bits, interlaced or not, decode to their exact pixels") {
  Generator gen(9);
  for (uint8_t depth : {1, 2, 4, 8}) {
    for (bool interlaced : {false, true}) {
      for (auto [w, h] : {std::pair{1u, 1u}, std::pair{5u, 3u}, std::pair{9u, 10u}}) {
        INFO(int(depth), " bits, interlaced ", interlaced, ", ", w, "x", h);
        const int entries = std::min(1 << depth, 20);
        const std::vector<uint8_t> indices =
            randint(0, entries, {w * h}, {.dtype = DType::UInt8}, &gen).to_vector<uint8_t>();
        const Tensor image = decode_image(indexed_png(w, h, depth, entries, indices, interlaced), "i.png", 1);
        std::vector<int64_t> expected;
        for (uint8_t index : indices) expected.push_back(10 * index);
        CHECK(image.to_vector<int64_t>() == expected);
      }
    }
  }
}

TEST_CASE("pixels past the palette are rejected, whatever the depth, interlacing or filter") {
  // The case: a one-entry PLTE and a pixel of index 200.
  CHECK_THROWS_WITH_FRAGMENT(decode_image(indexed_png(3, 2, 8, 1, {0, 0, 0, 0, 200, 0}, false),
                                          "pal.png", 3),
                             IoError,
                             "pal.png: corrupt PNG: a pixel uses palette entry 200, but the PLTE "
                             "chunk has 1 entries (stb_image would read uninitialised memory)");
  for (uint8_t depth : {1, 2, 4}) {
    for (bool interlaced : {false, true}) {
      INFO(int(depth), " bits, interlaced ", interlaced);
      std::vector<uint8_t> indices(7 * 5, 0);
      indices.back() = static_cast<uint8_t>((1 << depth) - 1);  // the last pixel, last pass
      CHECK_THROWS_WITH_FRAGMENT(decode_image(indexed_png(7, 5, depth, 1, indices, interlaced), "d.png", 1),
                                 IoError, "uses palette entry");
    }
  }
  // A Paeth-filtered row whose raw bytes are small: only the unfiltered index is too large.
  std::vector<uint8_t> rows = {0, 1, 1, 4, 0, 1};  // row 0: none [1, 1]; row 1: Paeth [0, 1]
  const std::vector<uint8_t> paeth = fuzz::png_file({{"IHDR", fuzz::png_header(2, 2, 8, 3, 0)},
                                                     {"PLTE", gray_palette(2)},
                                                     {"IDAT", fuzz::zlib_compressed(rows)},
                                                     {"IEND", {}}});
  CHECK_THROWS_WITH_FRAGMENT(decode_image(paeth, "paeth.png", 1), IoError,
                             "uses palette entry 2, but the PLTE chunk has 2 entries");
}

TEST_CASE("chunk orders: split data, chunks between, a second PLTE, PLTE after the data, an empty first IDAT") {
  const std::vector<uint8_t> rows = fuzz::png_rows(4, 4, 8, std::vector<uint8_t>(16, 3), false);
  const std::vector<uint8_t> packed = fuzz::zlib_compressed(rows);
  const std::vector<uint8_t> first(packed.begin(), packed.begin() + 5), rest(packed.begin() + 5, packed.end());
  const PngChunk header{"IHDR", fuzz::png_header(4, 4, 8, 3, 0)};
  // Split IDAT with a tRNS and an ancillary chunk around: decodes (index 3 < 4 entries).
  const std::vector<uint8_t> split = fuzz::png_file({header,
                                                     {"PLTE", gray_palette(4)},
                                                     {"tRNS", {255, 128}},
                                                     {"tEXt", {'a', 0, 'b'}},
                                                     {"IDAT", first},
                                                     {"IDAT", rest},
                                                     {"IEND", {}}});
  CHECK(decode_image(split, "split.png", 1).to_vector<int64_t>() == std::vector<int64_t>(16, 30));
  // The same data split around a short palette: the index is checked across chunks.
  CHECK_THROWS_WITH_FRAGMENT(decode_image(fuzz::png_file({header,
                                                          {"PLTE", gray_palette(3)},
                                                          {"IDAT", first},
                                                          {"tEXt", {'a', 0, 'b'}},
                                                          {"IDAT", rest},
                                                          {"IEND", {}}}),
                                          "short.png", 1),
                             IoError, "uses palette entry 3, but the PLTE chunk has 3 entries");
  CHECK_THROWS_WITH_FRAGMENT(decode_image(fuzz::png_file({header,
                                                          {"PLTE", gray_palette(4)},
                                                          {"PLTE", gray_palette(2)},
                                                          {"IDAT", packed},
                                                          {"IEND", {}}}),
                                          "two.png", 1),
                             IoError, "two.png: corrupt PNG: a second PLTE chunk at offset 57");
  // PLTE after the data: stb refuses it itself ("no PLTE").
  CHECK_THROWS_WITH_FRAGMENT(decode_image(fuzz::png_file({header,
                                                          {"IDAT", packed},
                                                          {"PLTE", gray_palette(4)},
                                                          {"IEND", {}}}),
                                          "late.png", 1),
                             IoError, "cannot decode the image: no PLTE");
  // An empty IDAT first: stb would copy it to its not yet allocated (null)
  // buffer. Found by png_fuzzer (fuzz/regressions/png/empty_first_idat).
  CHECK_THROWS_WITH_FRAGMENT(decode_image(fuzz::png_file({header,
                                                          {"PLTE", gray_palette(4)},
                                                          {"IDAT", {}},
                                                          {"IDAT", packed},
                                                          {"IEND", {}}}),
                                          "empty.png", 1),
                             IoError, "empty.png: PNG: the first IDAT chunk, at offset 57, is empty");
  // Empty IDAT chunks after the first data are harmless and stay valid.
  CHECK(decode_image(fuzz::png_file({header,
                                     {"PLTE", gray_palette(4)},
                                     {"IDAT", first},
                                     {"IDAT", {}},
                                     {"IDAT", rest},
                                     {"IEND", {}}}),
                     "later.png", 1)
            .to_vector<int64_t>() == std::vector<int64_t>(16, 30));
}

}  // namespace
}  // namespace loom::data
