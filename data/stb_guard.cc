// File: data/stb_guard.cc
// Walks over an image's structure, the way stb_image 2.27 reads it, before
// stb does: JPEG marker segments (Huffman tables defined before each scan
// uses them), BMP headers (height, pixel array size) and PNG chunks (none cut
// off before IEND).
#include "data/stb_guard.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <iterator>

#include "core/error.h"
#include "data/stb_config.h"

namespace loom::data {

namespace {

// --- JPEG ---------------------------------------------------------------------

constexpr uint8_t kMarker = 0xFF;
constexpr uint8_t kDefineHuffmanTables = 0xC4;
constexpr uint8_t kProgressiveFrame = 0xC2;
constexpr uint8_t kStartOfScan = 0xDA;
constexpr uint8_t kEndOfImage = 0xD9;
constexpr int kMaxCodes = 256;
constexpr size_t kTableHeader = 17;  // class/id byte, then 16 code counts

// Marker codes without a length field: TEM, RST0-7 and SOI. (EOI ends the walk.)
bool has_no_length(uint8_t code) { return code == 0x01 || (code >= 0xD0 && code <= 0xD8); }

// Bit (class * 4 + id) set for every Huffman table defined so far.
using TableSet = unsigned;

// The tables of one DHT segment, read in sequence as stb reads them: while the
// segment length says more follow, a header and as many values as it counts.
// Like stb's reader, bytes past the end of the file read as 0.
void check_tables(std::span<const uint8_t> jpeg, size_t segment, const std::string& path,
                  TableSet& defined) {
  auto byte = [&](size_t i) -> int { return i < jpeg.size() ? jpeg[i] : 0; };
  int64_t left = ((byte(segment + 2) << 8) | byte(segment + 3)) - 2;
  size_t at = segment + 4;
  while (left > 0 && at < jpeg.size()) {
    const int table_class = byte(at) >> 4, id = byte(at) & 15;
    if (table_class > 1 || id > 3) return;  // stb rejects the class/id
    int codes = 0;
    for (size_t i = 1; i < kTableHeader; ++i) codes += byte(at + i);
    LOOM_CHECK(codes <= kMaxCodes, IoError,
               "[image_folder] {}: corrupt JPEG: the Huffman table at offset {} declares {} "
               "codes; at most {} exist",
               path, at, codes, kMaxCodes);
    defined |= 1u << (table_class * 4 + id);
    at += kTableHeader + codes;
    left -= static_cast<int64_t>(kTableHeader) + codes;
  }
}

// A scan's components name a DC and an AC table each; the scan must find
// those it decodes with already defined. Progressive DC refinement scans use
// no table, other DC scans only DC tables, AC scans only AC tables.
void check_scan(std::span<const uint8_t> jpeg, size_t segment, bool progressive,
                TableSet defined, const std::string& path) {
  auto byte = [&](size_t i) -> int { return i < jpeg.size() ? jpeg[i] : 0; };
  const int components = byte(segment + 4);
  const size_t spectral = segment + 5 + 2 * static_cast<size_t>(components);
  const int start = byte(spectral), approximation_high = byte(spectral + 2) >> 4;
  const bool uses_dc = !progressive || (start == 0 && approximation_high == 0);
  const bool uses_ac = !progressive || start > 0;
  for (int k = 0; k < components; ++k) {
    const int tables = byte(segment + 6 + 2 * static_cast<size_t>(k));
    const int dc = tables >> 4, ac = tables & 15;
    if (dc > 3 || ac > 3) return;  // stb rejects the scan header itself
    const bool missing_dc = uses_dc && !(defined & (1u << dc));
    const bool missing_ac = uses_ac && !(defined & (1u << (4 + ac)));
    LOOM_CHECK(!missing_dc && !missing_ac, IoError,
               "[image_folder] {}: corrupt JPEG: the scan at offset {} decodes with {} Huffman "
               "table {}, which no DHT segment before it defines (stb would decode garbage)",
               path, segment, missing_dc ? "DC" : "AC", missing_dc ? dc : ac);
  }
}

// --- BMP ----------------------------------------------------------------------

uint32_t le16(std::span<const uint8_t> b, size_t at) { return b[at] | (b[at + 1] << 8); }
uint32_t le32(std::span<const uint8_t> b, size_t at) {
  return b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | (uint32_t{b[at + 3]} << 24);
}

constexpr size_t kBmpFileHeader = 14;
constexpr uint32_t kBmpUncompressed = 0, kBmpBitfields = 3;

void check_bmp(std::span<const uint8_t> bmp, const std::string& path) {
  if (bmp.size() < kBmpFileHeader + 16) return;  // stb reports a cut-off header
  const uint32_t header_size = le32(bmp, 14);
  if (header_size == 12) return;  // OS/2 core header: 16-bit sizes, no overflow, rare
  if (bmp.size() < kBmpFileHeader + 20 + 4) return;
  const auto width = static_cast<int32_t>(le32(bmp, 18));
  const auto height = static_cast<int32_t>(le32(bmp, 22));
  LOOM_CHECK(height != INT_MIN, IoError,
             "[image_folder] {}: corrupt BMP: height {} at offset 22 has no positive counterpart",
             path, height);
  const uint32_t bits = le16(bmp, 28), compression = le32(bmp, 30);
  const uint64_t rows = static_cast<uint64_t>(height < 0 ? -static_cast<int64_t>(height) : height);
  if (compression != kBmpUncompressed && compression != kBmpBitfields) return;
  // stb rejects these itself, with its own reason.
  if (width <= 0 || rows == 0 || bits == 0 || bits > 32 || width > STBI_MAX_DIMENSIONS ||
      rows > STBI_MAX_DIMENSIONS) {
    return;
  }
  // Rows are padded to 4 bytes. Sizes are at most 2^31 * 32 bits: no overflow in 64 bits.
  const uint64_t row_bytes = (static_cast<uint64_t>(width) * bits + 31) / 32 * 4;
  const uint64_t needed = row_bytes * rows;
  const uint64_t offset = le32(bmp, 10);
  const uint64_t available = offset < bmp.size() ? bmp.size() - offset : 0;
  LOOM_CHECK(available >= needed, IoError,
             "[image_folder] {}: corrupt BMP: {}x{} pixels at {} bits need a {}-byte pixel array "
             "from offset {}, but the file has {} bytes there (truncated?)",
             path, width, rows, bits, needed, offset, available);
}

// --- PNG ----------------------------------------------------------------------

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

// The chunk type's 4 bytes as they are (loom::Error escapes what does not print).
std::string chunk_name(std::span<const uint8_t> png, size_t at) {
  std::string type;
  for (size_t i = at; i < at + 4 && i < png.size(); ++i) type += static_cast<char>(png[i]);
  return type;
}

void check_png(std::span<const uint8_t> png, const std::string& path) {
  size_t at = sizeof(kPngSignature);
  while (true) {
    LOOM_CHECK(at + 8 <= png.size(), IoError,
               "[image_folder] {}: truncated PNG: the file ends at offset {} inside a chunk "
               "header, before the IEND chunk",
               path, png.size());
    const uint64_t length = (uint64_t{png[at]} << 24) | (png[at + 1] << 16) | (png[at + 2] << 8) |
                            png[at + 3];
    const std::string type = chunk_name(png, at + 4);
    const uint64_t end = at + 12 + length;  // length, type, data, CRC
    LOOM_CHECK(end <= png.size(), IoError,
               "[image_folder] {}: truncated PNG: chunk '{}' at offset {} needs {} bytes but "
               "the file ends {} bytes later",
               path, type, at, 12 + length, png.size() - at);
    if (type == "IEND") return;
    at = static_cast<size_t>(end);
  }
}

// Where the walk over a JPEG's segments starts: after its SOI marker, which
// stb, like any marker, finds after any number of FF fill bytes. 0: not a JPEG.
size_t after_start_of_image(std::span<const uint8_t> encoded) {
  if (encoded.empty() || encoded[0] != kMarker) return 0;
  size_t pos = 1;
  while (pos < encoded.size() && encoded[pos] == kMarker) ++pos;
  return pos < encoded.size() && encoded[pos] == 0xD8 ? pos + 1 : 0;
}

}  // namespace

void check_jpeg_huffman_tables(std::span<const uint8_t> encoded, const std::string& path) {
  size_t pos = after_start_of_image(encoded);
  if (pos == 0) return;
  TableSet defined = 0;
  bool progressive = false;
  while (pos + 1 < encoded.size()) {
    // Between segments lie entropy-coded bytes, where an FF is followed by 00.
    const uint8_t code = encoded[pos + 1];
    if (encoded[pos] != kMarker || code == kMarker) {  // data, or a fill byte
      ++pos;
    } else if (code == 0x00 || has_no_length(code)) {
      pos += 2;
    } else if (code == kEndOfImage || pos + 4 > encoded.size()) {
      return;  // stb stops at EOI and reports a cut-off length itself
    } else {
      if (code == kDefineHuffmanTables) check_tables(encoded, pos, path, defined);
      if (code == kProgressiveFrame) progressive = true;
      if (code == kStartOfScan) check_scan(encoded, pos, progressive, defined, path);
      pos += 2 + ((encoded[pos + 2] << 8) | encoded[pos + 3]);
    }
  }
}

void screen_image(std::span<const uint8_t> encoded, const std::string& path) {
  check_jpeg_huffman_tables(encoded, path);
  if (encoded.size() >= 2 && encoded[0] == 'B' && encoded[1] == 'M') check_bmp(encoded, path);
  if (encoded.size() >= sizeof(kPngSignature) &&
      std::equal(std::begin(kPngSignature), std::end(kPngSignature), encoded.begin())) {
    check_png(encoded, path);
  }
}

}  // namespace loom::data
