// File: data/stb_guard_bmp.cc
// The BMP screen: reads the headers as stb_image 2.27 does (OS/2 12-byte core
// headers and the 40, 56, 108 and 124-byte Windows ones) and checks what stb
// leaves unchecked: zero sizes, bytes cut off, and palette indices.
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <string>

#include "core/error.h"
#include "data/stb_config.h"
#include "data/stb_guard.h"
#include "data/stb_guard_internal.h"

namespace loom::data {

namespace {

using stb_guard_internal::le16;
using stb_guard_internal::le32;
using stb_guard_internal::padded_le32;

constexpr size_t kFileHeader = 14;
constexpr uint32_t kCoreHeader = 12;  // OS/2 1.x: 16-bit sizes, 3-byte palette entries
constexpr uint32_t kUncompressed = 0, kBitfields = 3;

// What stb reads from the headers; sizes as stb uses them.
struct BmpHeader {
  uint32_t header_size = 0;
  uint64_t width = 0, rows = 0;
  int64_t signed_height = 0;
  uint32_t bits = 0, compression = kUncompressed;
  int64_t offset = 0;          // where the pixel array starts
  int64_t palette_entries = 0;  // as stb computes it; used for fewer than 16 bits
};

bool known_header_size(uint32_t size) {
  return size == kCoreHeader || size == 40 || size == 56 || size == 108 || size == 124;
}

// The bytes of the headers stb reads: the file header, the info header and,
// for bitfields in a 40 or 56-byte header, the three masks after it.
size_t header_bytes(std::span<const uint8_t> bmp, uint32_t header_size) {
  const bool masks_follow = (header_size == 40 || header_size == 56) && bmp.size() >= 34 &&
                            le32(bmp, 30) == kBitfields;
  return kFileHeader + header_size + (masks_follow ? 12 : 0);
}

BmpHeader read_header(std::span<const uint8_t> bmp) {
  BmpHeader h;
  h.header_size = le32(bmp, 14);
  h.offset = static_cast<int32_t>(le32(bmp, 10));
  if (h.header_size == kCoreHeader) {
    h.width = le16(bmp, 18);
    h.signed_height = le16(bmp, 20);
    h.bits = le16(bmp, 24);
  } else {
    h.width = le32(bmp, 18);
    h.signed_height = static_cast<int32_t>(le32(bmp, 22));
    h.bits = le16(bmp, 28);
    h.compression = le32(bmp, 30);
  }
  h.rows = static_cast<uint64_t>(h.signed_height < 0 ? -h.signed_height : h.signed_height);
  // stb's palette size: the bytes between the headers and the pixel array, in
  // 3-byte entries (computed with 24 for the header, as stb does) or 4-byte ones.
  const int64_t before_pixels = h.offset - static_cast<int64_t>(kFileHeader);
  h.palette_entries = h.header_size == kCoreHeader
                          ? (before_pixels - 24) / 3
                          : (before_pixels - static_cast<int64_t>(h.header_size)) >> 2;
  return h;
}

// The formats stb decodes; it rejects the others itself, with its own reason.
bool stb_decodes(const BmpHeader& h) {
  if (h.offset < 0 || h.width > STBI_MAX_DIMENSIONS || h.rows > STBI_MAX_DIMENSIONS) return false;
  // stb reads the compression into an int and refuses 1, 2 and 4 or more: one
  // of 2^31 or more is negative there and decodes as if uncompressed.
  const auto compression = static_cast<int32_t>(h.compression);
  if (compression == 1 || compression == 2 || compression >= 4) return false;
  if (h.compression == kBitfields && h.bits != 16 && h.bits != 32) return false;
  return h.bits == 1 || h.bits == 4 || h.bits == 8 || h.bits == 16 || h.bits == 24 || h.bits == 32;
}

// The palette index of pixel `x` in a row of `bits`-bit indices, read as stb reads it.
int palette_index(std::span<const uint8_t> row, uint64_t x, uint32_t bits) {
  if (bits == 8) return row[x];
  if (bits == 4) return x % 2 == 0 ? row[x / 2] >> 4 : row[x / 2] & 15;
  return (row[x / 8] >> (7 - x % 8)) & 1;
}

// Why an index is past what stb filled: stb 2.27 computes an OS/2 palette's
// size with 24 bytes of header where there are 12, so it reads such a palette
// 4 entries short (and none of one with 4 entries or fewer).
std::string palette_limit(const BmpHeader& h) {
  if (h.header_size != kCoreHeader) {
    return fmt::format("the palette has {} entries", std::max<int64_t>(h.palette_entries, 0));
  }
  const int64_t in_file = (h.offset - static_cast<int64_t>(kFileHeader + kCoreHeader)) / 3;
  return fmt::format(
      "stb_image 2.27 reads {} of the {} entries of this OS/2 palette (it takes OS/2 palettes 4 "
      "entries short; convert the image to PNG or a Windows BMP)",
      std::max<int64_t>(h.palette_entries, 0), std::max<int64_t>(in_file, 0));
}

// Every pixel of a palette image must name an entry stb filled.
void check_palette_indices(std::span<const uint8_t> bmp, const BmpHeader& h, uint64_t row_bytes,
                           const std::string& path) {
  // An OS/2 file may be valid: the fault is stb's.
  const char* what = h.header_size == kCoreHeader ? "a BMP stb_image cannot decode" : "corrupt BMP";
  LOOM_CHECK(h.palette_entries >= 1, IoError,
             "[image_folder] {}: {}: an image of {} bits per pixel needs a palette, but {} (its "
             "pixel array starts at offset {}; stb_image would read uninitialised memory)",
             path, what, h.bits, palette_limit(h), h.offset);
  for (uint64_t y = 0; y < h.rows; ++y) {
    const std::span<const uint8_t> row = bmp.subspan(h.offset + y * row_bytes, row_bytes);
    for (uint64_t x = 0; x < h.width; ++x) {
      const int index = palette_index(row, x, h.bits);
      LOOM_CHECK(index < h.palette_entries, IoError,
                 "[image_folder] {}: {}: pixel {} of row {} (in file order) uses palette entry "
                 "{}, but {} (stb_image would read uninitialised memory)",
                 path, what, x, y, index, palette_limit(h));
    }
  }
}

}  // namespace

void screen_bmp(std::span<const uint8_t> bmp, const std::string& path) {
  if (image_format(bmp) != ImageFormat::Bmp) return;
  const uint32_t header_size = padded_le32(bmp, 14);
  if (!known_header_size(header_size)) return;  // stb: "BMP type not supported"
  // stb reads past the end as zeros, so a cut-off header would load.
  const size_t needed = header_bytes(bmp, header_size);
  LOOM_CHECK(bmp.size() >= needed, IoError,
             "[image_folder] {}: truncated BMP: its headers need {} bytes, but the file has {}",
             path, needed, bmp.size());
  const BmpHeader h = read_header(bmp);
  LOOM_CHECK(h.signed_height != INT_MIN, IoError,
             "[image_folder] {}: corrupt BMP: height {} at offset 22 has no positive counterpart",
             path, h.signed_height);
  if (!stb_decodes(h)) return;
  LOOM_CHECK(h.width > 0 && h.rows > 0, IoError,
             "[image_folder] {}: corrupt BMP: {}x{} pixels (width x height): an image without "
             "pixels",
             path, h.width, h.rows);
  // Rows are padded to 4 bytes. Sizes are at most 4096 * 32 bits: no overflow.
  const uint64_t row_bytes = (h.width * h.bits + 31) / 32 * 4;
  const uint64_t pixel_bytes = row_bytes * h.rows;
  const uint64_t offset = static_cast<uint64_t>(h.offset);
  const uint64_t available = offset < bmp.size() ? bmp.size() - offset : 0;
  LOOM_CHECK(available >= pixel_bytes, IoError,
             "[image_folder] {}: corrupt BMP: {}x{} pixels at {} bits need a {}-byte pixel array "
             "from offset {}, but the file has {} bytes there (truncated?)",
             path, h.width, h.rows, h.bits, pixel_bytes, offset, available);
  if (h.bits < 16) check_palette_indices(bmp, h, row_bytes, path);
}

}  // namespace loom::data
