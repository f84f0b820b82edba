// File: data/stb_guard.cc
// A walk over a JPEG's marker segments that checks every Huffman table the way
// stb_image 2.27 reads it, before stb does.
#include "data/stb_guard.h"

#include "core/error.h"

namespace loom::data {

namespace {

constexpr uint8_t kMarker = 0xFF;
constexpr uint8_t kDefineHuffmanTables = 0xC4;
constexpr uint8_t kEndOfImage = 0xD9;
constexpr int kMaxCodes = 256;
constexpr size_t kTableHeader = 17;  // class/id byte, then 16 code counts

// Marker codes without a length field: TEM, RST0-7 and SOI. (EOI ends the walk.)
bool has_no_length(uint8_t code) { return code == 0x01 || (code >= 0xD0 && code <= 0xD8); }

// The tables of one DHT segment, read in sequence as stb reads them: while the
// segment length says more follow, a header and as many values as it counts.
// Like stb's reader, bytes past the end of the file read as 0.
void check_tables(std::span<const uint8_t> jpeg, size_t segment, const std::string& path) {
  auto byte = [&](size_t i) -> int { return i < jpeg.size() ? jpeg[i] : 0; };
  int64_t left = ((byte(segment + 2) << 8) | byte(segment + 3)) - 2;
  size_t at = segment + 4;
  while (left > 0 && at < jpeg.size()) {
    if ((byte(at) >> 4) > 1 || (byte(at) & 15) > 3) return;  // stb rejects the class/id
    int codes = 0;
    for (size_t i = 1; i < kTableHeader; ++i) codes += byte(at + i);
    LOOM_CHECK(codes <= kMaxCodes, IoError,
               "[image_folder] {}: corrupt JPEG: the Huffman table at offset {} declares {} "
               "codes; at most {} exist",
               path, at, codes, kMaxCodes);
    at += kTableHeader + codes;
    left -= static_cast<int64_t>(kTableHeader) + codes;
  }
}

}  // namespace

void check_jpeg_huffman_tables(std::span<const uint8_t> encoded, const std::string& path) {
  const bool is_jpeg = encoded.size() >= 2 && encoded[0] == kMarker && encoded[1] == 0xD8;
  if (!is_jpeg) return;
  size_t pos = 2;
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
      if (code == kDefineHuffmanTables) check_tables(encoded, pos, path);
      pos += 2 + ((encoded[pos + 2] << 8) | encoded[pos + 3]);
    }
  }
}

}  // namespace loom::data
