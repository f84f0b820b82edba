// File: data/stb_guard_jpeg.cc
// The JPEG screen: walks the marker segments the way stb_image 2.27 reads them
// and checks each scan against the frame and the tables defined before it.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "data/stb_guard.h"
#include "data/stb_guard_internal.h"

namespace loom::data {

namespace {

using stb_guard_internal::be16;

constexpr uint8_t kMarker = 0xFF;
constexpr uint8_t kStartOfImage = 0xD8;
constexpr uint8_t kEndOfImage = 0xD9;
constexpr uint8_t kDefineHuffmanTables = 0xC4;
constexpr uint8_t kDefineQuantizationTables = 0xDB;
constexpr uint8_t kProgressiveFrame = 0xC2;
constexpr uint8_t kStartOfScan = 0xDA;
constexpr int kMaxCodes = 256;
constexpr size_t kTableHeader = 17;  // class/id byte, then 16 code counts

// Marker codes without a length field: TEM, RST0-7 and SOI. (EOI ends the walk.)
bool has_no_length(uint8_t code) { return code == 0x01 || (code >= 0xD0 && code <= 0xD8); }

// The frame headers stb decodes: baseline, extended and progressive.
bool is_frame(uint8_t code) { return code >= 0xC0 && code <= 0xC2; }

struct Component {
  int id;
  int quantization_table;
};

// What the segments before a scan defined.
struct JpegState {
  unsigned huffman_tables = 0;       // bit (class * 4 + id) per Huffman table
  unsigned quantization_tables = 0;  // bit id per quantization table
  bool progressive = false;
  bool has_frame = false;
  size_t frame_at = 0;
  std::vector<Component> components;
};

// A byte as stb reads it: past the end of the file, 0.
int byte_at(std::span<const uint8_t> jpeg, size_t i) { return i < jpeg.size() ? jpeg[i] : 0; }

// stb reads a table segment's tables while its length says bytes are left,
// each table whole (past the segment's end if it must); a length its tables
// do not fill exactly then fails in stb without a reason.
void check_tables_fill(int64_t left, uint8_t code, size_t segment, const std::string& path) {
  LOOM_CHECK(left == 0, IoError,
             "[image_folder] {}: corrupt JPEG: the tables of the segment FF {:02X} at offset {} "
             "{} its length by {} bytes",
             path, code, segment, left < 0 ? "overrun" : "fall short of", left < 0 ? -left : left);
}

// The tables of one DHT segment, read in sequence as stb reads them: while the
// segment length says more follow, a header and as many values as it counts.
// The code counts are checked before stb builds a table from them.
void check_huffman_tables(std::span<const uint8_t> jpeg, size_t segment, const std::string& path,
                          JpegState& state) {
  int64_t left = int64_t{be16(jpeg, segment + 2)} - 2;
  size_t at = segment + 4;
  while (left > 0) {
    const int table_class = byte_at(jpeg, at) >> 4, id = byte_at(jpeg, at) & 15;
    if (table_class > 1 || id > 3) return;  // stb rejects the class/id
    int codes = 0;
    for (size_t i = 1; i < kTableHeader; ++i) codes += byte_at(jpeg, at + i);
    LOOM_CHECK(codes <= kMaxCodes, IoError,
               "[image_folder] {}: corrupt JPEG: the Huffman table at offset {} declares {} "
               "codes; at most {} exist",
               path, at, codes, kMaxCodes);
    state.huffman_tables |= 1u << (table_class * 4 + id);
    at += kTableHeader + codes;
    left -= static_cast<int64_t>(kTableHeader) + codes;
  }
  check_tables_fill(left, kDefineHuffmanTables, segment, path);
}

// Each table of a DQT segment: a precision/id byte, then 64 values of 1 or 2 bytes.
void note_quantization_tables(std::span<const uint8_t> jpeg, size_t segment,
                              const std::string& path, JpegState& state) {
  int64_t left = int64_t{be16(jpeg, segment + 2)} - 2;
  size_t at = segment + 4;
  while (left > 0) {
    const int precision = byte_at(jpeg, at) >> 4, id = byte_at(jpeg, at) & 15;
    if (precision > 1 || id > 3) return;  // stb rejects the table
    state.quantization_tables |= 1u << id;
    at += 1 + 64 * (precision + 1);
    left -= 1 + 64 * (precision + 1);
  }
  check_tables_fill(left, kDefineQuantizationTables, segment, path);
}

void note_frame(std::span<const uint8_t> jpeg, size_t segment, JpegState& state) {
  state.has_frame = true;
  state.frame_at = segment;
  state.progressive = jpeg[segment + 1] == kProgressiveFrame;
  const size_t end = segment + 2 + be16(jpeg, segment + 2);
  const size_t count = segment + 9 < end ? jpeg[segment + 9] : 0;
  for (size_t k = 0; k < count && segment + 12 + 3 * k < end; ++k) {
    state.components.push_back({jpeg[segment + 10 + 3 * k], jpeg[segment + 12 + 3 * k]});
  }
}

std::string frame_ids(const JpegState& state) {
  std::vector<int> ids;
  for (const Component& c : state.components) ids.push_back(c.id);
  return fmt::format("{}", fmt::join(ids, ", "));
}

// One component of a scan: it must be the frame's, and its tables defined.
void check_scan_component(const JpegState& state, int id, int tables, bool uses_dc, bool uses_ac,
                          size_t segment, const std::string& path) {
  const auto component = std::find_if(state.components.begin(), state.components.end(),
                                       [&](const Component& c) { return c.id == id; });
  LOOM_CHECK(component != state.components.end(), IoError,
             "[image_folder] {}: corrupt JPEG: the scan at offset {} decodes component {}, which "
             "the frame at offset {} does not have (its components: {})",
             path, segment, id, state.frame_at, frame_ids(state));
  const int q = component->quantization_table;
  LOOM_CHECK(q > 3 || (state.quantization_tables & (1u << q)), IoError,
             "[image_folder] {}: corrupt JPEG: the scan at offset {} dequantizes component {} "
             "with table {}, which no DQT segment before it defines (stb would decode garbage)",
             path, segment, id, q);
  const int dc = tables >> 4, ac = tables & 15;
  if (dc > 3 || ac > 3) return;  // stb rejects the scan header itself
  const bool missing_dc = uses_dc && !(state.huffman_tables & (1u << dc));
  const bool missing_ac = uses_ac && !(state.huffman_tables & (1u << (4 + ac)));
  LOOM_CHECK(!missing_dc && !missing_ac, IoError,
             "[image_folder] {}: corrupt JPEG: the scan at offset {} decodes with {} Huffman "
             "table {}, which no DHT segment before it defines (stb would decode garbage)",
             path, segment, missing_dc ? "DC" : "AC", missing_dc ? dc : ac);
}

// A scan's components name a DC and an AC table each; the scan must find
// those it decodes with already defined. Progressive DC refinement scans use
// no table, other DC scans only DC tables, AC scans only AC tables.
void check_scan(std::span<const uint8_t> jpeg, size_t segment, const JpegState& state,
                const std::string& path) {
  if (!state.has_frame) return;  // stb reports a scan before the frame header
  const size_t end = segment + 2 + be16(jpeg, segment + 2);
  const size_t components = segment + 4 < end ? jpeg[segment + 4] : 0;
  const size_t spectral = segment + 5 + 2 * components;
  // stb reports a bad component count or a length that does not fit it.
  if (components < 1 || components > 4 || components > state.components.size() ||
      end != spectral + 3) {
    return;
  }
  const int start = jpeg[spectral], approximation_high = jpeg[spectral + 2] >> 4;
  const bool uses_dc = !state.progressive || (start == 0 && approximation_high == 0);
  const bool uses_ac = !state.progressive || start > 0;
  for (size_t k = 0; k < components; ++k) {
    check_scan_component(state, jpeg[segment + 5 + 2 * k], jpeg[segment + 6 + 2 * k], uses_dc,
                         uses_ac, segment, path);
  }
}

// Where the walk over a JPEG's segments starts: after its SOI marker, which
// stb, like any marker, finds after any number of FF fill bytes. 0: not a JPEG.
size_t after_start_of_image(std::span<const uint8_t> encoded) {
  if (encoded.empty() || encoded[0] != kMarker) return 0;
  size_t pos = 1;
  while (pos < encoded.size() && encoded[pos] == kMarker) ++pos;
  return pos < encoded.size() && encoded[pos] == kStartOfImage ? pos + 1 : 0;
}

// The segment at `pos` (FF code length ...): checked to lie in the file, then
// screened. Returns where the walk goes on.
size_t screen_segment(std::span<const uint8_t> jpeg, size_t pos, const std::string& path,
                      JpegState& state) {
  const uint8_t code = jpeg[pos + 1];
  LOOM_CHECK(pos + 4 <= jpeg.size(), IoError,
             "[image_folder] {}: truncated JPEG: the file ends at offset {} inside the length of "
             "the segment FF {:02X} at offset {}",
             path, jpeg.size(), code, pos);
  const size_t end = pos + 2 + be16(jpeg, pos + 2);
  LOOM_CHECK(end <= jpeg.size(), IoError,
             "[image_folder] {}: truncated JPEG: the segment FF {:02X} at offset {} needs {} "
             "bytes but the file ends {} bytes later",
             path, code, pos, end - pos, jpeg.size() - pos);
  if (end < pos + 4) return pos + 4;  // a length below 2: stb reports it
  if (code == kDefineHuffmanTables) check_huffman_tables(jpeg, pos, path, state);
  if (code == kDefineQuantizationTables) note_quantization_tables(jpeg, pos, path, state);
  if (is_frame(code) && !state.has_frame) note_frame(jpeg, pos, state);
  if (code == kStartOfScan) check_scan(jpeg, pos, state, path);
  return end;
}

}  // namespace

void screen_jpeg(std::span<const uint8_t> encoded, const std::string& path) {
  size_t pos = after_start_of_image(encoded);
  if (pos == 0) return;
  JpegState state;
  while (pos + 1 < encoded.size()) {
    // Between segments lie entropy-coded bytes, where an FF is followed by 00.
    const uint8_t code = encoded[pos + 1];
    if (encoded[pos] != kMarker || code == kMarker) {  // data, or a fill byte
      ++pos;
    } else if (code == 0x00 || has_no_length(code)) {
      pos += 2;
    } else if (code == kEndOfImage) {
      return;  // stb reads nothing after it
    } else {
      pos = screen_segment(encoded, pos, path, state);
    }
  }
  throw IoError(fmt::format(
      "[image_folder] {}: truncated JPEG: the file ends at offset {} without the end-of-image "
      "marker FF D9 (cut off?)",
      path, encoded.size()));
}

}  // namespace loom::data
